"""NSHash: text in, ``similar_id`` out; reposts of one story share the id."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError, NSHashError, UnknownOptionError
from ...inputs import check_doc_id, check_documents, check_text, check_title, either_id
from ...method import Method
from ...options import SETTINGS, blame, from_text, settings_in_url
from ...results import (
    ADD_RESULT_FIELDS,
    HOUR,
    Activity,
    AddResult,
    Assignment,
    Correction,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    HotGroup,
    StoreStats,
)
from ...text.fingerprint import DEFAULT_DELIMITERS, DocPrint, Fingerprinter
from .assign import MatchPolicy
from .base import Placer, Store
from .compiled import compiled
from .find import (
    CARD_MEMBERS,
    MAX_SITE_CHARS,
    MAX_TIME,
    StoryCards,
    StoryPage,
    TimeRange,
    rank,
    search_key,
    site_key,
    time_range,
    zone,
)
from .store import open_path, open_store

__all__ = ["MAX_TIME", "Document", "NSHash"]

#: What :meth:`NSHash.add_many` accepts per item: a text, or a mapping with ``text`` and
#: optionally ``id`` and ``title``.
Document = str | dict[str, Any]

#: The original release's file names: ``hashdb`` -> (store scheme, suffix added to ``name``).
#: _assign.make_record (None on the pure path): a result made without the frozen
#: dataclass's __init__, field by field as that __init__ sets them (tests compare the two).
_MAKE = compiled("make_record")

_HASHDBS = {"memory": ("memory", ".hashdb.pkl"), "leveldb": ("leveldb", ".hashdb")}


#: Options of :class:`~nshash.Fingerprinter` and :class:`~nshash.MatchPolicy` that NSHash
#: passes through (besides ``n``, ``min_length``, ``hashfunc`` and ``delimiters``); every one
#: is a setting of :data:`nshash.options.SETTINGS` (a test holds the two equal).
_TEXT_OPTIONS = ("max_sentences", "shingle", "letter_units", "sketch_rate", "sketch_size", "html")
_POLICY_OPTIONS = ("theta", "min_overlap", "sketch_cap", "merge_theta", "merge_guard", "votes")
#: NSHash's own keywords that are not tuning settings.
_OWN_OPTIONS = ("delimiters", "track", "clock")


_check_doc_id = check_doc_id

#: A document's time: epoch seconds, or a datetime (a naive one is taken as UTC).
Moment = int | float | datetime

_WINDOW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_window(window: str | int | float) -> int:
    """Return a time window in seconds: a number of seconds, or ``"90m"``, ``"24h"``, ``"7d"``.

    Raises:
        ConfigError: not a positive duration.

    Example:
        >>> parse_window("24h"), parse_window("7d"), parse_window(600)
        (86400, 604800, 600)
    """
    if isinstance(window, (int, float)) and not isinstance(window, bool):
        seconds = float(window)
    elif isinstance(window, str) and (m := _WINDOW.match(window)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ConfigError(f"A window is a duration such as '24h', '90m' or '7d', not {window!r}")
    if not math.isfinite(seconds) or seconds < 1 or seconds >= 2**53:
        raise ConfigError(f"A window must be at least one second, not {window!r}")
    return max(1, int(seconds))


def _moment(value: object) -> int:
    """Whole epoch seconds of *value* (epoch seconds or a datetime)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        seconds = value.timestamp()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigError(f"published_at is epoch seconds or a datetime, not {value!r:.80}")
    if not math.isfinite(seconds) or not 0 <= seconds < MAX_TIME:
        raise ConfigError(f"published_at must be in the years 1970 to 9999, not {value!r:.80}")
    return int(seconds)


def site_of(url: str | None) -> str | None:
    """The site of a URL: its host in lower case, without a leading ``www.`` (None if none).

    Example:
        >>> site_of("https://WWW.Example.com:8443/a?b=1")
        'example.com'
    """
    if not url:
        return None
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host or len(host) > MAX_SITE_CHARS:  # (no host name is longer: no site)
        return None
    return host[4:] if host.startswith("www.") else host


def _letters_refused(given: int, stored: int) -> str:
    """The one line that refuses *given* letter_units on a store begun with *stored*."""
    return (
        f"letter_units={given} is not this store's: it was begun with letter_units={stored};"
        f" open it with letter_units={stored} (URL ?letter_units={stored}, --letter-units"
        f" {stored}, NSHASH_LETTER_UNITS={stored}) or start a new store"
    )


