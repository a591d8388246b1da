"""Stage 3 of the vocabulary-split pipeline: the residual / bonus draw over (request, chunk).

* ``_draw_sums_kernel``: per chunk of the row a request draws from, the integer weight sums
  of the residual and of p (reference section 5), and for probability rows the row check's
  counts.
* ``_draw_find_kernel``: every chunk combines the sums (the same S everywhere), so the chunk
  whose prefix range holds ``t = floor(U * S / 2**64)`` knows it is the owner and finds the
  token in its chunk; chunk 0 writes the rest of the output row.
"""
import triton
import triton.language as tl

from ._common import (P_CHECK_MAX, TAG_SAMPLE, _weights_tile, find_token, mulhi_u64,
                      stream_words)
from ._split_common import (AT_DRAW, AT_J, AT_Q_OK, AT_Y, DRAW_AT_WIDTH, OF_DRAFT, OF_TARGET,
                            load_draw_stats, stats_chunk)
from ._walk_common import write_row


@triton.jit
def _request_draw(b, t_ptr, t_stride, t_start_ptr, q_ptr, q_stride, d_start_ptr, inv_t_ptr,
                  draw_at_ptr, draw_stats_ptr, draw_mass_ptr):
    """-> (draw, j, y, q_ok, inv_t, t_row, q_row, t_stats, q_stats) of request b."""
    at = draw_at_ptr + b * DRAW_AT_WIDTH
    draw = tl.load(at + AT_DRAW) != 0
    j = tl.load(at + AT_J)
    y = tl.load(at + AT_Y)
    q_ok = tl.load(at + AT_Q_OK) != 0
    t_row = t_ptr + (tl.load(t_start_ptr + b) + j) * t_stride
    q_row = q_ptr + (tl.load(d_start_ptr + b) + tl.where(y >= 0, j, 0)) * q_stride
    t_stats = load_draw_stats(draw_stats_ptr, draw_mass_ptr, b, OF_TARGET)
    q_stats = load_draw_stats(draw_stats_ptr, draw_mass_ptr, b, OF_DRAFT)
    return draw, j, y, q_ok, tl.load(inv_t_ptr + b), t_row, q_row, t_stats, q_stats


