"""The kit's statistics: calibrated goodness-of-fit tests and what they can detect.

The chi-square and noncentral chi-square tails are scipy's (``scipy.stats.chi2`` /
``ncx2``): scipy is the kit's one extra dependency (``pip install "specops[check]"``), imported
on first use only, so ``import specops`` (and ``import specops.conformance``) never loads it.
``require_scipy()`` raises ``MissingDependency`` (an ImportError naming the extra) where it is
missing; ``check_chain`` / ``check_tree`` call it before running anything.

**The test.**  Every statistical check compares observed counts with an exact law: one
categorical law, or a *stratified* one (a conditional law ``P(category | stratum)`` per
stratum, e.g. the next token given the accepted prefix).  The statistic is Pearson's
``X^2 = sum (O - E)^2 / E`` summed over strata, with ``df = sum (cells - 1)``; under the
exact law it is asymptotically chi-square(df) (strata are conditioned on, so the stratum
sizes need not follow any law).  Cells whose expected count is below ``MIN_EXPECTED`` are
pooled, smallest first, so the asymptotics hold in the far tail the kit tests at.  A count
in a cell of probability 0 is not statistics: it is an *impossible event* and fails the
check outright, whatever the p-value.

**What a pass rules out.**  An alternative law whose total-variation distance from the exact
law (on the test's cells) is ``delta`` has noncentrality ``lambda = N * sum (p1 - p0)^2 / p0
>= 4 N delta^2`` (Cauchy-Schwarz: ``(sum |p1 - p0|)^2 <= sum (p1 - p0)^2 / p0 * sum p0``,
with equality for deviations proportional to p0).  The power of the level-alpha test grows
with lambda, so every alternative with ``TV >= detectable_tv(N, df, alpha)`` is detected with
probability at least ``POWER`` (90%), where ``detectable_tv = sqrt(lambda* / (4 N))`` and
``lambda*`` solves ``P(noncentral chi2(df, lambda*) > critical value) = POWER``.  A bias
smaller than that can still hide behind a pass.  For impossible events the bound is a rate:
an event the exact law forbids, occurring at rate ``r`` per opportunity, shows up among ``N``
opportunities with probability ``1 - (1 - r)^N``, at least 90% once ``r >= ln(10) / N``.
This is the one ``detectable_tv`` of specops (the statistical tests of ``tests/`` use it too).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

MIN_EXPECTED = 20.0        # pool cells below this expected count
POWER = 0.9                # the detection probability the stated bounds are for
INSTALL_HINT = 'pip install "specops[check]"'


class MissingDependency(ImportError):
    """The kit needs scipy, which is not installed (the message says how to get it)."""


@functools.lru_cache(maxsize=None)
def _scipy_stats():
    try:
        from scipy import stats as scipy_stats
    except ImportError as exc:
        raise MissingDependency(
            f"the conformance kit needs scipy, which is not installed ({exc}): "
            f"{INSTALL_HINT}") from exc
    return scipy_stats


def require_scipy() -> None:
    """Raise ``MissingDependency`` now (before a run) if scipy is not importable."""
    _scipy_stats()


# ----------------------------------------------------------------------------- distributions
def chi2_sf(x: float, df: float) -> float:
    """P(chi2(df) > x)."""
    if df <= 0:
        return 0.0 if x > 0 else 1.0
    return float(_scipy_stats().chi2.sf(x, df))


def chi2_isf(alpha: float, df: float) -> float:
    """The critical value c with P(chi2(df) > c) = alpha."""
    return float(_scipy_stats().chi2.isf(alpha, df))


def ncx2_sf(x: float, df: float, lam: float) -> float:
    """P(noncentral chi2(df, lam) > x)."""
    if lam <= 0:
        return chi2_sf(x, df)
    return float(_scipy_stats().ncx2.sf(x, df, lam))


def detectable_tv(n: int, df: int, alpha: float, power: float = POWER) -> Optional[float]:
    """Smallest TV (on the test's cells) detected with probability >= power (module doc)."""
    if n <= 0 or df <= 0:
        return None
    return min(1.0, math.sqrt(_noncentrality(int(df), float(alpha), float(power)) / (4.0 * n)))


@functools.lru_cache(maxsize=None)
def _noncentrality(df: int, alpha: float, power: float) -> float:
    """lambda* with P(noncentral chi2(df, lambda*) > the level-alpha critical value) = power:
    the upper end of a bisection to 1e-6 relative (the stated bounds are printed to 2-3
    digits; the bisection's stopping rule is the one the kit's figures were always made with,
    so they stay as they were)."""
    crit = chi2_isf(alpha, df)
    lo, hi = 0.0, 1.0
    while ncx2_sf(crit, df, hi) < power:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if ncx2_sf(crit, df, mid) < power:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-6 * hi:
            break
    return hi


def detectable_rate(n: int, power: float = POWER) -> Optional[float]:
    """Smallest per-opportunity rate of an impossible event seen with probability >= power."""
    return min(1.0, -math.log(1.0 - power) / n) if n > 0 else None


# ----------------------------------------------------------------------------- the test
@dataclass
class GofResult:
    """A stratified Pearson test: statistic, df, p-value, N, and what could still hide."""
    statistic: float
    df: int
    pvalue: float
    n: int
    alpha: float
    impossible: List[tuple] = field(default_factory=list)   # (stratum, category, count)

    @property
    def detectable_tv(self) -> Optional[float]:
        return detectable_tv(self.n, self.df, self.alpha)

    @property
    def passed(self) -> bool:
        return not self.impossible and self.pvalue >= self.alpha


def _pool(o: np.ndarray, e: np.ndarray, min_expected: float):
    """Merge the cells of one stratum whose expected count is below min_expected, smallest
    first, into one pooled cell (itself merged on until it reaches min_expected)."""
    order = np.argsort(e, kind="stable")
    o, e = o[order], e[order]
    k = 0
    pooled_o = pooled_e = 0.0
    while k < len(e) and (e[k] < min_expected or pooled_e and pooled_e < min_expected):
        pooled_o += o[k]
        pooled_e += e[k]
        k += 1
    cells_o = list(o[k:])
    cells_e = list(e[k:])
    if pooled_e > 0:
        cells_o.append(pooled_o)
        cells_e.append(pooled_e)
    return np.asarray(cells_o, dtype=np.float64), np.asarray(cells_e, dtype=np.float64)


def stratified_gof(observed, probs, alpha: float, min_expected: float = MIN_EXPECTED,
                   labels=None) -> GofResult:
    """Test counts ``observed`` [S, C] against conditional laws ``probs`` [S, C] (each row a
    law over the categories, rows of strata never observed are ignored)."""
    observed = np.asarray(observed, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    stat, df, n = 0.0, 0, int(observed.sum())
    impossible = []
    for s in range(observed.shape[0]):
        o = observed[s]
        ns = o.sum()
        if ns == 0:
            continue
        row = probs[s]
        bad = (row <= 0) & (o > 0)
        for c in np.flatnonzero(bad):
            impossible.append(((labels[0][s] if labels else s),
                               (labels[1][c] if labels else c), int(o[c])))
        keep = row > 0
        if keep.sum() < 2:
            continue
        oc, ec = _pool(o[keep], ns * row[keep] / row[keep].sum(), min_expected)
        if len(ec) < 2:
            continue
        stat += float(((oc - ec) ** 2 / ec).sum())
        df += len(ec) - 1
    pvalue = chi2_sf(stat, df) if df > 0 else 1.0
    return GofResult(stat, df, pvalue, n, alpha, impossible)


def independence_gof(tables, alpha: float, min_expected: float = MIN_EXPECTED) -> GofResult:
    """Pearson's test of independence, summed over contingency tables (one per stratum):
    expected counts from each table's own margins, so only the dependence between the two
    outcomes is tested, not their laws.  Categories whose margin is too small for every
    expected count to reach ``min_expected`` are pooled, rarest first."""
    stat, df, n = 0.0, 0, 0
    for t in tables:
        t = np.asarray(t, dtype=np.float64)
        m = t.sum()
        n += int(m)
        if m == 0:
            continue
        margin = t.sum(0) + t.sum(1)
        order = np.argsort(margin, kind="stable")
        groups = [[int(i)] for i in order]
        while len(groups) > 1:                       # merge the rarest group into the next
            share = np.array([margin[g].sum() for g in groups]) / (2 * m)
            if m * share.min() ** 2 >= min_expected:
                break
            k = int(np.argmin(share))
            other = min((i for i in range(len(groups)) if i != k), key=lambda i: share[i])
            merged = groups[k] + groups[other]
            groups = [g for i, g in enumerate(groups) if i not in (k, other)] + [merged]
        if len(groups) < 2:
            continue
        g = np.array([[t[np.ix_(a, b)].sum() for b in groups] for a in groups])
        e = np.outer(g.sum(1), g.sum(0)) / m
        keep = e > 0
        stat += float(((g - e)[keep] ** 2 / e[keep]).sum())
        df += (len(groups) - 1) ** 2
    pvalue = chi2_sf(stat, df) if df > 0 else 1.0
    return GofResult(stat, df, pvalue, n, alpha)
