"""What every dedup method shares, whatever its fingerprints and stores.

:class:`~nshash.NSHash`, :class:`~nshash.KeyedDedup` and :class:`~nshash.SimhashDedup` each
answer ``add(text, doc_id, title=...)`` with an :class:`~nshash.AddResult`; on that this
base gives them ``get_similar`` (the original call), ``add_many`` one document at a time with
a bad item's error in its place, and the context manager that closes the store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from types import TracebackType
from typing import Any, TypeVar

from .errors import ConfigError, NSHashError, StoreClosedError
from .inputs import check_documents
from .results import AddResult

__all__ = ["Method"]

_M = TypeVar("_M", bound="Method")


class Method(ABC):
    """The base of the dedup methods (see the module docstring)."""

    @abstractmethod
    def add(self, text: str, doc_id: str | None = None, *, title: str | None = None) -> AddResult:
        """Add one document and return its group."""

    @abstractmethod
    def close(self) -> None:
        """Close the store."""

    def get_similar(self, text: str) -> int:
        """Add *text* and return its ``similar_id`` (the original release's call)."""
        return self.add(text).similar_id

    def add_many(self, documents: Iterable[str | dict[str, Any]]) -> list[AddResult | NSHashError]:
        """Add documents in order; a bad item yields its exception in place, the rest go in.

        Each item is a text or a dict with ``text`` and optional ``id`` and ``title``.
        """
        out: list[AddResult | NSHashError] = []
        for item in check_documents(documents):
            try:
                if isinstance(item, str):
                    out.append(self.add(item))
                elif isinstance(item, dict):
                    text = item.get("text")
                    if not isinstance(text, str):
                        raise ConfigError(f"A document needs a 'text' string, not {text!r:.80}")
                    out.append(self.add(text, item.get("id"), title=item.get("title")))
                else:
                    raise ConfigError(f"A document is a str or a dict, not {type(item).__name__}")
            except StoreClosedError:
                raise
            except NSHashError as exc:
                out.append(exc)
        return out

    def __enter__(self: _M) -> _M:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
