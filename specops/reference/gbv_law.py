"""Exact law of GBV (section 15) by enumeration, for small K, L and V: every drafted set of K
i.i.d. paths from the draft, the path the walk selects (``gbv.select_path``'s rule), then
every coin outcome of the block verification of that path (``gbv.gbv_plan``: the implemented
float64 arithmetic), in float64.  Also the exact rational ``q~`` (``skew_row_exact``) that the
float64 row is measured against, and E[num_accepted] of GBV, block and traversal_iid."""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from . import gbv as G
from .checks import probs_row_valid
from .law import _as_fn, against_target, completion, exact_output_law
from .traversal_law import exact_traversal_law


def path_law(QF, V: int, L: int) -> dict:
    """{path (tuple of L tokens): probability} of one path drafted autoregressively from
    ``QF(prefix)`` (each row normalised in float64), zero-probability paths left out."""
    law = {(): 1.0}
    for _ in range(L):
        nxt = {}
        for pre, w in law.items():
            q = np.asarray(QF(pre), dtype=np.float64)
            q = q / q.sum()
            for y in range(V):
                if q[y] > 0:
                    nxt[pre + (y,)] = w * q[y]
        law = nxt
    return law


def _usable(q):
    """A draft row as the walk reads it: float32, None if it fails the probability-row check
    (section 3; unusable)."""
    q = np.asarray(q, dtype=np.float32)
    return q if probs_row_valid(q) else None


def _rows_at(pvec, QF, best):
    def rows_at(d):
        pre = tuple(best[:d])
        return pvec(pre), _usable(QF(pre))
    return rows_at


def selection_law(pvec, QF, V: int, K: int, L: int, brute: bool = False) -> dict:
    """{path: P(Y = path)} of the selected path among K i.i.d. paths.  The selection is
    sequential (best = path 0; path k replaces best iff ``gbv.replaces``), so the law of best
    after k paths is a Markov chain in k: that is summed exactly (``brute=False``), or every
    ordered K-tuple of paths is enumerated (``brute=True``; V**(K L) tuples)."""
    one = path_law(QF, V, L)
    if K == 0:
        return {(): 1.0}
    paths = list(one)
    if brute:
        law = {}
        for tup in itertools.product(paths, repeat=K):
            w, best = 1.0, tup[0]
            for c in tup:
                w *= one[c]
            for c in tup[1:]:
                if G.replaces(_rows_at(pvec, QF, best), best, c):
                    best = c
            law[best] = law.get(best, 0.0) + w
        return law
    sel = {(y, c): (c if G.replaces(_rows_at(pvec, QF, y), y, c) else y)
           for y in paths for c in paths}
    law = dict(one)
    for _ in range(1, K):
        nxt = {}
        for y, wy in law.items():
            for c, wc in one.items():
                z = sel[(y, c)]
                nxt[z] = nxt.get(z, 0.0) + wy * wc
        law = nxt
    return law


def exact_gbv_law(target, draft, K: int, L: int, V: int, brute: bool = False) -> dict:
    """Exact law of GBV's output with K i.i.d. draft paths of L tokens (section 15).

    ``target(prefix) -> p`` and ``draft(prefix) -> q`` (float32 rows after a path of tokens,
    as ``law.exact_output_law``; arrays [L + 1, V] / [L, V] mean prefix-independent rows).
    Every node with the same prefix carries the same rows (the walk's rows of the best path's
    node then equal the selected path's).  The output (accepted prefix, then the correction /
    bonus token) is completed to L + 1 tokens by sampling the target.  Returns ``law``,
    ``target_law``, ``tv``, ``length_law`` (P(num_accepted = n)), ``mean``
    (E[num_accepted]) and ``selection`` ({path: P(Y = path)})."""
    PF, QF = _as_fn(target), _as_fn(draft)
    law, complete, pvec = completion(PF, V, L + 1)
    length_law = np.zeros(L + 1)
    sel = selection_law(pvec, QF, V, K, L, brute)
    for ytoks, wy in sel.items():
        # the selected path as a chain request: node d is the prefix of d tokens
        token = [0] + list(ytoks)
        req = G.Request(lambda n: pvec(tuple(ytoks[:n])),
                        lambda n: _usable(QF(tuple(ytoks[:n]))),
                        token, [list(range(1, L + 1))], point_mass=False)
        plan = G.gbv_plan(req, list(range(1, L + 1)), K)
        for t in range(plan.e + 1):
            pt = plan.h[t] * float(np.prod([1.0 - x for x in plan.h[t + 1:]]))
            if pt == 0.0:
                continue
            length_law[t] += wy * pt
            W = plan.weights(t)
            S = int(W.sum())
            for x, wx in enumerate(W):
                if wx:
                    complete(tuple(ytoks[:t]) + (x,), wy * pt * int(wx) / S)
    res = against_target(law, pvec, V, length_law)
    res["mean"] = float((np.arange(L + 1) * length_law).sum())
    res["selection"] = sel
    return res


