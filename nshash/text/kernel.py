"""The compiled text kernel: which path :meth:`nshash.Fingerprinter.prepare` runs.

``nshash.text._kernel`` is an optional C extension (built by ``pip install .`` where a C compiler
exists) that computes what the pure-Python path of :mod:`nshash.text.fingerprint` computes, in one
pass over the text: sentence keys, the key stream, the rolling shingle hashes, the anchors and
the sketch. Its results are bit-identical to the pure path's (the tests compare both on
arbitrary Unicode and on real articles), so stores written by either keep matching. Keys are
hashed by farmhash's own ``Fingerprint64``, found in pyfarmhash's module and checked against
``farmhash.fingerprint64`` at start-up (else through ``farmhash.fingerprint64`` itself). The
extension also compiles the surrogate scan of :mod:`nshash.inputs` and
:func:`nshash.text.fingerprint.narrow` (each with its Python version, which the tests compare
on random input). The nshash assignment has
an extension of its own (:mod:`nshash.methods.nshash.compiled`), loaded by
:func:`load_extension` under the same rules.

It needs two character tables, built here once per process from the very functions the pure
path calls: rapidfuzz's ``default_process`` of every BMP character, and which characters are
proven to need no folding (already NFKC, not combining, unchanged by casefolding and by OpenCC).
Anything the tables cannot prove (a traditional character, a combining mark, a character past
the BMP that is kept) goes through :func:`nshash.text.normalize.fold_keys` itself.

The pure path runs when the extension is not built, when the environment variable
``NSHASH_PURE`` is set to anything but ``0`` or the empty string (CI runs the tests both ways),
or when a configuration is one the kernel does not implement. :func:`kernel_info` says which.
"""

from __future__ import annotations

import array
import importlib
import os
import unicodedata
from functools import lru_cache
from typing import Any

import farmhash
from rapidfuzz.utils import default_process

__all__ = ["PURE_ENV", "compile_kernel", "compiled_function", "kernel_info", "load_extension"]

#: Set this environment variable (to anything but "" or "0") to force the pure-Python path.
PURE_ENV = "NSHASH_PURE"

#: The period rule the kernel implements (fingerprint._PERIOD): it runs only where the pure
#: path's pattern is this one, so a change there can never silently diverge.
KERNEL_PERIOD = r"[.．](?:(?=[\"'”’)\]]*(?:\s|$))|(?<=[\u3400-\u9fff\uf900-\ufaff][.．]))"

#: The blocks whose characters may skip folding when they pass every check (ASCII, Latin,
#: Greek, Cyrillic, kana, CJK ideographs, Hangul syllables): their characters never compose
#: with a neighbour under NFKC. Characters elsewhere always take fold_keys.
_PLAIN_BLOCKS = (
    (0x0000, 0x0080),
    (0x00C0, 0x0250),
    (0x0370, 0x0400),
    (0x0400, 0x0500),
    (0x3041, 0x3099),
    (0x309D, 0x3100),
    (0x3005, 0x3008),
    (0x3400, 0x4DC0),
    (0x4E00, 0xA000),
    (0xAC00, 0xD7A4),
)

#: Full-width digits and lowercase letters: fold_keys turns them into ASCII (c - 0xFEE0).
_FULLWIDTH_KEPT = (*range(0xFF10, 0xFF1A), *range(0xFF41, 0xFF5B))

_BMP = 0x10000

#: The interface version of the extension this module drives (``KERNEL_ABI`` in _kernel.c).
ABI = 11


