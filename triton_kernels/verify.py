"""The verifier (reference.verify_rows_ref): one walk per request over its block, without
materialising probabilities, reading only the target / draft rows the request needs.

One program per request.  ``_visit`` is one position j of the walk: the accept test and, on
a rejection or at the end of the block, the draw.  The walk repeats it while drafts are
accepted.  The forced mode (``FORCED``, the residual-sample view, reference section 7) takes
the positions before ``j* = min(forced_num_accepted, kb)`` as accepted without reading their
rows and visits ``j*`` alone, with no accept test.

Per-request scalars travel as the tuple ``req = (inv_t, top_k, top_p, min_p, seed, offset)``;
row statistics as ``stats`` (see ``_common``).
"""
import triton
import triton.language as tl

from ._common import (TAG_SAMPLE, accept_uniform, block_length, draw_row, logits_scan,
                      prob_at, probs_check_argmax, request_ok, row_stats, stream_words)
from ._launch import (chunk_size, launch_opts, row_args, use_split, verify_outputs,
                      walk_sizes)


@triton.jit
def _draw(t_row, q_row, V, y, j, req, t_stats, q_ok, q_stats,
          T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """The draw at position j (stream tag 1 at j) over the residual of p_j and the draft
    (y = -1, Q_MODE 0: over p_j, the bonus draw).  A probability row is checked in full
    first.  -> token, or -1 if the row is invalid."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    token = tl.full([], -1, tl.int32)
    if T_PROBS:
        row_ok, arg = probs_check_argmax(t_row, V, BLOCK_V)
    else:
        row_ok = True                      # logits rows are checked before the accept test
    if row_ok:
        u_lo, u_hi = stream_words(seed, offset, j, TAG_SAMPLE)
        token = draw_row(t_row, q_row, V, y, u_lo, u_hi, inv_t, t_stats, q_ok, q_stats,
                         T_PROBS, Q_MODE, BLOCK_V)
    return token


@triton.jit
def _accept_test(t_row, q_row, y, j, req, t_stats, q_ok, q_stats,
                 T_PROBS: tl.constexpr, Q_MODE: tl.constexpr):
    """p_j(y) > 0 and u_j * q_j(y) < p_j(y) in float64 (q = 1 for a point-mass draft; NaN
    rejects; p > 0 keeps an unchecked negative q from accepting a token of probability 0)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    p_y = prob_at(t_row, y, inv_t, t_stats, T_PROBS).to(tl.float64)
    u = accept_uniform(seed, offset, j)
    if Q_MODE == 0:
        accepted = u < p_y
    else:
        q_y = prob_at(q_row, y, inv_t, q_stats, Q_MODE == 1)
        if Q_MODE == 2:
            q_y = tl.where(q_ok, q_y, float("nan"))
        accepted = (u * q_y.to(tl.float64) < p_y) & (p_y > 0)
    return accepted


@triton.jit
def _greedy_position(t_row, V, y, is_draft, TEST: tl.constexpr, T_PROBS: tl.constexpr,
                     BLOCK_V: tl.constexpr):
    """Greedy request at one position -> (accepted, token): the token is the row's
    lowest-index argmax (-1 if the row is invalid); a draft equal to it is accepted."""
    if T_PROBS:
        row_ok, arg = probs_check_argmax(t_row, V, BLOCK_V)
    else:
        row_ok, x_max, arg = logits_scan(t_row, V, 1.0, BLOCK_V)
    accepted = tl.full([], False, tl.int1)
    if TEST:
        accepted = row_ok & is_draft & (y == arg)
    return accepted, tl.where(row_ok, arg, -1)


@triton.jit
def _sampled_position(t_row, q_row, V, y, j, is_draft, req, TEST: tl.constexpr,
                      T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """Sampled (non-greedy) request at one position -> (accepted, token): the accept test
    (with TEST, at a draft position), then on a rejection the residual draw, or the bonus
    draw at the end of the block."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    accepted = tl.full([], False, tl.int1)
    token = tl.full([], -1, tl.int32)
    if T_PROBS:
        row_ok = True                      # checked in full only if drawn from
        t_stats = None
    else:
        row_ok, t_stats = row_stats(t_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
    if row_ok:
        if is_draft:
            if Q_MODE == 2:
                q_ok, q_stats = row_stats(q_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
            else:
                q_ok = True
                q_stats = None
            if TEST:
                accepted = _accept_test(t_row, q_row, y, j, req, t_stats, q_ok, q_stats,
                                        T_PROBS, Q_MODE)
            if not accepted:
                token = _draw(t_row, q_row, V, y, j, req, t_stats, q_ok, q_stats,
                              T_PROBS, Q_MODE, BLOCK_V)
        else:
            token = _draw(t_row, q_row, V, -1, j, req, t_stats, True, None,
                          T_PROBS, 0, BLOCK_V)
    return accepted, token


@triton.jit
def _visit(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V, j, kb, draft_oob, req,
           TEST: tl.constexpr, T_PROBS: tl.constexpr, Q_MODE: tl.constexpr,
           BLOCK_V: tl.constexpr):
    """Position j of the request's walk -> (accepted, token); token -1 (with accepted
    false) marks the request invalid at j.  A target row outside [0, N), or the draft row
    at j == kb when the block was cut by the end of the draft tensor, makes it invalid
    without reading anything."""
    t_index = t0 + j
    exists = (t_index >= 0) & (t_index < N) & ~(draft_oob & (j == kb))
    accepted = tl.full([], False, tl.int1)
    token = tl.full([], -1, tl.int32)
    if exists:
        t_row = t_ptr + t_index * t_stride
        q_row = q_ptr + (d0 + j) * q_stride
        is_draft = j < kb
        y = tl.load(ids_ptr + d0 + j, mask=is_draft, other=-1)
        if req[0] == 0.0:                  # inv_t == 0: greedy
            accepted, token = _greedy_position(t_row, V, y, is_draft, TEST, T_PROBS, BLOCK_V)
        else:
            accepted, token = _sampled_position(t_row, q_row, V, y, j, is_draft, req, TEST,
                                                T_PROBS, Q_MODE, BLOCK_V)
    return accepted, token


@triton.jit(do_not_specialize=["t_stride", "N", "n_ids", "q_stride", "n_draft_rows", "V",
                               "MAXK"])
def _verify_kernel(
    t_ptr,             # [N, V] target logits (float32 / bfloat16 / float16) or float32 probs
    t_stride,          # elements between consecutive target rows (t_ptr's row stride)
    N,                 # target rows: a row index outside [0, N) makes its request invalid
    t_start_ptr,       # [B] int64 first target row of each request
    ids_ptr,           # [n_ids] int64 draft token ids, request b's at d_start[b] + j
    d_start_ptr,       # [B] int64 first draft id (and draft row) of each request
    n_draft_ptr,       # [B] int64 number of draft tokens of each request
    n_ids,             # draft ids in the id tensor
    n_draft_rows,      # draft indices in [0, n_draft_rows) exist: n_ids, or min(n_ids, T)
    q_ptr,             # [T, V] draft probs (Q_MODE 1) or logits (Q_MODE 2); t_ptr if Q_MODE 0
    q_stride,          # elements between consecutive draft rows
    inv_t_ptr,         # [B] float32 host 1/T, 0 for greedy requests
    top_k_ptr,         # [B] int64 top-k (0: off)
    top_p_ptr,         # [B] float32 top-p (1: off)
    min_p_ptr,         # [B] float32 min-p (0: off)
    seed_ptr,          # [B] int64 Philox key (two's complement bits)
    offset_ptr,        # [B] int64 Philox counter words 2-3
    forced_ptr,        # [B] int64 forced num_accepted (FORCED); None otherwise
    tok_ptr,           # [B, MAXK + 1] int32 out: accepted drafts, token, then -1
    nacc_ptr,          # [B] int32 out: num_accepted
    valid_ptr,         # [B] bool out: no row the request read was invalid
    V,                 # vocabulary size (columns of target and draft)
    MAXK,              # max_k: block lengths are cut to it; output width MAXK + 1
    T_PROBS: tl.constexpr,   # target holds probabilities (else logits)
    Q_MODE: tl.constexpr,    # 0: point-mass drafts (no q), 1: draft probs, 2: draft logits
    FORCED: tl.constexpr,    # forced mode: forced_ptr gives num_accepted
    BLOCK_V: tl.constexpr,   # vocabulary tile (power of 2)
    MAXK_P2: tl.constexpr,   # power of 2 >= MAXK (block-length scan)
    OUT_P2: tl.constexpr,    # power of 2 >= MAXK + 1 (output row)
):
    b = tl.program_id(0).to(tl.int64)
    t0 = tl.load(t_start_ptr + b)
    d0 = tl.load(d_start_ptr + b)
    req = (tl.load(inv_t_ptr + b), tl.load(top_k_ptr + b), tl.load(top_p_ptr + b),
           tl.load(min_p_ptr + b), tl.load(seed_ptr + b), tl.load(offset_ptr + b))
    kb, draft_oob, ids_ok = block_length(ids_ptr, d0, tl.load(n_draft_ptr + b), n_ids,
                                         n_draft_rows, V, MAXK, MAXK_P2)
    if not (ids_ok & request_ok(req, T_PROBS)):           # malformed: nothing emitted
        nacc = tl.full([], 0, tl.int32)
        token = tl.full([], -1, tl.int32)
    elif FORCED:
        forced = tl.load(forced_ptr + b)
        nacc = tl.minimum(tl.maximum(forced, 0), kb).to(tl.int32)
        token = tl.full([], -1, tl.int32)
        if forced >= 0:
            _, token = _visit(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V, nacc,
                              kb, draft_oob, req, False, T_PROBS, Q_MODE, BLOCK_V)
    else:
        nacc = tl.full([], 0, tl.int32)
        token = tl.full([], -1, tl.int32)
        walking = tl.full([], True, tl.int1)
        while walking:
            walking, token = _visit(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V,
                                    nacc, kb, draft_oob, req, True, T_PROBS, Q_MODE, BLOCK_V)
            nacc += walking.to(tl.int32)
    # output row: accepted drafts, then the correction / bonus token, then -1
    pos = tl.arange(0, OUT_P2)
    ids = tl.load(ids_ptr + d0 + pos, mask=pos < nacc, other=-1).to(tl.int32)
    row = tl.where(pos < nacc, ids, tl.where(pos == nacc, token, -1))
    tl.store(tok_ptr + b * (MAXK + 1) + pos, row, mask=pos < MAXK + 1)
    tl.store(nacc_ptr + b, nacc)
    tl.store(valid_ptr + b, token >= 0)


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
           forced_num_accepted=None, has_topk=True, has_topp=True):
    """Contiguous [B] tensors (int64 / float32), target and draft rows with unit column
    stride; ``has_topk`` / ``has_topp``: whether a filter can be on (``split.filters_on``).
    The vocabulary-split pipeline (``split.py``) or one program per request, as
    ``_launch.use_split`` decides from the shapes.  -> (token_ids [B, max_k + 1] int32,
    num_accepted [B] int32, valid [B] bool)."""
    B = num_draft.shape[0]
    dev = target.device
    max_k = int(max_k)
    V = target.shape[1]
    q_mode = 0 if draft is None else (1 if draft_is_probs else 2)
    logit_rows = (not target_is_probs) or q_mode == 2
    if use_split(B, max_k, V, target.element_size(),
                 0 if q_mode == 0 else draft.element_size(), has_topk, has_topp, logit_rows,
                 chunk_size(V, dev)):
        from .split import verify_split       # split_accept reuses this module's accept test
        return verify_split(target, target_is_probs, target_row_start, draft_ids,
                            draft_row_start, num_draft, draft, draft_is_probs, inv_temp, top_k,
                            top_p, min_p, seed, offset, max_k, forced_num_accepted, has_topk,
                            has_topp)
    tok, nacc, valid = verify_outputs(B, max_k, dev)
    if B == 0:
        return tok, nacc, valid
    rows, q_mode = row_args(target, target_row_start, draft_ids, draft_row_start, num_draft,
                            draft, draft_is_probs, inv_temp, top_k, top_p, min_p)
    _verify_kernel[(B,)](*rows, seed, offset, forced_num_accepted, tok, nacc, valid, V, max_k,
                         T_PROBS=bool(target_is_probs), Q_MODE=q_mode,
                         FORCED=forced_num_accepted is not None, **walk_sizes(max_k, V, dev),
                         **launch_opts(dev))
    return tok, nacc, valid
