"""The dedup methods, each on the stores: :mod:`nshash.methods.nshash` (sentence
anchors, the default), :mod:`~nshash.methods.keyed` (seed 001's four keys) and
:mod:`~nshash.methods.simhash` (seed 002's simhash).
"""
