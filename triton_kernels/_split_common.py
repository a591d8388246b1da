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

from ._common import (NEG_INF, NO_INDEX, P_CHECK_MAX, RADIX, block_length, request_ok,
                      ukey_f32)

N_ROUNDS = tl.constexpr(8)          # KEY_BITS // RADIX_BITS radix rounds per select
SEL_TOPK = tl.constexpr(0)
SEL_TOPP = tl.constexpr(1)


@triton.jit
def load_req(b, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, offset_ptr):
    return (tl.load(inv_t_ptr + b), tl.load(top_k_ptr + b), tl.load(top_p_ptr + b),
            tl.load(min_p_ptr + b), tl.load(seed_ptr + b), tl.load(offset_ptr + b))


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
    d0 = tl.load(d_start_ptr + b)
    t0 = tl.load(t_start_ptr + b)
    prm = (tl.load(inv_t_ptr + b), tl.load(top_k_ptr + b), tl.load(top_p_ptr + b),
           tl.load(min_p_ptr + b))
    kb, oob, ids_ok = block_length(ids_ptr, d0, tl.load(n_draft_ptr + b), n_ids, n_draft_rows,
                                   V, MAXK, MAXK_P2)
    ok = ids_ok & request_ok(prm + (0, 0), T_PROBS)
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
def summary(s, C, pmax_ptr, parg_ptr, pcnt_ptr, is_probs, CP2: tl.constexpr):
    """Combine a row's chunk statistics -> (valid, max, lowest argmax).  Counts: logits rows
    (bad, finite l, finite x); probability rows (bad, mass in 2**-32 units, 1).  ``is_probs``
    is an int1 tensor (a Python bool mixed into tensor logic yields int32 under the
    interpreter; so is `~` on a scalar: this code writes `== 0`)."""
    c = tl.arange(0, CP2)
    m = c < C
    base = s * C + c
    mx = tl.load(pmax_ptr + base, mask=m, other=NEG_INF)
    arg = tl.load(parg_ptr + base, mask=m, other=NO_INDEX)
    bad = tl.sum(tl.load(pcnt_ptr + base * 3, mask=m, other=0), axis=0)
    c1 = tl.sum(tl.load(pcnt_ptr + base * 3 + 1, mask=m, other=0), axis=0)
    c2 = tl.sum(tl.load(pcnt_ptr + base * 3 + 2, mask=m, other=0), axis=0)
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
def digit_of(hist_ptr, target):
    """The radix digit a round's histogram selects: how many of the 16 candidates still
    hold at least ``target`` weight, minus one -> (digit, weight of keys >= its candidate)."""
    h = tl.load(hist_ptr + tl.arange(0, RADIX))
    d = tl.sum((h.to(tl.float64) >= target).to(tl.int64), axis=0) - 1
    w = tl.sum(tl.where(tl.arange(0, RADIX) == d, h, 0), axis=0)
    return d, w


@triton.jit
def prefix_of(s, sel, rnd, hist_ptr, ans_ptr, target):
    """The key prefix a select has fixed before round ``rnd`` (0 for round 0), and the
    weight of keys >= it (valid after the last round)."""
    ans = tl.full([], 0, tl.int64)
    w = tl.full([], 0, tl.int64)
    if rnd > 0:
        slot = (s * 2 + sel) * N_ROUNDS + rnd - 1
        d, w = digit_of(hist_ptr + slot * RADIX, target)
        shift = 32 - 4 * rnd
        ans = tl.load(ans_ptr + slot) + (d << shift)
    return ans, w


@triton.jit
def row_stats_split(s, C, is_probs, inv_t, top_k, top_p, min_p, V, pmax_ptr, parg_ptr,
                    pcnt_ptr, pmk_ptr, pmm_ptr, hist_ptr, ans_ptr, HAS_TOPK: tl.constexpr,
                    HAS_TOPP: tl.constexpr, CP2: tl.constexpr):
    """The row statistics of a logits row from its partials (``_common.row_stats``) ->
    (valid, stats); stats = (x_max, k_thr, p_tau, min_p, kept_mass)."""
    valid, x_max, arg = summary(s, C, pmax_ptr, parg_ptr, pcnt_ptr, is_probs, CP2)
    k_thr = tl.full([], NEG_INF, tl.float32)
    if HAS_TOPK:
        if valid & (top_k > 0) & (top_k < V):
            key, w = prefix_of(s, SEL_TOPK, N_ROUNDS, hist_ptr, ans_ptr, top_k.to(tl.float64))
            k_thr = ukey_f32(key)
    topk_mass = psum(pmk_ptr, s, C, CP2)
    minp_mass = psum(pmm_ptr, s, C, CP2)
    p_tau = tl.full([], 0.0, tl.float32)
    min_p = tl.where(min_p > 0.0, min_p, 0.0)
    kept = tl.where(min_p > 0.0, minp_mass, topk_mass)
    if HAS_TOPP:
        if valid & (top_p < 1.0):
            target = top_p.to(tl.float64) * topk_mass.to(tl.float64)
            key, w = prefix_of(s, SEL_TOPP, N_ROUNDS, hist_ptr, ans_ptr, target)
            p_tau = key.to(tl.int32).to(tl.float32, bitcast=True)
            # kept = e >= max(p_tau, min_p) among the top-k: the nested sets' masses
            kept = tl.where(p_tau >= min_p, w, minp_mass)
    kept = tl.where(kept > 0, kept, 1)             # invalid rows: no division by 0
    return valid, (x_max, k_thr, p_tau, min_p, kept)
