"""Shared @triton.jit helpers of the specops Triton backend.

Every helper reproduces, bit for bit, one piece of ``specops.reference`` (whose docstring is
the specification): the exact upcast of a logit, the portable exp, the float32 key order, the
row transform (validity, max, exact top-k / top-p thresholds by radix select over bit
patterns, min-p, integer masses and the float64 renormalisation), the Philox stream layout and
the exact integer inverse-CDF draw.

Row statistics.  The transform of a row of logits is summed up by its *row statistics*, the
tuple ``stats = (x_max, k_thr, p_tau, min_p, kept_mass)``: the max of ``x = l * inv_t``, the
top-k threshold on x, the top-p threshold on e, the min-p threshold on e and the integer mass
of the kept tokens (section 2 of the reference).  ``row_stats`` computes them;
``probs_from_logits`` turns any logit of the row into its probability.

All kernels are launched with ``enable_fp_fusion=False`` (no FMA contraction), never divide in
float32 and use only correctly rounded float32/float64 operations and integer sums.
"""
import triton
import triton.language as tl

# constants: exact float32 values of specops.reference (written as their exact decimals);
# tests/test_triton.py::test_constants_match_reference compares each one with the reference
NEG_INF = tl.constexpr(float("-inf"))
POS_INF = tl.constexpr(float("inf"))
EXP_CUTOFF = tl.constexpr(-86.0)
EXP_LOG2E = tl.constexpr(1.44269502162933349609375)
EXP_ROUND = tl.constexpr(12582912.0)                              # 1.5 * 2**23
EXP_LN2_HI = tl.constexpr(0.693145751953125)
EXP_LN2_LO = tl.constexpr(1.42860676533018704503774642944335937500e-06)
EXP_C0 = tl.constexpr(1.98412701138295233249664306640625e-04)    # f32(1/5040)
EXP_C1 = tl.constexpr(1.38888892251998186111450195312500e-03)    # f32(1/720)
EXP_C2 = tl.constexpr(8.33333376795053482055664062500000e-03)    # f32(1/120)
EXP_C3 = tl.constexpr(4.16666679084300994873046875000000e-02)    # f32(1/24)
EXP_C4 = tl.constexpr(1.66666671633720397949218750000000e-01)    # f32(1/6)
EXP_C5 = tl.constexpr(0.5)
EXP_C6 = tl.constexpr(1.0)
EXP_C7 = tl.constexpr(1.0)
F32_EXP_BIAS = tl.constexpr(127)
F32_MANT_BITS = tl.constexpr(23)
E_SCALE = tl.constexpr(1099511627776.0)            # 2**E_SCALE_BITS (40)
W_SCALE = tl.constexpr(1152921504606846976.0)      # 2**W_SCALE_BITS (60)
P_CHECK_SCALE = tl.constexpr(4294967296.0)         # 2**P_CHECK_BITS (32)
P_CHECK_MAX = tl.constexpr(17179869184)            # 2**(P_CHECK_BITS + 2)
U32_TO_UNIT = tl.constexpr(2.3283064365386962890625e-10)   # 2**-32
FLT_MIN = tl.constexpr(1.17549435082228750796873653722224568e-38)
PHILOX_ROUNDS = tl.constexpr(10)                   # tl.philox's 32-bit constants are checked too
TAG_ACCEPT = tl.constexpr(0)                       # Philox counter word 1: accept uniform
TAG_SAMPLE = tl.constexpr(1)                       # Philox counter word 1: 64-bit draw
KEY_BITS = tl.constexpr(32)                        # radix select over 32-bit float keys ...
RADIX_BITS = tl.constexpr(4)                       # ... 4 bits (16 candidates) per round
RADIX = tl.constexpr(16)
NO_INDEX = tl.constexpr(2147483647)                # larger than any token index


