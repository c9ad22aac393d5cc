"""The similarity toolkit of seeds 000, 002 and 004: pairwise measures
(:mod:`.similarity`) and soft-404 detection (:mod:`.soft404`).
"""
