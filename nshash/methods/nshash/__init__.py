"""The nshash method: :class:`~nshash.NSHash` (:mod:`.core`), the assignment
algorithm (:mod:`.assign`), the store factory (:mod:`.store`: which backend a URL names), and its
tables on each backend (:mod:`.memory`, :mod:`.leveldb`, :mod:`.redis`), on the contract
of :mod:`.base`.
"""