# ----------------------------------------------------------------------------- loads
@triton.jit
def load_f32(ptr, mask=None, other=None):
    """Load float values (float32, float16 or bfloat16) upcast exactly to float32.

    bfloat16 is widened from its bits (``bits << 16``): Triton's interpreter converts
    bfloat16 subnormals wrongly (9.18e-41 becomes 0), the bit shift is exact everywhere."""
    v = tl.load(ptr, mask=mask, other=other)
    if v.dtype == tl.bfloat16:
        x = (v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        x = v.to(tl.float32)
    return x


# ----------------------------------------------------------------------------- exp, keys
@triton.jit
def pexp(d):
    """Portable float32 exp for d <= 0 (reference.pexp): every op rounded separately."""
    ok = d >= EXP_CUTOFF
    dd = tl.where(ok, d, 0.0)
    n = (dd * EXP_LOG2E + EXP_ROUND) - EXP_ROUND
    r = (dd - n * EXP_LN2_HI) - n * EXP_LN2_LO
    s = EXP_C0 * r + EXP_C1
    s = s * r + EXP_C2
    s = s * r + EXP_C3
    s = s * r + EXP_C4
    s = s * r + EXP_C5
    s = s * r + EXP_C6
    s = s * r + EXP_C7
    scale = ((n.to(tl.int32) + F32_EXP_BIAS) << F32_MANT_BITS).to(tl.float32, bitcast=True)
    return tl.where(ok, s * scale, 0.0)


@triton.jit
def f32_ukey(x):
    """float32 -> int64 key in [0, 2**32) ordered like the float values (NaN excluded)."""
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return key.to(tl.int64) + 2147483648


@triton.jit
def ukey_f32(k):
    """Inverse of f32_ukey."""
    key = (k - 2147483648).to(tl.int32)
    bits = tl.where(key >= 0, key, key ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


# ----------------------------------------------------------------------------- randomness
@triton.jit
def stream_words(seed, offset, pos, tag):
    """Philox4x32-10 of the reference's stream layout: key = seed lo/hi,
    counter = (pos, tag, offset lo, offset hi).  Returns (w0, w1) as uint32."""
    o_lo = (offset & 0xFFFFFFFF).to(tl.uint32)
    o_hi = ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = tl.full(o_lo.shape, 0, tl.uint32) + pos.to(tl.uint32)
    c1 = tl.full(o_lo.shape, tag, tl.uint32)
    w0, w1, w2, w3 = tl.philox(seed, c0, c1, o_lo, o_hi, PHILOX_ROUNDS)
    return w0, w1


@triton.jit
def accept_uniform(seed, offset, pos):
    """u = w0 * 2**-32 of stream tag 0 at pos, as float64 (exact)."""
    w0, w1 = stream_words(seed, offset, pos, TAG_ACCEPT)
    return w0.to(tl.float64) * U32_TO_UNIT


@triton.jit
def mulhi_u64(u_lo, u_hi, s):
    """floor(U * S / 2**64) exactly, U = u_lo | u_hi << 32 (uint32 words), 0 <= S < 2**63."""
    ul = u_lo.to(tl.uint64)
    uh = u_hi.to(tl.uint64)
    su = s.to(tl.uint64)
    sl = su & 0xFFFFFFFF
    sh = su >> 32
    ll = ul * sl
    lh = ul * sh
    hl = uh * sl
    hh = uh * sh
    cross = (ll >> 32) + (lh & 0xFFFFFFFF) + hl
    t = (cross >> 32) + (lh >> 32) + hh
    return t.to(tl.int64)


# ----------------------------------------------------------------------------- row scans
@triton.jit
def _argmax_step(vals, idx, msk, best, best_i):
    """Running lowest-index argmax over tiles: a later tile wins only if strictly larger."""
    tmax = tl.max(vals, axis=0)
    ti = tl.min(tl.where(msk & (vals == tmax), idx, NO_INDEX), axis=0)
    upd = tmax > best
    return tl.where(upd, tmax, best), tl.where(upd, ti, best_i)


@triton.jit
def logits_tile(row_ptr, idx, msk, x_scale):
    """One tile of a logits row, x = l * x_scale -> (bad, finite l, finite x: int32 counts,
    x with NaN and masked lanes at -inf: the argmax candidates)."""
    l = load_f32(row_ptr + idx, msk, NEG_INF)
    x = l * x_scale
    bad = (l != l) | (l == POS_INF) | (x != x) | (x == POS_INF)
    return (tl.sum(bad.to(tl.int32), axis=0), tl.sum((l > NEG_INF).to(tl.int32), axis=0),
            tl.sum((x > NEG_INF).to(tl.int32), axis=0), tl.where(msk & (x == x), x, NEG_INF))


@triton.jit
def check_probs_tile(row_ptr, idx, msk):
    """One tile of a probability row -> (entries outside [0, 1]: int32, mass in 2**-32 units:
    int64, p with bad and masked lanes at -1: the argmax candidates)."""
    p = load_f32(row_ptr + idx, msk, 0.0)
    ok = (p >= 0.0) & (p <= 1.0)
    return (tl.sum((msk & (~ok)).to(tl.int32), axis=0),
            tl.sum((tl.where(ok, p, 0.0) * P_CHECK_SCALE).to(tl.int64), axis=0),
            tl.where(msk & ok, p, -1.0))


@triton.jit
def logits_counts(row_ptr, lo, hi, x_scale, BLOCK_V: tl.constexpr):
    """One pass over the logits l[lo:hi] of a row, x = l * x_scale -> (max x, its lowest
    index, and int64 counts of: entries that are bad (NaN or +inf in l or x), finite l,
    finite x).  A whole row (``logits_scan``) or one chunk of the split pipeline."""
    offs = tl.arange(0, BLOCK_V)
    x_max = tl.full([], NEG_INF, tl.float32)
    arg = tl.full([], 0, tl.int32)
    n_bad = tl.full([], 0, tl.int64)
    n_finite_l = tl.full([], 0, tl.int64)
    n_finite_x = tl.full([], 0, tl.int64)
    for start in range(lo, hi, BLOCK_V):
        idx = start + offs
        msk = idx < hi
        bad, fin_l, fin_x, cand = logits_tile(row_ptr, idx, msk, x_scale)
        n_bad += bad
        n_finite_l += fin_l
        n_finite_x += fin_x
        x_max, arg = _argmax_step(cand, idx, msk, x_max, arg)
    return x_max, arg, n_bad, n_finite_l, n_finite_x


@triton.jit
def logits_scan(row_ptr, V, inv_t, BLOCK_V: tl.constexpr):
    """One pass over a row of logits l, x = l * inv_t -> (valid, max x, lowest argmax of x).

    valid: no NaN or +inf in l or x, and neither l nor x is -inf everywhere (reference
    section 3).  inv_t = 1 gives the greedy row check and argmax of the logits themselves."""
    x_max, arg, n_bad, n_finite_l, n_finite_x = logits_counts(row_ptr, 0, V, inv_t, BLOCK_V)
    valid = (n_bad == 0) & (n_finite_l > 0) & (n_finite_x > 0)
    return valid, x_max, arg


@triton.jit
def probs_counts(row_ptr, lo, hi, BLOCK_V: tl.constexpr):
    """One pass over the probabilities p[lo:hi] of a row -> (max p among the entries in
    [0, 1] (-1 if none), its lowest index, int64 count of entries outside [0, 1] (NaN
    included), int64 mass sum trunc(p * 2**32) of the others)."""
    offs = tl.arange(0, BLOCK_V)
    best = tl.full([], -1.0, tl.float32)
    arg = tl.full([], 0, tl.int32)
    n_bad = tl.full([], 0, tl.int64)
    mass = tl.full([], 0, tl.int64)
    for start in range(lo, hi, BLOCK_V):
        idx = start + offs
        msk = idx < hi
        bad, m, cand = check_probs_tile(row_ptr, idx, msk)
        n_bad += bad
        mass += m
        best, arg = _argmax_step(cand, idx, msk, best, arg)
    return best, arg, n_bad, mass


@triton.jit
def probs_check_argmax(row_ptr, V, BLOCK_V: tl.constexpr):
    """Probability rows: (valid, lowest-index argmax).  valid = every entry in [0, 1] and
    0 < sum trunc(p * 2**32) <= 2**34."""
    best, arg, n_bad, mass = probs_counts(row_ptr, 0, V, BLOCK_V)
    valid = (n_bad == 0) & (mass > 0) & (mass <= P_CHECK_MAX)
    return valid, arg


# ----------------------------------------------------------------------------- the transform
@triton.jit
def _e_tile(row_ptr, idx, msk, inv_t, x_max, k_thr):
    """(e, kept by top-k): e = pexp(x - x_max) for tokens with x >= k_thr, else 0."""
    x = load_f32(row_ptr + idx, msk, NEG_INF) * inv_t
    kept = msk & (x >= k_thr)
    return tl.where(kept, pexp(x - x_max), 0.0), kept


@triton.jit
def _select_tile(row_ptr, idx, msk, inv_t, x_max, k_thr, TOP_P: tl.constexpr):
    """(key, weight) of a tile for the radix selects: top-k counts the float keys of x,
    top-p weighs the bit patterns of e (e >= 0) by their integer masses."""
    if TOP_P:
        e, kept = _e_tile(row_ptr, idx, msk, inv_t, x_max, k_thr)
        key = e.to(tl.int32, bitcast=True).to(tl.int64)
        weight = (e * E_SCALE).to(tl.int64)
    else:
        key = f32_ukey(load_f32(row_ptr + idx, msk, NEG_INF) * inv_t)
        weight = msk.to(tl.int64)
    return key, weight


@triton.jit
def _radix_select(row_ptr, V, inv_t, x_max, k_thr, target, TOP_P: tl.constexpr,
                  BLOCK_V: tl.constexpr):
    """The largest 32-bit key K of the row with float64(weight of keys >= K) >= target,
    RADIX_BITS bits per round from the top (it always ends on a key of the row)."""
    offs = tl.arange(0, BLOCK_V)
    digits = tl.arange(0, RADIX).to(tl.int64)
    ans = tl.full([], 0, tl.int64)
    for rnd in tl.static_range(KEY_BITS // RADIX_BITS):
        shift = KEY_BITS - RADIX_BITS * (rnd + 1)
        cand = ans + (digits << shift)
        weight_ge = tl.zeros([RADIX], tl.int64)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            key, weight = _select_tile(row_ptr, idx, idx < V, inv_t, x_max, k_thr, TOP_P)
            weight_ge += tl.sum(tl.where(key[None, :] >= cand[:, None], weight[None, :], 0),
                                axis=1)
        digit = tl.sum((weight_ge.to(tl.float64) >= target).to(tl.int64), axis=0) - 1
        ans += digit << shift
    return ans


@triton.jit
def _kept_mass(row_ptr, V, inv_t, x_max, k_thr, p_tau, min_p, BLOCK_V: tl.constexpr):
    """Sum of the integer masses trunc(e * 2**40) of the tokens kept by all three filters."""
    offs = tl.arange(0, BLOCK_V)
    mass = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        e, kept = _e_tile(row_ptr, idx, idx < V, inv_t, x_max, k_thr)
        kept = kept & (e >= p_tau) & (e >= min_p)
        mass += tl.sum(tl.where(kept, (e * E_SCALE).to(tl.int64), 0), axis=0)
    return mass


@triton.jit
def row_stats(row_ptr, V, inv_t, top_k, top_p, min_p, BLOCK_V: tl.constexpr):
    """The transform of one row of logits (reference.transform_row, inv_t > 0) ->
    (valid, stats), stats = (x_max, k_thr, p_tau, min_p, kept_mass); see the module
    docstring.  kept_mass is never 0 for a valid row (the argmax keeps e = 1)."""
    valid, x_max, arg = logits_scan(row_ptr, V, inv_t, BLOCK_V)
    k_thr = tl.full([], NEG_INF, tl.float32)
    if valid & (top_k > 0) & (top_k < V):          # the k-th largest x
        k_thr = ukey_f32(_radix_select(row_ptr, V, inv_t, x_max, k_thr, top_k.to(tl.float64),
                                       False, BLOCK_V))
    p_tau = tl.full([], 0.0, tl.float32)
    min_p = tl.where(min_p > 0.0, min_p, 0.0)
    topk_mass = _kept_mass(row_ptr, V, inv_t, x_max, k_thr, 0.0, 0.0, BLOCK_V)
    kept_mass = topk_mass
    if valid & (top_p < 1.0):                      # the largest e holding top_p of the mass
        target = top_p.to(tl.float64) * topk_mass.to(tl.float64)
        p_tau = _radix_select(row_ptr, V, inv_t, x_max, k_thr, target, True,
                              BLOCK_V).to(tl.int32).to(tl.float32, bitcast=True)
    if valid & ((top_p < 1.0) | (min_p > 0.0)):
        kept_mass = _kept_mass(row_ptr, V, inv_t, x_max, k_thr, p_tau, min_p, BLOCK_V)
    kept_mass = tl.where(kept_mass > 0, kept_mass, 1)   # invalid rows: no division by 0
    return valid, (x_max, k_thr, p_tau, min_p, kept_mass)


@triton.jit
def probs_from_logits(l, inv_t, stats):
    """p for a block (or scalar) of float32 logits of a row, given its row statistics."""
    x_max, k_thr, p_tau, min_p, kept_mass = stats
    x = l * inv_t
    kept = x >= k_thr
    e = tl.where(kept, pexp(x - x_max), 0.0)
    kept = kept & (e >= p_tau) & (e >= min_p)
    p = (e.to(tl.float64) * E_SCALE / kept_mass.to(tl.float64)).to(tl.float32)
    return tl.where(kept & (p >= FLT_MIN), p, 0.0)


@triton.jit
def prob_at(row_ptr, y, inv_t, stats, IS_PROBS: tl.constexpr):
    """p(y) of a row: the stored probability, or the transform of logit y."""
    if IS_PROBS:
        p = load_f32(row_ptr + y)
    else:
        p = probs_from_logits(load_f32(row_ptr + y), inv_t, stats)
    return p


@triton.jit
def probs_tile(row_ptr, idx, msk, inv_t, stats, IS_PROBS: tl.constexpr):
    """p over a tile of a row (0 past V): the stored probabilities, or the transform."""
    if IS_PROBS:
        p = load_f32(row_ptr + idx, msk, 0.0)
    else:
        l = load_f32(row_ptr + idx, msk, NEG_INF)
        p = tl.where(msk, probs_from_logits(l, inv_t, stats), 0.0)
    return p


# ----------------------------------------------------------------------------- the draw
@triton.jit
def _weights_tile(t_row, q_row, idx, msk, y, inv_t, t_stats, q_ok, q_stats,
                  T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, rho=None):
    """(W of the residual, W of p) over a tile: trunc(r * 2**60), trunc(p * 2**60), with
    r = p - max(q, 0) where p > q else 0 (Q_MODE 1: q probabilities, 2: q from draft logits,
    NaN where not q_ok) or, for a point-mass draft (Q_MODE 0), p with y zeroed.  With ``rho``
    (block verification, reference section 9) r is the scaled residual in float64:
    rho * p - max(q, 0) where rho * p > q else 0, q = one-hot(y) for Q_MODE 0."""
    p = probs_tile(t_row, idx, msk, inv_t, t_stats, T_PROBS)
    if Q_MODE == 0:
        q = tl.where(idx == y, 1.0, 0.0)
    else:
        q = probs_tile(q_row, idx, msk, inv_t, q_stats, Q_MODE == 1)
        if Q_MODE == 2:
            q = tl.where(q_ok, q, float("nan"))
    if rho is None:
        if Q_MODE == 0:
            r = tl.where(idx == y, 0.0, p)
        else:
            r = tl.where(p > q, p - tl.maximum(q, 0.0), 0.0)
        w_r = (r * W_SCALE).to(tl.int64)
    else:
        a = p.to(tl.float64) * rho
        b = q.to(tl.float64)
        w_r = (tl.where(a > b, a - tl.maximum(b, 0.0), 0.0) * W_SCALE).to(tl.int64)
    return w_r, (p * W_SCALE).to(tl.int64)


@triton.jit
def draw_row(t_row, q_row, V, y, u_lo, u_hi, inv_t, t_stats, q_ok, q_stats,
             T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr, rho=None):
    """Integer inverse-CDF draw (reference.draw_from / draw_index) over the residual of the
    target row t_row and the draft (see _weights_tile; y = -1 with Q_MODE 0 draws from p
    itself: the bonus draw; ``rho``: block verification's scaled residual), falling back to
    p when the residual has no mass.  U = u_lo | u_hi << 32.  Returns the token, or -1 if
    S == 0."""
    offs = tl.arange(0, BLOCK_V)
    total_r = tl.full([], 0, tl.int64)
    total_p = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        w_r, w_p = _weights_tile(t_row, q_row, idx, idx < V, y, inv_t, t_stats, q_ok, q_stats,
                                 T_PROBS, Q_MODE, rho)
        total_r += tl.sum(w_r, axis=0)
        total_p += tl.sum(w_p, axis=0)
    use_p = total_r == 0
    total = tl.where(use_p, total_p, total_r)
    t = mulhi_u64(u_lo, u_hi, total)
    hi = tl.where(total > 0, V, 0)                 # S == 0: nothing to find, -1
    return find_token(t_row, q_row, 0, hi, y, inv_t, t_stats, q_ok, q_stats, use_p,
                      tl.full([], 0, tl.int64), t, T_PROBS, Q_MODE, BLOCK_V, rho)


@triton.jit
def find_token(t_row, q_row, lo, hi, y, inv_t, t_stats, q_ok, q_stats, use_p, cum, t,
               T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr, rho=None):
    """The smallest index i in [lo, hi) where cum + the weights of [lo, i] pass t (the
    weights of the residual, or of p with ``use_p``); -1 if none does."""
    offs = tl.arange(0, BLOCK_V)
    token = tl.full([], -1, tl.int32)
    start = tl.full([], 0, tl.int32) + lo
    while (token < 0) & (start < hi):
        idx = start + offs
        w_r, w_p = _weights_tile(t_row, q_row, idx, idx < hi, y, inv_t, t_stats, q_ok, q_stats,
                                 T_PROBS, Q_MODE, rho)
        w = tl.where(use_p, w_p, w_r)
        hit = (idx < hi) & (cum + tl.cumsum(w, axis=0) > t)
        first = tl.min(tl.where(hit, idx, NO_INDEX), axis=0)
        token = tl.where(first < NO_INDEX, first, token)
        cum += tl.sum(w, axis=0)
        start += BLOCK_V
    return token


# ----------------------------------------------------------------------------- blocks
@triton.jit
def params_ok(inv_t, top_k, top_p, min_p):
    """The sampling parameters are inside the contract (reference section 8; NaN fails)."""
    return ((inv_t >= 0.0) & (inv_t < POS_INF) & (top_k >= 0) & (top_p > 0.0) & (top_p <= 1.0)
            & (min_p >= 0.0) & (min_p <= 1.0))


@triton.jit
def request_ok(req, T_PROBS: tl.constexpr):
    """The request's own parameters are inside the contract (its ids: ``block_length``)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    ok = params_ok(inv_t, top_k, top_p, min_p)
    if T_PROBS:
        ok = ok & ((inv_t == 0.0) | (inv_t == 1.0)) & (top_k == 0) & (top_p == 1.0) & (min_p == 0.0)
    return ok


@triton.jit
def block_length(ids_ptr, d0, num_draft, n_ids, n_draft_rows, V, MAXK,
                 MAXK_P2: tl.constexpr):
    """(kb, oob, ids_ok): the block length num_draft, cut at the first id -1 or the first
    draft index d0 + j outside [0, n_draft_rows) (``oob``: the row at kb does not exist, the
    request is invalid if it gets there); ``ids_ok``: num_draft is in [0, MAXK] and every id
    of the request inside [0, n_ids) is in [-1, V) (else the request is malformed)."""
    lim = tl.minimum(tl.maximum(num_draft, 0), MAXK).to(tl.int32)
    pos = tl.arange(0, MAXK_P2)
    row = d0 + pos
    in_block = pos < lim
    in_ids = (row >= 0) & (row < n_ids)
    row_exists = (row >= 0) & (row < n_draft_rows)
    ids = tl.load(ids_ptr + row, mask=in_block & in_ids, other=-1)
    bad = in_block & in_ids & ((ids < -1) | (ids >= V))
    ids_ok = (tl.max(bad.to(tl.int32), axis=0) == 0) & (num_draft >= 0) & (num_draft <= MAXK)
    ends = in_block & ((~row_exists) | (ids == -1))
    kb = tl.min(tl.where(ends, pos, lim), axis=0)
    oob = tl.max(((pos == kb) & in_block & (~row_exists)).to(tl.int32), axis=0) != 0
    return kb, oob, ids_ok
