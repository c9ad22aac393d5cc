"""The tuning settings of :class:`~nshash.NSHash`: one schema that every surface reads.

A setting such as ``theta`` can be given four ways, and each surface reads it through
:data:`SETTINGS`:

========================  =========================================================
a keyword                 ``NSHash.open(url, theta=0.6)``, ``NSHash(..., theta=0.6)``
a store URL option        ``memory:///news.pkl?theta=0.6`` (taken off before the store
                          sees the URL)
a command-line flag       ``nshash dedup FILE --theta 0.6``
an environment variable   ``NSHASH_THETA=0.6`` (the command line and the service)
========================  =========================================================

Text values (URL options, flags, variables) are cast here by each setting's type; the range
rules stay with the classes that use the values (:class:`~nshash.Fingerprinter` and
:class:`~nshash.MatchPolicy`), and an error from either names where the bad value came from
(:func:`blame`).

Example:
    >>> from_text({"theta": "0.6", "n": "8"}, "the store URL")
    {'theta': 0.6, 'n': 8}
    >>> from_text({"theta": "high"}, "the store URL")
    Traceback (most recent call last):
    ...
    nshash.errors.ConfigError: theta must be a number, not 'high' (from the store URL)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from .errors import ConfigError

__all__ = [
    "ENV_PREFIX",
    "SETTINGS",
    "Setting",
    "blame",
    "from_environ",
    "from_text",
    "settings_in_url",
]

#: The prefix of the settings' environment variables (``NSHASH_THETA``).
ENV_PREFIX = "NSHASH_"


def _boolean_or_auto(text: str) -> bool | str:
    folded = text.strip().lower()
    if folded == "auto":
        return "auto"
    if folded in ("1", "true", "yes", "on"):
        return True
    if folded in ("0", "false", "no", "off"):
        return False
    raise ValueError("true, false or auto")


def _integer(text: str) -> int:
    return int(text.strip())


def _number(text: str) -> float:
    value = float(text.strip())
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("a finite number")
    return value


_KINDS: dict[str, tuple[Callable[[str], Any], str]] = {
    "int": (_integer, "an integer"),
    "float": (_number, "a number"),
    "str": (str, "a string"),
    "auto": (_boolean_or_auto, "true, false or auto"),
}


@dataclass(frozen=True)
class Setting:
    """One tuning setting: its name on every surface, its type and what it does.

    Attributes:
        name: the keyword and URL option (``min_length``); the flag is ``--min-length`` and
            the variable ``NSHASH_MIN_LENGTH``.
        kind: ``int``, ``float``, ``str`` or ``auto`` (true, false or ``auto``).
        default: the value when none is given (None: derived, see *help*).
        help: one line for ``--help`` and the README.
        text: whether the fingerprinter reads it (:class:`~nshash.Fingerprinter`; the others
            are the guard's, :class:`~nshash.MatchPolicy`).
    """

    name: str
    kind: str
    default: Any
    help: str
    text: bool = False

    @property
    def flag(self) -> str:
        """The command-line flag (``--min-length``)."""
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        """The environment variable (``NSHASH_MIN_LENGTH``)."""
        return ENV_PREFIX + self.name.upper()

    def cast(self, text: str, where: str) -> Any:
        """The value *text* (from *where*) stands for.

        Raises:
            ConfigError: *text* is not of the setting's kind; the message names *where*.
        """
        parse, expected = _KINDS[self.kind]
        try:
            return parse(text)
        except ValueError:
            raise ConfigError(
                f"{self.name} must be {expected}, not {text!r} (from {where})"
            ) from None


#: Every tuning setting, in the order ``--help`` and the README list them.
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("n", "int", 16, "anchors per document", text=True),
        Setting("min_length", "int", 10, "the shortest key a sentence anchor uses", text=True),
        Setting("hashfunc", "str", "farmhash", "fingerprints: farmhash or md5", text=True),
        Setting("theta", "float", 0.5, "share of the smaller sketch a copy and a group share"),
        Setting("min_overlap", "int", 3, "the fewest shared sketch values for a match"),
        Setting("sketch_cap", "int", 256, "sketch values a group keeps"),
        Setting("merge_theta", "float", 0.6, "how strongly a copy must match to merge groups"),
        Setting("merge_guard", "float", 0.25, "how much two groups must share to merge"),
        Setting("votes", "int", 3, "groups kept apart on a hash before it is boilerplate"),
        Setting("max_sentences", "int", None, "anchor candidates a page offers (n + 8)", text=True),
        Setting("shingle", "int", 24, "a shingle's weight (CJK character 3, letter 2)", text=True),
        Setting(
            "letter_units",
            "int",
            2,
            "units a non-CJK letter or digit weighs (a store keeps the one it began with)",
            text=True,
        ),
        Setting("sketch_rate", "int", 8, "one shingle hash in this many is sketched", text=True),
        Setting("sketch_size", "int", 256, "sketch values a document keeps", text=True),
        Setting("html", "auto", "auto", "reduce HTML to text first: true, false, auto", text=True),
    )
}


def from_text(values: Mapping[str, str], where: str) -> dict[str, Any]:
    """Cast the settings among *values* (text, from *where*); other names are left out.

    Raises:
        ConfigError: a value is not of its setting's kind.
    """
    return {
        name: SETTINGS[name].cast(text, where) for name, text in values.items() if name in SETTINGS
    }


def from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings given as ``NSHASH_*`` variables in *environ* (empty ones are unset).

    Raises:
        ConfigError: a variable's value is not of its setting's kind; the message names it.
    """
    found: dict[str, Any] = {}
    for setting in SETTINGS.values():
        text = environ.get(setting.env, "")
        if text.strip():
            found[setting.name] = setting.cast(text, f"the environment variable {setting.env}")
    return found


def settings_in_url(url: str) -> tuple[str, dict[str, str]]:
    """*url* without the tuning settings in its query (:data:`SETTINGS`), and those settings
    as text; the store sees only its own options.

    Example:
        >>> settings_in_url("memory:///news.pkl?fsync=always&theta=0.6")
        ('memory:///news.pkl?fsync=always', {'theta': '0.6'})
    """
    if not isinstance(url, str) or "?" not in url:
        return url, {}
    head, _, tail = url.partition("?")
    query, hash_, fragment = tail.partition("#")
    kept, settings = [], {}
    for pair in query.split("&"):
        name = unquote_plus(pair.partition("=")[0])
        if name in SETTINGS:
            if name in settings:
                raise ConfigError(f"Option {name!r} is given twice in the store URL")
            settings[name] = unquote_plus(pair.partition("=")[2])
        elif pair:
            kept.append(pair)
    rest = "?" + "&".join(kept) if kept else ""
    return head + rest + hash_ + fragment, settings


_NAMED = re.compile(r"^(?:Unknown )?(\w+)")


def blame(exc: ConfigError, origins: Mapping[str, str]) -> ConfigError:
    """*exc* (raised by a check of the settings) with where its setting came from added.

    *origins* maps a setting's name to where its value was given (``"--theta"``, ``"the
    store URL"``...); a message naming none of them comes back as it was.
    """
    match = _NAMED.match(str(exc))
    name = match[1] if match else ""
    if name not in origins or "(from " in str(exc):
        return exc
    return ConfigError(f"{exc} (from {origins[name]})")
