"""Philox4x32-10 and the stream layout of section 4 (``specops.reference``)."""
from __future__ import annotations

import numpy as np

from .constants import (PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1,
                        TAG_ACCEPT, TAG_SAMPLE)

_U32 = np.uint64(0xFFFFFFFF)


def philox4x32(c0, c1, c2, c3, k0, k1, rounds: int = PHILOX_ROUNDS):
    """Vectorised Philox4x32-R (Random123). Arguments broadcast; returns four uint32 arrays."""
    c0, c1, c2, c3, k0, k1 = (np.asarray(a, dtype=np.uint64) & _U32
                              for a in np.broadcast_arrays(c0, c1, c2, c3, k0, k1))
    m0, m1 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1)
    for r in range(rounds):
        if r:
            k0 = (k0 + np.uint64(PHILOX_W0)) & _U32
            k1 = (k1 + np.uint64(PHILOX_W1)) & _U32
        p0 = m0 * c0          # < 2**64: exact in uint64
        p1 = m1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _U32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _U32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def _split64(v):
    """int64 (two's complement) -> (low, high) uint32 words."""
    u = np.asarray(v, dtype=np.int64).astype(np.uint64)
    return u & _U32, u >> np.uint64(32)


def stream_words(seed, offset, position, tag):
    """The four Philox output words of stream (seed, offset) at (position, tag)."""
    k0, k1 = _split64(seed)
    o0, o1 = _split64(offset)
    return philox4x32(position, tag, o0, o1, k0, k1)


def accept_uniform(seed, offset, position) -> np.ndarray:
    """u_j = w0 * 2**-32 of stream tag 0, as float64 (exact)."""
    w0 = stream_words(seed, offset, position, TAG_ACCEPT)[0]
    return w0.astype(np.float64) * 2.0 ** -32


def sample_uniform64(seed, offset, position) -> np.ndarray:
    """U = w0 | (w1 << 32) of stream tag 1, as uint64."""
    w0, w1 = stream_words(seed, offset, position, TAG_SAMPLE)[:2]
    return w0.astype(np.uint64) | (w1.astype(np.uint64) << np.uint64(32))
