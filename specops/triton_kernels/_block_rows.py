"""Row passes of block verification and of the acceptance rates (reference sections 9-10),
shared by ``verify_block.py`` and ``accept_rates.py``: rho, the stopping probability, the
scaled residual's mass (its weights and their draw are ``_common``'s with ``rho``), and
beta = sum min(p, q)."""
import triton
import triton.language as tl

from ._common import W_SCALE, _weights_tile, prob_at, probs_tile

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
def block_mass(t_row, q_row, V, y, rho, inv_t, t_stats, q_stats, T_PROBS: tl.constexpr,
               Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """S = sum of the block weights of the row (an integer sum: any order); the draw over
    them is ``draw_row(..., rho=rho)``."""
    offs = tl.arange(0, BLOCK_V)
    total = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        w, _ = _weights_tile(t_row, q_row, idx, idx < V, y, inv_t, t_stats, True, q_stats,
                             T_PROBS, Q_MODE, rho)
        total += tl.sum(w, axis=0)
    return total


@triton.jit
def accept_rate(t_row, q_row, V, y, inv_t, t_stats, q_stats, T_PROBS: tl.constexpr,
                Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """beta = min(1, float32(sum trunc(min(p, max(q, 0)) * 2**60) * 2**-60)); p(y) for
    point-mass drafts (Q_MODE 0)."""
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
        rate = tl.minimum((total.to(tl.float64) * W_UNIT).to(tl.float32), 1.0)  # section 10
    return rate
