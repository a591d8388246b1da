"""Tree verification in the reference (contract: ``specops.reference``, section 11).

``verify_tree_ref`` is the walk every backend implements, written for clarity, not speed;
the per-node steps (``coin_accepts``, ``residual_update``, ``remove_token``,
``final_weights``) are called by their names in this module, so that the tests' negative
controls (``tests/_negative.py``) can substitute one of them.  ``tree_law.exact_tree_law``
enumerates the same steps for small trees.
"""
from __future__ import annotations

import numpy as np

from .checks import probs_row_valid, request_ok
from .constants import W_SCALE_BITS
from .draw import draw_index, integer_weights
from .philox import sample_uniform64, stream_words
from .transform import argmax_row, target_row, transform_row

METHODS = ("rsd", "mss")
SCALE = 2.0 ** W_SCALE_BITS


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
    if not probs_row_valid(q):
        return np.zeros(q.size, dtype=np.int64), 0
    Qw = integer_weights(q)
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


def final_weights(p, Rw, A: int):
    """The weights of the draw after every child was rejected: the residual ``R`` (sum A),
    or ``trunc(p * 2**60)`` if A == 0."""
    return integer_weights(p) if A == 0 else Rw


# ----------------------------------------------------------------------------- the walk
def tree_outputs(B: int, D: int):
    """Every tree walk's outputs before a request is walked (what a malformed request keeps):
    (token_ids [B, D + 1] -1, num_accepted [B] 0, accepted_nodes [B, D] -1, valid [B] False)."""
    return (np.full((B, D + 1), -1, dtype=np.int32), np.zeros(B, dtype=np.int32),
            np.full((B, D), -1, dtype=np.int32), np.zeros(B, dtype=bool))


def request_depths(params, target_is_probs, parents, num_nodes, node_ids, V: int, D: int):
    """One request's node depths (``tree_depths``), or None when its parameters or its tree
    are malformed (section 8: nothing is read, nothing emitted)."""
    if not request_ok(*params, target_is_probs, 0, 0, np.zeros(0, np.int64), 0, V):
        return None
    return tree_depths(parents, int(num_nodes), node_ids, V, D)


def verify_tree_ref(target, target_is_probs, node_ids, parents, num_nodes, draft,
                    draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                    max_depth: int, method: str = "rsd"):
    """Tree verification (section 11).  target [B, N, V] (logits or float32 probs), draft
    [B, N, V] (probs or logits) or None (point-mass drafts), node_ids / parents [B, N],
    num_nodes and the parameters [B].  Returns numpy (token_ids [B, max_depth + 1] int32,
    num_accepted [B] int32, accepted_nodes [B, max_depth] int32, valid [B] bool)."""
    if method not in METHODS:
        raise ValueError(f"method must be 'rsd' or 'mss', got {method!r}")
    target = np.asarray(target)
    B, N, V = target.shape
    D = max(int(max_depth), 0)
    out, nacc, nodes, valid = tree_outputs(B, D)
    point_mass = draft is None
    for b in range(B):
        params = (inv_temp[b], top_k[b], top_p[b], min_p[b])
        depth = request_depths(params, target_is_probs, parents[b], num_nodes[b], node_ids[b],
                               V, D)
        if depth is None:
            continue
        greedy = np.float32(inv_temp[b]) == 0
        sd, off = int(seed[b]), int(offset[b])

        def draft_q(n):
            row = np.asarray(draft[b, n])
            if draft_is_probs:
                return row.astype(np.float32)
            q, ok = transform_row(row, *params)
            return q if ok else None

        c, j = 0, 0
        while True:
            p = target_row(target[b, c], target_is_probs, params)
            if p is None:
                break                                  # invalid at depth j
            kids = children_of(c, parents[b], depth)
            if greedy:
                best = argmax_row(p)
                nxt = next((x for x in kids if int(node_ids[b, x]) == best), None)
                if nxt is None:
                    out[b, j], valid[b] = best, True
                    break
                out[b, j], nodes[b, j], c, j = best, nxt, nxt, j + 1
                continue
            Rw = integer_weights(p)
            A = int(Rw.sum())
            Qw, Q = (None, 0) if point_mass or not kids else draft_weights(draft_q(c))
            tried, nxt = [], None
            for i, x in enumerate(kids):
                y = int(node_ids[b, x])
                if method == "rsd" and y in tried:
                    continue
                tried.append(y)
                u = stream_words(sd, off, j, 2 * i)[0].astype(np.float64) * 2.0 ** -32
                if coin_accepts(u, Rw, A, Qw, Q, y, point_mass):
                    nxt = x
                    break
                if A == 0 or (not point_mass and Q == 0):
                    continue
                Rw, A = residual_update(Rw, A, Qw, Q, y, point_mass)
                if method == "rsd" and not point_mass:
                    Qw, Q = remove_token(Qw, Q, y)
            if nxt is not None:
                out[b, j], nodes[b, j], c, j = int(node_ids[b, nxt]), nxt, nxt, j + 1
                continue
            tok = draw_index(final_weights(p, Rw, A), sample_uniform64(sd, off, j))
            if 0 <= tok < V:
                out[b, j], valid[b] = tok, True
            break
        nacc[b] = j
    return out, nacc, nodes, valid
