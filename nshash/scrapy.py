"""A Scrapy item pipeline: every scraped article gets its ``similar_id``, or reposts are dropped.

Needs ``pip install 'nshash[scrapy]'``. Enable it in the project's ``settings.py``::

    ITEM_PIPELINES = {"nshash.scrapy.NSHashPipeline": 300}
    NSHASH_STORE_URL = "leveldb:///var/lib/crawl/nshash"   # an embedded store, or:
    # NSHASH_SERVICE_URL = "http://nshash:8000"            # a running `nshash serve`
    NSHASH_DUPLICATES = "drop"                             # default "tag"

One crawl process owns an embedded store (``memory:///path.pkl`` or ``leveldb://``; see
:func:`nshash.open_store`); a ``redis://`` store or the HTTP service lets many crawl processes
share one state. The store (or the client) is opened once when the spider opens and closed when
it closes. Store calls run in one worker thread of the pipeline's own, so Scrapy's event loop
never waits on a disk, Redis or the network, and documents reach the store in the order the
pipeline received them.

==========================  ==============  ====================================================
setting                     default         meaning
==========================  ==============  ====================================================
``NSHASH_STORE_URL``        ``memory://``   an embedded store (``memory://`` lasts one crawl)
``NSHASH_SERVICE_URL``      unset           a running service instead (not with the above)
``NSHASH_API_KEY``          unset           the service's ``NSHASH_API_KEY``
``NSHASH_TEXT_FIELD``       content, text   the text field (a name, or names tried in order);
                                            a list of strings is joined with line breaks
``NSHASH_ID_FIELD``         ``id``          the document id; without one, the url is the id
``NSHASH_TITLE_FIELD``      ``title``       kept with the id in group listings
``NSHASH_URL_FIELD``        ``url``         sent to the service; the id when there is no id
``NSHASH_DUPLICATES``       ``tag``         ``tag``: set ``similar_id`` and ``duplicate`` on
                                            every item; ``drop``: drop reposts (``DropItem``)
                                            and tag the rest
``NSHASH_RETRIES``          3               service requests retried (safe: ids make a resend a
                                            no-op)
``NSHASH_TIMEOUT``          10              seconds per service request
==========================  ==============  ====================================================

With an id (or a url), a page crawled again is a no-op that returns its first answer: crawls
can be resumed and requests retried without counting a page as its own repost.

Scrapy's stats get ``nshash/items`` (documents sent), ``nshash/new`` (first of their story),
``nshash/duplicates``, ``nshash/dropped``, ``nshash/replayed`` (ids seen before),
``nshash/merges``, ``nshash/skipped/no_text`` (no text field: passed on untouched),
``nshash/skipped/empty`` (no letter or digit: passed on untouched),
``nshash/skipped/refused`` (a text, id, title or url no store takes, such as an id of a kind
no id is or a url over 1,024 characters standing for the id: passed on untouched, with a
warning that says why) and ``nshash/errors`` (the store or service failed: the item is not
passed on). Among the text fields, the first that holds more than white space is the text.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import install_hint

try:
    from itemadapter import ItemAdapter
    from scrapy.exceptions import DropItem
except ImportError as exc:  # pragma: no cover - the extra is installed under test
    raise ImportError(
        f"nshash.scrapy needs Scrapy, which cannot be imported ({exc}):"
        f" {install_hint('scrapy')}"
    ) from exc

from .errors import ConfigError, EmptyDocumentError, NSHashError
from .methods.nshash.core import NSHash
from .results import AddResult
from .stores.url import mask_url

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

__all__ = ["NSHashPipeline", "PipelineSettings"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What ``NSHASH_DUPLICATES`` may say.
DUPLICATE_ACTIONS = ("tag", "drop")

#: The item fields the pipeline sets.
ADDED_FIELDS = ("similar_id", "duplicate")


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """The pipeline's configuration, read from Scrapy settings by :meth:`from_settings`.

    Attributes:
        store_url: the embedded store's URL (None when a service is used).
        service_url: the service's base URL, or None.
        api_key: the service's API key, or None.
        text_fields: the text field names, tried in order.
        id_field: the id field.
        title_field: the title field.
        url_field: the url field (the id when the item has no id).
        duplicates: ``tag`` or ``drop``.
        retries: service retries.
        timeout: seconds per service request.
    """

    store_url: str | None = "memory://"
    service_url: str | None = None
    api_key: str | None = None
    text_fields: tuple[str, ...] = ("content", "text")
    id_field: str = "id"
    title_field: str = "title"
    url_field: str = "url"
    duplicates: str = "tag"
    retries: int = 3
    timeout: float = 10.0

    @classmethod
    def from_settings(cls, settings: Any) -> PipelineSettings:
        """Read the ``NSHASH_*`` settings (a Scrapy ``Settings`` or any mapping with ``get``).

        Raises:
            ConfigError: both or a bad value are set.
        """
        store = settings.get("NSHASH_STORE_URL") or None
        service = settings.get("NSHASH_SERVICE_URL") or None
        for key, value in (("NSHASH_STORE_URL", store), ("NSHASH_SERVICE_URL", service)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{key} is a URL, not {value!r}")
        if store and service:
            raise ConfigError(
                "Set NSHASH_STORE_URL (an embedded store) or NSHASH_SERVICE_URL (a running"
                " service), not both"
            )
        duplicates = str(settings.get("NSHASH_DUPLICATES") or "tag").lower()
        if duplicates not in DUPLICATE_ACTIONS:
            raise ConfigError(
                f"NSHASH_DUPLICATES is 'tag' or 'drop', not {settings.get('NSHASH_DUPLICATES')!r}"
            )
        text = settings.get("NSHASH_TEXT_FIELD") or ("content", "text")
        if isinstance(text, str):  # "body" or, from the command line, "body,content"
            text = [name.strip() for name in text.split(",")]
        if not isinstance(text, list | tuple):
            raise ConfigError(f"NSHASH_TEXT_FIELD is a field name or a list of them, not {text!r}")
        text_fields = tuple(text)
        if not text_fields or not all(isinstance(f, str) and f for f in text_fields):
            raise ConfigError(f"NSHASH_TEXT_FIELD is a field name or a list of them, not {text!r}")
        return cls(
            store_url=None if service else (store or "memory://"),
            service_url=service,
            api_key=settings.get("NSHASH_API_KEY") or None,
            text_fields=text_fields,
            id_field=_name(settings, "NSHASH_ID_FIELD", "id"),
            title_field=_name(settings, "NSHASH_TITLE_FIELD", "title"),
            url_field=_name(settings, "NSHASH_URL_FIELD", "url"),
            duplicates=duplicates,
            retries=_number(settings, "NSHASH_RETRIES", 3, int),
            timeout=_number(settings, "NSHASH_TIMEOUT", 10.0, float),
        )

    def describe(self) -> str:
        """Where the groups live, for the log (passwords masked)."""
        if self.service_url:
            return f"the service at {mask_url(self.service_url)}"
        return mask_url(self.store_url or "memory://")


def _name(settings: Any, key: str, default: str) -> str:
    value = settings.get(key) or default
    if not isinstance(value, str):
        raise ConfigError(f"{key} is a field name, not {value!r}")
    return value


def _number(settings: Any, key: str, default: T, kind: Callable[[Any], T]) -> T:
    value = settings.get(key)
    if value is None or value == "":
        return default
    what = "a whole number" if kind is int else "a number"
    try:
        number = kind(value)
        exact = kind is not int or float(value) == number  # 1.7 is no count of retries
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{key} must be {what}, not {value!r}") from None
    if isinstance(value, bool) or not exact or not math.isfinite(number):  # type: ignore[arg-type]
        raise ConfigError(f"{key} must be {what}, not {value!r}")
    if number < 0:  # type: ignore[operator]
        raise ConfigError(f"{key} must be 0 or more, not {value!r}")
    return number


class _Document:
    """What the pipeline sends for one item."""

    __slots__ = ("doc_id", "text", "title", "url")

    def __init__(self, text: str, doc_id: str | None, title: str | None, url: str | None):
        self.text = text
        self.doc_id = doc_id
        self.title = title
        self.url = url


def _text(value: object) -> str | None:
    """A text field's value as one str: a str, or a list of str joined by line breaks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    return None


