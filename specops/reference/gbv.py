"""Greedy multi-path block verification (GBV) in the reference (contract: ``specops.reference``,
section 15).

GBV (Thomas & Pal, arXiv 2602.16961) takes K i.i.d. draft paths (section 14's multi-path
input: a root with K chains), selects one path deterministically -- the lexicographic maximum
under a per-node ranking of tokens by ``p / q`` -- and runs block verification (section 9) on
it with ``q`` replaced by ``q~``, the law of the next token of the maximum of K i.i.d. paths.

The walk is written as named per-step functions, looked up by their names in this module, so
that the exact law (``gbv_law.exact_gbv_law``, which runs the same code) and the tests'
negative controls can substitute one of them:

* ``rank_below(p, q, a, b)``: the order of one node (token a ranks strictly below token b);
* ``ranks_above(p, q, t, s)``: the path selection's compare (t replaces s);
* ``replaces(rows_at, best, cand)``: one step of the path selection;
* ``rank_masses(p, q)``: the integer masses F / F- of every token in rank order;
* ``skew_row(q, F, Fm, a, b, K)``: the row ``q~``;
* ``skew_step(a, b, Fm_y, qn_y)``: the rescaled (a, b) after the selected token;
* ``gbv_rho``, ``gbv_residual``: section 9's rho and scaled residual on the float64 ``q~``.
"""
from __future__ import annotations

import functools
from typing import Callable, List, Optional

import numpy as np

from .checks import probs_row_valid
from .constants import W_SCALE_BITS
from .draw import block_stop_probability, draw_index, integer_weights
from .philox import accept_uniform, sample_uniform64
from .transform import argmax_row, target_row, transform_row
from .tree import request_depths, tree_depths, tree_outputs

METHODS = ("gbv",)
SCALE = 2.0 ** W_SCALE_BITS


# ----------------------------------------------------------------------------- shape
def gbv_chains(parents, depth) -> Optional[List[List[int]]]:
    """The K chains of a GBV request (section 15's shape), each the list of its nodes from
    depth 1 down, in increasing node order of their first nodes; None if the present tree
    (``depth`` from ``tree_depths``) is not a root with K chains of one length L."""
    N = len(depth)
    kids = [[] for _ in range(N)]
    for n in range(1, N):
        if depth[n] >= 0:
            kids[int(parents[n])].append(n)
    chains = []
    for first in kids[0]:
        chain = [first]
        while kids[chain[-1]]:
            if len(kids[chain[-1]]) > 1:
                return None                      # a branch below the root
            chain.append(kids[chain[-1]][0])
        chains.append(chain)
    if len({len(c) for c in chains}) > 1:
        return None                              # ragged chains
    return chains


def gbv_shape_error(parents, num_nodes, node_ids, V: int, max_depth: int,
                    point_mass: bool) -> Optional[str]:
    """Why one request is not a GBV request (the host raises ``ValueError`` with it), or
    None.  Section 11's malformed trees first, then section 15's shape rules."""
    depth = tree_depths(parents, int(num_nodes), node_ids, V, int(max_depth))
    if depth is None:
        return ("parent_ids / num_nodes / node_token_ids / max_depth do not describe a tree "
                "(reference section 11)")
    chains = gbv_chains(parents, depth)
    if chains is None:
        return ("parent_ids must describe K chains of one length from the root for "
                "method='gbv' (every node other than the root has at most one child, every "
                "leaf at the same depth)")
    if point_mass and len(chains) > 1:
        return ("method='gbv' with more than one path needs draft_probs or draft_logits "
                "(the path selection and q~ need the draft rows)")
    return None


def check_gbv_trees(node_ids, parents, num_nodes, V: int, max_depth: int,
                    point_mass: bool) -> None:
    """Host check of a batch (values readable): raises ValueError naming the argument and the
    first offending request."""
    for b in range(len(num_nodes)):
        why = gbv_shape_error(parents[b], num_nodes[b], node_ids[b], V, max_depth,
                              point_mass)
        if why is not None:
            raise ValueError(f"{why}; request {b}")


