"""``check_chain`` / ``check_tree``: run a sampler on every design and build the report.

The run: a seed probe first (reproducibility, whether the seeds are used, batch invariance;
it also measures the sampler's speed), then every design's requests in batches, each output
read and checked for well-formedness and zero-probability tokens as it comes back, then the
checks (``checks``) on what was observed.  Everything random comes from the kit's seed:
the same seed and N give the same inputs, so a failure reproduces.

Sizes: ``quick`` runs ``QUICK_N`` requests per design (times the design's weight), the full
run ``FULL_N``; ``scale`` multiplies both.  A quick run of a slow sampler is scaled down to fit
``QUICK_BUDGET_S`` seconds at the speed the probe measured (never below ``MIN_N`` per design),
and the report says so: every check states its own N and the bias it could still miss.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import numpy as np

from specops.conformance import designs as catalogue
from specops.conformance import laws, stats
from specops.conformance.cases import make_case
from specops.conformance.checks import (ALPHA, Check, fmt_seq, gof_check, impossible_check,
                                        project)
from specops.conformance.report import Report

QUICK_N = 100_000
FULL_N = 1_000_000
QUICK_BUDGET_S = 60.0
MIN_N = 1000
PROBE_N = 256
DEFAULT_BATCH = 8192
SEED_MAX = 2 ** 63 - 1


@dataclass
class Observed:
    """One design's requests and what the sampler returned."""
    case: object
    drafts: np.ndarray
    seeds: np.ndarray
    tok: Optional[np.ndarray] = None
    L: Optional[np.ndarray] = None          # emitted tokens per row; -1: malformed
    problems: List[str] = field(default_factory=list)
    zero_hits: int = 0
    malformed: int = 0
    error: str = ""

    def pairs(self) -> dict:
        """{(drafts, out): count} over the well-formed rows."""
        ok = self.L > 0
        if not ok.any():
            return {}
        rows = np.concatenate([self.drafts[ok], np.where(
            np.arange(self.tok.shape[1])[None, :] < self.L[ok][:, None], self.tok[ok], -1)], 1)
        uniq, counts = np.unique(rows, axis=0, return_counts=True)
        k = self.drafts.shape[1]
        return {(tuple(int(t) for t in r[:k]), tuple(int(t) for t in r[k:] if t >= 0)): int(c)
                for r, c in zip(uniq, counts)}


class Session:
    """Calls the sampler in batches, reads and checks every output, tracks progress."""

    def __init__(self, sampler: Callable, batch_size: int, progress: Optional[Callable]):
        self.sampler, self.batch_size, self.progress = sampler, batch_size, progress
        self.requests, self.sampler_s = 0, 0.0
        self.done, self.total, self.label = 0, 0, ""

    def run(self, case, drafts: np.ndarray, seeds: np.ndarray) -> Observed:
        obs = Observed(case, drafts, seeds)
        n = len(drafts)
        toks, Ls = [], []
        for lo in range(0, n, self.batch_size):
            hi = min(n, lo + self.batch_size)
            args = case.arguments(drafts[lo:hi], seeds[lo:hi])
            t0 = time.perf_counter()
            try:
                out = self.sampler(*args)
            except Exception as exc:                  # noqa: BLE001 (report, do not crash)
                obs.error = f"the sampler raised {type(exc).__name__}: {exc}"
                toks.append(np.full((hi - lo, case.width), -1, dtype=np.int64))
                Ls.append(np.full(hi - lo, -1))
                self._advance(hi - lo)
                continue
            self.sampler_s += time.perf_counter() - t0
            tok, L, problems = case.read(out, hi - lo)
            if tok is None:
                tok = np.full((hi - lo, case.width), -1, dtype=np.int64)
                L = np.full(hi - lo, -1)
            for what, row in problems:
                obs.problems.append(what if row is None else
                                    f"{what}: row {fmt_seq(tok[row])}")
            toks.append(tok)
            Ls.append(L)
            self._advance(hi - lo)
        obs.tok, obs.L = np.concatenate(toks), np.concatenate(Ls)
        bad_prefix = case.check_prefix(obs.tok, obs.L, drafts) & (obs.L > 0)
        if bad_prefix.any():
            i = int(np.flatnonzero(bad_prefix)[0])
            obs.problems.append(f"accepted tokens {fmt_seq(obs.tok[i, :obs.L[i] - 1])} are not "
                                f"the drafts {fmt_seq(drafts[i])}")
            obs.L = np.where(bad_prefix, -1, obs.L)
        obs.malformed = int((obs.L < 0).sum())
        hits = case.zero_target(obs.tok, obs.L)
        obs.zero_hits = int(hits.sum())
        if obs.zero_hits:
            i = int(np.flatnonzero(hits)[0])
            obs.problems.append(f"zero-probability token in {fmt_seq(obs.tok[i, :obs.L[i]])}"
                                f" (drafts {fmt_seq(drafts[i])})")
        self.requests += n
        return obs

    def _advance(self, k: int) -> None:
        self.done += k
        if self.progress:
            self.progress(self.done, self.total, self.label)


