"""The Redis backend of every method: a connection from a store URL, and Redis's errors as
nshash's.

:func:`connect` parses ``redis://``, ``rediss://`` (TLS) and ``unix://`` URLs and their
options exactly one way for every method, and :func:`translate` turns a redis-py exception
into the :class:`~nshash.StoreError` a caller can act on (refused credentials, TLS, damaged
data, an unreachable server). Each method brings its own Lua scripts
(:func:`nshash.stores.scripts.lua_script`) and keys under ``{PREFIX}:``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import (
    ConfigError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
    UnknownOptionError,
)
from .kv import check_settings
from .url import mask_url

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_COUNT",
    "Connection",
    "check_prefix",
    "connect",
    "count_arg",
    "translate",
]

#: Seconds to wait for a TCP connection and for each reply; no retries, so a dead or hung
#: server is reported within about this long.
DEFAULT_TIMEOUT = 1.0

#: The largest count a Redis command takes (a signed 64-bit integer).
MAX_COUNT = 2**63 - 1


def count_arg(n: int) -> bytes:
    """*n* as a Redis count argument (``LIMIT 0 n``): a count past what Redis holds asks for
    everything, as a count past the store's size does on every store."""
    return b"%d" % min(int(n), MAX_COUNT)


#: Options :meth:`RedisStore.from_url` accepts (in the URL query or as keywords).
_OPTIONS = ("prefix", "db", "socket_timeout", "socket_connect_timeout", "max_connections")

#: More options for ``rediss://``: a private CA, a client certificate, verification.
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")

#: Refused credentials: a connection error in redis-py, but a configuration problem here.
_AUTH_ERRORS: tuple[type[Exception], ...] = tuple(
    getattr(redis.exceptions, name)
    for name in ("AuthenticationError", "AuthorizationError")
    if hasattr(redis.exceptions, name)
)


def _positive_float(name: str, value: Any, url: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ConfigError(f"{name} must be a positive number of seconds, not {value!r} in {url!r}")
    return number


def _int_option(name: str, value: Any, url: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer >= {minimum}, not {value!r} in {url!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name} must be an integer >= {minimum}, not {value!r} in {url!r}"
        ) from None
    if number < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, not {value!r} in {url!r}")
    return number


def check_prefix(prefix: Any) -> str:
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"prefix must be a non-empty str, not {prefix!r}")
    if "{" in prefix or "}" in prefix or any(c.isspace() for c in prefix):
        raise ConfigError(f"prefix must not contain braces or white space, not {prefix!r}")
    if len(prefix) > 200:
        raise ConfigError(f"prefix must be at most 200 characters, not {len(prefix)}")
    return prefix


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether *exc* or an exception it was raised from or during is a *kind*."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False



def connect(url: str, taken: Sequence[str] = (), **options: Any) -> tuple[redis.Redis, str]:
    """A client for the Redis a store URL names, and the URL's key prefix.

    Nothing is sent until the first call. URL forms: ``redis://[[user]:password@]host[:port][/db]``,
    ``rediss://...`` (TLS) and ``unix://[[user]:password@]/path/to/redis.sock``, each with query
    options; keyword *options* override the query: ``prefix`` (default ``"nshash"``), ``db``,
    ``socket_timeout`` and ``socket_connect_timeout`` (seconds, default 1),
    ``max_connections``; with ``rediss://`` also ``ssl_ca_certs``, ``ssl_certfile``,
    ``ssl_keyfile`` and ``ssl_cert_reqs``.

    *taken* names the query options the caller has read already (a method's own).

    Raises:
        ConfigError: the URL or an option is invalid, or an option is unknown.
    """
    shown = mask_url(url) if isinstance(url, str) else repr(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"Invalid Redis URL {shown!r}: {exc}") from None
    if parts.scheme.lower() not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"A Redis URL starts with redis://, rediss:// or unix://, not {shown!r}"
        )
    merged: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    merged.update(options)
    for name in taken:
        merged.pop(name, None)
    prefix = check_prefix(merged.pop("prefix", "nshash"))
    kwargs: dict[str, Any] = {
        "socket_timeout": _positive_float(
            "socket_timeout", merged.pop("socket_timeout", DEFAULT_TIMEOUT), shown
        ),
        "socket_connect_timeout": _positive_float(
            "socket_connect_timeout",
            merged.pop("socket_connect_timeout", DEFAULT_TIMEOUT),
            shown,
        ),
    }
    if "db" in merged:
        if parts.scheme.lower() != "unix" and parts.path.strip("/"):
            raise ConfigError(f"Give the database once, in the path or as db=, in {shown!r}")
        kwargs["db"] = _int_option("db", merged.pop("db"), shown, 0)
    elif parts.scheme.lower() != "unix" and parts.path.strip("/"):
        # (redis-py reads a path that is not a number as database 0, and says nothing)
        path = parts.path.strip("/")
        if not (path.isascii() and path.isdigit()):
            raise ConfigError(f"A Redis URL's path is a database number, not {path!r}: {shown!r}")
    if "max_connections" in merged:
        kwargs["max_connections"] = _int_option(
            "max_connections", merged.pop("max_connections"), shown, 1
        )
    tls = {k: merged.pop(k) for k in _TLS_OPTIONS if k in merged}
    if merged:
        raise UnknownOptionError(
            f"Unknown option(s) {sorted(merged)} for a Redis store in {shown!r}; use "
            f"{', '.join(_OPTIONS)}, and with rediss:// {', '.join(_TLS_OPTIONS)}",
            names=sorted(merged),
        )
    if tls and parts.scheme.lower() != "rediss":
        raise ConfigError(f"TLS options {sorted(tls)} need a rediss:// URL, not {shown!r}")
    if tls.get("ssl_cert_reqs", "required") not in ("none", "optional", "required"):
        raise ConfigError(
            f"ssl_cert_reqs must be none, optional or required, not {tls['ssl_cert_reqs']!r}"
        )
    kwargs.update(tls)
    # Not urlunsplit: it drops the "//" of "unix:///path" when the netloc is empty.
    bare = f"{parts.scheme}://{parts.netloc}{parts.path}"
    try:
        client = redis.Redis.from_url(
            bare,
            protocol=2,
            retry=Retry(NoBackoff(), 0),
            decode_responses=False,
            **kwargs,
        )
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"Invalid Redis URL {shown!r}: {exc}") from None
    return client, prefix


