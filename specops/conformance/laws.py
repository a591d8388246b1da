"""Exact laws of the verifier's raw output, from the reference's own step functions.

The reference's ``exact_output_law`` / ``exact_tree_law`` give the law of the output
*completed* to a fixed length by sampling the target (exact iff it equals the target's own
law): that is what ``law.output`` tests.  The other checks need the law of the raw output
itself (accepted drafts, then the emitted token) jointly with the drafts, which the
reference computes only on the way.  This module enumerates it with the reference's exported
steps (``accept_probability``, ``residual_row``, ``implemented_draw_law``, the block
verification weights, the tree node rules of ``specops.reference.tree``), so the arithmetic
is the contract's; ``tests/test_conformance.py`` (the binary tree: ``test_conformance_full.py``)
completes every law here and finds the reference's completed law and length law to 1e-12.
The methods with laws here: ``designs.KIT_CHAIN_METHODS`` / ``KIT_TREE_METHODS``.

A joint law is a dict ``{(drafts, out): probability}``: ``drafts`` the drafted tokens (chain:
y_0..y_{K-1}; tree: the tokens of nodes 1..N-1), ``out`` the raw output (a tuple of 1..D+1
tokens).
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Dict, Iterator, Optional, Tuple

import numpy as np

from specops import reference as R
from specops.reference import tree as RT

Joint = Dict[Tuple[tuple, tuple], float]


def _add_draw(out: dict, prefix: tuple, weight: float, law) -> None:
    for x in np.flatnonzero(law):
        out[prefix + (int(x),)] += weight * float(law[x])


def _normalised(row) -> np.ndarray:
    row = np.asarray(row, dtype=np.float32).astype(np.float64)
    return row / row.sum()


# ----------------------------------------------------------------------------- chain
def chain_proposal(design, prefix) -> np.ndarray:
    """The law the kit drafts position len(prefix) from (float64, normalised: the reference's
    ``exact_output_law`` weighs drafts by q's float32 values as they are, so where those do
    not sum to exactly 1 the two laws differ by that rounding, about 1e-8)."""
    if design.forced_draft is not None:
        tok = design.forced_draft(prefix)
    elif design.draft is None:
        tok = design.drafter(prefix)
    else:
        return _normalised(design.draft(prefix))
    law = np.zeros(design.V)
    law[tok] = 1.0
    return law


def chain_draft_law(design) -> Iterator[Tuple[tuple, float]]:
    """Every draft block with its probability."""
    def walk(prefix, w):
        if len(prefix) == design.K:
            yield prefix, w
            return
        law = chain_proposal(design, prefix)
        for y in np.flatnonzero(law):
            yield from walk(prefix + (int(y),), w * float(law[y]))
    yield from walk((), 1.0)


def _token_given(design, d: tuple) -> dict:
    """P(out | drafts d) of token-wise verification (reference section 1)."""
    out = defaultdict(float)
    reach = 1.0
    for j, y in enumerate(d):
        p = design.target(d[:j])
        q = None if design.draft is None else design.draft(d[:j])
        a = R.accept_probability(p[y], 1.0 if q is None else q[y])
        if a < 1.0:
            _add_draw(out, d[:j], reach * (1.0 - a),
                      R.implemented_draw_law(R.residual_row(p, q, y), p))
        reach *= a
        if reach == 0.0:
            return out
    p = design.target(d)
    _add_draw(out, d, reach, R.implemented_draw_law(p, p))
    return out


def _block_given(design, d: tuple) -> dict:
    """P(out | drafts d) of block verification (reference section 9): the stopping point
    tau has law ``h_tau * prod_{i > tau} (1 - h_i)``, then the draw at tau."""
    K = len(d)
    rows = [(design.target(d[:i]), None if design.draft is None else design.draft(d[:i]))
            for i in range(K)]
    rho, h = [1.0], [1.0]
    for i, (p, q) in enumerate(rows):
        if i:
            S = int(R.block_weights(p, q, d[i], rho[i]).sum())
            h.append(R.block_stop_probability(S, rho[i]))
        rho.append(R.block_next_rho(rho[i], p[d[i]], 1.0 if q is None else q[d[i]]))
    h.append(rho[K])
    out = defaultdict(float)
    for t in range(K + 1):
        w = h[t] * float(np.prod([1.0 - x for x in h[t + 1:]]))
        if w == 0.0:
            continue
        if t == K:
            p = design.target(d)
            law = R.implemented_draw_law(p, p)
        else:
            p, q = rows[t]
            W = R.block_weights(p, q, d[t], rho[t])
            S = int(W.sum())
            law = W.astype(np.float64) / S if S else R.implemented_draw_law(p, p)
        _add_draw(out, d[:t], w, law)
    return out


def chain_joint(design, method: str = "token") -> Joint:
    given = {"token": _token_given, "block": _block_given}[method]
    joint = {}
    for d, w in chain_draft_law(design):
        for out, pr in given(design, d).items():
            joint[(d, out)] = joint.get((d, out), 0.0) + w * pr
    return joint


def chain_reference(design, method: str = "token") -> dict:
    """The reference's exact law (completed to K + 1 tokens) and length law."""
    draft = design.draft if design.draft is not None else design.drafter
    return R.exact_output_law(design.target, draft, design.K, design.V, method=method)


# ----------------------------------------------------------------------------- tree
def tree_shape(design):
    """(depth [N], D) of the design's tree."""
    N = len(design.parents)
    depth = RT.tree_depths(np.asarray(design.parents), N, np.zeros(N, np.int64), design.V, N)
    return depth, int(depth.max())