def load_extension(module: str, abi: int, what: str) -> tuple[Any, str]:
    """Import the optional C extension *module* if it may run: not with ``NSHASH_PURE`` set,
    and not a stale build (its ``ABI`` constant must be *abi*). Returns the module (or None)
    and why, for messages about *what* it is."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"{PURE_ENV} is set"
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        return None, f"{what} is not built ({type(exc).__name__})"
    if getattr(found, "ABI", None) != abi:
        where = getattr(found, "__file__", module)
        return None, f"{what} at {where} is stale: rebuild it"
    return found, "built"


_MODULE, _WHY = load_extension(f"{__package__}._kernel", ABI, "the compiled kernel")


@lru_cache(maxsize=1)
def _tables() -> bool:
    """Build the character tables and hand them to the extension; False if they cannot be."""
    from .normalize import _traditional_chars

    bmp = "".join(map(chr, range(_BMP)))
    # The "a"s keep default_process's trimming of white space at either end off the table.
    mapped = str(default_process("a" + bmp + "a"))
    if len(mapped) != _BMP + 2 or default_process("\ua66e") != "\ua66e":
        return False  # not one character for one: the kernel's model does not hold
    dp = array.array("I", [0 if c == " " else ord(c) for c in mapped[1:-1]])
    fold = bytearray(b"\x02") * _BMP
    traditional = set(_traditional_chars())
    normalized = unicodedata.is_normalized
    combining = unicodedata.combining
    for lo, hi in _PLAIN_BLOCKS:
        for code in range(lo, hi):
            ch = chr(code)
            if (
                ch.casefold() == ch
                and ch not in traditional
                and not combining(ch)
                and normalized("NFKC", ch)
            ):
                fold[code] = 0
    for code in _FULLWIDTH_KEPT:
        fold[code] = 1
    _MODULE.set_tables(dp.tobytes(), bytes(fold))
    return True


#: Byte strings a borrowed Fingerprint64 must hash as ``farmhash.fingerprint64`` does (every
#: length class of farmhash's code: 0-16, 17-32, 33-64 and longer, with Chinese text).
_CHECKS = (b"", b"a", b"0123456789abcdef", b"x" * 31, "一段中文".encode() * 4, bytes(range(256)))


@lru_cache(maxsize=1)
def _fingerprint64() -> int:
    """The address of farmhash's C++ ``util::Fingerprint64(const char*, size_t)``, which
    pyfarmhash's module exports and ``farmhash.fingerprint64`` calls; 0 when it is not
    there or does not give ``farmhash.fingerprint64``'s values on :data:`_CHECKS` (the kernel
    then calls ``farmhash.fingerprint64``). The same function, not a copy: values stay
    bit-identical by construction, and are checked anyway."""
    try:
        import ctypes

        lib = ctypes.CDLL(str(farmhash.__file__))
        fn = lib._ZN4util13Fingerprint64EPKcm  # the Itanium C++ ABI name of the function
    except (OSError, AttributeError, TypeError):
        return 0
    fn.restype = ctypes.c_uint64
    fn.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
    if any(fn(b, len(b)) != farmhash.fingerprint64(b) for b in _CHECKS):
        return 0
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


def compile_kernel(
    *,
    ends: str,
    shingle: int,
    wide: int,
    wide_units: int,
    narrow_units: int,
    max_sentences: int,
    long_page: int,
    top_part: int,
    sketch_rate: int,
    sketch_size: int,
    sketch_bits: int,
    base: int,
    salt: int,
    hashfunc: Any,
    fold: Any,
    docprint: type,
    period: str,
) -> Any:
    """Return a compiled kernel for one Fingerprinter configuration, or None (pure path).

    Args:
        ends: the characters that always end a sentence (the period has its own rule).
        period: the pure path's period pattern; the kernel runs only if it is the one it
            implements (:data:`KERNEL_PERIOD`).
        The others are the Fingerprinter's parameters and constants, taken as they are.
    """
    if _MODULE is None or period != KERNEL_PERIOD:
        return None
    if getattr(docprint, "__slots__", None) != ("sentences", "sketch", "exact", "limit", "places"):
        return None
    if any(ord(c) >= _BMP for c in ends) or not _tables():
        return None
    return _MODULE.Kernel(
        ends,
        shingle,
        wide,
        wide_units,
        narrow_units,
        max_sentences,
        long_page,
        top_part,
        sketch_rate,
        sketch_size,
        sketch_bits,
        base,
        salt,
        hashfunc,
        fold,
        default_process,
        docprint,
        # farmhash hashes the UTF-8 bytes of a str: the kernel hands it bytes it encoded
        # itself, which costs far less than a str that CPython then encodes; with farmhash's
        # own C++ function at hand, it hashes them in place, with no Python call at all.
        hashfunc is farmhash.fingerprint64,
        _fingerprint64() if hashfunc is farmhash.fingerprint64 else 0,
    )


def compiled_function(name: str) -> Any:
    """The text kernel's function *name* (the surrogate scan of :mod:`nshash.inputs`, narrow), or
    None: on the pure path, or in a build that lacks it, the caller runs its Python version."""
    return getattr(_MODULE, name, None) if _MODULE is not None else None


def kernel_info() -> dict[str, str]:
    """Say which text path runs: ``{"path": "compiled" | "pure", "reason": ...}``.

    Example:
        >>> kernel_info()["path"] in ("compiled", "pure")
        True
    """
    if _MODULE is None:
        return {"path": "pure", "reason": _WHY}
    if not _tables():
        return {"path": "pure", "reason": "rapidfuzz's default_process is not one-for-one"}
    hashing = "farmhash in place" if _fingerprint64() else "farmhash through Python"
    return {"path": "compiled", "reason": f"{_WHY}: {_MODULE.__file__} ({hashing})"}
