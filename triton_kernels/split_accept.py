"""Stage 2 of the vocabulary-split pipeline: the accept tests, one program per request.

The walk of ``verify.py`` on row statistics combined from the chunk partials of stage 1: each
position reads p_j(y_j) and q_j(y_j) (one logit each, no full-row read), greedy positions the
combined argmax.  A request that ends on a draw (a rejection, the bonus or the end of its
block) records it in ``info`` for stage 3; every other request (greedy, malformed, invalid)
writes its output row here.

info_i [B, 4] int64: j*, y (the draft id at j*, -1 for a bonus draw), draw (0/1), q_ok.
info_f [B, 8] float32: target (x_max, k_thr, p_tau, min_p), then the draft row's.
info_m [B, 2] int64: target kept mass, draft kept mass.
"""
import triton
import triton.language as tl

from ._common import block_length, request_ok
from ._split_common import row_stats_split, summary
from .verify import _accept_test


@triton.jit
def write_row(tok_ptr, nacc_ptr, valid_ptr, b, ids_ptr, d0, nacc, token, valid, skip_token,
              MAXK, OUT_P2: tl.constexpr):
    """Output row b: accepted drafts, the token at nacc (unless ``skip_token``: its owner
    writes it), then -1."""
    pos = tl.arange(0, OUT_P2)
    ids = tl.load(ids_ptr + d0 + pos, mask=pos < nacc, other=-1).to(tl.int32)
    row = tl.where(pos < nacc, ids, tl.where(pos == nacc, token, -1))
    # the scalar is widened by hand: the interpreter broadcasts an int1 scalar into an
    # int32 mask, which its store refuses
    m = (pos <= MAXK) & ((pos != nacc) | (pos * 0 + skip_token.to(tl.int32) == 0))
    tl.store(tok_ptr + b * (MAXK + 1) + pos, row, mask=m)
    tl.store(nacc_ptr + b, nacc)
    tl.store(valid_ptr + b, valid)


@triton.jit
def _stats_of(s, C, is_probs, req, V, pmax_ptr, parg_ptr, pcnt_ptr, pmk_ptr, pmm_ptr,
              hist_ptr, ans_ptr, HAS_TOPK: tl.constexpr, HAS_TOPP: tl.constexpr,
              CP2: tl.constexpr):
    inv_t, top_k, top_p, min_p, seed, offset = req
    return row_stats_split(s, C, is_probs, inv_t, top_k, top_p, min_p, V, pmax_ptr, parg_ptr,
                           pcnt_ptr, pmk_ptr, pmm_ptr, hist_ptr, ans_ptr, HAS_TOPK, HAS_TOPP,
                           CP2)


