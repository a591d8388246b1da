"""Exact law of tree verification (section 11) by enumeration, for small trees and
vocabularies: drafting (i.i.d. or without replacement) and verification, in float64."""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from .law import _as_fn, against_target, completion, implemented_draw_law
from .draw import integer_weights
from .tree import (children_of, coin_probability, draft_weights, remove_token,
                   residual_update, tree_depths)

def _draft_sibling_laws(q, k: int, method: str):
    """Every ordered tuple of k sibling tokens with its probability: i.i.d. from q (mss) or
    without replacement (rsd), q float32 [V] normalised in float64.  rsd from a row with
    m < k tokens of positive probability draws m siblings: the tuples have m tokens and the
    other k - m siblings are absent (``sample_without_replacement``'s -1 entries, which a
    drafter leaves out of the tree), so the tuples' probabilities still sum to 1."""
    q = np.asarray(q, dtype=np.float64)
    q = q / q.sum()
    V = q.size
    if method == "rsd":
        k = min(k, int((q > 0).sum()))
    for seq in itertools.product(range(V), repeat=k):
        w, left = 1.0, 1.0
        for i, y in enumerate(seq):
            if method == "rsd":
                if y in seq[:i] or left <= 0:
                    w = 0.0
                    break
                w *= q[y] / left
                left -= q[y]
            else:
                w *= q[y]
        if w > 0:
            yield seq, w


def exact_tree_law(target, draft, parents, V: int, method: str = "rsd",
                   point_tokens=None, fallback: str = "residual", drafting: Optional[str] = None):
    """Exact law of tree verification's output for a small tree (section 11), in float64.

    ``target(prefix) -> p`` and ``draft(prefix) -> q`` (float32 rows after a path of tokens)
    as in ``law.exact_output_law``; ``parents`` [N] the tree.  The children of every
    node are drafted from ``draft(path)`` i.i.d. (mss) or without replacement (rsd); with
    ``point_tokens`` [N] (and ``draft`` None) the tokens are fixed proposals.  The output
    (accepted path, then the correction / bonus token, L tokens) is completed to D + 1 tokens
    by sampling the target, D the depth of the tree.  ``fallback="p"``: emit from p after
    rejections (the classic mistake); ``drafting`` ("rsd" / "mss", default ``method``): how
    the siblings were drawn, so that a mismatch (rsd's rule on i.i.d. siblings) can be
    measured.  Returns ``law`` and ``target_law`` ([V] * (D + 1)),
    ``tv``, and ``length_law`` (P(num_accepted = n), n = 0..D)."""
    N = len(parents)
    depth = tree_depths(parents, N, point_tokens if point_tokens is not None
                        else np.zeros(N, np.int64), V, N)
    D = int(depth.max())
    QF = _as_fn(draft)
    law, complete, pvec = completion(_as_fn(target), V, D + 1)
    length_law = np.zeros(D + 1)
    point_mass = point_tokens is not None

    def verify(c, prefix, tokens, w):
        """Verification from node c (tokens: drafted token of every node reached so far)."""
        p = pvec(prefix)
        kids = [x for x in children_of(c, parents, depth) if x in tokens]   # drafted ones
        Rw = integer_weights(p)
        A = int(Rw.sum())
        if point_mass:
            Qw, Q = None, 0
        else:
            Qw, Q = draft_weights(QF(prefix)) if kids else (None, 0)

        def step(i, Rw, A, Qw, Q, tried, w):
            if i == len(kids):
                length_law[len(prefix)] += w
                draw = (implemented_draw_law(p, p) if (A == 0 or fallback == "p")
                        else Rw.astype(np.float64) / A)
                for x, px in enumerate(draw):
                    complete(prefix + (x,), w * px)
                return
            x = kids[i]
            y = tokens[x]
            if method == "rsd" and y in tried:
                step(i + 1, Rw, A, Qw, Q, tried, w)
                return
            a = coin_probability(Rw, A, Qw, Q, y, point_mass)
            if a > 0:
                verify(x, prefix + (y,), tokens, w * a)
            if a < 1:
                if A == 0 or (not point_mass and Q == 0):
                    step(i + 1, Rw, A, Qw, Q, tried + [y], w * (1 - a))
                    return
                R2, A2 = residual_update(Rw, A, Qw, Q, y, point_mass)
                Q2w, Q2 = (remove_token(Qw, Q, y) if method == "rsd" and not point_mass
                           else (Qw, Q))
                step(i + 1, R2, A2, Q2w, Q2, tried + [y], w * (1 - a))

        step(0, Rw, A, Qw, Q, [], w)

    def draft_tree(order, tokens, paths, w):
        """Enumerate the tokens of every node (node order), then verify."""
        if not order:
            verify(0, (), tokens, w)
            return
        c = order[0]
        kids = children_of(c, parents, depth)
        if not kids or (c != 0 and c not in tokens):      # a leaf, or an absent sibling
            draft_tree(order[1:], tokens, paths, w)
            return
        if point_mass:
            for x in kids:
                tokens[x] = int(point_tokens[x])
                paths[x] = paths[c] + (tokens[x],)
            draft_tree(order[1:], tokens, paths, w)
            return
        q = np.asarray(QF(paths[c]), dtype=np.float32)
        for seq, ws in _draft_sibling_laws(q, len(kids), drafting or method):
            t2, p2 = dict(tokens), dict(paths)
            for x, y in zip(kids, seq):
                t2[x] = y
                p2[x] = paths[c] + (y,)
            draft_tree(order[1:], t2, p2, w * ws)

    present = [n for n in range(N) if depth[n] >= 0]
    draft_tree(present, {}, {0: ()}, 1.0)
    return against_target(law, pvec, V, length_law)
