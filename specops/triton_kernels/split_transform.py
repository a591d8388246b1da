"""Stage 1 of the vocabulary-split pipeline: the fused softmax with the sampling transform,
as reductions over (slot, vocabulary chunk) programs (see ``_split_common`` for slots and
partials, ``split.py`` for the launch sequence).

* ``_stats_kernel``: per chunk, validity counts, max of x = l * inv_t and its lowest argmax
  (greedy rows: of l; probability rows of greedy requests: the row check and argmax).
* ``_select_kernel``: one radix round (4 bits) of the top-k threshold on x (``TOP_P`` False)
  or of the top-p threshold on e (``TOP_P`` True); each chunk adds its 16-bin histogram of
  "weight of keys >= candidate" with integer atomics; chunk 0 records the round's prefix.
* ``_mass_kernel``: per chunk, the integer masses of the tokens top-k keeps and of those
  min-p keeps too.
"""
import triton
import triton.language as tl

from ._common import NEG_INF, RADIX, _e_tile, _select_tile, E_SCALE
from ._split_common import (N_ROUNDS, SEL_TOPK, SEL_TOPP, locate, prefix_of, psum, stats_chunk,
                            summary, ukey_f32)

_NOSPEC = ["t_stride", "N", "n_ids", "q_stride", "n_draft_rows", "V", "MAXK", "R", "C",
           "CHUNK"]


