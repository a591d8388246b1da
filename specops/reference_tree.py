"""Tree verification in the reference (contract: ``specops.reference``, section 11).

``verify_tree_ref`` is the walk every backend implements; ``exact_tree_law`` enumerates
drafting and verification for small trees and vocabularies, so the tests can prove that the
emitted sequence has exactly the target's law.  Written for clarity, not speed.
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from specops import reference as R

METHODS = ("rsd", "mss")
SCALE = 2.0 ** R.W_SCALE_BITS


# ----------------------------------------------------------------------------- shape
def tree_depths(parents, n_nodes: int, node_ids, V: int, max_depth: int):
    """Depth of every node (-1: absent) or None if the tree is malformed (section 11)."""
    N = len(parents)
    if not 1 <= n_nodes <= N or int(parents[0]) != -1:
        return None
    depth = np.full(N, -1, dtype=np.int64)
    depth[0] = 0
    for n in range(1, n_nodes):
        a = int(parents[n])
        if not -1 <= a < n:
            return None
        if a == -1 or depth[a] < 0:
            continue                                       # absent (padding) node
        depth[n] = depth[a] + 1
        if not 0 <= int(node_ids[n]) < V or depth[n] > max_depth:
            return None
    return depth


def children_of(c: int, parents, depth) -> list:
    return [n for n in range(c + 1, len(depth)) if depth[n] >= 0 and int(parents[n]) == c]


# ----------------------------------------------------------------------------- one node
def draft_weights(q) -> tuple:
    """(Qw int64 [V], Q) of a draft row; Q = 0 for an unusable row (None: invalid logits)."""
    if q is None:
        return None, 0
    q = np.asarray(q, dtype=np.float32)
    if not R.probs_row_valid(q):
        return np.zeros(q.size, dtype=np.int64), 0
    Qw = R.integer_weights(q)
    return Qw, int(Qw.sum())


def _ratio(w, total) -> np.ndarray:
    """w / total as the contract computes it: float64(w) * (1 / float64(total))."""
    inv = np.float64(1.0) / np.float64(total)
    return np.asarray(w, dtype=np.int64).astype(np.float64) * inv


def coin_probability(Rw, A: int, Qw, Q: int, y: int, point_mass: bool) -> float:
    """P(u * qn < rn) for a continuous uniform u (the algorithm's min(1, rn/qn)); 0 where
    the child is rejected without a coin."""
    if A == 0 or (not point_mass and Q == 0):
        return 0.0
    rn = float(_ratio(Rw[y], A))
    qn = 1.0 if point_mass else float(_ratio(Qw[y], Q))
    if not rn > 0:
        return 0.0
    return 1.0 if qn <= 0 else min(1.0, rn / qn)


def coin_accepts(u: float, Rw, A: int, Qw, Q: int, y: int, point_mass: bool) -> bool:
    """The implemented test: u * qn < rn, float64."""
    if A == 0 or (not point_mass and Q == 0):
        return False
    rn = _ratio(Rw[y], A)
    qn = np.float64(1.0) if point_mass else _ratio(Qw[y], Q)
    return bool(np.float64(u) * qn < rn)


def residual_update(Rw, A: int, Qw, Q: int, y: int, point_mass: bool):
    """(R', A') after rejecting y: trunc(max(R/A - Qw/Q, 0) * 2**60)."""
    rn = _ratio(Rw, A)
    if point_mass:
        qn = np.zeros(rn.size)
        qn[y] = 1.0
    else:
        qn = _ratio(Qw, Q)
    d = rn - qn
    Rn = np.where(d > 0, d * SCALE, 0.0).astype(np.int64)
    return Rn, int(Rn.sum())


def remove_token(Qw, Q: int, y: int):
    """rsd: the draft without y (renormalised implicitly through Q)."""
    Qw = Qw.copy()
    Q -= int(Qw[y])
    Qw[y] = 0
    return Qw, Q


# ----------------------------------------------------------------------------- the walk
def verify_tree_ref(target, target_is_probs, node_ids, parents, num_nodes, draft,
                    draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                    max_depth: int, method: str = "rsd", _variant: str = "exact"):
    """Tree verification (section 11).  target [B, N, V] (logits or float32 probs), draft
    [B, N, V] (probs or logits) or None (point-mass drafts), node_ids / parents [B, N],
    num_nodes and the parameters [B].  Returns numpy (token_ids [B, max_depth + 1] int32,
    num_accepted [B] int32, accepted_nodes [B, max_depth] int32, valid [B] bool).

    ``_variant`` selects negative controls the statistical tests must reject: "wrong_fallback"
    (emit from p after rejections), "with_replacement" (mss's rule on rsd's siblings, run
    with method="rsd": the draft is never renormalised), "no_residual" (the residual is not
    updated between siblings)."""
    if method not in METHODS:
        raise ValueError(f"method must be 'rsd' or 'mss', got {method!r}")
    target = np.asarray(target)
    B, N, V = target.shape
    D = max(int(max_depth), 0)
    out = np.full((B, D + 1), -1, dtype=np.int32)
    nodes = np.full((B, D), -1, dtype=np.int32)
    nacc = np.zeros(B, dtype=np.int32)
    valid = np.zeros(B, dtype=bool)
    point_mass = draft is None
    for b in range(B):
        params = (inv_temp[b], top_k[b], top_p[b], min_p[b])
        if not R.request_ok(*params, target_is_probs, 0, 0, np.zeros(0, np.int64), 0, V):
            continue
        depth = tree_depths(parents[b], int(num_nodes[b]), node_ids[b], V, D)
        if depth is None:
            continue
        greedy = np.float32(inv_temp[b]) == 0
        sd, off = int(seed[b]), int(offset[b])

        def target_p(n):
            row = target[b, n]
            if not target_is_probs:
                p, ok = R.transform_row(row, *params)
                return p if ok else None
            row = row.astype(np.float32)
            if not R.probs_row_valid(row):
                return None
            if greedy:
                onehot = np.zeros(V, dtype=np.float32)
                onehot[R.argmax_row(row)] = 1
                return onehot
            return row

        def draft_q(n):
            row = np.asarray(draft[b, n])
            if draft_is_probs:
                return row.astype(np.float32)
            q, ok = R.transform_row(row, *params)
            return q if ok else None

        c, j = 0, 0
        while True:
            p = target_p(c)
            if p is None:
                break                                  # invalid at depth j
            kids = children_of(c, parents[b], depth)
            if greedy:
                best = R.argmax_row(p)
                nxt = next((x for x in kids if int(node_ids[b, x]) == best), None)
                if nxt is None:
                    out[b, j], valid[b] = best, True
                    break
                out[b, j], nodes[b, j], c, j = best, nxt, nxt, j + 1
                continue
            Rw = R.integer_weights(p)
            A = int(Rw.sum())
            Qw, Q = (None, 0) if point_mass or not kids else draft_weights(draft_q(c))
            tried, nxt = [], None
            for i, x in enumerate(kids):
                y = int(node_ids[b, x])
                if method == "rsd" and y in tried:
                    continue
                tried.append(y)
                u = R.stream_words(sd, off, j, 2 * i)[0].astype(np.float64) * 2.0 ** -32
                if coin_accepts(u, Rw, A, Qw, Q, y, point_mass):
                    nxt = x
                    break
                if A == 0 or (not point_mass and Q == 0):
                    continue
                if _variant != "no_residual":
                    Rw, A = residual_update(Rw, A, Qw, Q, y, point_mass)
                if method == "rsd" and not point_mass and _variant != "with_replacement":
                    Qw, Q = remove_token(Qw, Q, y)
            if nxt is not None:
                out[b, j], nodes[b, j], c, j = int(node_ids[b, nxt]), nxt, nxt, j + 1
                continue
            W = R.integer_weights(p) if (A == 0 or _variant == "wrong_fallback") else Rw
            tok = R.draw_index(W, R.sample_uniform64(sd, off, j))
            if 0 <= tok < V:
                out[b, j], valid[b] = tok, True
            break
        nacc[b] = j
    return out, nacc, nodes, valid


# ----------------------------------------------------------------------------- exact law
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
    as in ``reference.exact_output_law``; ``parents`` [N] the tree.  The children of every
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
    QF = R._as_fn(draft)
    law, complete, pvec = R.completion(R._as_fn(target), V, D + 1)
    length_law = np.zeros(D + 1)
    point_mass = point_tokens is not None

    def verify(c, prefix, tokens, w):
        """Verification from node c (tokens: drafted token of every node reached so far)."""
        p = pvec(prefix)
        kids = [x for x in children_of(c, parents, depth) if x in tokens]   # drafted ones
        Rw = R.integer_weights(p)
        A = int(Rw.sum())
        if point_mass:
            Qw, Q = None, 0
        else:
            Qw, Q = draft_weights(QF(prefix)) if kids else (None, 0)

        def step(i, Rw, A, Qw, Q, tried, w):
            if i == len(kids):
                length_law[len(prefix)] += w
                draw = (R.implemented_draw_law(p, p) if (A == 0 or fallback == "p")
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
    return R.against_target(law, pvec, V, length_law)
