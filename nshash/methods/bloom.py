"""Bloom filters for the keyed method: sized from an expected count and a false-positive rate.

A Bloom filter answers "have I seen this key?" with *no* (certain) or *probably* (wrong at
about the configured rate). :mod:`nshash.methods.keyed` puts one in front of each of its four key
indexes, as the crawler of seed 001 does, so that a key never seen costs no index read.
A *probably* is only a hint: the index read and the cosine check that follow decide, so a
false positive costs a read, never a false duplicate.

Two implementations with the same sizing:

* :class:`LocalBloom`: in this process, on the maintained Rust library ``rbloom``
  (``pip install 'nshash[keyed]'``). Its bits can be saved and loaded as bytes.
* :class:`RedisBloom`: the bits live in one Redis string (``SETBIT``/``GETBIT`` at
  :func:`bit_positions`), so every process sharing the Redis shares the filter. Plain
  ``redis-server`` has no Bloom module; none is needed.

Items are 64-bit unsigned integers, already hashed (the keyed method's farmhash key
fingerprints), so neither filter hashes them again with Python's salted ``hash()``.

Example:
    >>> bits, hashes = bloom_params(1_000_000, 0.001)
    >>> bits, hashes
    (14377588, 10)
    >>> bloom = LocalBloom(1000, 0.01)
    >>> bloom.add(42)
    >>> 42 in bloom
    True
"""

from __future__ import annotations

import importlib
import math
from typing import Any

from ..errors import ConfigError, StoreError, install_hint

__all__ = ["LocalBloom", "RedisBloom", "bit_positions", "bloom_params"]

#: The largest filter :class:`RedisBloom` can hold: a Redis string has at most 512 MiB.
MAX_BITS = 1 << 32

_MASK64 = (1 << 64) - 1


def _check(expected_items: object, fp_rate: object) -> tuple[int, float]:
    if (
        not isinstance(expected_items, int)
        or isinstance(expected_items, bool)
        or expected_items < 1
    ):
        raise ConfigError(f"expected_items must be a positive integer, not {expected_items!r}")
    if isinstance(fp_rate, bool) or not isinstance(fp_rate, (int, float)) or not 0 < fp_rate < 1:
        raise ConfigError(f"fp_rate must be a number between 0 and 1, not {fp_rate!r}")
    return expected_items, float(fp_rate)


def bloom_params(expected_items: int, fp_rate: float) -> tuple[int, int]:
    """Return the optimal ``(bits, hashes)`` for *expected_items* at *fp_rate*.

    ``bits = -n ln p / (ln 2)^2`` and ``hashes = bits / n * ln 2``, rounded up and to the
    nearest integer (at least one).

    Raises:
        ConfigError: *expected_items* is not a positive int, *fp_rate* not in (0, 1), or the
            filter would exceed 2**32 bits (a Redis string's limit).
    """
    n, p = _check(expected_items, fp_rate)
    bits = max(8, math.ceil(-n * math.log(p) / math.log(2) ** 2))
    if bits > MAX_BITS:
        raise ConfigError(
            f"A Bloom filter for {n!r} items at fp_rate {p!r} needs {bits:,} bits, "
            f"more than the {MAX_BITS:,} a Redis string holds"
        )
    hashes = max(1, round(bits / n * math.log(2)))
    return bits, hashes


def _mix(h: int) -> int:
    """SplitMix64's finalizer: a second, independent-looking 64-bit hash of *h*."""
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _MASK64
    return h ^ (h >> 31)


def bit_positions(item: int, bits: int, hashes: int) -> list[int]:
    """The *hashes* bit positions of *item* (a 64-bit unsigned int) in a filter of *bits*.

    Double hashing (Kirsch and Mitzenmacher): position i is ``(h1 + i * h2) mod bits`` with
    ``h1`` the item and ``h2`` its SplitMix64 mix made odd; deterministic across processes,
    machines and versions, so writers on many hosts agree on every bit.

    Example:
        >>> bit_positions(12345, 1000, 3)
        [345, 218, 91]
    """
    h2 = _mix(item) | 1
    return [(item + i * h2) % bits for i in range(hashes)]


def _identity(item: int) -> int:
    """rbloom's hash function: the item is a 64-bit hash already."""
    return item