#: What :meth:`NSHash.explain` with ``as_copy`` changes a text's exact fingerprint by (XOR):
#: another text with that fingerprint is as unlikely as any fingerprint collision.
COPY_SALT = 0x9E3779B97F4A7C15


class NSHash(Method):
    """A near-duplicate detector: gives each text the ``similar_id`` of its story.

    Each document is reduced to n anchors, short windows of its text (after folding width,
    case, script, punctuation and line breaks) chosen by a consistent sample, and a sketch of
    its whole text; a document joins a group one of its anchors hits when their sketches
    mostly agree, so what two articles share only in a site's header or footer does not join
    them (see :mod:`nshash.methods.nshash.assign`). Groups live in a store chosen by URL; see
    :func:`nshash.open_store`.

    The constructor keeps the original release's signature: ``NSHash(name, hashfunc, hashdb)``
    keeps its state in ``name + ".hashdb.pkl"`` (memory) or the directory ``name + ".hashdb"``
    (LevelDB) in the working directory. :meth:`open` takes a store URL instead.

    Args:
        name: the file name stem for ``hashdb``'s files.
        hashfunc: ``"farmhash"`` (default) or ``"md5"``.
        hashdb: ``"memory"`` or ``"leveldb"``.
        n: anchors per document (default 16).
        min_length: the shortest sentence key that may be an anchor (default 10 characters).
        store: an open :class:`~nshash.Store` to use instead of ``name``/``hashdb``.
        track: also keep each document's time (and url and site) and count each group's
            documents per hour, so :meth:`hot` can rank the stories of a time window
            (default off; the service turns it on).
        clock: the time of a document added without ``published_at`` (default
            :func:`time.time`; tests pass their own).
        **options: more tuning: ``delimiters``, ``max_sentences``, ``shingle``,
            ``letter_units``, ``sketch_rate``, ``sketch_size``, ``html`` (see
            :class:`~nshash.Fingerprinter`);
            ``theta``, ``min_overlap``, ``sketch_cap``, ``merge_theta``, ``merge_guard``,
            ``votes`` (see :class:`~nshash.MatchPolicy`).

    A store keeps the ``letter_units`` it was begun with (its fingerprints were made with
    it): without ``letter_units=``, NSHash fingerprints with the store's value (1 for a store
    begun before the setting existed), and the first write to a new store records this
    NSHash's value (default 2).

    Raises:
        ConfigError: an unknown ``hashdb``, ``hashfunc`` or option, or a ``letter_units``
            that is not the one the store was begun with.

    Example:
        >>> nsh = NSHash.open("memory://")
        >>> a = nsh.add("The quick brown fox jumps over the lazy dog. It was not amused.")
        >>> b = nsh.add("the quick brown fox jumps over the lazy dog! It was not amused")
        >>> a.similar_id == b.similar_id, b.duplicate
        (True, True)
    """

    def __init__(
        self,
        name: str = "nshash",
        hashfunc: str = "farmhash",
        hashdb: str = "memory",
        *,
        n: int = 16,
        min_length: int = 10,
        store: Store | None = None,
        track: bool = False,
        clock: Callable[[], float] = time.time,
        **options: Any,
    ) -> None:
        if not isinstance(track, bool):
            raise ConfigError(f"track must be True or False, not {track!r}")
        if not callable(clock):
            raise ConfigError(f"clock must be a callable returning epoch seconds, not {clock!r}")
        #: Whether documents' times, urls and sites are kept (see :meth:`hot`).
        self.track = track
        #: What time it is, in epoch seconds.
        self.clock = clock
        delimiters = options.pop("delimiters", DEFAULT_DELIMITERS)
        sketch_options = {k: options.pop(k) for k in _TEXT_OPTIONS if k in options}
        policy_options = {k: options.pop(k) for k in _POLICY_OPTIONS if k in options}
        if options:
            raise ConfigError(f"Unknown option(s) {sorted(options)} for NSHash")
        self._fingerprinter = Fingerprinter(
            n=n,
            min_length=min_length,
            hashfunc=hashfunc,
            delimiters=delimiters,
            **sketch_options,
        )
        self.policy = MatchPolicy(n=n, **policy_options)
        #: The ``letter_units`` this NSHash was given (None: it adopts the store's).
        self._letters_given: int | None = sketch_options.get("letter_units")
        #: Whether the store's letter_units is still to be read (see _settle_letters), and
        #: whether this NSHash has yet to write (the first write records its letter_units
        #: in a store that records none).
        self._letters_due = True
        self._unrecorded = False
        self._first_write = True
        #: The store's one step from a document to its group (Store.placer), once this
        #: NSHash has written (the first write settles what it fingerprints with); None
        #: without.
        self._place: Placer | None = None
        owned = store is None
        if store is None:
            if hashdb not in _HASHDBS:
                raise ConfigError(f"Unknown hashdb {hashdb!r}; use 'memory' or 'leveldb'")
            if not isinstance(name, str) or not name:
                raise ConfigError(f"name must be a non-empty str, not {name!r}")
            if "://" in name:  # a store URL: it would become a file named after it
                raise ConfigError(
                    f"name is a file name, not a store URL ({name!r:.60}): "
                    f"use NSHash.open({name!r:.60})"
                )
            scheme, suffix = _HASHDBS[hashdb]
            store = open_path(scheme, os.path.abspath(name + suffix))
        self.store = store
        #: The story cards :meth:`find` filters by (made by its first call; see
        #: :class:`~nshash.methods.nshash.find.StoryCards`).
        self.cards: StoryCards | None = None
        if not store.connects_lazily:  # (a server store is asked on first use, see below)
            try:
                self._settle_letters()
            except BaseException:
                if owned:
                    store.close()
                raise

    @property
    def fingerprinter(self) -> Fingerprinter:
        """What turns a text into its :class:`~nshash.DocPrint`: with the ``letter_units``
        the store was begun with (read on first use from a store that connects lazily)."""
        if self._letters_due:
            self._settle_letters()
        return self._fingerprinter

    @fingerprinter.setter
    def fingerprinter(self, fingerprinter: Fingerprinter) -> None:
        self._fingerprinter = fingerprinter
        self._make_place()

    def _make_place(self) -> None:
        """Ask the store for its one step from a text to its group (see :meth:`add`), with
        the fingerprinter and policy of now: after the first write, and untracked only."""
        self._place = None
        if not self._first_write and not self.track:
            self._place = self.store.placer(self._fingerprinter, self.policy)

    def _settle_letters(self) -> None:
        """Fingerprint with the ``letter_units`` the store was begun with (see
        :meth:`Store.letter_units`): adopted when this NSHash was given none, refused when
        it was given another. A store that records none (a new one) gets this NSHash's with
        its first write.

        Raises:
            ConfigError: the value given is not the one the store was begun with.
        """
        store = self.store
        stored = store.letter_units()
        fp = self._fingerprinter
        if stored is None:
            self._unrecorded = not getattr(store, "readonly", False)
        elif self._letters_given is not None and self._letters_given != stored:
            raise ConfigError(_letters_refused(self._letters_given, stored))
        elif stored != fp.letter_units:
            # (the store's own value: a store begun before the setting has 1, not the default)
            options = {k: getattr(fp, k) for k in _TEXT_OPTIONS}
            options["letter_units"] = stored
            self._fingerprinter = Fingerprinter(
                n=fp.n,
                min_length=fp.min_length,
                hashfunc=fp.hashfunc,
                delimiters=fp.delimiters,
                **options,
            )
        self._letters_due = False

    def _before_first_write(self) -> None:
        """Record this NSHash's ``letter_units`` in a store that records none (see
        :meth:`Store.record_letter_units`), once, before it writes.

        Raises:
            ConfigError: the store was begun with another value (by another writer, or
                before this NSHash read it from a store that connects lazily).
        """
        if self._letters_due:
            self._settle_letters()
        if self._unrecorded:
            units = self._fingerprinter.letter_units
            recorded = self.store.record_letter_units(units)
            if recorded != units:
                raise ConfigError(_letters_refused(units, recorded))
            self._unrecorded = False
        self._first_write = False
        self._make_place()

    @classmethod
    def open(
        cls,
        url: str = "memory://",
        *,
        readonly: bool = False,
        settings_from: Mapping[str, str] | None = None,
        **options: Any,
    ) -> NSHash:
        """Open the store at *url* and return an NSHash on it.

        Args:
            url: a store URL (see :func:`nshash.open_store`).
            readonly: read the store without creating, locking or changing anything: it must
                exist, it may be held by a writer in another process (a crawl can be watched),
                and :meth:`add` raises :class:`~nshash.StoreReadOnlyError`.
            settings_from: where each keyword's value came from, for the error a bad one
                gets (``{"theta": "--theta"}``; default: the keyword itself).
            **options: NSHash options (``n``, ``min_length``, ``hashfunc``, ...); anything
                else is passed to the store (``fsync``, ``prefix``, ...). The tuning settings
                (:data:`nshash.options.SETTINGS`) may be given in *url*'s query instead
                (``memory://?theta=0.6``); given both ways, they must agree.

        Raises:
            StoreNotFoundError: *readonly* and there is no store at *url*.
        """
        url, in_url = settings_in_url(url)
        mine: dict[str, Any] = from_text(in_url, "the store URL")
        origins = {name: "the store URL" for name in mine}
        for name in (*SETTINGS, *_OWN_OPTIONS):
            if name not in options:
                continue
            value = options.pop(name)
            if name in mine and mine[name] != value:
                where = (settings_from or {}).get(name, "a keyword")
                raise ConfigError(
                    f"{name} is given twice: {mine[name]!r} in the store URL and {value!r}"
                    f" as {where}"
                )
            mine[name] = value
            origins[name] = (settings_from or {}).get(name, f"the keyword {name}=")
        if not isinstance(readonly, bool):  # ("no" is truthy: it would open read-only)
            raise ConfigError(f"readonly must be True or False, not {readonly!r}")
        if readonly:
            options["readonly"] = True
        if "clock" in mine:  # the time a retention window counts by, too
            options["clock"] = mine["clock"]
        keywords = set(options)
        try:
            store = open_store(url, **options)
        except UnknownOptionError as exc:
            mistaken = sorted(keywords.intersection(exc.names))
            if not mistaken:
                raise
            raise UnknownOptionError(
                f"Unknown keyword(s) {mistaken} for NSHash.open: NSHash takes"
                f" {', '.join((*SETTINGS, *_OWN_OPTIONS, 'readonly'))}; the rest go to the"
                f" store, which refused them ({exc})",
                names=mistaken,
            ) from None
        try:
            return cls(store=store, **mine)
        except ConfigError as exc:
            store.close()
            raise blame(exc, origins) from None
        except BaseException:
            store.close()
            raise

    # -- the job -----------------------------------------------------------------------
    def prepare(self, text: str) -> DocPrint:
        """Fingerprint *text* without touching the store (pure; safe in worker processes).

        Raises:
            ConfigError: *text* is not a str, has a lone surrogate or is too long
                (:mod:`nshash.inputs`).
            EmptyDocumentError: *text* has no letter or digit.
        """
        return self.fingerprinter.prepare(check_text(text))

    def explain(self, text: str, *, as_copy: bool = False) -> Explanation:
        """Say which group *text* would join now, and why; writes nothing.

        The explanation lists the anchors looked up, the anchor candidates set aside as known
        boilerplate, and every group an anchor hit with the sketch values shared, the sizes
        compared, the score against ``theta`` and the verdict.

        With *as_copy*, the text is judged as a copy whose letters and digits differ from
        every text added (its exact-text fingerprint is changed, :data:`COPY_SALT`): an
        article already stored is then explained against its story by the guard, not answered
        as an identical text.
        """
        doc = self.prepare(text)
        if as_copy:
            doc = dataclasses.replace(doc, exact=doc.exact ^ COPY_SALT)
        return self.store.explain(doc, self.policy)

    def add(
        self,
        text: str,
        doc_id: str | None = None,
        *,
        title: str | None = None,
        url: str | None = None,
        site: str | None = None,
        published_at: Moment | None = None,
        explain: bool = False,
        id: str | None = None,  # the name every surface uses
    ) -> AddResult:
        """Add one document and return its group.

        Args:
            text: the article text.
            doc_id: your id for it. Sending the same ``doc_id`` again changes nothing and
                returns the first answer (crawlers retry), with ``canonical_id`` set when that
                group has been merged since.
            id: the same as *doc_id*, by the name the HTTP API, the command line and Parquet
                use (``add(text, id="a1")``); give one of the two.
            title: kept with ``doc_id`` for group listings.
            url: where it was found; kept with ``doc_id`` when tracking (``track=True``).
            site: the site that carried it (default: the host of *url*); kept likewise.
            published_at: its time (epoch seconds or a datetime) when tracking; default now
                (the ``clock``). It decides which hour the document counts in.

        Raises:
            ConfigError: *text*, *doc_id* or *title* is refused by :mod:`nshash.inputs`
                (a wrong type, a lone surrogate, NUL in an id or title, too long).
            EmptyDocumentError: *text* has no letters or digits.
            StoreError: the store failed; nothing was written.
        """
        # (each check called only for what was given: this runs once a document)
        if doc_id is not None or id is not None:
            doc_id = _check_doc_id(either_id(doc_id, id))
        if title is not None:
            title = check_title(title)
        text = check_text(text)
        place = self._place
        if place is not None and not explain:
            # Untracked: the store's one step from text to group (see Store.placer),
            # unless it declines.
            made = place(text, doc_id, title)
            if made is not None:
                if self.cards is not None:
                    self.cards.forget(made.similar_id, ())
                return made
        meta = self.meta(url, site, published_at) if self.track else None
        fp = self.fingerprinter if self._letters_due else self._fingerprinter
        return self._assigned(fp.prepare(text), doc_id, title, meta, explain)

    def get_similar(self, text: str) -> int:
        """Add *text* and return its ``similar_id`` (the original release's call): :meth:`add`
        of the text alone, without the checks of the arguments it is not given (unless a
        subclass has its own ``add``, which it then calls)."""
        if type(self).add is not NSHash.add:
            return super().get_similar(text)
        text = check_text(text)
        place = self._place
        if place is not None:  # (as add takes it)
            made = place(text, None, None)
            if made is not None:
                if self.cards is not None:
                    self.cards.forget(made.similar_id, ())
                return made.similar_id
        meta = self.meta() if self.track else None
        fp = self.fingerprinter if self._letters_due else self._fingerprinter
        return self._assigned(fp.prepare(text), None, None, meta, False).similar_id

    def meta(
        self, url: str | None = None, site: str | None = None, published_at: Moment | None = None
    ) -> DocMeta | None:
        """The :class:`~nshash.DocMeta` a document gets (None when not tracking).

        Raises:
            ConfigError: *url* or *site* is not a short string, or *published_at* is not a
                time after 1970.
        """
        if not self.track:
            return None
        url = check_title(url, "url")
        site = check_title(site, "site")
        if site:  # ("" is no site: the url's host stands for it)
            site_key(site)  # searches match sites by this rule: a site it refuses is never found
        else:
            site = site_of(url)
        added = int(self.clock()) if published_at is None else _moment(published_at)
        return DocMeta(added, url, site)

    def add_prepared(
        self,
        doc: DocPrint,
        doc_id: str | None = None,
        *,
        title: str | None = None,
        meta: DocMeta | None = None,
        explain: bool = False,
    ) -> AddResult:
        """Add a document fingerprinted earlier by :meth:`prepare`.

        *meta* (from :meth:`meta`) is recorded with it. With *explain*, the result carries an
        :class:`~nshash.Explanation` of the candidates as the store judged them just before
        the add (on Redis another writer may add a document in between).
        """
        return self._add(doc, _check_doc_id(doc_id), check_title(title), meta, explain)

    def _add(
        self,
        doc: DocPrint,
        doc_id: str | None,
        title: str | None,
        meta: DocMeta | None,
        explain: bool,
    ) -> AddResult:
        """:meth:`add_prepared` for arguments already checked."""
        place = self._place
        if place is not None and meta is None and not explain:
            stepped = place(doc, doc_id, title)  # (see add)
            if stepped is not None:
                if self.cards is not None:
                    self.cards.forget(stepped.similar_id, ())
                return stepped
        return self._assigned(doc, doc_id, title, meta, explain)

    def _assigned(
        self,
        doc: DocPrint,
        doc_id: str | None,
        title: str | None,
        meta: DocMeta | None,
        explain: bool,
    ) -> AddResult:
        """:meth:`_add` the general way, through the store's :meth:`~Store.assign` (what
        :meth:`add` calls where the store's one step declined or does not apply)."""
        if self._first_write:
            self._before_first_write()
        why = self.store.explain(doc, self.policy) if explain else None
        answer, anchors = self.store.assign(doc, self.policy, doc_id, title, meta)
        if doc_id is not None and not answer.replayed:
            answer = self._settled(answer, doc_id, anchors)
        if self.cards is not None:
            self.cards.forget(answer.similar_id, answer.merged_from)
        values = (
            answer.similar_id,
            answer.duplicate,
            answer.merged_from,
            anchors,
            doc_id,
            answer.replayed,
            answer.canonical_id,
            why,
        )
        if _MAKE is not None:  # AddResult(*values), without the frozen __init__'s cost
            made: AddResult = _MAKE(AddResult, ADD_RESULT_FIELDS, *values)
            return made
        return AddResult(*values)

    def add_many(self, documents: Iterable[Document]) -> list[AddResult | NSHashError]:
        """Add documents in order, batched for server stores (one round trip on Redis).

        Each item is a text or a dict with ``text`` and optional ``id`` and ``title`` (and
        ``url``, ``site``, ``published_at`` when tracking). A bad item (empty text, a wrong
        type) yields its exception in place; the rest still go in.
        """
        results: list[AddResult | NSHashError | None] = []
        batch: list[tuple[DocPrint, str | None, str | None]] = []
        metas: list[DocMeta | None] = []
        slots: list[int] = []
        for item in check_documents(documents):
            try:
                text, doc_id, title = self._unpack(item)
                meta = None
                if self.track and isinstance(item, dict):
                    meta = self.meta(item.get("url"), item.get("site"), item.get("published_at"))
                elif self.track:
                    meta = self.meta()
                batch.append((self.prepare(text), doc_id, title))
                metas.append(meta)
                slots.append(len(results))
                results.append(None)
            except NSHashError as exc:
                results.append(exc)
        if self._first_write and batch:
            self._before_first_write()
        outcomes = self.store.assign_many(batch, self.policy, metas if self.track else None)
        for slot, (_doc, doc_id, _title), outcome in zip(slots, batch, outcomes, strict=True):
            if isinstance(outcome, NSHashError):
                results[slot] = outcome
                continue
            answer, anchors = outcome
            if doc_id is not None and not answer.replayed:
                try:
                    answer = self._settled(answer, doc_id, anchors)
                except NSHashError as exc:
                    results[slot] = exc
                    continue
            if self.cards is not None:
                self.cards.forget(answer.similar_id, answer.merged_from)
            results[slot] = AddResult(
                answer.similar_id,
                answer.duplicate,
                answer.merged_from,
                anchors,
                doc_id,
                answer.replayed,
                answer.canonical_id,
            )
        return [r for r in results if r is not None]

    def _settled(self, answer: Assignment, doc_id: str, anchors: tuple[int, ...]) -> Assignment:
        """*answer*, after the detach rule (see :mod:`.corrections`) had its say."""
        moved = self.store.settle(doc_id, anchors)
        if moved is None:
            return answer
        if self.cards is not None:
            self.cards.forget(answer.similar_id)
        return Assignment(moved, answer.duplicate, answer.merged_from)

    # -- editors' corrections ------------------------------------------------------------
    def detach(self, doc_id: str, *, by: str = "python") -> Correction:
        """Take the copy *doc_id* out of its story: it becomes a story of its own, and the
        store remembers that it is not that story (see :mod:`.corrections`: later copies
        like it go with it).

        Args:
            doc_id: the copy, by the id it was added with.
            by: who makes the correction (kept with it).

        Raises:
            CorrectionError: no such document, or it is its story's only copy.
        """
        checked = _check_doc_id(doc_id)
        assert checked is not None
        done = self.store.detach(checked, by, int(self.clock()), self.policy.votes)
        self._forget(done)
        return done

    def join(self, a: int, b: int, *, by: str = "python") -> Correction:
        """Join stories *a* and *b* into one: the smaller canonical id survives and
        :meth:`resolve` sends the other to it, as a merge does.

        Raises:
            CorrectionError: a story is unknown, or both are one story already.
        """
        done = self.store.join(a, b, by, int(self.clock()), self.policy.sketch_cap)
        self._forget(done)
        return done

    def undo(self, correction_id: int, *, by: str = "python") -> Correction:
        """Undo a correction (a detach is joined back; a join is split as it was).

        Raises:
            CorrectionError: no such correction, or it cannot be undone (undone already, or
                its stories changed since).
        """
        done = self.store.undo(correction_id, by, int(self.clock()), self.policy.sketch_cap)
        self._forget(done)
        return done

    def corrections(self) -> list[Correction]:
        """Every correction made on this store, oldest first, with who made it and when."""
        return self.store.corrections()

    def _forget(self, done: Correction) -> None:
        if self.cards is not None:
            self.cards.forget(done.source, (done.target,))
            self.cards.forget(done.target, (done.source,))

    @staticmethod
    def _unpack(item: Document) -> tuple[str, str | None, str | None]:
        if isinstance(item, str):
            return item, None, None
        if isinstance(item, dict):
            text = item.get("text")
            if not isinstance(text, str):
                raise ConfigError(f"A document needs a 'text' string, not {text!r:.80}")
            return text, _check_doc_id(item.get("id")), check_title(item.get("title"))
        raise ConfigError(f"A document is a str or a dict, not {type(item).__name__}")

    def query(self, text: str) -> int | None:
        """Return the ``similar_id`` *text* would get, or None if it is new; writes nothing."""
        return self.store.lookup(self.prepare(text), self.policy)

    def resolve(self, similar_id: int) -> int:
        """Return the canonical id for *similar_id* (ids merged away resolve to the survivor)."""
        if not isinstance(similar_id, int) or isinstance(similar_id, bool) or similar_id < 1:
            raise ConfigError(f"similar_id must be a positive integer, not {similar_id!r}")
        return self.store.resolve(similar_id)

    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return the stored answer for *doc_id* (with its current canonical id), or None.

        Raises:
            ConfigError: *doc_id* is not a document id (None included).
        """
        checked = _check_doc_id(doc_id)
        if checked is None:
            raise ConfigError("document() needs a doc_id, not None")
        return self.store.document(checked)

    def group(self, similar_id: int) -> Group | None:
        """Return the group *similar_id* belongs to (after merges), or None if unknown."""
        if not isinstance(similar_id, int) or isinstance(similar_id, bool) or similar_id < 1:
            raise ConfigError(f"similar_id must be a positive integer, not {similar_id!r}")
        return self.store.group(similar_id)

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        """Return the largest groups first: the "hot stories" with their doc ids."""
        if not isinstance(min_size, int) or min_size < 1:
            raise ConfigError(f"min_size must be a positive integer, not {min_size!r}")
        if not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be a positive integer, not {limit!r}")
        return self.store.groups(min_size, limit)

    def stats(self) -> StoreStats:
        """Return counts over the store: documents, groups, fingerprints."""
        return self.store.stats()

    # -- activity (track=True) -----------------------------------------------------------
    def hot(
        self,
        since: str | int | float = "24h",
        limit: int = 30,
        *,
        now: float | None = None,
        min_count: int = 1,
    ) -> list[HotGroup]:
        """Return the hot stories: groups ranked by their documents added in a window.

        Documents count by the hour they were added (or published) in, so the window is
        widened to whole hours: ``since="24h"`` counts the current hour and the 24 before it.
        Only documents added while tracking (``track=True``) count. The cost grows with the
        groups active in the window, never with the store.

        Args:
            since: the window: seconds, or ``"90m"``, ``"24h"``, ``"7d"``.
            limit: how many groups at most.
            now: the window's end (default: the ``clock``).
            min_count: leave out groups with fewer documents in the window.

        Raises:
            ConfigError: a bad window, limit or count.
        """
        seconds = parse_window(since)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"limit must be a positive integer, not {limit!r}")
        if not isinstance(min_count, int) or isinstance(min_count, bool) or min_count < 1:
            raise ConfigError(f"min_count must be a positive integer, not {min_count!r}")
        end = self.clock() if now is None else float(now)
        last_hour = int(end // HOUR)
        first_hour = max(0, int((end - seconds) // HOUR))
        ranked = self.store.hot(first_hour, last_hour, limit)
        out = []
        for gid, recent in ranked:
            if recent < min_count:
                break
            out.append(self._hot_group(gid, recent))
        return out

    def find(
        self,
        text: str | None = None,
        *,
        site: str | None = None,
        start: str | Moment | None = None,
        end: str | Moment | None = None,
        since: str | int | float | None = None,
        tz: str | None = None,
        limit: int = 30,
        offset: int = 0,
        min_count: int = 1,
        now: float | None = None,
    ) -> StoryPage:
        """Find stories: by headline, by site, in a time range, a page at a time.

        The stories with copies in the range are ranked by those copies (most first, ties
        by smaller id, as :meth:`hot` ranks them); those whose headline holds *text* and
        whose sites include *site* are kept, and ``limit`` of them from ``offset`` are
        returned with the total. See :mod:`nshash.methods.nshash.find` for how terms, sites
        and times are matched. Only documents added while tracking (``track=True``) count.

        Args:
            text: a search term for the headlines (letters and digits matter; case, width
                and traditional or simplified script do not).
            site: only stories carried by this site (among their first 100 copies).
            start: the range's start: epoch seconds, a datetime or an ISO 8601 date or time.
            end: its end (exclusive; a bare date means the end of that day).
            since: a window ending now instead (``"24h"``, ``"7d"``); not with start/end.
            tz: the time zone of dates and of times without an offset (default UTC).
            limit: stories per page.
            offset: matching stories to skip (the previous pages').
            min_count: leave out stories with fewer copies in the range.
            now: the end of a ``since`` window (default: the ``clock``).

        Raises:
            ConfigError: a bad term, site, time, range, zone, limit, offset or count (an
                inverted range, a malformed date, a term over 200 characters...).
        """
        checks = (("limit", limit, 1), ("offset", offset, 0), ("min_count", min_count, 1))
        for name, value, least in checks:
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"{name} must be an integer of at least {least}, not {value!r}")
        term = None if text is None or text == "" else search_key(text)
        where = None if site is None or site == "" else site_key(site)
        hours: TimeRange | None
        if since is not None:
            if start is not None or end is not None:
                raise ConfigError("Give a window (since) or a range (from/to), not both")
            seconds = parse_window(since)
            last = self.clock() if now is None else float(now)
            hours = TimeRange(max(0, int((last - seconds) // HOUR)), int(last // HOUR))
        else:
            hours = time_range(start, end, zone(tz))
        if self.cards is None:
            # Another process may write to a shared store, or to one this one only reads.
            shared = urlsplit(self.store.url).scheme in ("redis", "rediss", "unix")
            alone = not shared and not getattr(self.store, "readonly", False)
            self.cards = StoryCards(max_age=None if alone else 60.0)
        page, total = rank(self.store, self.cards, hours, term, where, min_count, offset + limit)
        stories = tuple(self._hot_group(gid, n) for gid, n in page[offset:])
        return StoryPage(stories, total, offset, hours)

    #: How many of a hot group's first members give its headline and sites.
    HOT_MEMBERS = CARD_MEMBERS

    def _hot_group(self, gid: int, recent: int) -> HotGroup:
        group = self.store.group_head(gid, self.HOT_MEMBERS)
        activity = self.store.activity(gid)
        size = group.size if group is not None else recent
        members = group.members if group is not None else ()
        title = next((m.title for m in members if m.title), None)
        metas = self.store.doc_meta([m.doc_id for m in members]) if members else []
        sites = tuple(dict.fromkeys(m.site for m in metas if m is not None and m.site))
        return HotGroup(
            gid,
            recent,
            size,
            activity.first_seen if activity else None,
            activity.last_seen if activity else None,
            title,
            sites,
        )

    def activity(self, similar_id: int) -> Activity | None:
        """Return when a group's documents came in (first and last seen, per hour), or None
        when none was tracked."""
        if not isinstance(similar_id, int) or isinstance(similar_id, bool) or similar_id < 1:
            raise ConfigError(f"similar_id must be a positive integer, not {similar_id!r}")
        return self.store.activity(similar_id)

    def doc_meta(self, doc_ids: Iterable[str]) -> list[DocMeta | None]:
        """Return the time, url and site kept for each document id (None where none).

        Raises:
            ConfigError: *doc_ids* is one id (a str) or not iterable, or holds a value that
                is not a document id.
        """
        if isinstance(doc_ids, str) or not isinstance(doc_ids, Iterable):
            raise ConfigError(
                f"doc_meta takes an iterable of doc ids, not a {type(doc_ids).__name__}"
            )
        ids = [_check_doc_id(d) for d in doc_ids]
        if None in ids:
            raise ConfigError("doc_meta takes doc ids, not None")
        return self.store.doc_meta([d for d in ids if d is not None])

    def close(self) -> None:
        """Close the store (a memory store with a path flushes its journal, writes no snapshot)."""
        self.store.close()

    def __repr__(self) -> str:
        hashfunc = self._fingerprinter.hashfunc  # (asks the store nothing)
        return f"NSHash({self.store!r}, n={self.policy.n}, hashfunc={hashfunc!r})"
