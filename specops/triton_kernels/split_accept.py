"""Stage 2 of the vocabulary-split pipeline: the accept tests, one program per request.

The walk of ``verify.py`` on row statistics combined from the chunk partials of stage 1: each
position reads p_j(y_j) and q_j(y_j) (one logit each, no full-row read), greedy positions the
combined argmax.  A request that ends on a draw (a rejection, the bonus or the end of its
block) records it for stage 3 (``draw_at``, ``draw_stats``, ``draw_mass``: the layout is in
``_split_common``); every other request (greedy, malformed, invalid) writes its output row
here.

The stage-1 partials travel through the walk as one tuple ``parts = (part_max, part_argmax,
part_count, kept_mass, minp_mass, radix_hist, radix_prefix)`` of pointers.
"""
import triton
import triton.language as tl

from ._split_common import (AT_DRAW, AT_J, AT_Q_OK, AT_Y, DRAW_AT_WIDTH, DRAW_MASS_WIDTH,
                            OF_DRAFT, OF_TARGET, row_stats_split, store_draw_stats, summary)
from ._walk_common import accept_test, load_request, write_row


@triton.jit
def _stats_of(s, C, is_probs, req, V, parts, HAS_TOPK: tl.constexpr, HAS_TOPP: tl.constexpr,
              CP2: tl.constexpr):
    """The row statistics of slot s (``_split_common.row_stats_split``)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    (part_max_ptr, part_argmax_ptr, part_count_ptr, kept_mass_ptr, minp_mass_ptr,
     radix_hist_ptr, radix_prefix_ptr) = parts
    return row_stats_split(s, C, is_probs, inv_t, top_k, top_p, min_p, V, part_max_ptr,
                           part_argmax_ptr, part_count_ptr, kept_mass_ptr, minp_mass_ptr,
                           radix_hist_ptr, radix_prefix_ptr, HAS_TOPK, HAS_TOPP, CP2)


@triton.jit
def _visit(b, j, kb, oob, N, t_ptr, t_stride, t0, q_ptr, q_stride, ids_ptr, d0, V, req, MAXK,
           R, C, parts, TEST: tl.constexpr, T_PROBS: tl.constexpr, Q_MODE: tl.constexpr,
           HAS_TOPK: tl.constexpr, HAS_TOPP: tl.constexpr, CP2: tl.constexpr):
    """Position j -> (accepted, token, draw): the accept test (TEST, at a draft position);
    greedy positions give their token, others that stop need a ``draw``; token -1 with no
    draw marks the request invalid at j."""
    NO = tl.full([], False, tl.int1)       # "not a probability row", as an int1 tensor
    t_index = t0 + j
    exists = (t_index >= 0) & (t_index < N) & ((oob & (j == kb)) == 0)
    accepted = tl.full([], False, tl.int1)
    draw = tl.full([], False, tl.int1)
    token = tl.full([], -1, tl.int32)
    if exists:
        s = b * (MAXK + 1) + j
        is_draft = j < kb
        y = tl.load(ids_ptr + d0 + j, mask=is_draft, other=-1)
        if req[0] == 0.0:                              # greedy
            valid, mx, arg = summary(s, C, parts[0], parts[1], parts[2],
                                     tl.full([], T_PROBS, tl.int1), CP2)
            if TEST:
                accepted = valid & is_draft & (y == arg)
            token = tl.where(valid, arg, -1)
        else:
            if T_PROBS:
                row_ok = True                          # checked in full only if drawn from
                t_stats = None
            else:
                row_ok, t_stats = _stats_of(s, C, NO, req, V, parts, HAS_TOPK, HAS_TOPP, CP2)
            if row_ok:
                if TEST:
                    if is_draft:
                        if Q_MODE == 2:
                            q_ok, q_stats = _stats_of(R + b * MAXK + j, C, NO, req, V, parts,
                                                      HAS_TOPK, HAS_TOPP, CP2)
                        else:
                            q_ok = True
                            q_stats = None
                        accepted = accept_test(t_ptr + t_index * t_stride,
                                               q_ptr + (d0 + j) * q_stride, y, j, req,
                                               t_stats, q_ok, q_stats, T_PROBS, Q_MODE)
                draw = accepted == 0
    return accepted, token, draw


@triton.jit(do_not_specialize=["t_stride", "N", "n_ids", "q_stride", "n_draft_rows", "V",
                               "MAXK", "R", "C"])
def _walk_kernel(
    t_ptr, t_stride, N, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
    q_ptr, q_stride, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr,   # as split_transform
    seed_ptr, offset_ptr,      # [B] int64 Philox key and counter words 2-3
    forced_ptr,                # [B] int64 forced num_accepted (FORCED)
    part_max_ptr, part_argmax_ptr, part_count_ptr,   # stage 1 (in): chunk statistics,
    kept_mass_ptr, minp_mass_ptr,                    # chunk masses,
    radix_hist_ptr, radix_prefix_ptr,                # radix selects
    draw_at_ptr, draw_stats_ptr, draw_mass_ptr,      # out: each request's draw (_split_common)
    tok_ptr,                   # [B, MAXK + 1] int32 out (requests that make no draw)
    nacc_ptr, valid_ptr,       # [B] int32 / bool out (idem)
    V, MAXK, R, C,
    T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, FORCED: tl.constexpr,
    HAS_TOPK: tl.constexpr, HAS_TOPP: tl.constexpr, MAXK_P2: tl.constexpr,
    OUT_P2: tl.constexpr, CP2: tl.constexpr,
):
    NO = tl.full([], False, tl.int1)       # "not a probability row", as an int1 tensor
    b = tl.program_id(0).to(tl.int64)
    parts = (part_max_ptr, part_argmax_ptr, part_count_ptr, kept_mass_ptr, minp_mass_ptr,
             radix_hist_ptr, radix_prefix_ptr)
    t0, d0, params, kb, oob, ok = load_request(
        b, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows, inv_t_ptr,
        top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    req = params + (tl.load(seed_ptr + b), tl.load(offset_ptr + b))
    nacc = tl.full([], 0, tl.int32)
    token = tl.full([], -1, tl.int32)
    draw = tl.full([], False, tl.int1)
    if ok:
        if FORCED:
            forced = tl.load(forced_ptr + b)
            if forced >= 0:
                nacc = tl.minimum(forced, kb).to(tl.int32)
                _, token, draw = _visit(b, nacc, kb, oob, N, t_ptr, t_stride, t0, q_ptr,
                                        q_stride, ids_ptr, d0, V, req, MAXK, R, C, parts,
                                        False, T_PROBS, Q_MODE, HAS_TOPK, HAS_TOPP, CP2)
        else:
            walking = tl.full([], True, tl.int1)
            while walking:
                walking, token, draw = _visit(b, nacc, kb, oob, N, t_ptr, t_stride, t0, q_ptr,
                                              q_stride, ids_ptr, d0, V, req, MAXK, R, C, parts,
                                              True, T_PROBS, Q_MODE, HAS_TOPK, HAS_TOPP, CP2)
                nacc += walking.to(tl.int32)
    j = nacc.to(tl.int64)
    y = tl.load(ids_ptr + d0 + j, mask=draw & (j < kb), other=-1)
    at = draw_at_ptr + b * DRAW_AT_WIDTH
    tl.store(at + AT_J, j)
    tl.store(at + AT_Y, tl.where(j < kb, y, -1))
    tl.store(at + AT_DRAW, draw.to(tl.int64))
    if draw:
        # the sampled row's statistics, for stage 3 (stats of a probability row: unused)
        q_ok = tl.full([], True, tl.int1)
        if T_PROBS:
            tl.store(draw_mass_ptr + b * DRAW_MASS_WIDTH + OF_TARGET, 1)
        else:
            ok, st = _stats_of(b * (MAXK + 1) + j, C, NO, req, V, parts, HAS_TOPK, HAS_TOPP,
                               CP2)
            store_draw_stats(draw_stats_ptr, draw_mass_ptr, b, OF_TARGET, st)
        if Q_MODE == 2:
            if j < kb:
                q_ok, qs = _stats_of(R + b * MAXK + j, C, NO, req, V, parts, HAS_TOPK,
                                     HAS_TOPP, CP2)
                store_draw_stats(draw_stats_ptr, draw_mass_ptr, b, OF_DRAFT, qs)
        tl.store(at + AT_Q_OK, q_ok.to(tl.int64))
    else:
        write_row(tok_ptr, nacc_ptr, valid_ptr, b, ids_ptr, d0, nacc, token, token >= 0, draw,
                  MAXK, OUT_P2)                        # draw is false here: no token skipped