def multipath_tree(K: int, L: int) -> list:
    """parents [1 + K L] of K chains of L nodes from the root (chain k's nodes contiguous)."""
    parents = [-1]
    for _ in range(K):
        base = len(parents)
        parents += [0] + [base + i for i in range(L - 1)]
    return parents


def expected_accepted(target, draft, K: int, L: int, V: int, method: str = "gbv") -> float:
    """E[num_accepted] (exact, by enumeration) of ``method`` with K i.i.d. draft paths of L
    tokens: "gbv" (section 15), "traversal_iid" (section 14 on the same K chains) or "block"
    (section 9 on one path of L tokens; K is ignored)."""
    if method == "gbv":
        return exact_gbv_law(target, draft, K, L, V)["mean"]
    if method == "block":
        lw = exact_output_law(target, draft, L, V, method="block")["length_law"]
        return float((np.arange(L + 1) * lw).sum())
    if method == "traversal_iid":
        return exact_traversal_law(_as_fn(target), _as_fn(draft), multipath_tree(K, L), V,
                                   "traversal_iid")["mean"]
    raise ValueError(f"method must be 'gbv', 'block' or 'traversal_iid', got {method!r}")


# ----------------------------------------------------------------------------- exact q~
def skew_row_exact(p, q, A: Fraction, x: Fraction, K: int) -> list:
    """The algorithm's q~ of a node in exact rationals (the frontier note's formula on the
    unscaled (A, x)): ``[(A + x F(t))**K - (A + x F-(t))**K] / [(A + x)**K - A**K]`` with
    ``q`` normalised exactly and ``F`` in the order of ``gbv.rank_below``."""
    qf = [Fraction(float(v)) for v in q]
    tot = sum(qf)
    qf = [v / tot for v in qf]
    order = G.rank_order(p, q)
    F, acc = [Fraction(0)] * len(q), Fraction(0)
    for t in order:
        acc += qf[t]
        F[t] = acc
    den = (A + x) ** K - A ** K
    return [((A + x * F[t]) ** K - (A + x * (F[t] - qf[t])) ** K) / den
            for t in range(len(q))]


def skew_error(rows, path, K: int) -> float:
    """Largest relative error of the float64 ``q~`` (``gbv.skew_row`` with the rescaled
    (a, b)) against ``skew_row_exact`` along a path: ``rows[j] = (p_j, q_j)`` float32,
    ``path[j]`` the selected token at depth j.  Entries whose exact value is 0 count their
    absolute error."""
    a, b = 0.0, 1.0
    A, x = Fraction(0), Fraction(1)
    worst = 0.0
    for (p, q), y in zip(rows, path):
        F, Fm, qn = G.rank_masses(p, q)
        qt = G.skew_row(q, F, Fm, a, b, K)
        ex = skew_row_exact(p, q, A, x, K)
        for t in range(len(q)):
            e = abs(Fraction(float(qt[t])) - ex[t])
            worst = max(worst, float(e / ex[t]) if ex[t] else float(e))
        # exact update: A += x * F-(y), x *= q(y), q and F- in exact rationals
        qf = [Fraction(float(v)) for v in q]
        tot = sum(qf)
        order = list(G.rank_order(p, q))
        Fm_exact = sum((qf[u] / tot for u in order[:order.index(y)]), Fraction(0))
        A, x = A + x * Fm_exact, x * (qf[y] / tot)
        a, b = G.skew_step(a, b, Fm[y], qn[y])
    return worst