# ----------------------------------------------------------------------------- the checks
def _seed_checks(session: Session, case, rng) -> List[Check]:
    """Same seeds -> same tokens; other seeds -> other tokens; a request's tokens do not
    depend on its neighbours or its place in the batch."""
    n = PROBE_N
    drafts = case.draw(n, rng)
    seeds = rng.integers(0, SEED_MAX, n)
    a = session.run(case, drafts, seeds)
    b = session.run(case, drafts, seeds)
    c = session.run(case, drafts, rng.integers(0, SEED_MAX, n))
    what = "reproducible: same inputs and seeds, same tokens"
    if a.error or b.error:
        return [Check("seeds.reproducible", case.name, "fail", "token equality", n,
                      detail=a.error or b.error, purpose=what)]
    same = int((a.tok == b.tok).all(1).sum())
    if same < n:
        return [Check("seeds.reproducible", case.name, "unseeded", "token equality", n,
                      value=float(n - same), detail=f"{n - same} of {n} requests changed "
                      "between two calls with the same seeds: the sampler does not draw its "
                      "randomness from the seeds (reported, not failed)", purpose=what),
                Check("seeds.batch_invariant", case.name, "unseeded", "token equality", 0,
                      detail="not applicable to an unseeded sampler", purpose="")]
    if (a.tok == c.tok).all():
        return [Check("seeds.reproducible", case.name, "unseeded", "token equality", n,
                      detail="new seeds gave the same tokens for every request: the sampler "
                      "ignores its seeds (reported, not failed)", purpose=what)]
    checks = [Check("seeds.reproducible", case.name, "pass", "token equality", n,
                    value=0.0, detail=f"{n} of {n} requests identical", purpose=what)]
    # the same requests, shuffled among as many others, then a few alone
    others = case.draw(n, rng)
    mixed = np.concatenate([drafts, others])
    mseeds = np.concatenate([seeds, rng.integers(0, SEED_MAX, n)])
    order = rng.permutation(2 * n)
    m = session.run(case, mixed[order], mseeds[order])
    back = np.empty_like(m.tok)
    back[order] = m.tok
    differ = int((back[:n] != a.tok).any(1).sum())
    alone = 0
    for i in range(8):
        s = session.run(case, drafts[i:i + 1], seeds[i:i + 1])
        alone += int((s.tok[0] != a.tok[i]).any())
    checks.append(impossible_check(
        "seeds.batch_invariant", case.name, "a request's tokens depend only on its inputs "
        "and seed, not on its neighbours or its place in the batch", differ + alone, n + 8,
        f"{differ} of {n} requests changed when shuffled into another batch, {alone} of 8 "
        "when run alone", f"{n} shuffled and 8 lone requests unchanged"))
    return checks


def _law_checks(obs: Observed, method: str, rng) -> List[Check]:
    case = obs.case
    design = case.design
    pairs = obs.pairs()
    ok = obs.L > 0
    ref = (laws.chain_reference(design, method) if case.kind == "chain"
           else laws.tree_reference(design, method))
    # law.output: the outputs completed by sampling the target, against the reference's law
    codes = case.complete(obs.tok[ok], obs.L[ok], rng)
    uniq, counts = np.unique(codes, return_counts=True)
    shape = (case.V,) * case.width
    observed = {((), tuple(int(t) for t in np.unravel_index(c, shape))): int(k)
                for c, k in zip(uniq, counts)}
    expected = {((), tuple(int(t) for t in idx)): float(ref["law"][idx])
                for idx in np.ndindex(*shape) if ref["law"][idx] > 0}
    checks = [gof_check("law.output", design.name, "the emitted sequence, completed by "
                        "sampling the target, has the reference's exact law (= the target's)",
                        expected, observed, what="completed output law")]
    lengths = {((), n): float(w) for n, w in enumerate(ref["length_law"]) if w > 0}
    obs_len = project(pairs, lambda d, out: ((), len(out) - 1))
    checks.append(gof_check("law.length", design.name, f"number of accepted drafts follows "
                            f"the {method} law", lengths, obs_len, what="length law"))
    nxt = lambda d, out: (out[:-1], out[-1:])            # noqa: E731
    checks.append(gof_check("law.next_token", design.name, "the emitted token's law given "
                            "the accepted prefix", project(case.joint, nxt),
                            project(pairs, nxt), what="next-token law"))
    return checks