# ----------------------------------------------------------------------------- the order
def rank_below(p, q, a: int, b: int) -> bool:
    """Token a ranks strictly below token b at a node with rows p, q (float32 [V]): the order
    of ``p / q`` ascending, without a division.  Tokens with ``q = 0`` rank above every token
    with ``q > 0``; among tokens with ``q > 0``, ``a`` is below ``b`` iff
    ``p(a) * q(b) < p(b) * q(a)`` (float64 products of float32 values: exact); every tie (equal
    cross products, or both ``q = 0``) is broken by the token id, the higher id ranking
    higher.  A node whose p or q cannot be used (None) orders by token id alone."""
    if a == b:
        return False
    if p is not None and q is not None:
        za, zb = not float(q[a]) > 0, not float(q[b]) > 0
        if za != zb:
            return zb
        if not za:
            lhs = float(np.float64(p[a]) * np.float64(q[b]))
            rhs = float(np.float64(p[b]) * np.float64(q[a]))
            if lhs != rhs:
                return lhs < rhs
    return a < b


def rank_order(p, q) -> np.ndarray:
    """The tokens 0..V-1 in ascending rank (``rank_below``)."""
    V = len(q)
    key = functools.cmp_to_key(lambda a, b: -1 if rank_below(p, q, a, b)
                               else (1 if rank_below(p, q, b, a) else 0))
    return np.array(sorted(range(V), key=key), dtype=np.int64)


def ranks_above(p, q, t: int, s: int) -> bool:
    """The path selection's compare: token t (the candidate's) replaces token s (the best
    path's) at this node iff t ranks strictly above s."""
    return rank_below(p, q, s, t)


def first_difference(best, cand) -> Optional[int]:
    """The first depth index d (tokens ``best[d] != cand[d]``), or None if equal."""
    for d, (x, y) in enumerate(zip(best, cand)):
        if int(x) != int(y):
            return d
    return None


def replaces(rows_at: Callable, best, cand) -> bool:
    """One step of the path selection: the candidate path (token list) replaces the best
    one iff at the first depth where their tokens differ the candidate's ranks strictly
    higher, in the order of the best path's node above that depth (``rows_at(d) -> (p, q)``:
    the root for d = 0).  Identical paths keep the best one."""
    d = first_difference(best, cand)
    if d is None:
        return False
    p, q = rows_at(d)
    return ranks_above(p, q, int(cand[d]), int(best[d]))


# ----------------------------------------------------------------------------- q~
def rank_masses(p, q):
    """(F, Fm, qn) of a node, float64 [V]: with ``Qw = trunc(q * 2**60)`` (int64),
    ``Q = sum Qw``, ``Fw(t) = sum of Qw(u) over u ranked <= t`` (an integer prefix sum in rank
    order) and ``iq = 1 / float64(Q)``: ``F = float64(Fw) * iq``,
    ``Fm = float64(Fw - Qw) * iq``, ``qn = float64(Qw) * iq`` (each integer rounded to float64
    once, then one product)."""
    Qw = integer_weights(q)
    order = rank_order(p, q)
    Fw = np.zeros(len(Qw), dtype=np.int64)
    Fw[order] = np.cumsum(Qw[order])
    iq = np.float64(1.0) / np.float64(int(Qw.sum()))
    return (Fw.astype(np.float64) * iq, (Fw - Qw).astype(np.float64) * iq,
            Qw.astype(np.float64) * iq)


def skew_sum(X, Y, K: int):
    """``sum_{i<K} X**i * Y**(K-1-i)`` by the fixed recurrence ``s = 1, y = 1``; for
    ``k = 1..K-1``: ``y = y * Y``, ``s = s * X + y`` (float64, every operation rounded)."""
    s = np.ones_like(np.asarray(X, dtype=np.float64))
    y = np.ones_like(s)
    for _ in range(1, K):
        y = y * Y
        s = s * X + y
    return s


def skew_row(q, F, Fm, a: float, b: float, K: int) -> np.ndarray:
    """``q~`` (float64 [V]) of a node in state (a, b): ``X = a + b * F``, ``Y = a + b * Fm``
    (product first), ``S = skew_sum(X, Y, K)``, ``Z = skew_sum(a + b * 1, a + b * 0, K)``,
    ``q~ = (float64(q) * S) * (1 / Z)``.  K = 1: ``q~ = q`` exactly."""
    a, b = np.float64(a), np.float64(b)
    S = skew_sum(a + b * F, a + b * Fm, K)
    Z = skew_sum(a + b * np.float64(1.0), a + b * np.float64(0.0), K)
    return (np.asarray(q, dtype=np.float32).astype(np.float64) * S) * (np.float64(1.0) / Z)


