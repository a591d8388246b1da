"""Row passes of block verification and of the acceptance rates (reference sections 9-10),
shared by ``verify_block.py`` and ``accept_rates.py``: the scaled residual's integer weights
(float64, so that rho * p keeps its bits), their draw, and beta = sum min(p, q)."""
import triton
import triton.language as tl

from ._common import (NO_INDEX, TAG_SAMPLE, W_SCALE, draw_row, mulhi_u64, prob_at,
                      probs_tile, stream_words)

W_UNIT = tl.constexpr(8.67361737988403547205962240695953369140625e-19)   # 2**-60


@triton.jit
def next_rho(rho, p_y, q_y):
    """rho_{j+1} = 1 if t > 0 and t >= q, t / q if t > 0 and q > 0, else 0 (t = rho * p_y,
    float64; NaN gives 0)."""
    t = rho * p_y.to(tl.float64)
    q = q_y.to(tl.float64)
    ratio = t / tl.where(q > 0.0, q, 1.0)
    return tl.where((t > 0.0) & (t >= q), 1.0, tl.where((t > 0.0) & (q > 0.0), ratio, 0.0))


@triton.jit
def stop_probability(S, rho):
    """h = z / (z + (1 - rho)), z = S * 2**-60 (float64); 1 when the denominator is 0."""
    z = S.to(tl.float64) * W_UNIT
    den = z + (1.0 - rho)
    return tl.where(den > 0.0, z / tl.where(den > 0.0, den, 1.0), 1.0)


@triton.jit
def block_weights_tile(t_row, q_row, idx, msk, y, rho, inv_t, t_stats, q_stats,
                       T_PROBS: tl.constexpr, Q_MODE: tl.constexpr):
    """D = trunc(d * 2**60), d = rho * p - max(q, 0) where rho * p > q else 0 (float64);
    Q_MODE 0: q is a point mass at y."""
    a = probs_tile(t_row, idx, msk, inv_t, t_stats, T_PROBS).to(tl.float64) * rho
    if Q_MODE == 0:
        b = tl.where(idx == y, 1.0, 0.0).to(tl.float64)
    else:
        b = probs_tile(q_row, idx, msk, inv_t, q_stats, Q_MODE == 1).to(tl.float64)
    d = tl.where(a > b, a - tl.maximum(b, 0.0), 0.0)
    return tl.where(msk, d * W_SCALE, 0.0).to(tl.int64)


@triton.jit
def block_mass(t_row, q_row, V, y, rho, inv_t, t_stats, q_stats, T_PROBS: tl.constexpr,
               Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """S = sum of the block weights of the row (an integer sum: any order)."""
    offs = tl.arange(0, BLOCK_V)
    total = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        total += tl.sum(block_weights_tile(t_row, q_row, idx, idx < V, y, rho, inv_t, t_stats,
                                           q_stats, T_PROBS, Q_MODE), axis=0)
    return total


@triton.jit
def block_draw(t_row, q_row, V, y, rho, j, req, t_stats, q_stats, T_PROBS: tl.constexpr,
               Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """The draw at position j (stream tag 1) over the block weights, or over p when they sum
    to 0 -> token (-1 if nothing can be drawn)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    u_lo, u_hi = stream_words(seed, offset, j, TAG_SAMPLE)
    S = block_mass(t_row, q_row, V, y, rho, inv_t, t_stats, q_stats, T_PROBS, Q_MODE, BLOCK_V)
    token = tl.full([], -1, tl.int32)
    if S == 0:
        token = draw_row(t_row, q_row, V, -1, u_lo, u_hi, inv_t, t_stats, True, None,
                         T_PROBS, 0, BLOCK_V)
    else:
        t = mulhi_u64(u_lo, u_hi, S)
        offs = tl.arange(0, BLOCK_V)
        cum = tl.full([], 0, tl.int64)
        start = tl.full([], 0, tl.int32)
        while (token < 0) & (start < V):
            idx = start + offs
            w = block_weights_tile(t_row, q_row, idx, idx < V, y, rho, inv_t, t_stats, q_stats,
                                   T_PROBS, Q_MODE)
            hit = (idx < V) & (cum + tl.cumsum(w, axis=0) > t)
            first = tl.min(tl.where(hit, idx, NO_INDEX), axis=0)
            token = tl.where(first < NO_INDEX, first, token)
            cum += tl.sum(w, axis=0)
            start += BLOCK_V
    return token


@triton.jit
def accept_rate(t_row, q_row, V, y, inv_t, t_stats, q_stats, T_PROBS: tl.constexpr,
                Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """beta = float32(sum trunc(min(p, max(q, 0)) * 2**60) * 2**-60); p(y) for point-mass
    drafts (Q_MODE 0)."""
    if Q_MODE == 0:
        rate = prob_at(t_row, y, inv_t, t_stats, T_PROBS)
    else:
        offs = tl.arange(0, BLOCK_V)
        total = tl.full([], 0, tl.int64)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            msk = idx < V
            p = probs_tile(t_row, idx, msk, inv_t, t_stats, T_PROBS)
            q = probs_tile(q_row, idx, msk, inv_t, q_stats, Q_MODE == 1)
            m = tl.where(q > 0.0, tl.minimum(p, q), 0.0)
            total += tl.sum((m * W_SCALE).to(tl.int64), axis=0)
        rate = (total.to(tl.float64) * W_UNIT).to(tl.float32)
    return rate
