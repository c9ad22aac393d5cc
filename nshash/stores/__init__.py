"""The storage every method stands on, one module per backend.

:mod:`~nshash.stores.durable` keeps tables in memory durable (journal, snapshot, lock)
for every method's memory store, and :mod:`~nshash.stores.memory` is the memory
key-value store on it; :mod:`~nshash.stores.leveldb` is the LevelDB backend (the host
every method's LevelDB store opens, and its key-value store); :mod:`~nshash.stores.redis`
opens Redis connections and translates their errors, and :mod:`~nshash.stores.scripts`
loads each method's Lua scripts from ``lua/``. :mod:`~nshash.stores.kv` is the key-value
interface of the keyed and simhash tables, :mod:`~nshash.stores.registry` opens the one a
URL names, and :mod:`~nshash.stores.url` parses store URLs.
"""
