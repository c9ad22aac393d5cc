"""The compiled half of the nshash assignment: which of its functions run in C.

``nshash.methods.nshash._assign`` is an optional C extension (built with the text kernel by
``pip install .`` where a C compiler exists). It holds the guard's sketch comparison and cut
(:func:`~nshash.methods.nshash.assign.sketch_guard`,
:func:`~nshash.methods.nshash.assign.cut_sketch`), the memory store's assignment of every case
but a merge and a retried id, journaled or not (``fast_assign``, see
:mod:`nshash.methods.nshash.memory`), ``journal_line``, which makes a journal line, and
``make_record``, which makes a frozen result without its ``__init__``. Each has its Python
version (``journal_line``'s is json.dumps and zlib.crc32), and the tests compare the two
(``tests/test_kernel.py``, ``tests/test_fast_assign.py``): without the extension, or with
``NSHASH_PURE=1``, the Python versions run with the same answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from ...text.kernel import load_extension

__all__ = ["assign_info", "compiled", "either"]

#: The interface version of the extension (``ASSIGN_ABI`` in _assign.c).
ABI = 33

_MODULE, _WHY = load_extension(f"{__package__}._assign", ABI, "the compiled assignment")


def compiled(name: str) -> Any:
    """The extension's function *name*, or None (the caller then runs its Python version)."""
    return getattr(_MODULE, name, None) if _MODULE is not None else None


_T = TypeVar("_T")


def either(fast: Callable[..., object] | None, pure: Callable[..., _T], *args: Any) -> _T:
    """*fast* (a function of :func:`compiled`, or None on the pure path) called on *args*,
    or *pure* where there is none or it answers None (an argument it does not take, such as
    an int past 64 bits): the two give equal answers, so the caller need not know which ran."""
    if fast is not None:
        found = fast(*args)
        if found is not None:
            return cast(_T, found)
    return pure(*args)


def assign_info() -> dict[str, str]:
    """Say which assignment runs: ``{"path": "compiled" | "pure", "reason": ...}``.

    Example:
        >>> assign_info()["path"] in ("compiled", "pure")
        True
    """
    if _MODULE is None:
        return {"path": "pure", "reason": _WHY}
    return {"path": "compiled", "reason": f"{_WHY}: {_MODULE.__file__}"}