@triton.jit
def _visit(b, j, kb, oob, N, t_ptr, t_stride, t0, q_ptr, q_stride, ids_ptr, d0, V, req, MAXK,
           R, C, pmax_ptr, parg_ptr, pcnt_ptr, pmk_ptr, pmm_ptr, hist_ptr, ans_ptr,
           TEST: tl.constexpr, T_PROBS: tl.constexpr, Q_MODE: tl.constexpr,
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
            valid, mx, arg = summary(s, C, pmax_ptr, parg_ptr, pcnt_ptr,
                                     tl.full([], T_PROBS, tl.int1), CP2)
            if TEST:
                accepted = valid & is_draft & (y == arg)
            token = tl.where(valid, arg, -1)
        else:
            if T_PROBS:
                row_ok = True                          # checked in full only if drawn from
                t_stats = None
            else:
                row_ok, t_stats = _stats_of(s, C, NO, req, V, pmax_ptr, parg_ptr, pcnt_ptr,
                                            pmk_ptr, pmm_ptr, hist_ptr, ans_ptr, HAS_TOPK,
                                            HAS_TOPP, CP2)
            if row_ok:
                if TEST:
                    if is_draft:
                        if Q_MODE == 2:
                            q_ok, q_stats = _stats_of(R + b * MAXK + j, C, NO, req, V,
                                                      pmax_ptr, parg_ptr, pcnt_ptr, pmk_ptr,
                                                      pmm_ptr, hist_ptr, ans_ptr, HAS_TOPK,
                                                      HAS_TOPP, CP2)
                        else:
                            q_ok = True
                            q_stats = None
                        accepted = _accept_test(t_ptr + t_index * t_stride,
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
    pmax_ptr, parg_ptr, pcnt_ptr, pmk_ptr, pmm_ptr, hist_ptr, ans_ptr,   # stage 1 (in)
    info_i_ptr, info_f_ptr, info_m_ptr,   # out: the draw of each request (module docstring)
    tok_ptr,                   # [B, MAXK + 1] int32 out (requests that make no draw)
    nacc_ptr, valid_ptr,       # [B] int32 / bool out (idem)
    V, MAXK, R, C,
    T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, FORCED: tl.constexpr,
    HAS_TOPK: tl.constexpr, HAS_TOPP: tl.constexpr, MAXK_P2: tl.constexpr,
    OUT_P2: tl.constexpr, CP2: tl.constexpr,
):
    NO = tl.full([], False, tl.int1)       # "not a probability row", as an int1 tensor
    b = tl.program_id(0).to(tl.int64)
    t0 = tl.load(t_start_ptr + b)
    d0 = tl.load(d_start_ptr + b)
    req = (tl.load(inv_t_ptr + b), tl.load(top_k_ptr + b), tl.load(top_p_ptr + b),
           tl.load(min_p_ptr + b), tl.load(seed_ptr + b), tl.load(offset_ptr + b))
    kb, oob, ids_ok = block_length(ids_ptr, d0, tl.load(n_draft_ptr + b), n_ids, n_draft_rows,
                                   V, MAXK, MAXK_P2)
    nacc = tl.full([], 0, tl.int32)
    token = tl.full([], -1, tl.int32)
    draw = tl.full([], False, tl.int1)
    if ids_ok & request_ok(req, T_PROBS):
        if FORCED:
            forced = tl.load(forced_ptr + b)
            if forced >= 0:
                nacc = tl.minimum(forced, kb).to(tl.int32)
                _, token, draw = _visit(b, nacc, kb, oob, N, t_ptr, t_stride, t0, q_ptr,
                                        q_stride, ids_ptr, d0, V, req, MAXK, R, C, pmax_ptr,
                                        parg_ptr, pcnt_ptr, pmk_ptr, pmm_ptr, hist_ptr, ans_ptr,
                                        False, T_PROBS, Q_MODE, HAS_TOPK, HAS_TOPP, CP2)
        else:
            walking = tl.full([], True, tl.int1)
            while walking:
                walking, token, draw = _visit(b, nacc, kb, oob, N, t_ptr, t_stride, t0, q_ptr,
                                              q_stride, ids_ptr, d0, V, req, MAXK, R, C,
                                              pmax_ptr, parg_ptr, pcnt_ptr, pmk_ptr, pmm_ptr,
                                              hist_ptr, ans_ptr, True, T_PROBS, Q_MODE,
                                              HAS_TOPK, HAS_TOPP, CP2)
                nacc += walking.to(tl.int32)
    j = nacc.to(tl.int64)
    y = tl.load(ids_ptr + d0 + j, mask=draw & (j < kb), other=-1)
    tl.store(info_i_ptr + b * 4, j)
    tl.store(info_i_ptr + b * 4 + 1, tl.where(j < kb, y, -1))
    tl.store(info_i_ptr + b * 4 + 2, draw.to(tl.int64))
    if draw:
        # the sampled row's statistics, for stage 3 (stats of a probability row: unused)
        q_ok = tl.full([], True, tl.int1)
        if T_PROBS:
            tl.store(info_m_ptr + b * 2, 1)
        else:
            ok, st = _stats_of(b * (MAXK + 1) + j, C, NO, req, V, pmax_ptr, parg_ptr,
                               pcnt_ptr, pmk_ptr, pmm_ptr, hist_ptr, ans_ptr, HAS_TOPK,
                               HAS_TOPP, CP2)
            tl.store(info_f_ptr + b * 8, st[0])
            tl.store(info_f_ptr + b * 8 + 1, st[1])
            tl.store(info_f_ptr + b * 8 + 2, st[2])
            tl.store(info_f_ptr + b * 8 + 3, st[3])
            tl.store(info_m_ptr + b * 2, st[4])
        if Q_MODE == 2:
            if j < kb:
                q_ok, qs = _stats_of(R + b * MAXK + j, C, NO, req, V, pmax_ptr, parg_ptr,
                                     pcnt_ptr, pmk_ptr, pmm_ptr, hist_ptr, ans_ptr, HAS_TOPK,
                                     HAS_TOPP, CP2)
                tl.store(info_f_ptr + b * 8 + 4, qs[0])
                tl.store(info_f_ptr + b * 8 + 5, qs[1])
                tl.store(info_f_ptr + b * 8 + 6, qs[2])
                tl.store(info_f_ptr + b * 8 + 7, qs[3])
                tl.store(info_m_ptr + b * 2 + 1, qs[4])
        tl.store(info_i_ptr + b * 4 + 3, q_ok.to(tl.int64))
    else:
        write_row(tok_ptr, nacc_ptr, valid_ptr, b, ids_ptr, d0, nacc, token, token >= 0, draw,
                  MAXK, OUT_P2)                        # draw is false here: no token skipped
