"""Shared @triton.jit helpers of the vocabulary-split pipeline (``split.py``).

Slots.  Every row a request may read gets a *slot*: target slots ``s = b * (MAXK + 1) + j``
(``s < R``), then, with draft logits, draft slots ``R + b * MAXK + j``.  The row-parallel
kernels run one program per (slot, vocabulary chunk); a program whose row the walk can never
read (a malformed request, ``j`` past the block, a row outside the tensor) exits at once.

Partials.  Per (slot, chunk) the statistics kernel stores the chunk's max, its lowest-index
argmax and three int64 counts; the mass kernel two int64 masses; the radix rounds add 16-bin
int64 histograms with atomics.  Integer sums, maxima and "lowest index among the maxima" do not
depend on the order they are combined in, so every consumer that combines the C partials of a
row gets exactly the row statistics of the one-program path (``_common.row_stats``).
"""
import triton
import triton.language as tl

from ._common import (NEG_INF, NO_INDEX, P_CHECK_MAX, RADIX, logits_counts, probs_counts,
                      ukey_f32)
from ._walk_common import load_request

N_ROUNDS = tl.constexpr(8)          # KEY_BITS // RADIX_BITS radix rounds per select
SEL_TOPK = tl.constexpr(0)
SEL_TOPP = tl.constexpr(1)

# The draw each request leaves for stage 3 (split_accept -> split_draw), row b of:
# draw_at [B, DRAW_AT_WIDTH] int64: j* (the position drawn at), y (the draft id at j*, -1 for
# a bonus draw), draw (0/1: this request draws in stage 3), q_ok (its draft row is usable);
# draw_stats [B, 2 * STATS_WIDTH] float32: the target row's (x_max, k_thr, p_tau, min_p),
# then the draft row's; draw_mass [B, DRAW_MASS_WIDTH] int64: their kept masses.
DRAW_AT_WIDTH = tl.constexpr(4)
AT_J = tl.constexpr(0)
AT_Y = tl.constexpr(1)
AT_DRAW = tl.constexpr(2)
AT_Q_OK = tl.constexpr(3)
STATS_WIDTH = tl.constexpr(4)
DRAW_MASS_WIDTH = tl.constexpr(2)
OF_TARGET = tl.constexpr(0)
OF_DRAFT = tl.constexpr(1)