def _boundary_check(obs: Observed) -> Check:
    case = obs.case
    pairs = obs.pairs()
    n = len(obs.drafts)
    bad = {k: v for k, v in pairs.items() if case.joint is not None and k not in case.joint}
    count = sum(bad.values()) + obs.malformed + obs.zero_hits
    if obs.error:
        detail = obs.error
    elif bad:
        (d, out), k = next(iter(bad.items()))
        detail = (f"{sum(bad.values())} outputs the exact law forbids, e.g. drafts "
                  f"{fmt_seq(d)} -> output {fmt_seq(out)} ({k} times)")
    else:
        detail = "; ".join(obs.problems[:2])
    return impossible_check("boundary", case.name, case.design.purpose, count, n, detail,
                            f"0 forbidden outputs in {n} requests")


def _coupling_check(obs: Observed) -> Check:
    case = obs.case
    d = case.design
    width = case.width
    if d.name == "batch_pairs":
        return _batch_check(obs)
    spec = {
        "accept_residual": ("coupling.accept_residual", lambda dr, out: len(out) < width,
                            lambda dr, out: (dr[:len(out)], out[-1:]),
                            "the residual token given the rejected draft"),
        "decision_bonus": ("coupling.decision_bonus", lambda dr, out: len(out) == width,
                           lambda dr, out: (dr[-1:], out[-1:]),
                           "the bonus token given the last draft"),
        "positions": ("coupling.positions", lambda dr, out: True,
                      lambda dr, out: ((), out), "the joint law of the positions' outcomes"),
        "siblings": ("coupling.siblings", lambda dr, out: True,
                     lambda dr, out: (dr, out), "the output given the drafted siblings"),
    }[d.name]
    name, select, key, what = spec
    return gof_check(name, d.name, d.purpose, project(case.joint, key, select),
                     project(obs.pairs(), key, select), what=what)


def _batch_check(obs: Observed) -> Check:
    """Pairs (2i, 2i + 1): identical inputs, seeds s and s + 1, side by side in the batch.
    Their outputs must be independent (their laws are the law checks' business)."""
    case = obs.case
    ok = (obs.L[0::2] > 0) & (obs.L[1::2] > 0)
    outs = [tuple(int(t) for t in obs.tok[i, :obs.L[i]]) for i in range(len(obs.L))]
    cats = sorted({o for i, o in enumerate(outs) if obs.L[i] > 0})
    ci = {c: i for i, c in enumerate(cats)}
    tables = {}
    for i in np.flatnonzero(ok):
        d = tuple(int(t) for t in obs.drafts[2 * i])
        t = tables.setdefault(d, np.zeros((len(cats), len(cats))))
        t[ci[outs[2 * i]], ci[outs[2 * i + 1]]] += 1
    res = stats.independence_gof(list(tables.values()), ALPHA)
    what = "independence of the pair's outputs"
    detail = (f"{what}: p = {res.pvalue:.3g}" + (f" < alpha = {ALPHA:g}" if not res.passed
                                                  else ""))
    return Check("coupling.batch", case.name, "pass" if res.passed else "fail",
                 "Pearson chi-square (independence)", res.n, ALPHA, res.df, res.statistic,
                 res.pvalue, res.detectable_tv, "tv", detail, case.design.purpose)