def translate(exc: Exception, url: str) -> StoreError:
    """The :class:`~nshash.StoreError` for a redis-py exception raised talking to *url*."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, _AUTH_ERRORS):
        err: StoreError = StoreError(
            f"Redis at {url!r} refused the credentials: {exc}", url=url
        )
    elif _caused_by(exc, ssl.SSLError):
        err = StoreError(f"TLS with Redis at {url!r} failed: {exc}", url=url)
    elif isinstance(exc, redis.ResponseError) and "CORRUPT" in str(exc):
        err = StoreCorruptError(f"Redis at {url!r}: {exc}", url=url)
    elif isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        err = StoreUnavailableError(
            f"Redis at {url!r} is unavailable: {exc}", url=url
        )
    else:
        err = StoreError(f"Redis at {url!r} failed: {exc}", url=url)
    err.__cause__ = exc
    return err


def ping_writable(client: redis.Redis, prefix: str, url: str) -> None:
    """Check that Redis answers and takes a write: ``{PREFIX}:ready``, a small key that
    expires in a minute. Redis out of memory under ``maxmemory-policy noeviction`` refuses it
    as it refuses every add.

    Raises:
        StoreUnavailableError: Redis refuses writes for want of memory (it may pass).
        redis.RedisError: anything else (for the caller's :func:`translate`).
    """
    client.ping()
    try:
        client.set(("{" + prefix + "}:ready").encode("utf-8"), b"1", px=60_000)
    except redis.ResponseError as exc:
        if not str(exc).startswith("OOM"):
            raise
        raise StoreUnavailableError(f"Redis at {url!r} refuses writes: {exc}", url=url) from exc


class Connection:
    """A method's connection to Redis: a client, the URL's key prefix, and typed errors.

    Args:
        url: the store URL (see :func:`connect`).
        **options: as for :func:`connect`.

    Raises:
        ConfigError: the URL or an option is invalid.
    """

    def __init__(self, url: str, **options: Any) -> None:
        self.client, self.prefix = connect(url, **options)
        self.url = mask_url(url)
        self.closed = False

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Refuse a closed connection; turn redis-py's errors into :class:`~nshash.StoreError`."""
        if self.closed:
            raise StoreClosedError(f"{self.url} is closed", url=self.url)
        try:
            yield
        except redis.RedisError as exc:
            raise translate(exc, self.url) from exc

    def tables(self, method: str, names: Sequence[str]) -> tuple[list[str], str]:
        """The keys of *method*'s tables, ``{P}:METHOD:NAME`` for each of *names* (the braces
        put them in one hash slot, as a script needs), and its meta hash ``{P}:METHOD:meta``."""
        tag = "{" + self.prefix + "}:" + method + ":"
        return [tag + name for name in names], tag + "meta"

    def settle(self, meta_key: str, settings: dict[str, Any], method: str) -> None:
        """Store *method*'s key-defining settings in its meta hash on first use; refuse
        different ones later (see :func:`~nshash.stores.kv.check_settings`)."""
        with self.errors():
            self.client.hsetnx(meta_key, "settings", json.dumps(settings, sort_keys=True))
            stored: Any = self.client.hget(meta_key, "settings")
        check_settings(self.url, stored, settings, method)

    def ping(self) -> None:
        """Raise a StoreError unless Redis answers and takes a write (see
        :func:`ping_writable`)."""
        with self.errors():
            ping_writable(self.client, self.prefix, self.url)

    def close(self) -> None:
        """Release the connections (idempotent)."""
        if not self.closed:
            self.closed = True
            with suppress(redis.RedisError):
                self.client.close()
