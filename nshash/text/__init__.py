"""The text pipeline: folding, sentence keys, shingles and sketches, the simhash
fingerprint, and the optional compiled kernel. Pure functions: nothing here reads or
writes a store.
"""