# ----------------------------------------------------------------------------- the run
def _draw(case, n: int, rng):
    if case.name == "batch_pairs":
        half = max(1, n // 2)
        drafts = np.repeat(case.draw(half, rng), 2, axis=0)
        seeds = np.repeat(rng.integers(0, SEED_MAX - 1, half), 2) + np.tile([0, 1], half)
        return drafts, seeds
    return case.draw(n, rng), rng.integers(0, SEED_MAX, n)


def run_kit(kind: str, sampler: Callable, method: str, *, quick: bool = True, seed: int = 0,
            scale: Optional[float] = None, batch_size: Optional[int] = None,
            progress: Optional[Callable] = None, designs: Optional[List[str]] = None,
            announce: Optional[Callable[[str], None]] = None) -> Report:
    if not callable(sampler):
        raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
    methods = catalogue.kit_methods(kind)
    if method not in methods:
        raise ValueError(f"method must be one of {', '.join(methods)} for {kind} samplers, "
                         f"got {method!r}")
    all_designs = catalogue.chain_designs() if kind == "chain" else catalogue.tree_designs()
    if designs is not None:
        unknown = set(designs) - {d.name for d in all_designs}
        if unknown:
            raise ValueError(f"unknown designs: {', '.join(sorted(unknown))}")
        all_designs = [d for d in all_designs if d.name in designs]
    if scale is not None and not scale > 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    batch = int(batch_size or getattr(sampler, "conformance_batch_size", DEFAULT_BATCH))
    if batch < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch}")
    t_start = time.perf_counter()
    cases = [make_case(kind, d, method) for d in all_designs]
    session = Session(sampler, batch, progress)
    notes = []
    law_cases = [c for c in cases if c.design.role == "law"]
    probe_case = law_cases[min(1, len(law_cases) - 1)] if law_cases else cases[0]
    session.total = 11 * PROBE_N // 2 + min(batch, 2048)
    session.label = "seed probe"
    probe_rng = np.random.default_rng([seed, 10 ** 6])
    checks = _seed_checks(session, probe_case, probe_rng)
    # the speed at a full batch (the probe's small calls mostly measure per-call overhead)
    n_rate = min(batch, 2048)
    before = session.sampler_s
    session.run(probe_case, *_draw(probe_case, n_rate, probe_rng))
    rate = n_rate / max(session.sampler_s - before, 1e-9)
    base = (QUICK_N if quick else FULL_N)
    weights = sum(c.design.weight for c in cases)
    floor = MIN_N if scale is None else 2
    if scale is None:
        scale = 1.0
        projected = base * weights / rate
        if quick and projected > QUICK_BUDGET_S:
            scale = max(QUICK_BUDGET_S / projected, MIN_N / base)
            notes.append(f"N scaled by {scale:.3g} to fit the quick run's {QUICK_BUDGET_S:.0f} s "
                         f"budget at the measured {rate:,.0f} requests/s")
    sizes = [max(floor, int(round(base * c.design.weight * scale))) for c in cases]
    total = sum(sizes)
    budget = (f"{'quick' if quick else 'full'} run: {total:,} requests over {len(cases)} "
              f"designs, about {total / rate:,.0f} s of sampler time at the measured "
              f"{rate:,.0f} requests/s")
    notes.insert(0, budget)
    if announce:
        announce(budget)
    session.done, session.total = 0, total
    observed = []
    for i, (case, n) in enumerate(zip(cases, sizes)):
        session.label = case.name
        rng = np.random.default_rng([seed, i])
        drafts, seeds = _draw(case, n, rng)
        observed.append(session.run(case, drafts, seeds))
    checks = _assemble(observed, method, seed) + checks
    return Report(kind=kind, method=method, sampler=_name(sampler),
                  mode="quick" if quick else "full", kit_seed=seed, scale=scale,
                  requests=session.requests, elapsed_s=time.perf_counter() - t_start,
                  sampler_s=session.sampler_s, alpha=ALPHA, checks=checks, notes=notes)


def _assemble(observed: List[Observed], method: str, seed: int) -> List[Check]:
    rows = sum(len(o.drafts) for o in observed)
    malformed = sum(o.malformed for o in observed)
    problems = [f"{o.case.name}: {p}" for o in observed for p in ([o.error] if o.error else [])
                + o.problems if "zero-probability" not in p]
    checks = [impossible_check("output.well_formed", "", "ids in [-1, V), the accepted "
                               "prefix equals the drafts (a path of the tree), one emitted "
                               "token, then -1", malformed, rows, "; ".join(problems[:3]))]
    zero = sum(o.zero_hits for o in observed)
    zero_detail = "; ".join(f"{o.case.name}: {p}" for o in observed for p in o.problems
                            if "zero-probability" in p)
    checks.append(impossible_check("boundary.zero_target_prob", "", "no accepted or emitted "
                                   "token has target probability 0, whatever the coin", zero,
                                   rows, zero_detail))
    for i, o in enumerate(observed):
        role = o.case.design.role
        if role in ("boundary", "robustness"):
            checks.append(_boundary_check(o))
            continue
        if o.error or not (o.L > 0).any():
            checks.append(Check(f"{role}", o.case.name, "fail", "", len(o.drafts),
                                detail=o.error or "no well-formed output"))
            continue
        rng = np.random.default_rng([seed, i, 7])
        checks.extend(_law_checks(o, method, rng) if role == "law" else [_coupling_check(o)])
    order = ["output", "boundary", "law.output", "law.length", "law.next_token", "coupling",
             "law", "seeds"]
    return sorted(checks, key=lambda c: next(i for i, p in enumerate(order)
                                             if c.name.startswith(p)))


def _name(sampler) -> str:
    mod = getattr(sampler, "__module__", None) or type(sampler).__module__
    name = getattr(sampler, "__qualname__", None) or type(sampler).__qualname__
    return f"{mod}:{name}"
