"""The one check of what callers hand the library: texts, document ids and titles.

Every way in (``NSHash.add``, ``add_many``, ``query``, ``document``, the keyed method, the
HTTP routes through them, the command line) runs these checks, so no store can hold a value
that cannot be read back or sent as JSON:

==========  =============================================================================
value       refused (:class:`~nshash.ConfigError`)
==========  =============================================================================
text        not a str; a lone surrogate (not Unicode text: no encoder takes it); more than
            :data:`MAX_TEXT_CHARS` characters
doc_id      not a str, empty; a lone surrogate; NUL; more than :data:`MAX_DOC_ID_CHARS`
title       not a str or None; a lone surrogate; NUL; more than :data:`MAX_TITLE_CHARS`
documents   (``add_many``) a str, bytes or a dict (one document, not many), or not iterable
==========  =============================================================================

A NUL is refused in ids and titles, which stores keep and hand back to clients (many tools
cut a string at NUL), and allowed in texts, which no store keeps: only their fingerprints
are kept, and fingerprinting drops control characters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from .errors import ConfigError
from .text.kernel import compiled_function

__all__ = [
    "either_id",
    "MAX_DOC_ID_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_TITLE_CHARS",
    "check_doc_id",
    "check_documents",
    "check_text",
    "check_title",
    "checked_doc_id",
]

#: The longest text accepted, in characters (about 10 MB of Latin text).
MAX_TEXT_CHARS = 10_000_000
#: The longest document id accepted, in characters.
MAX_DOC_ID_CHARS = 1024
#: The longest title accepted, in characters.
MAX_TITLE_CHARS = 2048


#: The compiled scan for a lone surrogate (nshash.text._kernel.surrogate_at), or None.
_SURROGATE_AT = compiled_function("surrogate_at")


def _surrogate_at_pure(value: str) -> int:
    """Where *value* holds its first lone surrogate, or -1: the compiled scan in Python."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return int(exc.start)
    return -1


#: Where a str holds its first lone surrogate, or -1: a scan in C where the kernel is built
#: (encoding the text would copy it).
_surrogate_at = _SURROGATE_AT if _SURROGATE_AT is not None else _surrogate_at_pure


def _not_unicode(what: str, at: int) -> ConfigError:
    return ConfigError(
        f"{what} must be valid Unicode text: it has a lone surrogate at position {at}"
    )


def _unicode(value: str, what: str) -> None:
    """Refuse a str holding a lone surrogate (the ASCII case, nearly every id, is free)."""
    if not value.isascii() and (at := _surrogate_at(value)) >= 0:
        raise _not_unicode(what, at)


def check_text(text: object) -> str:
    """Return *text* if the library can work on it.

    Raises:
        ConfigError: see the module docstring.
    """
    if not isinstance(text, str):
        raise ConfigError(f"text must be a str, not {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(f"text has {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    if not text.isascii() and (at := _surrogate_at(text)) >= 0:  # (_unicode, without a call)
        raise _not_unicode("text", at)
    return text


def _short(value: str, what: str, limit: int) -> str:
    if len(value) > limit:
        raise ConfigError(f"{what} has {len(value)} characters; the limit is {limit}")
    if "\x00" in value:
        raise ConfigError(f"{what} must not contain NUL characters")
    _unicode(value, what)
    return value


def check_doc_id(doc_id: object) -> str | None:
    """Return *doc_id* (None allowed: no id) if a store can keep it and give it back.

    Raises:
        ConfigError: see the module docstring.
    """
    if doc_id is None:
        return None
    if not isinstance(doc_id, str) or not doc_id:
        raise ConfigError(f"doc_id must be a non-empty str, not {doc_id!r:.80}")
    if type(doc_id) is not str:  # a subclass: its text, as the str the stores key by
        doc_id = str.__str__(doc_id)
    return _short(doc_id, "doc_id", MAX_DOC_ID_CHARS)


def checked_doc_id(doc_id: object) -> str:
    """Return *doc_id* if it names a document: :func:`check_doc_id` without None (what a
    store's lookups by id take).

    Raises:
        ConfigError: see the module docstring.
    """
    checked = check_doc_id(doc_id)
    if checked is None:
        raise ConfigError("doc_id must be a non-empty str, not None")
    return checked


def check_title(title: object, what: str = "title") -> str | None:
    """Return *title* (None allowed) if a store can keep it and give it back.

    The same rules hold for a document's ``url`` and ``site`` (*what* names the field).

    Raises:
        ConfigError: see the module docstring.
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise ConfigError(f"{what} must be a str, not {type(title).__name__}")
    return _short(title, what, MAX_TITLE_CHARS)


#: The type of an id (whatever the caller passes: a str, or an int the checks refuse).
_Id = TypeVar("_Id")


def either_id(doc_id: _Id | None, id: _Id | None) -> _Id | None:  # noqa: A002
    """The document id given as ``doc_id=`` (the older name) or ``id=`` (the name every surface
    uses); both may be given only when they agree.

    Raises:
        ConfigError: both are given and differ.
    """
    if id is None:
        return doc_id
    if doc_id is not None and doc_id != id:
        raise ConfigError(f"Give the id once: doc_id={doc_id!r} and id={id!r} differ")
    return id


_D = TypeVar("_D")


def check_documents(documents: Iterable[_D]) -> Iterable[_D]:
    """Return *documents* (what ``add_many`` takes: an iterable of documents) if it is one.

    Raises:
        ConfigError: *documents* is a str, bytes or a dict (one document: iterating it would
            add each character or key), or is not iterable.
    """
    if isinstance(documents, (str, bytes, bytearray, dict)):  # (one document, not many)
        raise ConfigError(
            f"add_many takes an iterable of documents (a list of texts or dicts), not one"
            f" {type(documents).__name__}: use add() for one document"
        )
    if not isinstance(documents, Iterable):
        raise ConfigError(
            f"add_many takes an iterable of documents, not {type(documents).__name__}"
        )
    return documents