@triton.jit
def locate(s, R, N, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
           inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS: tl.constexpr,
           MAXK_P2: tl.constexpr):
    """Slot s -> (row, needed, is_draft, is_probs, (inv_t, top_k, top_p, min_p)): the row
    index in the target (or, for a draft slot, the draft) tensor.  ``needed``: the walk may
    read this row (request not malformed, j <= kb for a target slot, j < kb for a draft
    slot, the row inside its tensor); otherwise row is 0 and must not be read."""
    is_draft = s >= R
    sd = tl.maximum(s - R, 0)
    mk = tl.maximum(MAXK, 1)
    b = tl.where(is_draft, sd // mk, s // (MAXK + 1))
    j = tl.where(is_draft, sd % mk, s % (MAXK + 1))
    t0, d0, prm, kb, oob, ok = load_request(b, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr,
                                            n_ids, n_draft_rows, inv_t_ptr, top_k_ptr,
                                            top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    t_row = t0 + j
    t_needed = (j <= kb) & (t_row >= 0) & (t_row < N) & ((oob & (j == kb)) == 0)
    needed = ok & tl.where(is_draft, j < kb, t_needed)
    row = tl.where(needed, tl.where(is_draft, d0 + j, t_row), 0)
    if T_PROBS:
        is_probs = is_draft == 0
    else:
        is_probs = tl.full([], False, tl.int1)
    return row, needed, is_draft, is_probs, prm


@triton.jit
def summary(s, C, part_max_ptr, part_argmax_ptr, part_count_ptr, is_probs, CP2: tl.constexpr):
    """Combine a row's chunk statistics -> (valid, max, lowest argmax).  Counts: logits rows
    (bad, finite l, finite x); probability rows (bad, mass in 2**-32 units, 1).  ``is_probs``
    is an int1 tensor (a Python bool mixed into tensor logic yields int32 under the
    interpreter; so is `~` on a scalar: this code writes `== 0`)."""
    c = tl.arange(0, CP2)
    m = c < C
    base = s * C + c
    mx = tl.load(part_max_ptr + base, mask=m, other=NEG_INF)
    arg = tl.load(part_argmax_ptr + base, mask=m, other=NO_INDEX)
    bad = tl.sum(tl.load(part_count_ptr + base * 3, mask=m, other=0), axis=0)
    c1 = tl.sum(tl.load(part_count_ptr + base * 3 + 1, mask=m, other=0), axis=0)
    c2 = tl.sum(tl.load(part_count_ptr + base * 3 + 2, mask=m, other=0), axis=0)
    x_max = tl.max(mx, axis=0)
    a = tl.min(tl.where(m & (mx == x_max), arg, NO_INDEX), axis=0)
    valid = (bad == 0) & (c1 > 0) & (c2 > 0) & ((c1 <= P_CHECK_MAX) | (is_probs == 0))
    return valid, x_max, a


@triton.jit
def psum(ptr, s, C, CP2: tl.constexpr):
    """Sum of a row's int64 chunk partials."""
    c = tl.arange(0, CP2)
    return tl.sum(tl.load(ptr + s * C + c, mask=c < C, other=0), axis=0)


@triton.jit
def digit_of(radix_hist_ptr, target):
    """The radix digit a round's histogram selects: how many of the 16 candidates still
    hold at least ``target`` weight, minus one -> (digit, weight of keys >= its candidate)."""
    h = tl.load(radix_hist_ptr + tl.arange(0, RADIX))
    d = tl.sum((h.to(tl.float64) >= target).to(tl.int64), axis=0) - 1
    w = tl.sum(tl.where(tl.arange(0, RADIX) == d, h, 0), axis=0)
    return d, w


@triton.jit
def prefix_of(s, sel, rnd, radix_hist_ptr, radix_prefix_ptr, target):
    """The key prefix a select has fixed before round ``rnd`` (0 for round 0), and the
    weight of keys >= it (valid after the last round)."""
    prefix = tl.full([], 0, tl.int64)
    w = tl.full([], 0, tl.int64)
    if rnd > 0:
        slot = (s * 2 + sel) * N_ROUNDS + rnd - 1
        d, w = digit_of(radix_hist_ptr + slot * RADIX, target)
        shift = 32 - 4 * rnd
        prefix = tl.load(radix_prefix_ptr + slot) + (d << shift)
    return prefix, w


@triton.jit
def row_stats_split(s, C, is_probs, inv_t, top_k, top_p, min_p, V, part_max_ptr,
                    part_argmax_ptr, part_count_ptr, kept_mass_ptr, minp_mass_ptr,
                    radix_hist_ptr, radix_prefix_ptr, HAS_TOPK: tl.constexpr,
                    HAS_TOPP: tl.constexpr, CP2: tl.constexpr):
    """The row statistics of a logits row from its partials (``_common.row_stats``) ->
    (valid, stats); stats = (x_max, k_thr, p_tau, min_p, kept_mass)."""
    valid, x_max, arg = summary(s, C, part_max_ptr, part_argmax_ptr, part_count_ptr, is_probs,
                                CP2)
    k_thr = tl.full([], NEG_INF, tl.float32)
    if HAS_TOPK:
        if valid & (top_k > 0) & (top_k < V):
            key, w = prefix_of(s, SEL_TOPK, N_ROUNDS, radix_hist_ptr, radix_prefix_ptr,
                               top_k.to(tl.float64))
            k_thr = ukey_f32(key)
    topk_mass = psum(kept_mass_ptr, s, C, CP2)
    minp_mass = psum(minp_mass_ptr, s, C, CP2)
    p_tau = tl.full([], 0.0, tl.float32)
    min_p = tl.where(min_p > 0.0, min_p, 0.0)
    kept = tl.where(min_p > 0.0, minp_mass, topk_mass)
    if HAS_TOPP:
        if valid & (top_p < 1.0):
            target = top_p.to(tl.float64) * topk_mass.to(tl.float64)
            key, w = prefix_of(s, SEL_TOPP, N_ROUNDS, radix_hist_ptr, radix_prefix_ptr, target)
            p_tau = key.to(tl.int32).to(tl.float32, bitcast=True)
            # kept = e >= max(p_tau, min_p) among the top-k: the nested sets' masses
            kept = tl.where(p_tau >= min_p, w, minp_mass)
    kept = tl.where(kept > 0, kept, 1)             # invalid rows: no division by 0
    return valid, (x_max, k_thr, p_tau, min_p, kept)


@triton.jit
def store_draw_stats(draw_stats_ptr, draw_mass_ptr, b, which, stats):
    """Request b's statistics of its target (``which`` OF_TARGET) or draft (OF_DRAFT) row."""
    at = draw_stats_ptr + b * (2 * STATS_WIDTH) + which * STATS_WIDTH
    tl.store(at, stats[0])
    tl.store(at + 1, stats[1])
    tl.store(at + 2, stats[2])
    tl.store(at + 3, stats[3])
    tl.store(draw_mass_ptr + b * DRAW_MASS_WIDTH + which, stats[4])


@triton.jit
def load_draw_stats(draw_stats_ptr, draw_mass_ptr, b, which):
    """What ``store_draw_stats`` stored: (x_max, k_thr, p_tau, min_p, kept_mass)."""
    at = draw_stats_ptr + b * (2 * STATS_WIDTH) + which * STATS_WIDTH
    return (tl.load(at), tl.load(at + 1), tl.load(at + 2), tl.load(at + 3),
            tl.load(draw_mass_ptr + b * DRAW_MASS_WIDTH + which))


@triton.jit
def stats_chunk(row_ptr, lo, hi, x_scale, is_probs, BLOCK_V: tl.constexpr):
    """-> (max, lowest argmax, n0, n1, n2) of the chunk [lo, hi) (see ``summary``)."""
    if is_probs:
        best, arg, n0, n1 = probs_counts(row_ptr, lo, hi, BLOCK_V)
        n2 = tl.full([], 1, tl.int64)
    else:
        best, arg, n0, n1, n2 = logits_counts(row_ptr, lo, hi, x_scale, BLOCK_V)
    return best, arg, n0, n1, n2
