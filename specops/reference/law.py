"""Exact laws by enumeration (float64), for small V and K: what the tests compare the
walks and the target's own autoregressive law with (sections 1, 6 and 9)."""
from __future__ import annotations

import itertools
from typing import Callable, Optional

import numpy as np

from .draw import (block_next_rho, block_stop_probability, block_weights, integer_weights,
                   residual_row)

RowFn = Callable[[tuple], np.ndarray]


def _as_fn(rows) -> Optional[RowFn]:
    if rows is None or callable(rows):
        return rows
    arr = np.asarray(rows)
    return lambda prefix: arr[len(prefix)]


def implemented_draw_law(r, p) -> np.ndarray:
    """Exact law (float64) of ``draw_from(r, p, U)`` over a uniform 64-bit U: W_i / S, where
    the rounding of t = floor(U S / 2**64) contributes at most 2**-64 per token."""
    W = integer_weights(r)
    if int(W.sum()) == 0:
        W = integer_weights(p)
    S = int(W.sum())
    return np.array([int(w) / S for w in W], dtype=np.float64) if S else np.zeros(len(W))


def accept_probability(p_y, q_y) -> float:
    """P(u * q < p) for a continuous uniform u: min(1, p/q) (q = 0: 1 iff p > 0)."""
    p_y, q_y = float(np.float32(p_y)), float(np.float32(q_y))
    if not p_y > 0:
        return 0.0
    if q_y <= 0:
        return 1.0
    return min(1.0, p_y / q_y)


def completion(P: RowFn, V: int, L: int):
    """(law, complete, pvec): ``complete(seq, w)`` adds weight w to the law of sequences of
    length L that start with seq and are continued by sampling the target ``P`` (normalised
    in float64); ``pvec(prefix)`` is P's float32 row."""
    law = np.zeros((V,) * L)

    def pvec(prefix):
        return np.asarray(P(prefix), dtype=np.float32)

    def complete(seq, w):
        if w == 0.0:
            return
        if len(seq) == L:
            law[seq] += w
            return
        p = pvec(seq).astype(np.float64)
        p = p / p.sum()
        for x in range(V):
            complete(seq + (x,), w * p[x])
    return law, complete, pvec


def against_target(law, pvec, V: int, length_law) -> dict:
    """The target's own law of sequences as long as ``law``'s, and the TV between them."""
    L = law.ndim
    target_law = np.zeros_like(law)
    for seq in itertools.product(range(V), repeat=L):
        w = 1.0
        for i in range(L):
            p = pvec(seq[:i]).astype(np.float64)
            w *= p[seq[i]] / p.sum()
        target_law[seq] = w
    tv = 0.5 * float(np.abs(law - target_law).sum())
    return {"law": law, "target_law": target_law, "tv": tv, "length_law": length_law}


def _draft_row(Q: RowFn, prefix, V: int):
    """(q float32 [V] or None, point-mass token or None) of the drafter after ``prefix``."""
    qd = Q(prefix)
    if np.ndim(qd) == 0:                       # point-mass drafter
        return None, int(qd)
    return np.asarray(qd, dtype=np.float32), None


def _token_law(pvec, Q: RowFn, K: int, V: int, fallback: str, complete, length_law):
    """Section 1's walk, enumerated: accept with min(1, p/q), else draw the residual."""

    def walk(prefix, w):
        j = len(prefix)
        p = pvec(prefix)
        if j == K:
            length_law[j] += w
            for x, px in enumerate(implemented_draw_law(p, p)):
                complete(prefix + (x,), w * px)
            return
        q, point = _draft_row(Q, prefix, V)
        if q is None:
            q = np.zeros(V, dtype=np.float32)
            q[point] = 1.0
        reject = 0.0
        for y in range(V):
            if q[y] <= 0:
                continue
            a = accept_probability(p[y], q[y])
            walk(prefix + (y,), w * float(q[y]) * a)
            reject += float(q[y]) * (1.0 - a)
        length_law[j] += w * reject
        r = p if fallback == "p" else residual_row(p, q, 0)
        for x, rx in enumerate(implemented_draw_law(r, p)):
            complete(prefix + (x,), w * reject * rx)

    walk((), 1.0)


