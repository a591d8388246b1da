"""Traversal verification in the reference (contract: ``specops.reference``, section 14).

``traverse`` is the one walk over one request's tree: leaf to root, sequence-level
acceptance (Weng et al., arXiv 2505.12398).  It takes the coin as an argument so that the
sampled oracle (``verify_traversal_ref``: the Philox coin of section 14) and the exact law
(``traversal_law.exact_traversal_law``: every coin outcome enumerated) run the same code.
The per-node steps (``child_weight``, ``delete_update``, ``accepted_weights``) are called by
their names in this module, so that the tests' negative controls can substitute one.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .checks import probs_row_valid
from .constants import W_SCALE_BITS
from .draw import block_stop_probability, draw_index, integer_weights
from .philox import accept_uniform, sample_uniform64
from .transform import argmax_row, target_row, transform_row
from .tree import children_of, request_depths, tree_outputs

METHODS = ("traversal", "traversal_iid")       # siblings drafted without replacement / i.i.d.
SCALE = 2.0 ** W_SCALE_BITS


# ----------------------------------------------------------------------------- one node
def child_weight(rho: float, m_y, s_y) -> float:
    """pi of a child with token y of a node of weight rho: ``min(rho * m(y) / s(y), 1)``
    with the product rounded first (section 9's rho rule; a NaN anywhere gives 0)."""
    t = float(rho) * float(m_y)
    s = float(s_y)
    if t > 0 and t >= s:
        return 1.0
    if t > 0 and s > 0:
        return t / s
    return 0.0


def delete_update(rho: float, m: np.ndarray, s: np.ndarray):
    """(R', A', rho') after deleting a child: ``d = rho * m - s`` where ``rho * m > s``
    (float64), ``R' = trunc(d * 2**60)``, ``A' = sum R'``, ``rho' = z / (z + (1 - rho))``
    with ``z = A' * 2**-60`` (1 if the denominator is 0): section 9's residual and stopping
    probability, on the node's current rows."""
    pd = np.asarray(m, dtype=np.float64) * np.float64(rho)
    with np.errstate(invalid="ignore"):
        d = np.where(pd > s, pd - s, 0.0)
    Rn = (d * SCALE).astype(np.int64)
    A = int(Rn.sum())
    return Rn, A, block_stop_probability(A, rho)


def accepted_weights(p, Rw, A: int):
    """The weights of the draw at the accepted node: its residual ``R`` if a child of it was
    deleted with an update and ``A > 0``, else ``trunc(p * 2**60)`` (the bonus)."""
    return integer_weights(p) if Rw is None or A == 0 else Rw


def _ratio(w, total) -> np.ndarray:
    """w / total as section 11 computes it: float64(w) * (1 / float64(total))."""
    return np.asarray(w, dtype=np.int64).astype(np.float64) * (np.float64(1.0) /
                                                                np.float64(total))


class Request:
    """One request's tree as the walk sees it: ``p(n)`` (float32 [V] or None when invalid),
    ``q(n)`` (the draft row of n's children: float32 [V], None when unusable; unused for
    point-mass drafts), ``token[n]``, the present children of n (``kids(n)``), its depth."""

    def __init__(self, p: Callable, q: Optional[Callable], token, kids: Callable, depth,
                 without_replacement: bool, point_mass: bool):
        self.p, self.q, self.token, self.kids, self.depth = p, q, token, kids, depth
        self.wor, self.point_mass = without_replacement, point_mass


def _draft_state(req: Request, c: int):
    """(s, Qw, Q) of node c before any deletion: s = float64(q_c) (None: unusable);
    Qw / Q the integer draft weights that removals (without replacement) update."""
    if req.point_mass:
        return None, None, 1
    q = req.q(c)
    if q is None or not probs_row_valid(q):
        return None, None, 0
    q = np.asarray(q, dtype=np.float32)
    Qw = integer_weights(q)
    return q.astype(np.float64), Qw, int(Qw.sum())


def traverse(req: Request, coin: Callable):
    """The walk of section 14 on one request -> (node, weights): the accepted node and the
    integer weights of its draw (None if its target row is invalid: the request ends there
    invalid).  ``coin(n, pi)`` decides whether node n, tested with weight pi, is accepted.

    ``visit`` is the recursion of section 14 written as a generator: where it would call
    itself on a child it yields the child and receives the child's result, so that the loop
    at the bottom runs trees of any depth without Python's recursion limit."""

    def visit(c: int, rho: float):
        p = req.p(c)
        kids = req.kids(c) if p is not None else []     # an invalid row: its subtree is cut
        m = None if p is None else p.astype(np.float64)
        Rw, A, live = None, 0, True
        s, Qw, Q = _draft_state(req, c) if kids else (None, None, 0)
        if not req.point_mass and Q == 0:
            live = False                                # unusable draft row: no child is tried
        tried = []
        for x in kids:
            y = int(req.token[x])
            if not live or (req.wor and y in tried):
                continue                                # deleted without a coin, no update
            tried.append(y)
            if req.point_mass:
                s = np.zeros(m.size)
                s[y] = 1.0
            found = yield x, child_weight(rho, m[y], s[y])        # visit(x, ...)
            if found is not None:
                return found
            Rw, A, rho = delete_update(rho, m, s)
            if A == 0:
                live = False                            # no residual mass: nothing to accept
                continue
            m = _ratio(Rw, A)
            if req.wor and not req.point_mass:
                Q -= int(Qw[y])
                Qw = Qw.copy()
                Qw[y] = 0
                if Q <= 0:
                    live = False
                    continue
                s = _ratio(Qw, Q)
        if c == 0 or coin(c, rho):
            return c, (None if p is None else accepted_weights(p, Rw, A))
        return None

    stack, result = [visit(0, 1.0)], None
    while stack:
        try:
            x, pi = stack[-1].send(result)                 # the frame asks to visit child x
            stack.append(visit(x, pi))
            result = None
        except StopIteration as done:                      # the frame returned
            stack.pop()
            result = done.value
    return result


# ----------------------------------------------------------------------------- the oracle
def _greedy(req: Request):
    """Greedy requests: section 11's walk (the first child whose token is the argmax)."""
    c, path = 0, []
    while True:
        p = req.p(c)
        if p is None:
            return path, -1
        best = argmax_row(p)
        nxt = next((x for x in req.kids(c) if int(req.token[x]) == best), None)
        if nxt is None:
            return path, best
        path.append(nxt)
        c = nxt


def verify_traversal_ref(target, target_is_probs, node_ids, parents, num_nodes, draft,
                         draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                         max_depth: int, method: str = "traversal"):
    """Traversal verification (section 14) with the arguments and outputs of
    ``verify_tree_ref`` (section 11)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    target = np.asarray(target)
    B, N, V = target.shape
    D = max(int(max_depth), 0)
    out, nacc, nodes, valid = tree_outputs(B, D)
    for b in range(B):
        params = (inv_temp[b], top_k[b], top_p[b], min_p[b])
        depth = request_depths(params, target_is_probs, parents[b], num_nodes[b], node_ids[b],
                               V, D)
        if depth is None:
            continue
        req = _request(target[b], target_is_probs, None if draft is None else draft[b],
                       draft_is_probs, node_ids[b], parents[b], depth, params, method)
        if np.float32(inv_temp[b]) == 0:
            path, tok = _greedy(req)
        else:
            sd, off = int(seed[b]), int(offset[b])
            node, W = traverse(req, lambda n, pi: bool(accept_uniform(sd, off, n - 1) < pi))
            path = _path(node, parents[b])
            tok = -1 if W is None else draw_index(W, sample_uniform64(sd, off, len(path)))
        j = len(path)
        out[b, :j] = [int(node_ids[b, x]) for x in path]
        nodes[b, :j] = path
        nacc[b] = j
        if 0 <= tok < V:
            out[b, j], valid[b] = tok, True
    return out, nacc, nodes, valid


def _path(node: int, parents) -> list:
    """Nodes root (excluded) .. node."""
    path = []
    while node > 0:
        path.append(node)
        node = int(parents[node])
    return path[::-1]


def _request(target_b, target_is_probs, draft_b, draft_is_probs, node_ids, parents, depth,
             params, method) -> Request:
    def p(n):
        return target_row(target_b[n], target_is_probs, params)

    def q(n):
        row = np.asarray(draft_b[n])
        if draft_is_probs:
            return row.astype(np.float32)
        qq, ok = transform_row(row, *params)
        return qq if ok else None

    return Request(p, None if draft_b is None else q, node_ids,
                   lambda c: children_of(c, parents, depth), depth,
                   without_replacement=method == "traversal", point_mass=draft_b is None)