@triton.jit(do_not_specialize=_NOSPEC)
def _stats_kernel(
    t_ptr, t_stride, N,        # [N, V] target logits or float32 probs, row stride, rows
    t_start_ptr,               # [B] int64 first target row of each request
    ids_ptr, d_start_ptr,      # [n_ids] int64 draft ids; [B] int64 first draft index
    n_draft_ptr,               # [B] int64 draft tokens per request
    n_ids, n_draft_rows,       # ids in the id tensor; draft indices whose row exists
    q_ptr, q_stride,           # [T, V] draft logits (draft slots), row stride
    inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr,   # [B] per-request parameters
    part_max_ptr, part_argmax_ptr,        # [S, C] float32 / int32 out: chunk max, chunk argmax
    part_count_ptr,                  # [S, C, 3] int64 out: chunk counts
    radix_hist_ptr,                  # [S, 2, N_ROUNDS, RADIX] int64: zeroed here (FILTERS)
    V, MAXK, R, C, CHUNK,      # vocabulary, max_k, target slots, chunks per row, chunk size
    T_PROBS: tl.constexpr, FILTERS: tl.constexpr, BLOCK_V: tl.constexpr,
    MAXK_P2: tl.constexpr,
):
    s = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    row, needed, is_draft, is_probs, prm = locate(
        s, R, N, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
        inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    inv_t = prm[0]
    greedy = inv_t == 0.0
    # the stats of a non-greedy probability row are never read (its accept test reads p(y))
    if needed & ((is_probs & (greedy == 0)) == 0):
        lo = (c * CHUNK).to(tl.int32)     # V <= 2**22: int32 indices
        hi = tl.minimum(lo + CHUNK, V)
        x_scale = tl.where(greedy, 1.0, inv_t)
        if is_draft:
            best, arg, n0, n1, n2 = stats_chunk(q_ptr + row * q_stride, lo, hi, x_scale,
                                                 is_probs, BLOCK_V)
        else:
            best, arg, n0, n1, n2 = stats_chunk(t_ptr + row * t_stride, lo, hi, x_scale,
                                                 is_probs, BLOCK_V)
        k = s * C + c
        tl.store(part_max_ptr + k, best)
        tl.store(part_argmax_ptr + k, arg)
        tl.store(part_count_ptr + k * 3, n0)
        tl.store(part_count_ptr + k * 3 + 1, n1)
        tl.store(part_count_ptr + k * 3 + 2, n2)
        if FILTERS:
            if c == 0:
                h = tl.arange(0, 2 * N_ROUNDS * RADIX)
                tl.store(radix_hist_ptr + s * (2 * N_ROUNDS * RADIX) + h,
                         tl.zeros(h.shape, tl.int64))


@triton.jit
def _hist_chunk(row_ptr, lo, hi, inv_t, x_max, k_thr, cand, TOP_P: tl.constexpr,
                BLOCK_V: tl.constexpr):
    """[RADIX] int64: weight of the chunk's keys >= each candidate."""
    offs = tl.arange(0, BLOCK_V)
    weight_ge = tl.zeros([RADIX], tl.int64)
    for start in range(lo, hi, BLOCK_V):
        idx = start + offs
        key, weight = _select_tile(row_ptr, idx, idx < hi, inv_t, x_max, k_thr, TOP_P)
        weight_ge += tl.sum(tl.where(key[None, :] >= cand[:, None], weight[None, :], 0), axis=1)
    return weight_ge


@triton.jit(do_not_specialize=_NOSPEC + ["rnd"])
def _select_kernel(
    t_ptr, t_stride, N, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
    q_ptr, q_stride, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr,   # as _stats_kernel
    part_max_ptr, part_argmax_ptr, part_count_ptr,   # [S, C] chunk statistics (in)
    kept_mass_ptr,             # [S, C] int64 top-k kept masses (in, top-p rounds)
    radix_hist_ptr,            # [S, 2, N_ROUNDS, RADIX] int64 histograms (atomic adds)
    radix_prefix_ptr,          # [S, 2, N_ROUNDS] int64 out: the key prefix fixed before a round
    V, MAXK, R, C, CHUNK,
    rnd,                       # the radix round, 0 .. N_ROUNDS - 1
    T_PROBS: tl.constexpr, TOP_P: tl.constexpr, HAS_TOPK: tl.constexpr,
    BLOCK_V: tl.constexpr, MAXK_P2: tl.constexpr, CP2: tl.constexpr,
):
    s = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    row, needed, is_draft, is_probs, prm = locate(
        s, R, N, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
        inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    inv_t, top_k, top_p, min_p = prm
    if needed & (inv_t != 0.0) & (is_probs == 0):
        valid, x_max, arg = summary(s, C, part_max_ptr, part_argmax_ptr, part_count_ptr,
                                    is_probs, CP2)
        k_thr = tl.full([], NEG_INF, tl.float32)
        if TOP_P:
            sel = SEL_TOPP
            active = valid & (top_p < 1.0)
            if HAS_TOPK:
                if valid & (top_k > 0) & (top_k < V):
                    key, w = prefix_of(s, SEL_TOPK, N_ROUNDS, radix_hist_ptr, radix_prefix_ptr,
                                       top_k.to(tl.float64))
                    k_thr = ukey_f32(key)
            target = top_p.to(tl.float64) * psum(kept_mass_ptr, s, C, CP2).to(tl.float64)
        else:
            sel = SEL_TOPK
            active = valid & (top_k > 0) & (top_k < V)
            target = top_k.to(tl.float64)
        if active:
            prefix, w = prefix_of(s, sel, rnd, radix_hist_ptr, radix_prefix_ptr, target)
            slot = (s * 2 + sel) * N_ROUNDS + rnd
            if c == 0:
                tl.store(radix_prefix_ptr + slot, prefix)
            shift = 28 - 4 * rnd
            cand = prefix + (tl.arange(0, RADIX).to(tl.int64) << shift)
            lo = (c * CHUNK).to(tl.int32)     # V <= 2**22: int32 indices
            hi = tl.minimum(lo + CHUNK, V)
            if is_draft:
                weight_ge = _hist_chunk(q_ptr + row * q_stride, lo, hi, inv_t, x_max, k_thr,
                                        cand, TOP_P, BLOCK_V)
            else:
                weight_ge = _hist_chunk(t_ptr + row * t_stride, lo, hi, inv_t, x_max, k_thr,
                                        cand, TOP_P, BLOCK_V)
            tl.atomic_add(radix_hist_ptr + slot * RADIX + tl.arange(0, RADIX), weight_ge)


@triton.jit
def _mass_chunk(row_ptr, lo, hi, inv_t, x_max, k_thr, min_p, BLOCK_V: tl.constexpr):
    """(mass top-k keeps, mass top-k and min-p keep) of the chunk, in units 2**-40."""
    offs = tl.arange(0, BLOCK_V)
    mk = tl.full([], 0, tl.int64)
    mm = tl.full([], 0, tl.int64)
    for start in range(lo, hi, BLOCK_V):
        idx = start + offs
        e, kept = _e_tile(row_ptr, idx, idx < hi, inv_t, x_max, k_thr)
        E = (e * E_SCALE).to(tl.int64)
        mk += tl.sum(tl.where(kept, E, 0), axis=0)
        mm += tl.sum(tl.where(kept & (e >= min_p), E, 0), axis=0)
    return mk, mm


@triton.jit(do_not_specialize=_NOSPEC)
def _mass_kernel(
    t_ptr, t_stride, N, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
    q_ptr, q_stride, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr,   # as _stats_kernel
    part_max_ptr, part_argmax_ptr, part_count_ptr,   # [S, C] chunk statistics (in)
    radix_hist_ptr, radix_prefix_ptr,   # top-k select (in)
    kept_mass_ptr, minp_mass_ptr,       # [S, C] int64 out: masses top-k keeps, top-k and min-p
    V, MAXK, R, C, CHUNK,
    T_PROBS: tl.constexpr, HAS_TOPK: tl.constexpr, BLOCK_V: tl.constexpr,
    MAXK_P2: tl.constexpr, CP2: tl.constexpr,
):
    s = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    row, needed, is_draft, is_probs, prm = locate(
        s, R, N, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
        inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    inv_t, top_k, top_p, min_p = prm
    if needed & (inv_t != 0.0) & (is_probs == 0):
        valid, x_max, arg = summary(s, C, part_max_ptr, part_argmax_ptr, part_count_ptr,
                                    is_probs, CP2)
        mk = tl.full([], 0, tl.int64)
        mm = tl.full([], 0, tl.int64)
        if valid:
            k_thr = tl.full([], NEG_INF, tl.float32)
            if HAS_TOPK:
                if (top_k > 0) & (top_k < V):
                    key, w = prefix_of(s, SEL_TOPK, N_ROUNDS, radix_hist_ptr, radix_prefix_ptr,
                                       top_k.to(tl.float64))
                    k_thr = ukey_f32(key)
            lo = (c * CHUNK).to(tl.int32)     # V <= 2**22: int32 indices
            hi = tl.minimum(lo + CHUNK, V)
            mp = tl.where(min_p > 0.0, min_p, 0.0)
            if is_draft:
                mk, mm = _mass_chunk(q_ptr + row * q_stride, lo, hi, inv_t, x_max, k_thr, mp,
                                     BLOCK_V)
            else:
                mk, mm = _mass_chunk(t_ptr + row * t_stride, lo, hi, inv_t, x_max, k_thr, mp,
                                     BLOCK_V)
        tl.store(kept_mass_ptr + s * C + c, mk)
        tl.store(minp_mass_ptr + s * C + c, mm)
