"""One check = one question, its statistic, N, alpha and what a pass still allows.

Every check the kit reports is a ``Check``: statistical ones carry the Pearson statistic, df,
p-value, the false-positive rate ``alpha`` it was tested at and ``detectable`` (the smallest
total-variation distance it detects with probability 0.9 at its N, ``stats``); exact ones
(impossible events, token equality) have ``alpha = 0`` and ``detectable`` is the smallest
per-opportunity rate they catch with probability 0.9.  ``plot`` holds expected and observed
frequencies of the check's cells for the HTML report.  A statistical check that saw an outcome
of probability 0 under the exact law fails whatever its Pearson statistic: its ``pvalue`` is 0
(the exact probability of what was seen) and ``forbidden`` counts those observations
(``value``, ``df`` stay the Pearson test's on the other cells).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Optional

import numpy as np

from specops.conformance import stats

ALPHA = 1e-6            # false-positive rate of each statistical check
PLOT_CELLS = 40


@dataclass
class Check:
    name: str                     # the question, e.g. "law.next_token"
    design: str                   # the input design it ran on ("" for run-wide checks)
    status: str                   # "pass", "fail", "unseeded" (reported, not failed)
    statistic: str
    n: int
    alpha: float = 0.0
    df: Optional[int] = None
    value: Optional[float] = None
    pvalue: Optional[float] = None
    detectable: Optional[float] = None
    detectable_kind: str = "tv"   # "tv" or "rate"
    detail: str = ""
    purpose: str = ""
    plot: Optional[dict] = None
    forbidden: int = 0            # observations of probability-0 outcomes (statistical checks)

    @property
    def id(self) -> str:
        return f"{self.name}[{self.design}]" if self.design else self.name

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["id"] = self.id
        return d


def fmt_seq(seq) -> str:
    return " ".join(str(int(t)) for t in seq) if len(seq) else "()"


def _label(key) -> str:
    if isinstance(key, tuple) and key and isinstance(key[0], tuple):
        return " | ".join(fmt_seq(k) for k in key)
    return fmt_seq(key) if isinstance(key, tuple) else str(key)


def gof_check(name, design, purpose, expected: Dict, observed: Dict, *, what: str,
              alpha: float = ALPHA, given: str = "given") -> Check:
    """Stratified Pearson test of ``observed`` {(stratum, category): count} against
    ``expected`` {(stratum, category): probability} (normalised within each stratum);
    ``given`` names the stratum in the details ("after the accepted prefix")."""
    strata = sorted({s for s, _ in expected} | {s for s, _ in observed}, key=repr)
    cats = sorted({c for _, c in expected} | {c for _, c in observed}, key=repr)
    si = {s: i for i, s in enumerate(strata)}
    ci = {c: i for i, c in enumerate(cats)}
    E = np.zeros((len(strata), len(cats)))
    O = np.zeros_like(E)
    for (s, c), w in expected.items():
        E[si[s], ci[c]] += w
    for (s, c), k in observed.items():
        O[si[s], ci[c]] += k
    tot = E.sum(1, keepdims=True)
    probs = np.divide(E, tot, out=np.zeros_like(E), where=tot > 0)
    res = stats.stratified_gof(O, probs, alpha, labels=([_label(s) for s in strata],
                                                         [_label(c) for c in cats]))
    forbidden = sum(k for _, _, k in res.impossible)
    if res.impossible:
        s, c, k = res.impossible[0]
        where = f"{c}" if len(strata) == 1 else f"{c} {given} {'(empty)' if s == '()' else s}"
        detail = (f"{what}: {forbidden:,} outcome(s) of probability 0 under the exact law, "
                  f"e.g. {where}, observed {k:,} time(s)"
                  + (f" (+{len(res.impossible) - 1} more cells)" if len(res.impossible) > 1
                     else ""))
    elif res.df == 0:
        seen = O.sum(1) > 0
        if seen.any() and ((probs > 0).sum(1)[seen] <= 1).all():
            detail = (f"{what}: the exact law has a single outcome here, so there is no "
                      "law to test; only outcomes of probability 0 were checked")
        else:
            detail = (f"{what}: too few requests for the test (every cell pooled); only "
                      "outcomes of probability 0 were checked")
    elif res.pvalue < alpha:
        detail = f"{what}: p = {res.pvalue:.3g} < alpha = {alpha:g}"
    else:
        detail = f"{what}: p = {res.pvalue:.3g}"
    exp_counts = probs * O.sum(1, keepdims=True)
    return Check(name, design, "pass" if res.passed else "fail",
                 "Pearson chi-square" + (" (stratified)" if len(strata) > 1 else ""),
                 res.n, alpha, res.df, res.statistic, 0.0 if forbidden else res.pvalue,
                 res.detectable_tv, "tv", detail, purpose,
                 _plot(strata, cats, exp_counts, O, res.n), forbidden)


def _plot(strata, cats, exp_counts, O, n) -> Optional[dict]:
    if n == 0:
        return None
    cells = [(exp_counts[i, j], O[i, j], i, j) for i in range(len(strata))
             for j in range(len(cats)) if exp_counts[i, j] > 0 or O[i, j] > 0]
    cells.sort(key=lambda c: -max(c[0], c[1]))
    shown, rest = cells[:PLOT_CELLS], cells[PLOT_CELLS:]
    labels = [(_label(cats[j]) if len(strata) == 1 else
               f"{_label(cats[j])} | {_label(strata[i])}") for _, _, i, j in shown]
    expected = [e / n for e, _, _, _ in shown]
    observed = [o / n for _, o, _, _ in shown]
    if rest:
        labels.append(f"{len(rest)} other cells")
        expected.append(sum(c[0] for c in rest) / n)
        observed.append(sum(c[1] for c in rest) / n)
    return {"labels": labels, "expected": expected, "observed": observed, "n": int(n)}


def impossible_check(name, design, purpose, count: int, n: int, detail_fail: str,
                     detail_pass: str = "") -> Check:
    """An exact rule: the count of rows breaking it must be 0."""
    return Check(name, design, "fail" if count else "pass", "count of forbidden outcomes",
                 n, 0.0, None, float(count), None, stats.detectable_rate(n), "rate",
                 detail_fail if count else (detail_pass or f"0 of {n}"), purpose)


def project(table: Dict, key: Callable, select: Callable = lambda d, out: True) -> Dict:
    """Sum ``table`` {(drafts, out): w} into {key(drafts, out): w} over selected entries."""
    res = defaultdict(float)
    for (d, out), w in table.items():
        if select(d, out):
            res[key(d, out)] += w
    return dict(res)
