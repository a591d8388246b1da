"""Row passes of tree verification (reference section 11) over a request's integer weight
rows kept in global memory (``verify_tree.py``): the residual ``R`` and the draft ``Qw``
survive across the sibling trials of a node, so they are stored, not recomputed.

Every pass loops over the vocabulary in tiles of ``BLOCK_V`` lanes; the probabilities, the
probability-row check and the draw's 128-bit threshold are ``_common``'s.  The kernel puts a
``tl.debug_barrier()`` between a pass that writes a weight row and anything that reads it
(and between reads and the next write): on a GPU the threads of a program do not see each
other's global stores without one.
"""
import triton
import triton.language as tl

from ._common import NO_INDEX, P_CHECK_MAX, W_SCALE, check_probs_tile, probs_tile


@triton.jit
def store_weights(row, w_row, V, inv_t, stats, IS_PROBS: tl.constexpr,
                  BLOCK_V: tl.constexpr):
    """W = trunc(p * 2**60) (int64) of a row into ``w_row`` -> (sum W, ok).

    IS_PROBS: the row holds probabilities, checked in full on the way (reference section 3:
    every entry in [0, 1] and 0 < sum trunc(p * 2**32) <= 2**34; ``ok``; entries outside
    [0, 1] weigh 0).  Otherwise p is the transform of a row of logits with statistics
    ``stats`` (``_common.row_stats``, already checked: ``ok`` is true)."""
    offs = tl.arange(0, BLOCK_V)
    total = tl.full([], 0, tl.int64)
    n_bad = tl.full([], 0, tl.int32)
    mass = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        if IS_PROBS:
            bad, m, cand = check_probs_tile(row, idx, msk)    # cand: p, bad lanes at -1
            n_bad += bad
            mass += m
            p = tl.where(cand >= 0.0, cand, 0.0)
        else:
            p = probs_tile(row, idx, msk, inv_t, stats, False)
        w = (p * W_SCALE).to(tl.int64)
        tl.store(w_row + idx, w, mask=msk)
        total += tl.sum(w, axis=0)
    ok = tl.full([], True, tl.int1)
    if IS_PROBS:
        ok = (n_bad == 0) & (mass > 0) & (mass <= P_CHECK_MAX)
    return total, ok


@triton.jit
def update_residual(r_row, qw_row, V, y, A, Q, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """The residual after rejecting token y, in place: R'(z) = trunc(d(z) * 2**60) if
    d(z) > 0 else 0, d(z) = R(z)*(1/A) - Qw(z)*(1/Q) (float64: int64 -> float64, one
    correctly rounded product each, one subtraction; Q_MODE 0, a point-mass draft: the
    second term is one-hot(y)).
    A > 0 (and Q > 0 unless Q_MODE 0).  -> A' = sum R'."""
    offs = tl.arange(0, BLOCK_V)
    ia = 1.0 / A.to(tl.float64)          # one division per update (reference section 11)
    iq = 1.0 / Q.to(tl.float64)
    total = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        rn = tl.load(r_row + idx, mask=msk, other=0).to(tl.float64) * ia
        if Q_MODE == 0:
            qn = tl.where(idx == y, 1.0, 0.0).to(tl.float64)
        else:
            qn = tl.load(qw_row + idx, mask=msk, other=0).to(tl.float64) * iq
        d = rn - qn
        w = tl.where(d > 0.0, d * W_SCALE, 0.0).to(tl.int64)
        tl.store(r_row + idx, w, mask=msk)
        total += tl.sum(w, axis=0)
    return total


@triton.jit
def find_weight(w_row, V, t, BLOCK_V: tl.constexpr):
    """The draw of section 5 over stored weights: the smallest i with W_0 + ... + W_i > t
    (t = floor(U * S / 2**64) from ``_common.mulhi_u64``, S = sum W > 0); -1 if none."""
    offs = tl.arange(0, BLOCK_V)
    token = tl.full([], -1, tl.int32)
    cum = tl.full([], 0, tl.int64)
    start = tl.full([], 0, tl.int32)
    while (token < 0) & (start < V):
        idx = start + offs
        msk = idx < V
        w = tl.load(w_row + idx, mask=msk, other=0)
        hit = msk & (cum + tl.cumsum(w, axis=0) > t)
        first = tl.min(tl.where(hit, idx, NO_INDEX), axis=0)
        token = tl.where(first < NO_INDEX, first, token)
        cum += tl.sum(w, axis=0)
        start += BLOCK_V
    return token