def _block_law(pvec, Q: RowFn, K: int, V: int, fallback: str, complete, length_law):
    """Section 9, enumerated: every draft sequence of length K, then the stopping point tau
    with the law ``h_t * prod_{i>t} (1 - h_i)`` and the draw at tau."""

    def at_full_block(prefix, w):
        rho, h = [1.0], [1.0]
        for i in range(K):
            p_i = pvec(prefix[:i])
            q_i, _ = _draft_row(Q, prefix[:i], V)
            y = prefix[i]
            if i >= 1:
                h.append(block_stop_probability(int(block_weights(p_i, q_i, y, rho[i]).sum()),
                                                rho[i]))
            rho.append(block_next_rho(rho[i], p_i[y], 1.0 if q_i is None else q_i[y]))
        h.append(rho[K])
        for t in range(K + 1):
            pt = h[t] * float(np.prod([1.0 - x for x in h[t + 1:]]))
            if pt == 0.0:
                continue
            length_law[t] += w * pt
            p_t = pvec(prefix[:t])
            if t == K or fallback == "p":
                draw = implemented_draw_law(p_t, p_t)
            else:
                q_t, _ = _draft_row(Q, prefix[:t], V)
                W = block_weights(p_t, q_t, prefix[t], rho[t])
                S = int(W.sum())
                draw = (np.array([int(x) / S for x in W]) if S
                        else implemented_draw_law(p_t, p_t))
            for x, px in enumerate(draw):
                complete(prefix[:t] + (x,), w * pt * px)

    def drafts(prefix, w):
        if len(prefix) == K:
            at_full_block(prefix, w)
            return
        q, point = _draft_row(Q, prefix, V)
        for y in ([point] if q is None else range(V)):
            wy = w if q is None else w * float(q[y])
            if wy > 0:
                drafts(prefix + (y,), wy)

    drafts((), 1.0)


def exact_output_law(target, draft, K: int, V: int, fallback: str = "residual",
                     method: str = "token"):
    """Exact law of the verifier's output, for small V and K, in float64.

    ``target(prefix) -> p`` and ``draft(prefix) -> q`` give the float32 conditionals after an
    accepted prefix (tuples of ints); arrays [K+1, V] / [K, V] mean prefix-independent rows.
    ``draft`` may also return an int (a point-mass drafter).  The output block (accepted
    drafts then the correction/bonus, L tokens) is completed to K + 1 tokens by sampling the
    target autoregressively; speculative sampling is exact iff that completed law equals the
    target's own autoregressive law.

    ``fallback``: "residual" (the algorithm) or "p" (the classic wrong fallback).
    ``method``: "token" (section 1) or "block" (section 9: every draft sequence of length K
    is enumerated, then the stopping point tau with the law ``h_t * prod_{i>t} (1 - h_i)``).
    Returns a dict: ``law`` and ``target_law`` (arrays of shape [V] * (K + 1)), ``tv`` (total
    variation distance between them), ``length_law`` (P(num_accepted = n), n = 0..K).
    """
    enumerate_law = {"token": _token_law, "block": _block_law}.get(method)
    if enumerate_law is None:
        raise ValueError(f"method must be 'token' or 'block', got {method!r}")
    law, complete, pvec = completion(_as_fn(target), V, K + 1)
    length_law = np.zeros(K + 1)
    enumerate_law(pvec, _as_fn(draft), K, V, fallback, complete, length_law)
    return against_target(law, pvec, V, length_law)


def accepted_length_law(p_rows, q_rows=None, draft_ids=None) -> np.ndarray:
    """Analytic law of num_accepted for prefix-independent rows with drafts sampled from q:
    P(n) = prod_{j<n} alpha_j * (1 - alpha_n), alpha_j = sum min(p_j, q_j); P(K) = prod alpha.
    With point-mass drafts (q_rows None) alpha_j = p_j(draft_ids[j])."""
    p_rows = np.asarray(p_rows, dtype=np.float64)
    K = p_rows.shape[0] - 1
    if q_rows is None:
        alpha = [p_rows[j][int(draft_ids[j])] for j in range(K)]
    else:
        q_rows = np.asarray(q_rows, dtype=np.float64)
        alpha = [np.minimum(p_rows[j], q_rows[j]).sum() for j in range(K)]
    law = np.zeros(K + 1)
    reach = 1.0
    for n in range(K):
        law[n] = reach * (1 - alpha[n])
        reach *= alpha[n]
    law[K] = reach
    return law
