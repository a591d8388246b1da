"""The oracle walk every backend implements (sections 1, 3, 7-10), on the canonical,
flattened arguments.  ``verify_rows_ref`` checks each request (section 8), then runs one of
three walks on its rows: ``token_walk`` (section 1), ``forced_walk`` (the residual-sample
view of section 7) or ``block_walk`` (section 9).  Each returns ``(num_accepted, token)``;
token -1 marks the request invalid at position ``num_accepted``.

The walks call the documented primitives (``accept_uniform``, ``sample_uniform64``,
``residual_row``, ``block_draw_weights``) by their names in this module, so that the tests'
negative controls (``tests/_negative.py``) can substitute one of them and show that the
statistical tests catch the mistake.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .checks import draft_row_ok, draft_value_ok, request_ok
from .draw import (accept_rate, block_draw_weights, block_next_rho, block_stop_probability,
                   block_weights, draw_from, draw_index, integer_weights, residual_row)
from .penalties import adjust_of, adjust_ok
from .philox import accept_uniform, sample_uniform64
from .transform import argmax_row, target_row, transform_row

METHODS = ("token", "block")


def _block_length(draft_ids: np.ndarray, d0: int, kmax: int, V: int, n_rows: int):
    """(kb, oob): the effective block length num_draft (<= max_k in a request that is not
    malformed), cut at the first id -1; ``oob`` if the cut is a draft index outside
    [0, n_rows) (the request is then invalid at kb: that row does not exist)."""
    for j in range(max(kmax, 0)):
        if not 0 <= d0 + j < n_rows:
            return j, True
        if not 0 <= int(draft_ids[d0 + j]) < V:
            return j, False
    return max(kmax, 0), False


class Rows:
    """Request b's view of the canonical arguments: its target and draft rows (transformed
    as sections 2-3 say), its block ``ids`` (length ``kb``), ``oob`` and its stream."""

    def __init__(self, target, target_is_probs, t0, draft, draft_is_probs, d0, ids, oob,
                 params, seed, offset, adjust=None):
        self.target, self.target_is_probs, self.t0 = target, target_is_probs, t0
        self.adjust = adjust                  # section 16's masks and penalties (or None)
        self.draft, self.draft_is_probs, self.d0 = draft, draft_is_probs, d0
        self.ids, self.kb, self.oob = ids, len(ids), oob
        self.params = params
        self.greedy = np.float32(params[0]) == 0
        self.seed, self.offset = seed, offset
        self.V = target.shape[-1]

    def target_p(self, j):
        """p_j, or None if the row is invalid (section 3) or outside the tensor."""
        if not 0 <= self.t0 + j < len(self.target):
            return None
        row = self.target[self.t0 + j]
        if self.adjust is not None:         # the drafts before row j are its history
            row = self.adjust.row(self.t0 + j, row, [int(y) for y in self.ids[:j]])
        return target_row(row, self.target_is_probs, self.params)

    def draft_q(self, j):
        """q_j (float32 [V]), NaN everywhere for an invalid draft-logits row, or None for
        point-mass drafts."""
        if self.draft is None:
            return None
        row = np.asarray(self.draft[self.d0 + j])
        if self.draft_is_probs:
            return row.astype(np.float32)
        q, ok = transform_row(row, *self.params)
        return q if ok else np.full(self.V, np.nan, dtype=np.float32)

    def rate(self, j, p=None) -> np.float32:
        """beta_j (section 10), NaN if the target row is invalid."""
        p = self.target_p(j) if p is None else p
        if p is None:
            return np.float32(np.nan)
        q = None if self.greedy else self.draft_q(j)
        return accept_rate(p, q, int(self.ids[j]), self.greedy)


def _accept_test(rows: Rows, j: int):
    """(accepted, p_j or None, row_ok) of the accept test at position j (section 1)."""
    y = int(rows.ids[j])
    if rows.target_is_probs and not rows.greedy:
        if not 0 <= rows.t0 + j < len(rows.target):
            return False, None, False
        p, p_y = None, np.float32(rows.target[rows.t0 + j][y])   # reads p_j(y_j) only
    else:
        p = rows.target_p(j)
        if p is None:
            return False, None, False
        p_y = p[y]
    if rows.greedy:
        return y == argmax_row(p), p, True
    q = rows.draft_q(j)
    q_y = np.float32(1.0) if q is None else q[y]
    u = accept_uniform(rows.seed, rows.offset, j)
    return bool(np.float64(p_y) > 0 and u * np.float64(q_y) < np.float64(p_y)), p, True


def _sample(rows: Rows, j: int, p=None, row_ok: bool = True) -> int:
    """The token of the sampled position j: the residual draw after a rejection (j < kb),
    the bonus / end-of-block draw (j == kb), the argmax for greedy requests; -1 if the row
    is invalid or does not exist, or nothing can be drawn."""
    if rows.oob and j == rows.kb:
        return -1                                         # the draft row does not exist
    if row_ok and p is None:
        p = rows.target_p(j)
    if not row_ok or p is None:
        return -1                                         # invalid row at j
    if rows.greedy:
        return argmax_row(p)
    U = sample_uniform64(rows.seed, rows.offset, j)
    if j == rows.kb:
        return draw_index(integer_weights(p), U)
    return draw_from(residual_row(p, rows.draft_q(j), int(rows.ids[j])), p, U)


def token_walk(rows: Rows, rates: Optional[np.ndarray] = None):
    """Section 1: accept while the test passes, then draw -> (num_accepted, token).
    ``rates`` (the request's row of accept_rates) receives beta of every position read."""
    j, p, row_ok = 0, None, True
    while j < rows.kb:
        ok, p, row_ok = _accept_test(rows, j)
        if rates is not None and row_ok:
            rates[j] = rows.rate(j, p)
        if not ok:
            break
        j, p = j + 1, None
    return j, _sample(rows, j, p, row_ok)


def forced_walk(rows: Rows, forced: int):
    """The residual-sample view of section 7 -> (num_accepted, token); None for a negative
    ``forced`` (the request is invalid: nothing is emitted)."""
    if forced < 0:
        return None
    j = min(forced, rows.kb)
    return j, _sample(rows, j)


def block_walk(rows: Rows, rates: Optional[np.ndarray] = None):
    """Block verification (section 9) of a request that is neither greedy nor forced ->
    (tau, token)."""
    sd, off, kb = rows.seed, rows.offset, rows.kb
    tau, e, end_ok, rhos = 0, kb, True, [1.0]
    for j in range(kb + 1):
        p = None if (rows.oob and j == kb) else rows.target_p(j)
        if p is None:
            e, end_ok = j, False                          # an invalid cut
            break
        if j == kb:
            break
        y = int(rows.ids[j])
        q = rows.draft_q(j)
        if rates is not None:
            rates[j] = accept_rate(p, q, y)
        if q is not None and not rows.draft_is_probs and np.isnan(q).all():
            e = j                                         # unusable draft row: a valid cut
            break
        if j >= 1:
            h = block_stop_probability(int(block_weights(p, q, y, rhos[j]).sum()), rhos[j])
            if accept_uniform(sd, off, j - 1) < h:
                tau = j
        rhos.append(block_next_rho(rhos[j], p[y], 1.0 if q is None else q[y]))
    if e >= 1 and accept_uniform(sd, off, e - 1) < rhos[e]:
        tau = e
    if tau == e and not end_ok:
        return tau, -1
    p = rows.target_p(tau)
    U = sample_uniform64(sd, off, tau)
    if tau == e:
        return tau, draw_index(integer_weights(p), U)
    return tau, draw_index(block_draw_weights(p, rows.draft_q(tau), int(rows.ids[tau]),
                                              rhos[tau]), U)


def draft_check(rows: Rows, n: int, valid: bool) -> int:
    """The default call's draft_probs check (section 8) of one request after its walk: the
    first draft position whose checked values are not probabilities, else -1.  Checked:
    ``q_j(y_j)`` of every accepted position ``j < n``, and the whole row of the position the
    token was drawn from the residual (``n < kb`` in a valid request).  Greedy requests, a
    bonus draw and point-mass or logits drafts check nothing."""
    if rows.greedy or rows.draft is None or not rows.draft_is_probs:
        return -1
    for j in range(n):
        if not draft_value_ok(rows.draft[rows.d0 + j][int(rows.ids[j])]):
            return j
    if valid and n < rows.kb and not draft_row_ok(rows.draft[rows.d0 + n]):
        return n
    return -1


def verify_rows_ref(target, target_is_probs, target_row_start, draft_ids, draft_row_start,
                    num_draft, draft, draft_is_probs, inv_temp, top_k, top_p, min_p,
                    seed, offset, max_k, forced_num_accepted=None, method: str = "token",
                    want_rates: bool = False, check_draft: bool = False,
                    allowed_token_bitmask=None, repetition_penalty=None, presence_penalty=None,
                    frequency_penalty=None, prompt_token_ids=None, output_token_ids=None):
    """The one verification walk every backend implements (flattened layout, section 7).

    target [N, V] (float logits or float32 probs), request b's row j is
    ``target[target_row_start[b] + j]``; draft ids ``draft_ids[draft_row_start[b] + j]`` and
    the draft row ``draft[draft_row_start[b] + j]`` (probs or logits, or None for point-mass
    drafts); per-request [B] arrays for everything else.  ``forced_num_accepted`` [B] (or
    None) selects the forced mode of section 7.  ``method``: "token" (section 1) or "block"
    (section 9).  Returns numpy (token_ids [B, max_k + 1] int32, num_accepted [B] int32,
    valid [B] bool), then accept_rates [B, max_k] float32 (section 10) with ``want_rates``,
    then draft_bad [B] int32 (``draft_check``; -1 everywhere in the forced mode) with
    ``check_draft``.  Section 16: ``allowed_token_bitmask`` [N, W] int32 (the target's rows),
    the penalties [B] and the committed ``prompt_token_ids`` / ``output_token_ids`` [B, *]
    (-1 padded) adjust the target rows.
    """
    target = np.asarray(target)
    V = target.shape[-1]
    B = len(num_draft)
    out = np.full((B, max_k + 1), -1, dtype=np.int32)
    nacc = np.zeros(B, dtype=np.int32)
    valid = np.zeros(B, dtype=bool)
    rates = np.full((B, max(max_k, 0)), np.nan, dtype=np.float32)
    bad = np.full(B, -1, dtype=np.int32)
    if method not in METHODS:
        raise ValueError(f"method must be 'token' or 'block', got {method!r}")
    draft_ids = np.asarray(draft_ids).reshape(-1)
    n_draft_rows = draft_ids.size if draft is None else min(draft_ids.size, len(draft))
    for b in range(B):
        t0, d0 = int(target_row_start[b]), int(draft_row_start[b])
        params = (inv_temp[b], top_k[b], top_p[b], min_p[b])
        if not request_ok(*params, target_is_probs, num_draft[b], max_k, draft_ids, d0, V):
            continue                                      # malformed: nothing emitted
        kb, oob = _block_length(draft_ids, d0, int(num_draft[b]), V, n_draft_rows)
        ids = draft_ids[d0:d0 + kb] if kb else draft_ids[:0]
        adjust = adjust_of(b, V, allowed_token_bitmask, None, repetition_penalty,
                           presence_penalty, frequency_penalty, prompt_token_ids,
                           output_token_ids)
        if adjust is not None and not adjust_ok(adjust, target_is_probs, params, b,
                                                prompt_token_ids, output_token_ids,
                                                [t0 + j for j in range(kb + 1)
                                                 if 0 <= t0 + j < len(target)]):
            continue                                      # malformed (section 16)
        rows = Rows(target, target_is_probs, t0, draft, draft_is_probs, d0, ids, oob, params,
                    int(seed[b]), int(offset[b]), adjust)
        rates_b = rates[b] if want_rates else None
        if forced_num_accepted is not None:
            result = forced_walk(rows, int(forced_num_accepted[b]))
            if result is None:
                continue                                  # invalid request: nothing emitted
        elif method == "block" and not rows.greedy:
            result = block_walk(rows, rates_b)
        else:
            result = token_walk(rows, rates_b)
        n, token = result
        out[b, :n] = ids[:n]
        nacc[b] = n
        if 0 <= token < V:
            out[b, n] = token
            valid[b] = True
        if check_draft and forced_num_accepted is None:
            bad[b] = draft_check(rows, n, bool(valid[b]))
    return (out, nacc, valid) + ((rates,) if want_rates else ()) + \
        ((bad,) if check_draft else ())