@triton.jit
def _weight_sums(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats,
                 T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    offs = tl.arange(0, BLOCK_V)
    sr = tl.full([], 0, tl.int64)
    sp = tl.full([], 0, tl.int64)
    for start in range(lo, hi, BLOCK_V):
        idx = start + offs
        w_r, w_p = _weights_tile(t_row, q_row, idx, idx < hi, y, inv_t, t_stats, q_ok, q_stats,
                                 T_PROBS, Q_MODE)
        sr += tl.sum(w_r, axis=0)
        sp += tl.sum(w_p, axis=0)
    return sr, sp


@triton.jit(do_not_specialize=["t_stride", "q_stride", "V", "C", "CHUNK"])
def _draw_sums_kernel(
    t_ptr, t_stride, t_start_ptr,   # target rows (logits or float32 probs)
    q_ptr, q_stride, d_start_ptr,   # draft rows (probs or logits; t_ptr if Q_MODE 0)
    inv_t_ptr,                 # [B] float32
    draw_at_ptr, draw_stats_ptr, draw_mass_ptr,   # the draw of each request (split_accept)
    draw_sums_ptr,                  # [B, C, 4] int64 out: sum W_r, sum W_p, bad, probs mass
    V, C, CHUNK,
    T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    draw, j, y, q_ok, inv_t, t_row, q_row, t_stats, q_stats = _request_draw(
        b, t_ptr, t_stride, t_start_ptr, q_ptr, q_stride, d_start_ptr, inv_t_ptr, draw_at_ptr,
        draw_stats_ptr, draw_mass_ptr)
    if draw:
        lo = (c * CHUNK).to(tl.int32)     # V <= 2**22: int32 indices
        hi = tl.minimum(lo + CHUNK, V)
        if Q_MODE == 0:                        # point-mass draft (y = -1: the bonus, r = p)
            sr, sp = _weight_sums(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats,
                                  T_PROBS, 0, BLOCK_V)
        elif y < 0:                            # bonus: r = p
            sr, sp = _weight_sums(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats,
                                  T_PROBS, 0, BLOCK_V)
        else:
            sr, sp = _weight_sums(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats,
                                  T_PROBS, Q_MODE, BLOCK_V)
        bad = tl.full([], 0, tl.int64)
        mass = tl.full([], 1, tl.int64)
        if T_PROBS:                            # the drawn probability row is checked in full
            best, arg, bad, mass, one = stats_chunk(t_row, lo, hi, 1.0, True, BLOCK_V)
        k = (b * C + c) * 4
        tl.store(draw_sums_ptr + k, sr)
        tl.store(draw_sums_ptr + k + 1, sp)
        tl.store(draw_sums_ptr + k + 2, bad)
        tl.store(draw_sums_ptr + k + 3, mass)


@triton.jit(do_not_specialize=["t_stride", "q_stride", "V", "MAXK", "C", "CHUNK"])
def _draw_find_kernel(
    t_ptr, t_stride, t_start_ptr, q_ptr, q_stride, d_start_ptr, inv_t_ptr,   # as above
    ids_ptr,                   # [n_ids] int64 draft ids (the output row's accepted drafts)
    seed_ptr, offset_ptr,      # [B] int64 Philox key and counter words 2-3
    draw_at_ptr, draw_stats_ptr, draw_mass_ptr,
    draw_sums_ptr,                  # [B, C, 4] int64 chunk sums (in)
    tok_ptr, nacc_ptr, valid_ptr,   # [B, MAXK + 1] int32, [B] int32, [B] bool out
    V, MAXK, C, CHUNK,
    T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr,
    OUT_P2: tl.constexpr, CP2: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    draw, j, y, q_ok, inv_t, t_row, q_row, t_stats, q_stats = _request_draw(
        b, t_ptr, t_stride, t_start_ptr, q_ptr, q_stride, d_start_ptr, inv_t_ptr, draw_at_ptr,
        draw_stats_ptr, draw_mass_ptr)
    if draw:
        cc = tl.arange(0, CP2)
        m = cc < C
        k = (b * C + cc) * 4
        wr = tl.load(draw_sums_ptr + k, mask=m, other=0)
        wp = tl.load(draw_sums_ptr + k + 1, mask=m, other=0)
        tot_r = tl.sum(wr, axis=0)
        tot_p = tl.sum(wp, axis=0)
        row_ok = tl.full([], True, tl.int1)
        if T_PROBS:
            bad = tl.sum(tl.load(draw_sums_ptr + k + 2, mask=m, other=0), axis=0)
            mass = tl.sum(tl.load(draw_sums_ptr + k + 3, mask=m, other=0), axis=0)
            row_ok = (bad == 0) & (mass > 0) & (mass <= P_CHECK_MAX)
        use_p = tot_r == 0
        total = tl.where(use_p, tot_p, tot_r)
        ok = row_ok & (total > 0)
        if c == 0:
            write_row(tok_ptr, nacc_ptr, valid_ptr, b, ids_ptr, tl.load(d_start_ptr + b),
                      j.to(tl.int32), -1, ok, ok, MAXK, OUT_P2)
        if ok:
            w = tl.where(use_p, wp, wr)
            prefix = tl.sum(tl.where(cc < c, w, 0), axis=0)
            mine = tl.sum(tl.where(cc == c, w, 0), axis=0)
            u_lo, u_hi = stream_words(tl.load(seed_ptr + b), tl.load(offset_ptr + b), j,
                                      TAG_SAMPLE)
            t = mulhi_u64(u_lo, u_hi, total)
            if (prefix <= t) & (t < prefix + mine):
                lo = (c * CHUNK).to(tl.int32)     # V <= 2**22: int32 indices
                hi = tl.minimum(lo + CHUNK, V)
                if Q_MODE == 0:
                    token = find_token(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats,
                                       use_p, prefix, t, T_PROBS, 0, BLOCK_V)
                elif y < 0:
                    token = find_token(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats,
                                       use_p, prefix, t, T_PROBS, 0, BLOCK_V)
                else:
                    token = find_token(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats,
                                       use_p, prefix, t, T_PROBS, Q_MODE, BLOCK_V)
                tl.store(tok_ptr + b * (MAXK + 1) + j, token)