def skew_step(a: float, b: float, Fm_y: float, qn_y: float):
    """(a, b) after the selected token y: ``na = a + b * Fm(y)``, ``nb = b * qn(y)``,
    ``den = na + nb``; ``(na / den, nb / den)`` if ``den > 0`` else ``(1, 0)``.  (a, b) is
    (A, x) of the frontier note rescaled so that a + b = 1."""
    na = float(a) + float(b) * float(Fm_y)
    nb = float(b) * float(qn_y)
    den = na + nb
    return (na / den, nb / den) if den > 0 else (1.0, 0.0)


# ----------------------------------------------------------------------------- block on q~
def gbv_rho(rho: float, p_y, qt_y) -> float:
    """Section 9's rho rule on the float64 ``q~(y)``: ``t = rho * p(y)``; 1 if ``t > 0`` and
    ``t >= q~(y)``, ``t / q~(y)`` if ``t > 0`` and ``q~(y) > 0``, else 0."""
    t = float(rho) * float(p_y)
    s = float(qt_y)
    if t > 0 and t >= s:
        return 1.0
    if t > 0 and s > 0:
        return t / s
    return 0.0


def gbv_residual(p, qt, rho: float) -> np.ndarray:
    """Section 9's scaled residual on ``q~``: ``d = rho * p - q~`` where ``rho * p > q~``
    (float64, the product first), ``D = trunc(d * 2**60)`` (int64)."""
    pd = np.asarray(p, dtype=np.float32).astype(np.float64) * np.float64(rho)
    qt = np.asarray(qt, dtype=np.float64)
    d = np.where(pd > qt, pd - qt, 0.0)
    return (d * SCALE).astype(np.int64)


class Request:
    """One GBV request as the walk sees it: ``p(n)`` (float32 [V] or None when invalid),
    ``q(n)`` (float32 [V] or None when unusable; unused for point-mass drafts),
    ``token[n]`` and the K chains (node lists from depth 1)."""

    def __init__(self, p: Callable, q: Optional[Callable], token, chains, point_mass: bool):
        self.p, self.q, self.token, self.chains = p, q, token, chains
        self.point_mass = point_mass

    def tokens(self, k: int) -> list:
        return [int(self.token[n]) for n in self.chains[k]]


def select_path(req: Request) -> int:
    """Y: the index of the selected chain (section 15): best = 0; for k = 1..K-1 chain k
    replaces best iff ``replaces`` says so, with the rows of best's own nodes."""
    best = 0
    for k in range(1, len(req.chains)):
        nodes = [0] + req.chains[best]

        def rows_at(d, nodes=nodes):
            n = nodes[d]
            p = req.p(n)
            q = None if req.q is None or p is None else req.q(n)
            return p, q
        if replaces(rows_at, req.tokens(best), req.tokens(k)):
            best = k
    return best


class Plan:
    """Block verification of the selected path (sections 9 and 15): the cut ``e`` (and
    whether it is valid), the stopping probabilities ``h[0..e]``, the weights ``rho[0..e]``
    and, for the draw at tau, ``weights(tau)`` (None: the request is invalid at tau)."""

    def __init__(self, e, end_ok, h, rho, rows):
        self.e, self.end_ok, self.h, self.rho, self._rows = e, end_ok, h, rho, rows

    def weights(self, tau: int):
        if tau == self.e:
            if not self.end_ok:
                return None
            return integer_weights(self._rows[tau][0])
        p, qt = self._rows[tau]
        W = gbv_residual(p, qt, self.rho[tau])
        return W if int(W.sum()) else integer_weights(p)


