"""Calibrated statistics shared by the statistical tests: chi-square goodness of fit at a
false-positive rate of ALPHA, the laws of the emitted tokens per position, and the power
bound each test states in its docstring (``detectable_tv``)."""
from __future__ import annotations

import numpy as np
from scipy import stats as scipy_stats

from specops.conformance import stats as kit_stats

ALPHA = 1e-6
N = 20000
P_ROWS = np.array([[0.05, 0.10, 0.15, 0.20, 0.25, 0.25],
                   [0.30, 0.05, 0.05, 0.20, 0.10, 0.30],
                   [0.10, 0.40, 0.10, 0.10, 0.20, 0.10],
                   [0.20, 0.20, 0.20, 0.20, 0.10, 0.10]], dtype=np.float32)
Q_ROWS = np.array([[0.30, 0.25, 0.20, 0.10, 0.10, 0.05],
                   [0.10, 0.30, 0.30, 0.10, 0.10, 0.10],
                   [0.05, 0.05, 0.30, 0.30, 0.20, 0.10]], dtype=np.float32)


def chi2_pvalue(observed, expected_probs):
    """Goodness-of-fit p-value; a count in a zero-probability cell is an immediate failure."""
    observed = np.asarray(observed, dtype=np.float64)
    expected_probs = np.asarray(expected_probs, dtype=np.float64)
    expected_probs = expected_probs / expected_probs.sum()
    if observed[expected_probs == 0].sum() > 0:
        return 0.0
    keep = expected_probs > 0
    if keep.sum() < 2:
        return 1.0
    n = observed[keep].sum()
    if n == 0:                       # nobody reached this position: no evidence either way
        return 1.0
    return float(scipy_stats.chisquare(observed[keep], n * expected_probs[keep]).pvalue)


def law_pvalues(tokens, nacc, p_rows, length_law):
    """Per-position p-values (conditional on reaching the position) and the length law's."""
    K = p_rows.shape[0] - 1
    V = p_rows.shape[1]
    pvals = {}
    for j in range(K + 1):
        reached = nacc >= j
        obs = np.bincount(tokens[reached, j], minlength=V)
        pvals[f"position {j}"] = chi2_pvalue(obs, p_rows[j])
    pvals["length"] = chi2_pvalue(np.bincount(nacc, minlength=K + 1), length_law)
    return pvals


def draft_ids(rng, q_rows, n):
    return np.stack([rng.choice(q_rows.shape[1], size=n, p=q.astype(np.float64) / q.astype(np.float64).sum())
                     for q in q_rows], axis=1)


def detectable_tv(n: int, cells: int, alpha: float = ALPHA, power: float = 0.99) -> float:
    """The smallest total-variation distance that a chi-square goodness-of-fit test over
    `cells` cells with `n` samples rejects with probability >= `power` at level `alpha`,
    whatever the direction of the deviation: the conformance kit's bound
    (``specops.conformance.stats.detectable_tv``, whose docstring derives it) at
    df = cells - 1, here at power 0.99."""
    return kit_stats.detectable_tv(n, cells - 1, alpha, power)
