"""Probability rows for the exact-law tests: dyadic rows (float32 values that sum to exactly 1)
and the adversarial families every method's enumeration runs on (chains, blocks, trees)."""
from __future__ import annotations

import numpy as np


def dyadic(rng, V, zeros=0, bits=20):
    """A float32 probability vector summing to exactly 1 (multiples of 2**-bits)."""
    w = rng.random(V) + 0.05
    if zeros:
        w[rng.choice(V, zeros, replace=False)] = 0
    c = np.floor(w / w.sum() * 2 ** bits).astype(np.int64)
    c[np.argmax(c)] += 2 ** bits - c.sum()
    return (c / 2 ** bits).astype(np.float32)


def onehot(V, i):
    p = np.zeros(V, dtype=np.float32)
    p[i] = 1
    return p


def tree(rng, V, K, make):
    """Prefix-dependent conditionals: a different row for every accepted prefix."""
    cache = {}

    def f(prefix):
        if prefix not in cache:
            cache[prefix] = make(rng, V, len(prefix))
        return cache[prefix]
    return f


ADVERSARIAL = {
    "random": lambda rng, V, j: (dyadic(rng, V), dyadic(rng, V)),
    "disjoint": lambda rng, V, j: (np.r_[dyadic(rng, V // 2), np.zeros(V - V // 2)]
                                   .astype(np.float32),
                                   np.r_[np.zeros(V // 2), dyadic(rng, V - V // 2)]
                                   .astype(np.float32)),
    "equal": None,
    "q_zero_where_p_positive": lambda rng, V, j: (dyadic(rng, V), dyadic(rng, V, zeros=2)),
    "onehot_target": lambda rng, V, j: (onehot(V, int(rng.integers(V))), dyadic(rng, V)),
    "topk_truncated": lambda rng, V, j: (dyadic(rng, V, zeros=V - 2), dyadic(rng, V)),
}