def top_tokens(design) -> tuple:
    """target_only drafting: the children of a node are its draft row's top tokens, most
    likely first (EAGLE's deterministic top-k); tokens of nodes 1..N-1."""
    depth, _ = tree_shape(design)
    tokens, paths = {}, {0: ()}
    for c in range(len(design.parents)):
        kids = RT.children_of(c, design.parents, depth)
        order = np.argsort(-np.asarray(design.draft(paths[c]), dtype=np.float64), kind="stable")
        for x, y in zip(kids, order):
            tokens[x] = int(y)
            paths[x] = paths[c] + (int(y),)
    return tuple(tokens[n] for n in range(1, len(design.parents)))


def sibling_law(q, k: int, method: str) -> Iterator[Tuple[tuple, float]]:
    """Ordered k-tuples of siblings drawn from q: i.i.d. (mss) or without replacement (rsd)."""
    q = _normalised(q)
    for seq in itertools.product(np.flatnonzero(q), repeat=k):
        if method == "rsd" and len(set(seq)) < k:
            continue
        w, left = 1.0, 1.0
        for y in seq:
            w *= q[y] / left
            if method == "rsd":
                left -= q[y]
        yield tuple(int(y) for y in seq), w


def tree_draft_law(design, method: str) -> Iterator[Tuple[tuple, float]]:
    """Every assignment of tokens to nodes 1..N-1, with its probability."""
    if method == "target_only":
        yield top_tokens(design), 1.0
        return
    depth, _ = tree_shape(design)
    N = len(design.parents)

    def walk(c, tokens, paths, w):
        if c == N:
            yield tuple(tokens[n] for n in range(1, N)), w
            return
        kids = RT.children_of(c, design.parents, depth)
        if not kids:
            yield from walk(c + 1, tokens, paths, w)
            return
        for seq, ws in sibling_law(design.draft(paths[c]), len(kids), method):
            t2, p2 = dict(tokens), dict(paths)
            for x, y in zip(kids, seq):
                t2[x], p2[x] = y, paths[c] + (y,)
            yield from walk(c + 1, t2, p2, w * ws)
    yield from walk(0, {}, {0: ()}, 1.0)


def _tree_given(design, tokens: tuple, method: str) -> dict:
    """P(out | the drafted tree) of reference section 11 (target_only: point-mass
    proposals, with rsd's duplicate rule)."""
    depth, _ = tree_shape(design)
    point = method == "target_only"
    rule = "rsd" if point else method
    tok = (None,) + tuple(tokens)
    out = defaultdict(float)

    def node(c, path, w):
        p = np.asarray(design.target(path), dtype=np.float32)
        kids = RT.children_of(c, design.parents, depth)
        Rw = R.integer_weights(p)
        A = int(Rw.sum())
        Qw, Q = (None, 0) if point or not kids else RT.draft_weights(design.draft(path))
        tried = []
        for x in kids:
            y = tok[x]
            if rule == "rsd" and y in tried:
                continue
            tried.append(y)
            a = RT.coin_probability(Rw, A, Qw, Q, y, point)
            if a > 0:
                node(x, path + (y,), w * a)
            w *= 1.0 - a
            if w == 0.0:
                return
            if A and (point or Q):
                Rw, A = RT.residual_update(Rw, A, Qw, Q, y, point)
                if rule == "rsd" and not point:
                    Qw, Q = RT.remove_token(Qw, Q, y)
        law = Rw.astype(np.float64) / A if A else R.implemented_draw_law(p, p)
        _add_draw(out, path, w, law)

    node(0, (), 1.0)
    return out


def tree_joint(design, method: str = "rsd") -> Joint:
    joint = {}
    for d, w in tree_draft_law(design, method):
        for out, pr in _tree_given(design, d, method).items():
            joint[(d, out)] = joint.get((d, out), 0.0) + w * pr
    return joint


def tree_reference(design, method: str = "rsd") -> dict:
    """The reference's exact tree law (completed to D + 1 tokens) and length law."""
    if method == "target_only":
        tokens = np.asarray((0,) + top_tokens(design))
        return R.exact_tree_law(design.target, None, list(design.parents), design.V,
                                method="rsd", point_tokens=tokens)
    return R.exact_tree_law(design.target, design.draft, list(design.parents), design.V,
                            method=method)


# ----------------------------------------------------------------------------- shared
def output_marginal(joint: Joint) -> dict:
    law = defaultdict(float)
    for (_, out), w in joint.items():
        law[out] += w
    return dict(law)


def complete(raw: dict, target, V: int, L: int) -> np.ndarray:
    """The law of raw outputs completed to L tokens by sampling the target (float64
    normalised rows), as the reference completes its own."""
    law = np.zeros((V,) * L)

    def extend(seq, w):
        if len(seq) == L:
            law[seq] += w
            return
        p = _normalised(target(seq))
        for x in np.flatnonzero(p):
            extend(seq + (int(x),), w * p[x])
    for out, w in raw.items():
        extend(tuple(out), w)
    return law


def conditional(joint: Joint) -> Dict[tuple, Dict[tuple, float]]:
    """{drafts: {out: P(out | drafts)}}."""
    by = defaultdict(dict)
    for (d, out), w in joint.items():
        by[d][out] = w
    for d, outs in by.items():
        s = sum(outs.values())
        for out in outs:
            outs[out] /= s
    return dict(by)


def law_or_none(design, kind: str, method: str) -> Optional[Joint]:
    if getattr(design, "role", "law") == "robustness":
        return None
    return chain_joint(design, method) if kind == "chain" else tree_joint(design, method)