def gbv_plan(req: Request, path: list, K: int) -> Plan:
    """Section 15's verification of the selected path (node list ``path``) with K paths:
    positions j = 0..g are visited in order; an invalid target row is an invalid cut, an
    unusable draft row (j < g) a valid cut (section 9); at every other j < g the node's
    ranking gives ``q~_j``, then ``h_j`` (j >= 1), ``rho_{j+1}`` and the next (a, b)."""
    nodes = [0] + list(path)
    g = len(path)
    a, b = 0.0, 1.0
    rho, h, rows = [1.0], [1.0], []
    e, end_ok = g, True
    for j in range(g + 1):
        p = req.p(nodes[j])
        if p is None:
            e, end_ok = j, False
            break
        if j == g:
            rows.append((p, None))
            break
        y = int(req.token[nodes[j + 1]])
        if req.point_mass:
            q = np.zeros(p.size, dtype=np.float32)
            q[y] = 1
        else:
            q = req.q(nodes[j])
            if q is None:
                e = j
                rows.append((p, None))
                break
        F, Fm, qn = rank_masses(p, q)
        qt = skew_row(q, F, Fm, a, b, K)
        rows.append((p, qt))
        if j >= 1:
            h.append(block_stop_probability(int(gbv_residual(p, qt, rho[j]).sum()), rho[j]))
        rho.append(gbv_rho(rho[j], p[y], qt[y]))
        a, b = skew_step(a, b, Fm[y], qn[y])
    h = h[:e] + [rho[e]] if e >= 1 else [1.0]
    return Plan(e, end_ok, h, rho[:e + 1], rows)


# ----------------------------------------------------------------------------- the oracle
def _greedy(req: Request, kids: Callable):
    """Greedy requests: section 11's walk (the first child, in node order, whose token is
    the argmax; none: emit the argmax)."""
    c, path = 0, []
    while True:
        p = req.p(c)
        if p is None:
            return path, -1
        best = argmax_row(p)
        nxt = next((x for x in kids(c) if int(req.token[x]) == best), None)
        if nxt is None:
            return path, best
        path.append(nxt)
        c = nxt


def _request(target_b, target_is_probs, draft_b, draft_is_probs, node_ids, chains,
             params) -> Request:
    cache_p, cache_q = {}, {}

    def p(n):
        if n not in cache_p:
            cache_p[n] = target_row(target_b[n], target_is_probs, params)
        return cache_p[n]

    def q(n):
        if n not in cache_q:
            row = np.asarray(draft_b[n])
            if draft_is_probs:
                row = row.astype(np.float32)
                cache_q[n] = row if probs_row_valid(row) else None
            else:
                qq, ok = transform_row(row, *params)
                cache_q[n] = qq if ok else None
        return cache_q[n]

    return Request(p, None if draft_b is None else q, node_ids, chains,
                   point_mass=draft_b is None)


def verify_gbv_ref(target, target_is_probs, node_ids, parents, num_nodes, draft,
                   draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                   max_depth: int, method: str = "gbv"):
    """GBV (section 15) with the arguments and outputs of ``verify_traversal_ref``
    (section 14): token_ids [B, max_depth + 1] int32, num_accepted [B] int32,
    accepted_nodes [B, max_depth] int32, valid [B] bool."""
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
            continue                                   # malformed (sections 8, 11)
        chains = gbv_chains(parents[b], depth)
        if chains is None or (draft is None and len(chains) > 1):
            continue                                   # not a GBV request: malformed
        K = len(chains)
        req = _request(target[b], target_is_probs, None if draft is None else draft[b],
                       draft_is_probs, node_ids[b], chains, params)
        if np.float32(inv_temp[b]) == 0:
            kids = {0: [c[0] for c in chains]}
            for c in chains:
                for u, v in zip(c, c[1:]):
                    kids[u] = [v]
            path, tok = _greedy(req, lambda c: kids.get(c, []))
        else:
            sd, off = int(seed[b]), int(offset[b])
            path = chains[select_path(req)] if K else []
            plan = gbv_plan(req, path, K)
            tau = 0
            for j in range(1, plan.e + 1):
                if accept_uniform(sd, off, j - 1) < plan.h[j]:
                    tau = j
            W = plan.weights(tau)
            path = path[:tau]
            tok = -1 if W is None else draw_index(W, sample_uniform64(sd, off, tau))
        j = len(path)
        out[b, :j] = [int(node_ids[b, x]) for x in path]
        nodes[b, :j] = path
        nacc[b] = j
        if 0 <= tok < V:
            out[b, j], valid[b] = tok, True
    return out, nacc, nodes, valid