def _first_text(values: Iterable[object]) -> str | None:
    """The first of the text fields' *values* that holds more than white space, else the first
    that is a text at all (an empty one: the item is then passed on as empty), else None."""
    found = None
    for value in values:
        text = _text(value)
        if text is not None:
            if text.strip():
                return text
            if found is None:
                found = text
    return found


def _id(value: object, field: str) -> str | None:
    """The id field's value as a str: a str, an int, or another plain value (a UUID, a finite
    float) written as str() writes it; None when there is none.

    Raises:
        ConfigError: the value is of a kind no id is (a bool, a dict, a list of those...).
    """
    value = _first(value)
    if value is None:
        return None
    if isinstance(value, str | int | uuid.UUID | Decimal) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise ConfigError(f"The {field!r} field is an id (a str or a number), not {value!r:.80}")


def _first(value: object) -> object:
    """A field's value, the first of a list; None for none or an empty one."""
    if isinstance(value, list | tuple):
        value = next((v for v in value if v not in (None, "")), None)
    return None if value == "" else value


def _label(value: object) -> str | None:
    """A title or url field's value as a str (the first of a list), or None."""
    value = _first(value)
    if isinstance(value, str | int) and not isinstance(value, bool):
        return str(value)
    return None


class NSHashPipeline:
    """Gives every scraped item the ``similar_id`` of its story (see the module docstring).

    Args:
        settings: what to do; :meth:`from_crawler` reads it from the crawl's settings.
        stats: Scrapy's stats collector, which gets the ``nshash/*`` counters.
    """

    def __init__(self, settings: PipelineSettings, stats: Any = None) -> None:
        self.settings = settings
        self.stats = stats
        #: The open NSHash or service client while the spider runs.
        self.dedup: Any = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> NSHashPipeline:
        """Build the pipeline from the crawl's ``NSHASH_*`` settings (Scrapy calls this).

        Raises:
            ConfigError: a setting is wrong.
        """
        return cls(PipelineSettings.from_settings(crawler.settings), crawler.stats)

    # -- the spider's life ---------------------------------------------------------------
    async def open_spider(self, spider: Any = None) -> None:
        """Open the store, or the client of the service, in the pipeline's thread."""
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nshash")
        try:
            self.dedup = await self._in_thread(self._open)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        logger.info("nshash: grouping items in %s", self.settings.describe())

    def _open(self) -> Any:
        s = self.settings
        if s.service_url:
            try:
                from .client import Client
            except ImportError as exc:
                raise ConfigError(str(exc)) from None
            client = Client(s.service_url, api_key=s.api_key, retries=s.retries, timeout=s.timeout)
            try:
                client.ping()
            except BaseException:
                client.close()
                raise
            return client
        return NSHash.open(s.store_url or "memory://")

    async def close_spider(self, spider: Any = None) -> None:
        """Close the store (its last writes are flushed) or the client, then the thread."""
        executor, dedup = self._executor, self.dedup
        self.dedup = None
        self._executor = None
        if executor is None:
            return
        try:
            if dedup is not None:
                await self._in_thread(dedup.close, executor=executor)
        finally:
            executor.shutdown(wait=True)

    # -- items ---------------------------------------------------------------------------
    async def process_item(self, item: Any, spider: Any = None) -> Any:
        """Send the item's text to the store; tag the item, or drop it as a repost.

        Raises:
            DropItem: with ``NSHASH_DUPLICATES = "drop"``, for a repost.
            ConfigError: the item's class declares no ``similar_id`` or ``duplicate`` field.
            NSHashError: the store or service failed (after the client's retries).
        """
        adapter = ItemAdapter(item)
        try:
            doc = self._document(adapter)
        except ConfigError as exc:
            return self._refused(item, exc)
        if doc is None:
            self._inc("nshash/skipped/no_text")
            return item
        self._check_fields(adapter)
        dedup = self.dedup
        if dedup is None:
            raise ConfigError("NSHashPipeline.process_item was called before open_spider")
        try:
            result = await self._in_thread(self._add, dedup, doc)
        except EmptyDocumentError:
            self._inc("nshash/skipped/empty")
            return item
        except ConfigError as exc:  # the item's text, id, title or url refused (nshash.inputs)
            return self._refused(item, exc)
        except NSHashError:
            self._inc("nshash/errors")
            raise
        self._count(result)
        if result.duplicate and self.settings.duplicates == "drop":
            self._inc("nshash/dropped")
            # A repost dropped on purpose is news for the INFO log, not a WARNING per item.
            raise DropItem(
                f"nshash: a repost of story {result.similar_id} ({doc.doc_id})", log_level="INFO"
            )
        adapter["similar_id"] = result.similar_id
        adapter["duplicate"] = result.duplicate
        return item

    def _document(self, adapter: Any) -> _Document | None:
        s = self.settings
        text = _first_text(adapter.get(f) for f in s.text_fields)
        if text is None:
            return None
        url = _label(adapter.get(s.url_field))
        doc_id = _id(adapter.get(s.id_field), s.id_field) or url
        return _Document(text, doc_id, _label(adapter.get(s.title_field)), url)

    def _refused(self, item: Any, exc: ConfigError) -> Any:
        """Pass on untouched an item whose text, id, title or url no store takes, and say
        why (it was lost from the crawl's output)."""
        self._inc("nshash/skipped/refused")
        logger.warning("nshash: an item passed on untouched: %s", exc)
        return item

    @staticmethod
    def _check_fields(adapter: Any) -> None:
        params = getattr(type(adapter.item), "__dataclass_params__", None)
        if params is not None and params.frozen:
            raise ConfigError(
                f"The item class {type(adapter.item).__name__} is a frozen dataclass: nshash"
                " cannot set its similar_id and duplicate"
            )
        if isinstance(adapter.item, dict):
            return
        names = set(adapter.field_names())
        missing = [f for f in ADDED_FIELDS if f not in names]
        if missing:
            declare = " and ".join(f"{f} = scrapy.Field()" for f in missing)
            raise ConfigError(
                f"The item class {type(adapter.item).__name__} has no {' or '.join(missing)}"
                f" field for nshash to set: declare {declare}, or yield dicts"
            )

    @staticmethod
    def _add(dedup: Any, doc: _Document) -> AddResult:
        if isinstance(dedup, NSHash):
            return dedup.add(doc.text, doc.doc_id, title=doc.title)
        result: AddResult = dedup.add(doc.text, doc.doc_id, title=doc.title, url=doc.url)
        return result

    def _count(self, result: AddResult) -> None:
        self._inc("nshash/items")
        self._inc("nshash/duplicates" if result.duplicate else "nshash/new")
        if result.replayed:
            self._inc("nshash/replayed")
        if result.merged_from:
            self._inc("nshash/merges", len(result.merged_from))

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)

    # -- the worker thread ---------------------------------------------------------------
    def _in_thread(
        self,
        fn: Callable[..., T],
        *args: Any,
        executor: concurrent.futures.ThreadPoolExecutor | None = None,
    ) -> Awaitable[T]:
        """Run ``fn(*args)`` in the pipeline's thread; return something Scrapy can await.

        On an asyncio loop (Scrapy's default reactor, or no reactor) that is an asyncio future;
        under another Twisted reactor, a Deferred fired from the reactor thread.
        """
        pool = executor or self._executor
        if pool is None:
            raise ConfigError("The nshash pipeline is not open")
        future = pool.submit(fn, *args)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _deferred(future)
        return asyncio.wrap_future(future)


def _deferred(future: concurrent.futures.Future[T]) -> Deferred[T]:
    """Return a Deferred that fires in the reactor thread when *future* is done."""
    from twisted.internet import reactor
    from twisted.internet.defer import Deferred

    deferred: Deferred[T] = Deferred()

    def fire(done: concurrent.futures.Future[T]) -> None:
        error = done.exception()
        if error is not None:
            deferred.errback(error)
        else:
            deferred.callback(done.result())

    future.add_done_callback(lambda done: reactor.callFromThread(fire, done))
    return deferred
