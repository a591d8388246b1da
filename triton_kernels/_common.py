"""Shared @triton.jit helpers of the specops Triton backend.

Every helper reproduces, bit for bit, one piece of ``specops.reference`` (whose docstring is
the specification): the portable exp, the float32 key order, the row transform (validity, max,
exact top-k / top-p thresholds by radix select over bit patterns, min-p, integer masses and the
float64 renormalisation), the Philox stream layout and the exact integer inverse-CDF draw.

All kernels are launched with ``enable_fp_fusion=False`` (no FMA contraction), never divide in
float32 and use only correctly rounded float32/float64 operations and integer sums.
"""
import triton
import triton.language as tl

# constants: exact float32 values of specops.reference (written as their exact decimals)
NEG_INF = tl.constexpr(float("-inf"))
POS_INF = tl.constexpr(float("inf"))
EXP_CUTOFF = tl.constexpr(-86.0)
EXP_LOG2E = tl.constexpr(1.44269502162933349609375)
EXP_ROUND = tl.constexpr(12582912.0)
EXP_LN2_HI = tl.constexpr(0.693145751953125)
EXP_LN2_LO = tl.constexpr(1.42860676533018704503774642944335937500e-06)
EXP_C0 = tl.constexpr(1.98412701138295233249664306640625e-04)    # f32(1/5040)
EXP_C1 = tl.constexpr(1.38888892251998186111450195312500e-03)    # f32(1/720)
EXP_C2 = tl.constexpr(8.33333376795053482055664062500000e-03)    # f32(1/120)
EXP_C3 = tl.constexpr(4.16666679084300994873046875000000e-02)    # f32(1/24)
EXP_C4 = tl.constexpr(1.66666671633720397949218750000000e-01)    # f32(1/6)
E_SCALE = tl.constexpr(1099511627776.0)            # 2**40
W_SCALE = tl.constexpr(1152921504606846976.0)      # 2**60
P_CHECK_SCALE = tl.constexpr(4294967296.0)         # 2**32
P_CHECK_MAX = tl.constexpr(17179869184)            # 2**34
U32_TO_UNIT = tl.constexpr(2.3283064365386962890625e-10)   # 2**-32
FLT_MIN = tl.constexpr(1.17549435082228750796873653722224568e-38)
RADIX_BITS = tl.constexpr(4)
RADIX = tl.constexpr(16)


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
    s = s * r + 0.5
    s = s * r + 1.0
    s = s * r + 1.0
    scale = ((n.to(tl.int32) + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(ok, s * scale, 0.0)


@triton.jit
def f32_ukey(x):
    """float32 -> int64 key in [0, 2**32) ordered like the float values (NaN excluded)."""
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return key.to(tl.int64) + 2147483648


@triton.jit
def ukey_f32(k):
    key = (k - 2147483648).to(tl.int32)
    bits = tl.where(key >= 0, key, key ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def stream_words(seed, offset, pos, tag):
    """Philox4x32-10 of the DESIGN.md stream layout: key = seed lo/hi,
    counter = (pos, tag, offset lo, offset hi).  Returns (w0, w1) as uint32."""
    o_lo = (offset & 0xFFFFFFFF).to(tl.uint32)
    o_hi = ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = (offset * 0 + pos).to(tl.uint32)
    c1 = (offset * 0 + tag).to(tl.uint32)
    w0, w1, w2, w3 = tl.philox(seed, c0, c1, o_lo, o_hi)
    return w0, w1


@triton.jit
def accept_uniform(seed, offset, pos):
    w0, w1 = stream_words(seed, offset, pos, 0)
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


@triton.jit
def _argmax_step(vals, idx, msk, best, best_i):
    """Running lowest-index argmax over tiles: a later tile wins only if strictly larger."""
    tmax = tl.max(vals, axis=0)
    ti = tl.min(tl.where(msk & (vals == tmax), idx, 2147483647), axis=0)
    upd = tmax > best
    return tl.where(upd, tmax, best), tl.where(upd, ti, best_i)


@triton.jit
def logits_argmax(row_ptr, V, BLOCK_V: tl.constexpr):
    """Greedy rows: (valid, lowest-index argmax) of the float32-upcast logits.
    valid = no NaN / +inf and not every entry -inf."""
    offs = tl.arange(0, BLOCK_V)
    best = tl.max(tl.full([BLOCK_V], NEG_INF, tl.float32), axis=0)
    best_i = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    bad = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    fin = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        l = tl.load(row_ptr + idx, mask=msk, other=NEG_INF).to(tl.float32)
        bad += tl.sum(((l != l) | (l == POS_INF)).to(tl.int32), axis=0)
        fin += tl.sum((l > NEG_INF).to(tl.int32), axis=0)
        lm = tl.where(msk & (l == l), l, NEG_INF)
        best, best_i = _argmax_step(lm, idx, msk, best, best_i)
    valid = (bad == 0) & (fin > 0)
    return valid, best_i


@triton.jit
def probs_check_argmax(row_ptr, V, BLOCK_V: tl.constexpr):
    """Probability rows: (valid, lowest-index argmax).  valid = every entry in [0, 1] and
    0 < sum trunc(p * 2**32) <= 2**34."""
    offs = tl.arange(0, BLOCK_V)
    best = tl.max(tl.full([BLOCK_V], -1.0, tl.float32), axis=0)
    best_i = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    bad = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    mass = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        p = tl.load(row_ptr + idx, mask=msk, other=0.0)
        ok = (p >= 0.0) & (p <= 1.0)
        bad += tl.sum((msk & (~ok)).to(tl.int32), axis=0)
        pc = tl.where(ok, p, 0.0)
        mass += tl.sum((pc * P_CHECK_SCALE).to(tl.int64), axis=0)
        pm = tl.where(msk & ok, p, -1.0)
        best, best_i = _argmax_step(pm, idx, msk, best, best_i)
    valid = (bad == 0) & (mass > 0) & (mass <= P_CHECK_MAX)
    return valid, best_i


@triton.jit
def _e_tile(row_ptr, idx, msk, inv_t, m, thr):
    """e = pexp(x - m) for tokens kept by top-k (x >= thr), else 0; also returns x."""
    l = tl.load(row_ptr + idx, mask=msk, other=NEG_INF).to(tl.float32)
    x = l * inv_t
    kk = msk & (x >= thr)
    e = tl.where(kk, pexp(x - m), 0.0)
    return e, kk


@triton.jit
def row_stats(row_ptr, V, inv_t, top_k, top_p, min_p, BLOCK_V: tl.constexpr):
    """The transform's per-row scalars (reference.transform_row, inv_t > 0):
    (valid, m, thr, tau, mp, s_kept).  p_i follows from probs_from_logits."""
    offs = tl.arange(0, BLOCK_V)
    # pass 1: validity and max of x = l * inv_t
    m = tl.max(tl.full([BLOCK_V], NEG_INF, tl.float32), axis=0)
    bad = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    fin_l = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    fin_x = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        l = tl.load(row_ptr + idx, mask=msk, other=NEG_INF).to(tl.float32)
        x = l * inv_t
        bv = (l != l) | (l == POS_INF) | (x != x) | (x == POS_INF)
        bad += tl.sum(bv.to(tl.int32), axis=0)
        fin_l += tl.sum((l > NEG_INF).to(tl.int32), axis=0)
        fin_x += tl.sum((x > NEG_INF).to(tl.int32), axis=0)
        m = tl.maximum(m, tl.max(tl.where(msk & (x == x), x, NEG_INF), axis=0))
    valid = (bad == 0) & (fin_l > 0) & (fin_x > 0)
    # top-k threshold: k-th largest x, radix select on the float32 key (ends on an element)
    thr = tl.max(tl.full([BLOCK_V], NEG_INF, tl.float32), axis=0)
    digits = tl.arange(0, RADIX).to(tl.int64)
    if valid & (top_k > 0) & (top_k < V):
        ans = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
        for it in tl.static_range(8):
            shift = 28 - 4 * it
            cand = ans + (digits << shift)
            cnt = tl.zeros([RADIX], tl.int64)
            for start in range(0, V, BLOCK_V):
                idx = start + offs
                msk = idx < V
                l = tl.load(row_ptr + idx, mask=msk, other=NEG_INF).to(tl.float32)
                key = tl.where(msk, f32_ukey(l * inv_t), -1)
                ge = key[None, :] >= cand[:, None]
                cnt += tl.sum(ge.to(tl.int64), axis=1)
            nd = tl.sum((cnt >= top_k).to(tl.int64), axis=0) - 1
            ans = ans + (nd << shift)
        thr = ukey_f32(ans)
    # S = sum of integer masses of the top-k-kept tokens
    s_k = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        e, kk = _e_tile(row_ptr, idx, msk, inv_t, m, thr)
        s_k += tl.sum((e * E_SCALE).to(tl.int64), axis=0)
    # top-p threshold tau: largest element e with float64(mass(e >= tau)) >= top_p * S
    tau = tl.sum(tl.zeros([BLOCK_V], tl.float32), axis=0)
    if valid & (top_p < 1.0):
        target = top_p.to(tl.float64) * s_k.to(tl.float64)
        ans2 = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
        for it in tl.static_range(8):
            shift2 = 28 - 4 * it
            cand2 = ans2 + (digits << shift2)
            mass = tl.zeros([RADIX], tl.int64)
            for start in range(0, V, BLOCK_V):
                idx = start + offs
                msk = idx < V
                e, kk = _e_tile(row_ptr, idx, msk, inv_t, m, thr)
                eb = e.to(tl.int32, bitcast=True).to(tl.int64)
                em = (e * E_SCALE).to(tl.int64)
                ge = eb[None, :] >= cand2[:, None]
                mass += tl.sum(tl.where(ge, em[None, :], 0), axis=1)
            nd2 = tl.sum((mass.to(tl.float64) >= target).to(tl.int64), axis=0) - 1
            ans2 = ans2 + (nd2 << shift2)
        tau = ans2.to(tl.int32).to(tl.float32, bitcast=True)
    mp = tl.where(min_p > 0.0, min_p, 0.0)
    s_kept = s_k
    if valid & ((top_p < 1.0) | (min_p > 0.0)):
        s_kept = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            msk = idx < V
            e, kk = _e_tile(row_ptr, idx, msk, inv_t, m, thr)
            keep = kk & (e >= tau) & (e >= mp)
            s_kept += tl.sum(tl.where(keep, (e * E_SCALE).to(tl.int64), 0), axis=0)
    return valid, m, thr, tau, mp, s_kept


@triton.jit
def probs_from_logits(l, inv_t, m, thr, tau, mp, s_kept):
    """p for a block (or scalar) of float32 logits, given row_stats."""
    x = l * inv_t
    kk = x >= thr
    e = tl.where(kk, pexp(x - m), 0.0)
    keep = kk & (e >= tau) & (e >= mp)
    p = (e.to(tl.float64) * E_SCALE / s_kept.to(tl.float64)).to(tl.float32)
    return tl.where(keep & (p >= FLT_MIN), p, 0.0)


@triton.jit
def target_tile(row_ptr, idx, msk, inv_t, m, thr, tau, mp, s_kept, IS_PROBS: tl.constexpr):
    if IS_PROBS:
        p = tl.load(row_ptr + idx, mask=msk, other=0.0).to(tl.float32)
    else:
        l = tl.load(row_ptr + idx, mask=msk, other=NEG_INF).to(tl.float32)
        p = tl.where(msk, probs_from_logits(l, inv_t, m, thr, tau, mp, s_kept), 0.0)
    return p


@triton.jit
def draw_row(t_row_ptr, q_row_ptr, V, y, bonus, u_lo, u_hi,
             inv_t, tm, tthr, ttau, tmp, ts,
             q_valid, qm, qthr, qtau, qmp, qs,
             T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """Integer inverse-CDF draw (reference.draw_from / draw_index).

    bonus != 0: weights of p.  Otherwise the residual r = p > q ? p - q : 0 (Q_MODE 1: q
    probabilities, 2: q from draft logits, NaN where q_valid is false, 0: point mass at y),
    falling back to p when the residual has no mass.  Returns the token or -1 if S == 0."""
    offs = tl.arange(0, BLOCK_V)
    s_r = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
    s_p = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        p = target_tile(t_row_ptr, idx, msk, inv_t, tm, tthr, ttau, tmp, ts, T_PROBS)
        r = _residual_tile(p, q_row_ptr, idx, msk, y, bonus, inv_t, q_valid, qm, qthr, qtau,
                           qmp, qs, Q_MODE)
        s_r += tl.sum((r * W_SCALE).to(tl.int64), axis=0)
        s_p += tl.sum((p * W_SCALE).to(tl.int64), axis=0)
    use_p = s_r == 0
    s = tl.where(use_p, s_p, s_r)
    t = mulhi_u64(u_lo, u_hi, s)
    found = s <= 0
    tok = tl.sum(tl.zeros([BLOCK_V], tl.int32), axis=0) - 1
    cum = tl.sum(tl.zeros([BLOCK_V], tl.int64), axis=0)
    for start in range(0, V, BLOCK_V):
        if found == 0:
            idx = start + offs
            msk = idx < V
            p = target_tile(t_row_ptr, idx, msk, inv_t, tm, tthr, ttau, tmp, ts, T_PROBS)
            r = _residual_tile(p, q_row_ptr, idx, msk, y, bonus, inv_t, q_valid, qm, qthr,
                               qtau, qmp, qs, Q_MODE)
            w = tl.where(use_p, (p * W_SCALE).to(tl.int64), (r * W_SCALE).to(tl.int64))
            w = tl.where(msk, w, 0)
            c = cum + tl.cumsum(w, axis=0)
            hit = msk & (c > t)
            first = tl.min(tl.where(hit, idx, 2147483647), axis=0)
            got = first < 2147483647
            tok = tl.where(got, first, tok)
            found = got
            cum = cum + tl.sum(w, axis=0)
    return tok


@triton.jit
def _residual_tile(p, q_row_ptr, idx, msk, y, bonus, inv_t, q_valid, qm, qthr, qtau, qmp, qs,
                   Q_MODE: tl.constexpr):
    if Q_MODE == 0:
        r = tl.where((idx == y) & ((idx * 0 + bonus) == 0), 0.0, p)
    else:
        qmsk = msk & ((idx * 0 + bonus) == 0)
        if Q_MODE == 1:
            q = tl.load(q_row_ptr + idx, mask=qmsk, other=0.0).to(tl.float32)
        else:
            lq = tl.load(q_row_ptr + idx, mask=qmsk & ((idx * 0 + q_valid) != 0), other=NEG_INF)
            q = probs_from_logits(lq.to(tl.float32), inv_t, qm, qthr, qtau, qmp, qs)
            q = tl.where(q_valid != 0, q, float("nan"))
        r = tl.where(bonus != 0, p, tl.where(p > q, p - tl.maximum(q, 0.0), 0.0))
    return r


@triton.jit
def block_length(ids_ptr, d0, nd, V, MAXK, MAXK_P2: tl.constexpr):
    """Effective block length: min(num_draft, max_k, first j with id < 0 or id >= V)."""
    lim = tl.minimum(tl.maximum(nd, 0), MAXK).to(tl.int32)
    pos = tl.arange(0, MAXK_P2)
    m = pos < lim
    ids = tl.load(ids_ptr + d0 + pos, mask=m, other=0)
    bad = m & ((ids < 0) | (ids >= V))
    return tl.min(tl.where(bad, pos, lim), axis=0)
