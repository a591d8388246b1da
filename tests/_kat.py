"""Philox4x32-10 known-answer vectors (Random123's published test vectors), read from
``tests/data/philox_kat.txt``: [c0, c1, c2, c3, k0, k1, w0, w1, w2, w3] per line."""
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "philox_kat.txt")


def kat_vectors():
    with open(PATH) as f:
        return [[int(x, 16) for x in ln.split()] for ln in f
                if ln.strip() and not ln.startswith("#")]
