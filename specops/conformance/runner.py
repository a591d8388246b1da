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

**The sampler is user code.**  Whatever it raises (``SystemExit`` included; only
``KeyboardInterrupt`` goes through), whatever it returns (an output whose ``__array__``
raises), is reported as a failing check, never as a pass.  Each call has a time limit
(``timeout``, default ``DEFAULT_TIMEOUT_S``): the calls run in one worker thread of the kit
(the same thread for the whole run, a daemon), and a call that has not returned by then fails
the run with a check that names the limit; the kit stops calling the sampler and reports.  A
Python thread cannot be killed, so the hung call goes on in the background until the process
ends (``specops check`` exits after its report).  The worker thread inherits the caller's
grad / inference mode and current CUDA device, no other thread-local state; ``timeout=None``
calls the sampler in the caller's thread, with no limit.  Arguments the kit cannot run with
raise ``KitUsageError`` (a ``ValueError``) before the sampler is first called.
"""
from __future__ import annotations

import faulthandler
import inspect
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import numpy as np
import torch

from specops.conformance import DEFAULT_TIMEOUT_S
from specops.conformance import designs as catalogue
from specops.conformance import laws, negative, stats
from specops.conformance.cases import make_case
from specops.conformance.checks import (ALPHA, Check, fmt_seq, gof_check, impossible_check,
                                        project)
from specops.conformance.report import Report, preamble

QUICK_N = 100_000
FULL_N = 1_000_000
QUICK_BUDGET_S = 60.0
MIN_N = 1000
MAX_DESIGN_N = 100_000_000     # requests of one design (~15 GB of outputs and tables)
PROBE_N = 256
DEFAULT_BATCH = 8192
WATCHDOG_GRACE_S = 30.0
SEED_MAX = 2 ** 63 - 1
PROTOCOL_ARGS = {"chain": ("target_probs", "draft_probs", "draft_token_ids", "seeds"),
                 "tree": ("target_probs", "draft_probs", "node_token_ids", "parent_ids",
                          "seeds", "method")}


class KitUsageError(ValueError):
    """An argument the kit cannot run with (``specops check``: a usage error, exit status 2)."""


class SamplerTimeout(Exception):
    """A sampler call did not return within the time limit."""


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Job:
    __slots__ = ("args", "state", "done", "out", "exc")

    def __init__(self, args, state):
        self.args, self.state = args, state
        self.done = threading.Event()
        self.out = self.exc = None


def _thread_state() -> tuple:
    """The caller's thread-local torch state the sampler's thread takes over."""
    device = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
    return torch.is_grad_enabled(), torch.is_inference_mode_enabled(), device


class Caller:
    """Calls the sampler: in a worker thread with a time limit (``timeout`` seconds), or in
    the caller's thread where ``timeout`` is None or 0.  ``watchdog``: also arm faulthandler
    to end the process (exit status 1) should even the wait not return, up to
    ``WATCHDOG_GRACE_S`` after the limit (a sampler stuck in C code that holds the GIL); for
    the command line only."""

    def __init__(self, fn: Callable, timeout: Optional[float], watchdog: bool = False):
        self.fn, self.timeout, self.watchdog = fn, (timeout or None), watchdog
        self._jobs = None

    def __call__(self, args: tuple):
        if self.timeout is None:
            return self.fn(*args)
        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(self._jobs,), daemon=True,
                             name="specops-check-sampler").start()
        job = _Job(args, _thread_state())
        armed = False
        if self.watchdog:
            try:                                  # fd 2 itself: sys.stderr may be anything
                grace = min(WATCHDOG_GRACE_S, max(5.0, self.timeout))
                faulthandler.dump_traceback_later(self.timeout + grace, exit=True, file=2)
                armed = True
            except (OSError, ValueError, RuntimeError):
                pass
        self._jobs.put(job)
        try:
            finished = job.done.wait(self.timeout)
        finally:
            if armed:
                faulthandler.cancel_dump_traceback_later()
        if not finished:
            self._jobs.put(None)           # the worker ends there, should the call return
            self._jobs = None
            raise SamplerTimeout(f"the sampler did not return within {self.timeout:g} s "
                                 "(the time limit per call, --timeout / timeout=): the kit "
                                 "stopped calling it")
        if job.exc is not None:
            exc, job.exc = job.exc, None
            raise exc
        return job.out

    def _serve(self, jobs) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            grad, inference, device = job.state
            try:
                if device is not None:
                    torch.cuda.set_device(device)
                with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                    job.out = self.fn(*job.args)
            except BaseException as exc:          # noqa: BLE001 (handed to the caller)
                job.exc = exc
            finally:
                job.done.set()
            job = None

    def close(self) -> None:
        if self._jobs is not None:
            self._jobs.put(None)
            self._jobs = None


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
    """Calls the sampler in batches, reads and checks every output, tracks progress.  After a
    call that timed out (``dead``) the sampler is not called again: every later row is
    malformed, with that reason."""

    def __init__(self, sampler: Callable, batch_size: int, progress: Optional[Callable],
                 timeout: Optional[float] = None, watchdog: bool = False):
        self.caller = Caller(sampler, timeout, watchdog)
        self.batch_size, self.progress = batch_size, progress
        self.requests, self.sampler_s = 0, 0.0
        self.done, self.total, self.label = 0, 0, ""
        self.dead = ""

    def run(self, case, drafts: np.ndarray, seeds: np.ndarray) -> Observed:
        obs = Observed(case, drafts, seeds)
        n = len(drafts)
        toks, Ls = [], []
        for lo in range(0, n, self.batch_size):
            hi = min(n, lo + self.batch_size)
            out, returned = None, False
            if self.dead:
                obs.error = obs.error or self.dead
            else:
                args = case.arguments(drafts[lo:hi], seeds[lo:hi])
                t0 = time.perf_counter()
                try:
                    out = self.caller(args)
                except KeyboardInterrupt:
                    raise
                except SamplerTimeout as exc:
                    self.dead = obs.error = str(exc)
                except BaseException as exc:      # noqa: BLE001 (SystemExit too: report it)
                    obs.error = obs.error or f"the sampler raised {describe(exc)}"
                else:
                    returned = True
                    self.sampler_s += time.perf_counter() - t0
            if not returned:
                toks.append(np.full((hi - lo, case.width), -1, dtype=np.int64))
                Ls.append(np.full(hi - lo, -1))
                self._advance(hi - lo)
                continue
            tok, L, problems = case.read(out, hi - lo)
            out = None
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
    # only rows the kit could read in both calls say anything about the seeds (an output of
    # the wrong shape reads as all -1 every time: that is output.well_formed's failure)
    ok = (a.L > 0) & (b.L > 0)
    if not ok.any():
        return [Check("seeds.reproducible", case.name, "fail", "token equality", 0,
                      detail="not checked: no well-formed output in the seed probe (see "
                      "output.well_formed)", purpose=what)]
    m = int(ok.sum())
    same = int((a.tok == b.tok).all(1)[ok].sum())
    if same < m:
        return [Check("seeds.reproducible", case.name, "unseeded", "token equality", m,
                      value=float(m - same), detail=f"{m - same} of {m} requests changed "
                      "between two calls with the same seeds: the sampler does not draw its "
                      "randomness from the seeds (reported, not failed)", purpose=what),
                Check("seeds.batch_invariant", case.name, "unseeded", "token equality", 0,
                      detail="not applicable to an unseeded sampler", purpose="")]
    ok_c = ok & (c.L > 0)
    if ok_c.any() and (a.tok == c.tok)[ok_c].all():
        return [Check("seeds.reproducible", case.name, "unseeded", "token equality", m,
                      detail="new seeds gave the same tokens for every request: the sampler "
                      "ignores its seeds (reported, not failed)", purpose=what)]
    checks = [Check("seeds.reproducible", case.name, "pass", "token equality", m,
                    value=0.0, detail=f"{m} of {m} requests identical", purpose=what)]
    # the same requests, shuffled among as many others, then a few alone
    others = case.draw(n, rng)
    mixed = np.concatenate([drafts, others])
    mseeds = np.concatenate([seeds, rng.integers(0, SEED_MAX, n)])
    order = rng.permutation(2 * n)
    mix = session.run(case, mixed[order], mseeds[order])
    back = np.empty_like(mix.tok)
    back[order] = mix.tok
    differ = int((back[:n] != a.tok).any(1).sum())
    alone, error = 0, mix.error
    for i in range(8):
        one = session.run(case, drafts[i:i + 1], seeds[i:i + 1])
        alone += int((one.tok[0] != a.tok[i]).any())
        error = error or one.error
    if error:
        checks.append(Check("seeds.batch_invariant", case.name, "fail", "token equality",
                            n + 8, detail=error, purpose="a request's tokens depend only on "
                            "its inputs and seed"))
        return checks
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
                            project(pairs, nxt), what="next-token law",
                            given="after the accepted prefix"))
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
                            "the residual token given the rejected draft",
                            "after the drafts"),
        "decision_bonus": ("coupling.decision_bonus", lambda dr, out: len(out) == width,
                           lambda dr, out: (dr[-1:], out[-1:]),
                           "the bonus token given the last draft", "after the last draft"),
        "positions": ("coupling.positions", lambda dr, out: True,
                      lambda dr, out: ((), out), "the joint law of the positions' outcomes",
                      "given"),
        "siblings": ("coupling.siblings", lambda dr, out: True,
                     lambda dr, out: (dr, out), "the output given the drafted siblings",
                     "given the drafted tree"),
    }[d.name]
    name, select, key, what, given = spec
    return gof_check(name, d.name, d.purpose, project(case.joint, key, select),
                     project(obs.pairs(), key, select), what=what, given=given)


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


def _check_arity(sampler: Callable, kind: str) -> None:
    """A chain sampler under the tree protocol (or the reverse) is a usage error, found from
    its signature where it has one, before the first call."""
    try:
        sig = inspect.signature(sampler)
    except (TypeError, ValueError):
        return                                  # no signature (a builtin): the calls will tell
    args = PROTOCOL_ARGS[kind]
    try:
        sig.bind(*args)
        return
    except TypeError as exc:
        why = str(exc)
    other = "tree" if kind == "chain" else "chain"
    try:
        sig.bind(*PROTOCOL_ARGS[other])
        hint = f"; it takes the {other} protocol's arguments: run it with --kind {other}"
    except TypeError:
        hint = ""
    raise KitUsageError(f"the {kind} protocol calls sampler({', '.join(args)}), "
                        f"{len(args)} positional arguments, which {_name(sampler)}{sig} "
                        f"cannot take ({why}){hint}")


def _designs(kind: str, designs) -> list:
    all_designs = catalogue.chain_designs() if kind == "chain" else catalogue.tree_designs()
    if designs is None:
        return all_designs
    valid = ", ".join(d.name for d in all_designs)
    if isinstance(designs, str) or not all(isinstance(d, str) for d in designs):
        raise KitUsageError(f"designs must be a list of design names (valid for {kind}: "
                            f"{valid}), got {designs!r}")
    if not designs:
        raise KitUsageError(f"designs names no design (valid for {kind}: {valid})")
    unknown = set(designs) - {d.name for d in all_designs}
    if unknown:
        raise KitUsageError(f"unknown designs: {', '.join(sorted(unknown))} (valid for "
                            f"{kind}: {valid})")
    return [d for d in all_designs if d.name in designs]


def _positive_number(value, what: str, zero_ok: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if isinstance(value, bool) or not math.isfinite(x) or x < 0 or (x == 0 and not zero_ok):
        raise KitUsageError(f"{what} must be a finite number {'>= 0' if zero_ok else '> 0'}, "
                            f"got {value!r}")
    return x


def run_kit(kind: str, sampler: Callable, method: str, *, quick: bool = True, seed: int = 0,
            scale: Optional[float] = None, batch_size: Optional[int] = None,
            progress: Optional[Callable] = None, designs: Optional[List[str]] = None,
            announce: Optional[Callable[[str], None]] = None,
            timeout: Optional[float] = DEFAULT_TIMEOUT_S, watchdog: bool = False) -> Report:
    """The kit's run (``check_chain`` / ``check_tree``); ``announce(text)`` gets the report's
    preamble (the sampler, the run and its budget) before the sampler time is spent;
    ``watchdog``: see ``Caller`` (the command line's)."""
    if not callable(sampler):
        raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
    if kind not in catalogue.KINDS:
        raise KitUsageError(f"kind must be one of {', '.join(catalogue.KINDS)}, got {kind!r}")
    methods = catalogue.kit_methods(kind)
    if method not in methods:
        raise KitUsageError(f"method must be one of {', '.join(methods)} for {kind} samplers, "
                            f"got {method!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= seed <= SEED_MAX:
        raise KitUsageError(f"seed must be an int in [0, 2**63 - 1], got {seed!r}")
    all_designs = _designs(kind, designs)
    base = QUICK_N if quick else FULL_N
    if scale is not None:
        scale = _positive_number(scale, "scale")
        per_scale = base * max(d.weight for d in all_designs)
        if per_scale * scale > MAX_DESIGN_N:
            raise KitUsageError(f"scale {scale:g} asks for more than {MAX_DESIGN_N:,} requests "
                                f"of one design, the most the kit runs (scale <= "
                                f"{MAX_DESIGN_N / per_scale:g} for a "
                                f"{'quick' if quick else 'full'} run)")
    if timeout is not None:
        timeout = _positive_number(timeout, "timeout", zero_ok=True) or None
    given = (batch_size if batch_size is not None else
             getattr(sampler, "conformance_batch_size", DEFAULT_BATCH))
    try:
        batch = int(given) if not isinstance(given, bool) and int(given) == given else 0
    except (TypeError, ValueError, OverflowError):
        batch = 0
    if batch < 1:
        raise KitUsageError(("batch_size" if batch_size is not None else
                             "the sampler's conformance_batch_size")
                            + f" must be an int >= 1, got {given!r}")
    _check_arity(sampler, kind)
    stats.require_scipy()
    t_start = time.perf_counter()
    cases = [make_case(kind, d, method) for d in all_designs]
    session = Session(sampler, batch, progress, timeout, watchdog)
    try:
        checks, notes, scale = _run(session, cases, kind, method, quick, seed, scale, base,
                                    announce)
    finally:
        session.caller.close()
    return Report(kind=kind, method=method, sampler=_name(sampler),
                  mode="quick" if quick else "full", kit_seed=seed, scale=scale,
                  requests=session.requests, elapsed_s=time.perf_counter() - t_start,
                  sampler_s=session.sampler_s, alpha=ALPHA, checks=checks, notes=notes,
                  hint=negative.diagnose(kind, checks))


def _run(session: Session, cases, kind, method, quick, seed, scale, base, announce):
    notes = []
    law_cases = [c for c in cases if c.design.role == "law"]
    probe_case = law_cases[min(1, len(law_cases) - 1)] if law_cases else cases[0]
    batch = session.batch_size
    session.total = 11 * PROBE_N // 2 + min(batch, 2048)
    session.label = "seed probe"
    probe_rng = np.random.default_rng([seed, 10 ** 6])
    seed_checks = _seed_checks(session, probe_case, probe_rng)
    # the speed at a full batch (the probe's small calls mostly measure per-call overhead)
    n_rate = min(batch, 2048)
    before = session.sampler_s
    timed = session.run(probe_case, *_draw(probe_case, n_rate, probe_rng))
    spent = session.sampler_s - before
    rate = n_rate / spent if spent > 0 and not timed.error else None
    weights = sum(c.design.weight for c in cases)
    floor = MIN_N if scale is None else 2
    if scale is None:
        scale = 1.0
        projected = base * weights / rate if rate else 0.0
        if quick and projected > QUICK_BUDGET_S:
            scale = max(QUICK_BUDGET_S / projected, MIN_N / base)
            notes.append(f"N scaled by {scale:.3g} to fit the quick run's {QUICK_BUDGET_S:.0f} s "
                         f"budget at the measured {rate:,.0f} requests/s")
    sizes = [max(floor, int(round(base * c.design.weight * scale))) for c in cases]
    total = sum(sizes)
    budget = f"{'quick' if quick else 'full'} run: {total:,} requests over {len(cases)} designs"
    budget += (f", about {total / rate:,.0f} s of sampler time at the measured {rate:,.0f} "
               "requests/s" if rate else " (the sampler's speed was not measured: its calls "
               "in the seed probe failed)")
    notes.insert(0, budget)
    if announce:
        announce("\n".join(preamble(_name(session.caller.fn), kind, method,
                                     "quick" if quick else "full", seed, notes)))
    session.done, session.total = 0, total
    observed, skipped = [], []
    for i, (case, n) in enumerate(zip(cases, sizes)):
        if session.dead:                     # the sampler hung: report what was seen
            skipped.append(case.name)
            continue
        session.label = case.name
        rng = np.random.default_rng([seed, i])
        drafts, seeds = _draw(case, n, rng)
        observed.append(session.run(case, drafts, seeds))
    checks = seed_checks
    if session.dead:
        checks = checks + [Check(
            "sampler.timeout", "", "fail", "time limit per call", session.requests,
            detail=session.dead + (f"; designs not run: {', '.join(skipped)}" if skipped
                                   else ""), purpose="every call returns within the limit")]
    return _assemble(observed, method, seed, checks), notes, scale


def _assemble(observed: List[Observed], method: str, seed: int,
              extra: List[Check]) -> List[Check]:
    checks = list(extra)
    rows = sum(len(o.drafts) for o in observed)
    if not rows:                                  # the sampler hung in the seed probe
        return _ordered(checks)
    malformed = sum(o.malformed for o in observed)
    problems = {}                                 # problem -> the designs it came up in
    for o in observed:
        for p in ([o.error] if o.error else []) + o.problems:
            if "zero-probability" not in p:
                problems.setdefault(p, []).append(o.case.name)
    checks.append(impossible_check(
        "output.well_formed", "", "ids in [-1, V), the accepted prefix equals the drafts (a "
        "path of the tree), one emitted token, then -1", malformed, rows,
        "; ".join(f"{', '.join(names)}: {p}" for p, names in list(problems.items())[:3])))
    zero = sum(o.zero_hits for o in observed)
    zero_detail = "; ".join(f"{o.case.name}: {p}" for o in observed for p in o.problems
                            if "zero-probability" in p)
    readable = rows - malformed                   # a malformed row has no tokens to judge
    purpose = "no accepted or emitted token has target probability 0, whatever the coin"
    if readable == 0:
        checks.append(Check("boundary.zero_target_prob", "", "fail",
                            "count of forbidden outcomes", 0, detail="not checked: no "
                            "well-formed output (see output.well_formed)", purpose=purpose))
    else:
        checks.append(impossible_check(
            "boundary.zero_target_prob", "", purpose, zero, readable, zero_detail,
            f"0 in {readable:,} well-formed requests"
            + (f" ({malformed:,} malformed rows not checked: see output.well_formed)"
               if malformed else "")))
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
    return _ordered(checks)


def _ordered(checks: List[Check]) -> List[Check]:
    order = ["sampler", "output", "boundary", "law.output", "law.length", "law.next_token",
             "coupling", "law", "seeds"]
    return sorted(checks, key=lambda c: next(i for i, p in enumerate(order)
                                             if c.name.startswith(p)))


def _name(sampler) -> str:
    mod = getattr(sampler, "__module__", None) or type(sampler).__module__
    name = getattr(sampler, "__qualname__", None) or type(sampler).__qualname__
    return f"{mod}:{name}"
