"""Store URLs: parsing them, masking the secrets in them, and the options every backend shares."""

from __future__ import annotations

import importlib
import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigError, UnknownOptionError, install_hint

__all__ = [
    "FSYNC_POLICIES",
    "fsync_option",
    "check_path",
    "mask_url",
    "parse_url",
    "readonly_option",
    "refuse_unknown",
    "repair_option",
    "require_package",
    "retention_option",
]

#: How often the memory journal and LevelDB writes reach the disk: after every write, about
#: once a second, or when the operating system decides. Every policy survives a killed
#: process; only ``always`` also survives a power cut without losing the last second.
FSYNC_POLICIES = ("always", "everysec", "no")


#: Query options whose value is a secret (``password=``, ``auth_token=``, ``api_key=``...).
_SECRET_OPTION = re.compile(r"pass|pwd|secret|token|auth|credential|(?:^|_)key$", re.IGNORECASE)


def mask_url(url: str) -> str:
    """Return *url* with every secret in it replaced by ``***``.

    The password of the user part (a user part with no ``:`` is masked whole, since some
    clients read it as the password) and the value of every query option named like a
    secret (``password``, ``token``, ``api_key``...). It never raises, whatever the string:
    a bad port or a stray bracket is left for the URL parser to report.

    Example:
        >>> mask_url("redis://:secret@cache:6379/0")
        'redis://:***@cache:6379/0'
        >>> mask_url("redis://cache:99999/0?password=S3cret&prefix=news")
        'redis://cache:99999/0?password=***&prefix=news'
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    scheme, sep, rest = url.partition("://")
    if not sep:
        # Not a URL; still, "user:secret@host" without a scheme keeps its secret.
        return f"***@{url.rpartition('@')[2]}" if "@" in url else url
    cut = len(rest)
    for mark in "/?#":
        at = rest.find(mark)
        if at != -1:
            cut = min(cut, at)
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _secret = userinfo.partition(":")
        netloc = f"{user}:***@{hostport}" if colon else f"***@{hostport}"
    head, q, after = tail.partition("?")
    if q:
        query, hash_, fragment = after.partition("#")
        pairs = []
        for pair in query.split("&"):
            name, eq, _value = pair.partition("=")
            pairs.append(f"{name}=***" if eq and _SECRET_OPTION.search(name) else pair)
        tail = head + "?" + "&".join(pairs) + hash_ + fragment
    return f"{scheme}://{netloc}{tail}"


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split a store URL into its scheme, its path and its query options.

    Raises:
        ConfigError: the URL has no scheme or repeats an option.
    """
    if not isinstance(url, str) or "://" not in url:
        shown = mask_url(url) if isinstance(url, str) else url
        raise ConfigError(f"A store URL looks like 'memory://' or 'leveldb:///path', not {shown!r}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError as exc:
        raise ConfigError(f"Invalid store URL {mask_url(url)!r}: {exc}") from None
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key in options:
            raise ConfigError(f"Option {key!r} is given twice in {mask_url(url)!r}")
        options[key] = value
    # memory://, leveldb:// and sqlite:// take a file path: "leveldb:///abs/dir", or a
    # relative one that says so, "leveldb://./rel/dir". "memory://tmp/x.pkl" is refused: it
    # reads as /tmp/x.pkl with a slash missing, and would quietly make ./tmp/x.pkl.
    if parts.scheme.lower().startswith(("redis", "unix")):
        path = parts.path
    else:
        path = parts.netloc + parts.path
        if parts.netloc and not parts.netloc.startswith("."):
            scheme = parts.scheme.lower()
            shown = mask_url(url).partition("://")[2].partition("?")[0]
            raise ConfigError(
                f"{mask_url(url)!r} names no clear path: write {scheme}:///{shown} for the"
                f" absolute path or {scheme}://./{shown} for one relative to the working folder"
            )
    check_path(path, mask_url(url))
    return parts.scheme.lower(), path, options


def check_path(path: str, shown: str) -> str:
    """*path*, a store's file path, if a file system can take it (*shown*: how the error
    names it, such as the masked URL).

    Raises:
        ConfigError: it holds a NUL (os calls would raise a bare ValueError).
    """
    if "\x00" in path:
        raise ConfigError(f"A store's path must not contain a NUL character: {shown!r}")
    return path


def fsync_option(options: dict[str, Any], url: str) -> str:
    fsync = options.pop("fsync", "everysec")
    if fsync not in FSYNC_POLICIES:
        raise ConfigError(
            f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r} in {mask_url(url)!r}"
        )
    return str(fsync)


def readonly_option(options: dict[str, Any], url: str) -> bool:
    value = options.pop("readonly", False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
        return value.lower() in ("1", "true", "yes")
    raise ConfigError(f"readonly must be true or false, not {value!r} in {mask_url(url)!r}")


#: The units a retention window may be written in (``30d``, ``12h``, ``90m``, ``3600s``).
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_WINDOW = re.compile(r"\s*(\d{1,9})\s*([smhdw]?)\s*", re.IGNORECASE)


def retention_option(options: dict[str, Any], url: str) -> int | None:
    """Pop the ``retention`` option: a window such as ``30d``, ``12h``, ``90m``, ``3600s`` or
    a number of seconds, returned in whole seconds (None when it is not given).

    Raises:
        ConfigError: the value is not a positive window.
    """
    value = options.pop("retention", None)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        match = _WINDOW.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise ConfigError(
                f"retention must be a window such as 30d, 12h, 90m or 3600s, not {value!r}"
                f" in {mask_url(url)!r}"
            )
        seconds = int(match[1]) * _UNITS[match[2].lower() or "s"]
    if seconds < 1:
        raise ConfigError(f"retention must be at least one second, not {value!r}")
    return seconds


def refuse_unknown(options: dict[str, Any], url: str) -> None:
    """Raise :class:`~nshash.errors.UnknownOptionError` for the options left in *options*."""
    if options:
        raise UnknownOptionError(
            f"Unknown option(s) {sorted(options)} for the store {mask_url(url)!r}",
            names=sorted(options),
        )


def repair_option(options: dict[str, Any], url: str) -> bool:
    value = options.pop("repair", False)
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes"):
        return True
    if str(value).lower() in ("0", "false", "no", ""):
        return False
    raise ConfigError(f"repair must be true or false, not {value!r} in {mask_url(url)!r}")


def require_package(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"This store needs the {module!r} package: {install_hint(extra)}"
        ) from exc