def _rbloom() -> Any:
    try:
        return importlib.import_module("rbloom")
    except ImportError as exc:
        raise ConfigError(
            f"The keyed method's Bloom filters need rbloom: {install_hint('keyed')}"
        ) from exc


class LocalBloom:
    """A Bloom filter in this process (rbloom), for 64-bit hashed items.

    Args:
        expected_items: how many items the filter is sized for.
        fp_rate: the false-positive rate at that many items.

    Raises:
        ConfigError: bad sizes, or rbloom is not installed.
    """

    def __init__(self, expected_items: int, fp_rate: float) -> None:
        self.expected_items, self.fp_rate = _check(expected_items, fp_rate)
        self._bloom: Any = _rbloom().Bloom(self.expected_items, self.fp_rate, _identity)

    def add(self, item: int) -> None:
        """Add one item (a 64-bit unsigned int)."""
        self._bloom.add(item)

    def __contains__(self, item: int) -> bool:
        return bool(item in self._bloom)

    @property
    def bits(self) -> int:
        """The size of the filter in bits."""
        return int(self._bloom.size_in_bits)

    def to_bytes(self) -> bytes:
        """The filter's state, for :meth:`from_bytes`."""
        return bytes(self._bloom.save_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, expected_items: int, fp_rate: float) -> LocalBloom:
        """Load a filter saved by :meth:`to_bytes` with the same sizes.

        Raises:
            ConfigError: *data* does not hold a filter of those sizes.
        """
        bloom = cls(expected_items, fp_rate)
        try:
            loaded = _rbloom().Bloom.load_bytes(data, _identity)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"Not a saved Bloom filter ({exc})") from exc
        if loaded.size_in_bits != bloom.bits:
            raise ConfigError(
                f"The saved Bloom filter has {loaded.size_in_bits} bits, not {bloom.bits}"
            )
        bloom._bloom = loaded
        return bloom

    def __repr__(self) -> str:
        return f"LocalBloom({self.expected_items!r}, {self.fp_rate!r})"


#: SETBIT every position in ARGV, return how many were 0 before (0: probably seen already).
_LUA_ADD = """
local fresh = 0
for i = 1, #ARGV do
  if redis.call('SETBIT', KEYS[1], ARGV[i], 1) == 0 then fresh = fresh + 1 end
end
return fresh
"""

#: 1 when every position in ARGV is set, else 0.
_LUA_CONTAINS = """#!lua flags=no-writes
for i = 1, #ARGV do
  if redis.call('GETBIT', KEYS[1], ARGV[i]) == 0 then return 0 end
end
return 1
"""


class RedisBloom:
    """A Bloom filter kept in one Redis string, shared by every process using that key.

    Each call is one Lua script call, so an add is atomic. :mod:`nshash.methods.keyed` does not call
    this class on its hot path: its scripts test and set the same :func:`bit_positions` as
    part of a document's read and write, in the same round trip.

    Args:
        client: a ``redis.Redis`` client.
        key: the Redis key of the bit string.
        expected_items: how many items the filter is sized for.
        fp_rate: the false-positive rate at that many items.

    Raises:
        ConfigError: bad sizes.
    """

    def __init__(self, client: Any, key: str, expected_items: int, fp_rate: float) -> None:
        self.bits, self.hashes = bloom_params(expected_items, fp_rate)
        self.key = key
        self._client = client
        self._add = client.register_script(_LUA_ADD)
        self._contains = client.register_script(_LUA_CONTAINS)

    def _call(self, script: Any, item: int) -> int:
        import redis

        try:
            return int(script(keys=[self.key], args=bit_positions(item, self.bits, self.hashes)))
        except redis.RedisError as exc:
            raise StoreError(f"Redis Bloom filter {self.key!r} failed: {exc}") from exc

    def add(self, item: int) -> bool:
        """Add one item; return True when it was certainly new (a bit was still 0)."""
        return self._call(self._add, item) > 0

    def __contains__(self, item: int) -> bool:
        return self._call(self._contains, item) == 1

    def __repr__(self) -> str:
        return f"RedisBloom({self.key!r}, bits={self.bits}, hashes={self.hashes})"
