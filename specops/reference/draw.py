"""The integer arithmetic of a position: the residual and the inverse-CDF draw (sections 1
and 5), block verification's weights (section 9) and the acceptance rate (section 10)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .constants import W_SCALE_BITS


def integer_weights(r) -> np.ndarray:
    return (np.asarray(r, dtype=np.float32) * np.float32(2.0 ** W_SCALE_BITS)).astype(np.int64)


def residual_row(p: np.ndarray, q: Optional[np.ndarray], y: int) -> np.ndarray:
    """r = p - max(q, 0) where p > q else 0 (float32); point-mass q (None) zeroes p at y."""
    p = np.asarray(p, dtype=np.float32)
    if q is None:
        r = p.copy()
        r[y] = 0
        return r
    q = np.asarray(q, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        return np.where(p > q, p - np.maximum(q, np.float32(0.0)), np.float32(0.0)
                        ).astype(np.float32)


def draw_index(W: np.ndarray, U: int) -> int:
    """Smallest i with W_0 + ... + W_i > floor(U * S / 2**64); -1 if S == 0."""
    S = int(W.sum())
    if S <= 0:
        return -1
    t = (int(U) * S) >> 64
    return int(np.searchsorted(np.cumsum(W), t, side="right"))


def draw_from(r, p, U) -> int:
    """Inverse-CDF draw over r, falling back to p when r has no mass."""
    W = integer_weights(r)
    if int(W.sum()) == 0:
        W = integer_weights(p)
    return draw_index(W, U)


def block_next_rho(rho: float, p_y, q_y) -> float:
    """rho_{j+1} from rho_j, p_j(y_j) and q_j(y_j) (section 9), float64."""
    t = float(rho) * float(np.float32(p_y))
    q = float(np.float32(q_y))
    if t > 0 and t >= q:
        return 1.0
    if t > 0 and q > 0:
        return t / q
    return 0.0


def block_weights(p, q, y: int, rho: float) -> np.ndarray:
    """D(x) = trunc(d(x) * 2**60), d = rho * p - max(q, 0) where rho * p > q else 0, in
    float64 (section 9); q None: a point mass at y."""
    pd = np.asarray(p, dtype=np.float32).astype(np.float64) * np.float64(rho)
    if q is None:
        qd = np.zeros(pd.size)
        qd[y] = 1.0
    else:
        qd = np.asarray(q, dtype=np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.where(pd > qd, pd - np.maximum(qd, 0.0), 0.0)
    return (d * 2.0 ** W_SCALE_BITS).astype(np.int64)


def block_draw_weights(p, q, y: int, rho: float) -> np.ndarray:
    """The weights of block verification's draw at ``tau < e`` (section 9): ``D_tau`` with
    ``rho = rho_tau``, or ``trunc(p * 2**60)`` if they sum to 0."""
    W = block_weights(p, q, y, rho)
    return W if int(W.sum()) else integer_weights(p)


def block_stop_probability(S: int, rho: float) -> float:
    """h_j = z / (z + (1 - rho_j)), z = S_j * 2**-60; 1 when the denominator is 0."""
    z = float(S) * 2.0 ** -W_SCALE_BITS
    den = z + (1.0 - float(rho))
    return z / den if den > 0 else 1.0


def accept_rate(p, q, y: int, greedy: bool = False) -> np.float32:
    """beta_j = min(1, sum_x min(p(x), max(q(x), 0))) in 2**-60 units (section 10); p(y)
    for point-mass drafts (q None) and greedy requests."""
    p = np.asarray(p, dtype=np.float32)
    if q is None or greedy:
        return np.float32(p[y])
    q = np.asarray(q, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        m = np.where(q > 0, np.minimum(p, q), np.float32(0.0)).astype(np.float32)
    return min(np.float32(float(int(integer_weights(m).sum())) * 2.0 ** -W_SCALE_BITS),
               np.float32(1.0))
