"""Exact law of traversal verification (section 14) by enumeration, for small trees and
vocabularies: every drafted tree (i.i.d. or without replacement, as ``tree_law``), then every
sequence of coin outcomes of the walk itself (``traversal.traverse``, replayed), in float64."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .law import _as_fn, against_target, completion
from .traversal import Request, traverse
from .tree import children_of, tree_depths
from .tree_law import _draft_sibling_laws


class _Pending(Exception):
    """Raised by the replaying coin at the first coin beyond the replayed outcomes."""

    def __init__(self, pi: float):
        super().__init__()
        self.pi = pi


def coin_outcomes(req: Request) -> list:
    """[(probability, node, weights)] of ``traverse(req, coin)`` over every sequence of coin
    outcomes, a coin with weight pi accepting with probability pi (the algorithm's coin; the
    implemented one is within 2**-32 of it, section 6)."""
    found = []

    def run(prefix: tuple, w: float):
        pos = iter(prefix)

        def coin(n, pi):
            nxt = next(pos, None)
            if nxt is None:
                raise _Pending(pi)
            return nxt
        try:
            node, W = traverse(req, coin)
        except _Pending as stop:
            if stop.pi > 0:
                run(prefix + (True,), w * stop.pi)
            if stop.pi < 1:
                run(prefix + (False,), w * (1.0 - stop.pi))
            return
        found.append((w, node, W))

    run((), 1.0)
    return found


def exact_traversal_law(target, draft, parents, V: int, method: str = "traversal",
                        point_tokens=None, drafting: Optional[str] = None) -> dict:
    """Exact law of traversal verification's output for a small tree (section 14).

    Arguments as ``tree_law.exact_tree_law``: ``target(prefix) -> p``, ``draft(prefix) ->
    q`` (float32 rows after a path of tokens), ``parents`` [N]; ``point_tokens`` [N] (and
    ``draft`` None) for fixed proposals.  ``method``: "traversal" (siblings drafted without
    replacement) or "traversal_iid" (i.i.d.); ``drafting`` ("rsd" / "mss", default the
    method's own) draws the siblings another way, so that a mismatch can be measured.
    Returns ``law``, ``target_law``, ``tv``, ``length_law`` (P(num_accepted = n)) and
    ``mean`` (E[num_accepted])."""
    N = len(parents)
    depth = tree_depths(parents, N, point_tokens if point_tokens is not None
                        else np.zeros(N, np.int64), V, N)
    D = int(depth.max())
    QF = _as_fn(draft)
    law, complete, pvec = completion(_as_fn(target), V, D + 1)
    length_law = np.zeros(D + 1)
    point_mass = point_tokens is not None
    drafting = drafting or ("rsd" if method == "traversal" else "mss")

    def verify(tokens: dict, paths: dict, w: float):
        req = Request(lambda n: pvec(paths[n]),
                      None if point_mass else (lambda n: QF(paths[n])), tokens,
                      lambda c: [x for x in children_of(c, parents, depth) if x in tokens],
                      depth, without_replacement=method == "traversal", point_mass=point_mass)
        for pw, node, W in coin_outcomes(req):
            prefix = paths[node]
            length_law[len(prefix)] += w * pw
            S = int(W.sum())
            for x, wx in enumerate(W):
                if wx:
                    complete(prefix + (x,), w * pw * int(wx) / S)

    def draft_tree(order, tokens, paths, w):
        if not order:
            verify(tokens, paths, w)
            return
        c = order[0]
        kids = children_of(c, parents, depth)
        if not kids or (c != 0 and c not in tokens):
            draft_tree(order[1:], tokens, paths, w)
            return
        if point_mass:
            for x in kids:
                tokens[x] = int(point_tokens[x])
                paths[x] = paths[c] + (tokens[x],)
            draft_tree(order[1:], tokens, paths, w)
            return
        q = np.asarray(QF(paths[c]), dtype=np.float32)
        for seq, ws in _draft_sibling_laws(q, len(kids), drafting):
            t2, p2 = dict(tokens), dict(paths)
            for x, y in zip(kids, seq):
                t2[x] = y
                p2[x] = paths[c] + (y,)
            draft_tree(order[1:], t2, p2, w * ws)

    draft_tree([n for n in range(N) if depth[n] >= 0], {}, {0: ()}, 1.0)
    res = against_target(law, pvec, V, length_law)
    res["mean"] = float((np.arange(D + 1) * length_law).sum())
    return res
