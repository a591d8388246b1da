"""The conformance kit (``specops check``), fast tier: its statistics against scipy, its exact
laws against the reference's, the kit end to end on the reference at tiny N, a negative
control caught by a boundary probe, malformed and unseeded samplers, and the CLI's exit codes.
The slow runs (quick runs of every backend, every negative control) are in
``tests/test_conformance_full.py``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from specops import cli
from specops import conformance as C
from specops.conformance import designs as D
from specops.conformance import laws as L
from specops.conformance import negative as NG
from specops.conformance import stats as S
from specops.conformance.adapters import native
from tests import _stats as tests_stats

scipy_stats = pytest.importorskip("scipy.stats")


# ----------------------------------------------------------------------------- statistics
# The kit's figures as its own incomplete gamma / bisection / Poisson mixture made them before
# scipy's chi2 / ncx2 replaced those (turn 4, F-8): the reported numbers must not move.
FROZEN_SF = {(4.3, 3): 0.2308387482088764, (61.6, 54): 0.2227146565064423,
             (150.0, 40): 1.239792154161708e-14, (900.0, 300): 3.0852110460657112e-61,
             (45.0, 1): 1.9703444711799113e-11}
FROZEN_TV = {(100000, 2): 0.010201394557987372, (100000, 54): 0.015143529213851745,
             (1000, 7): 0.11388571220454276, (1000000, 300): 0.006650358216238947,
             (50000, 12): 0.01713870025371582}


def test_the_kit_reports_the_figures_it_always_did():
    for (x, df), want in FROZEN_SF.items():
        assert S.chi2_sf(x, df) == pytest.approx(want, rel=1e-9), (x, df)
    for (n, df), want in FROZEN_TV.items():
        assert S.detectable_tv(n, df, 1e-6) == pytest.approx(want, rel=1e-9), (n, df)
    # the statistical tests of tests/ state their power with the kit's bound (one copy)
    assert tests_stats.detectable_tv(20000, 6) == S.detectable_tv(20000, 5, 1e-6, 0.99)
    assert tests_stats.detectable_tv(20000, 6) == pytest.approx(0.028385162819010195, rel=1e-9)
    assert S.chi2_sf(0.0, 0) == 1.0 and S.chi2_sf(1.0, 0) == 0.0
    assert S.ncx2_sf(3.0, 2, 0.0) == S.chi2_sf(3.0, 2)


def test_without_scipy_the_kit_says_what_to_install(monkeypatch, capsys):
    """scipy is the `check` extra's: a clear usage error (exit 2) naming it, no traceback, and
    the sampler is never called."""
    called = []
    monkeypatch.setitem(sys.modules, "scipy", None)            # import scipy: ImportError
    S._scipy_stats.cache_clear()
    try:
        assert cli.main(["check", "specops.conformance.negative:exact_chain", "--quick",
                         "--scale", "0.002", "--designs", "markov"]) == 2
        err = capsys.readouterr().err
        assert 'pip install "specops[check]"' in err and len(err.strip().splitlines()) == 1
        with pytest.raises(S.MissingDependency, match=r"specops\[check\]"):
            C.check_chain(lambda *a: called.append(1), designs=["markov"], scale=0.002)
        assert not called
    finally:
        S._scipy_stats.cache_clear()


def test_import_specops_does_not_import_scipy(tmp_path):
    """Nor does importing the kit (its CLI, runner, controls): scipy loads on first use."""
    code = ("import sys, specops, specops.conformance.runner, specops.conformance.negative\n"
            "from specops import cli\n"
            "cli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout


def test_detectable_tv_is_the_power_bound():
    """At TV = detectable_tv the least favourable alternative (deviation proportional to p0:
    noncentrality exactly 4 N TV^2) is detected with probability 0.9; more N, less TV."""
    n, df, alpha = 50000, 12, 1e-6
    tv = S.detectable_tv(n, df, alpha)
    crit = scipy_stats.chi2.isf(alpha, df)
    assert abs(scipy_stats.ncx2.sf(crit, df, 4 * n * tv ** 2) - S.POWER) < 1e-4
    assert S.detectable_tv(4 * n, df, alpha) < tv < S.detectable_tv(n // 4, df, alpha)
    assert abs(S.detectable_rate(1000) - np.log(10) / 1000) < 1e-15


def test_stratified_test_pools_small_cells_and_flags_impossible_events():
    probs = np.array([[0.5, 0.3, 0.19, 0.01, 0.0]])
    ok = S.stratified_gof([[500, 300, 190, 10, 0]], probs, 1e-6)
    assert ok.passed and ok.df == 2            # the 0.01 cell (10 expected) pooled
    bad = S.stratified_gof([[500, 300, 189, 10, 1]], probs, 1e-6)
    assert not bad.passed and bad.impossible == [(0, 4, 1)]
    shifted = S.stratified_gof([[300, 500, 190, 10, 0]], probs, 1e-6)
    assert not shifted.passed and shifted.pvalue < 1e-6


def test_independence_test_sees_dependence_not_laws():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, 20000), rng.integers(0, 4, 20000)
    indep = np.zeros((4, 4))
    np.add.at(indep, (a, b), 1)
    skewed = indep.copy()
    skewed[0] *= 3                              # another law, still independent
    assert S.independence_gof([indep], 1e-6).passed
    assert S.independence_gof([skewed], 1e-6).passed
    same = np.diag(np.bincount(a, minlength=4)).astype(float)
    assert not S.independence_gof([same], 1e-6).passed


# ----------------------------------------------------------------------------- exact laws
def _tolerance(design):
    """1e-12, plus the reference's convention: it weighs drafts by q's float32 values, which
    sum to 1 only up to float32 rounding for decimal rows."""
    q = design.draft
    if q is None:
        return 1e-12
    err = max(abs(float(np.asarray(q(pre), np.float32).astype(np.float64).sum()) - 1)
              for j in range(design.K) for pre in [(0,) * j, (1,) * j])
    return 1e-12 + 4 * design.K * err


@pytest.mark.parametrize("method", D.KIT_CHAIN_METHODS)
def test_chain_raw_laws_complete_to_the_reference_law(method):
    for d in D.chain_designs():
        if d.role == "robustness":
            continue
        joint = L.chain_joint(d, method)
        ref = L.chain_reference(d, method)
        raw = L.output_marginal(joint)
        assert abs(sum(joint.values()) - 1) < 1e-12, d.name
        comp = L.complete(raw, d.target, d.V, d.K + 1)
        assert np.abs(comp - ref["law"]).max() <= _tolerance(d), d.name
        lengths = np.bincount([len(o) - 1 for o in raw], weights=list(raw.values()),
                              minlength=d.K + 1)
        assert np.abs(lengths - ref["length_law"]).max() <= _tolerance(d), d.name


@pytest.mark.parametrize("method", D.KIT_TREE_METHODS)
def test_tree_raw_laws_complete_to_the_reference_law(method):
    for d in D.tree_designs():
        if d.name == "binary_depth2":         # 1-2 s each: the full tier
            continue
        raw = L.output_marginal(L.tree_joint(d, method))
        ref = L.tree_reference(d, method)
        _, depth = L.tree_shape(d)
        comp = L.complete(raw, d.target, d.V, depth + 1)
        assert np.abs(comp - ref["law"]).max() <= 1e-12, d.name
        lengths = np.bincount([len(o) - 1 for o in raw], weights=list(raw.values()),
                              minlength=depth + 1)
        assert np.abs(lengths - ref["length_law"]).max() <= 1e-12, d.name
        assert ref["tv"] <= 1e-12, d.name      # and the reference's law is the target's


def test_boundary_designs_forbid_what_they_should():
    """equal_rows: no rejection is possible; one_hot_draft: the rejected draft is never
    emitted; zero_target_draft: the last draft is never accepted."""
    by = {d.name: d for d in D.chain_designs()}
    for out in L.output_marginal(L.chain_joint(by["equal_rows"])):
        assert len(out) == 4
    for (d, out) in L.chain_joint(by["one_hot_draft"]):
        if len(out) <= 3:
            assert out[-1] != d[len(out) - 1]
    for (d, out) in L.chain_joint(by["zero_target_draft"]):
        assert len(out) == 2 and out[-1] in (0, 1)


# ----------------------------------------------------------------------------- the kit
FEW = ["markov", "equal_rows", "accept_residual"]


def test_kit_passes_the_reference_at_tiny_n():
    rep = C.check_chain(native.chain_reference, scale=0.005, designs=FEW)
    assert rep.passed, rep.to_text()
    ids = {c.id for c in rep.checks}
    assert {"output.well_formed", "boundary.zero_target_prob", "boundary[equal_rows]",
            "law.output[markov]", "law.length[markov]", "law.next_token[markov]",
            "coupling.accept_residual[accept_residual]", "seeds.reproducible[markov]",
            "seeds.batch_invariant[markov]"} <= ids
    for c in rep.statistical:
        assert c.alpha == 1e-6 and c.n > 0, c
        assert (c.df >= 1 and 0 < c.detectable <= 1) or "too few" in c.detail, c
    assert rep.check("law.output[markov]").df >= 1
    assert rep.family_alpha == pytest.approx(1e-6 * len(rep.statistical))
    assert json.loads(rep.to_json())["passed"] is True
    html = rep.to_html()
    assert "<svg" in html and "law.output[markov]" in html and "http" not in html.lower()


def test_coin_le_p_with_zero_coins_is_caught_by_the_boundary_probe():
    """sglang #35771: `coin <= p` accepts a draft of target probability 0 when the coin is
    exactly 0 (1/256 of bfloat16 coins): no statistics, an impossible event."""
    rep = C.check_chain(NG.coin_le_p_bf16, scale=0.05, designs=["zero_target_draft"])
    failed = {c.id for c in rep.failed}
    assert {"boundary.zero_target_prob", "boundary[zero_target_draft]"} <= failed
    assert "zero-probability token" in rep.check("boundary.zero_target_prob").detail
    exact = C.check_chain(NG.exact_chain, scale=0.05, designs=["zero_target_draft"])
    assert exact.passed, exact.to_text()


def test_wrong_fallback_is_caught_without_statistics():
    """Sampling p after rejecting y under a one-hot q can emit y: forbidden."""
    rep = C.check_chain(NG.wrong_fallback, scale=0.05, designs=["one_hot_draft"])
    assert rep.check("boundary[one_hot_draft]").failed, rep.to_text()
    assert "forbids" in rep.check("boundary[one_hot_draft]").detail


def _bad(kind):
    def sampler(target_probs, draft_probs, draft_token_ids, seeds):
        out = NG.exact_chain(target_probs, draft_probs, draft_token_ids, seeds)
        if kind == "shape":
            return out[:, :-1]
        if kind == "range":
            out[0, 0] = target_probs.shape[-1]
        if kind == "gap":
            out[:, 0], out[:, -1] = -1, 0
        if kind == "prefix":
            out[:, 0] = (draft_token_ids[:, 0] + 1) % target_probs.shape[-1]
            out[:, 1], out[:, 2:] = 0, -1       # "accepted" a token that is not the draft
        if kind == "raise":
            raise RuntimeError("kernel launch failed")
        if kind == "batch":                    # seeded, but a request's stream depends on
            return NG.exact_chain(target_probs, draft_probs, draft_token_ids,  # its place
                                  seeds + torch.arange(len(seeds)))
        return out
    return sampler


@pytest.mark.parametrize("kind", ["shape", "range", "gap", "prefix", "raise"])
def test_malformed_output_fails_well_formed_without_crashing(kind):
    rep = C.check_chain(_bad(kind), scale=0.002, designs=["markov"])
    assert rep.check("output.well_formed").failed, rep.to_text()
    if kind == "raise":
        assert "kernel launch failed" in rep.check("output.well_formed").detail


def test_batch_dependence_fails_and_unseeded_is_reported_not_failed():
    rep = C.check_chain(_bad("batch"), scale=0.002, designs=["markov"])
    assert rep.check("seeds.batch_invariant[markov]").failed
    unseeded = C.check_chain(NG.unseeded_chain, scale=0.002, designs=["markov"])
    assert unseeded.passed and unseeded.unseeded
    assert unseeded.check("seeds.reproducible[markov]").status == "unseeded"


def test_api_refuses_bad_arguments():
    with pytest.raises(ValueError, match="method"):
        C.check_chain(native.chain_cpu, method="rsd")
    with pytest.raises(ValueError, match="designs"):
        C.check_tree(native.tree_cpu, designs=["nope"])
    with pytest.raises(TypeError, match="callable"):
        C.check_chain(42)


def test_the_kit_has_its_own_method_names():
    """The contract's CHAIN_METHODS / TREE_METHODS are what verify_block / verify_tree take;
    the kit's sets (with target_only, without traversal) must not reuse those names."""
    from specops import _contract
    from specops.conformance import cli as kit_cli
    assert D.KIT_TREE_METHODS != _contract.TREE_METHODS and "target_only" in D.KIT_TREE_METHODS
    for module in (L, kit_cli, C):
        assert not hasattr(module, "CHAIN_METHODS") and not hasattr(module, "TREE_METHODS")
    assert C.KIT_CHAIN_METHODS == D.kit_methods("chain") == ("token", "block")


def test_the_files_the_kit_cites_exist():
    import glob
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cited = set()
    for path in glob.glob(os.path.join(root, "specops", "conformance", "*.py")):
        cited |= set(re.findall(r"\btests/[\w/]+\.py\b", open(path).read()))
    assert cited, "the kit cites its tests"
    assert all(os.path.exists(os.path.join(root, c)) for c in cited), cited


# ----------------------------------------------------------------------------- misbehaving samplers
class _Exits:
    """Raises SystemExit: at once, after `after` good calls, or from its output's __array__."""

    def __init__(self, after=0, from_output=False):
        self.after, self.from_output, self.calls = after, from_output, 0

    def __call__(self, target_probs, draft_probs, draft_token_ids, seeds):
        self.calls += 1
        if self.from_output:
            class Exploding:
                def __array__(self, *a, **k):
                    raise SystemExit(0)
            return Exploding()
        if self.calls > self.after:
            raise SystemExit(0)
        return NG.exact_chain(target_probs, draft_probs, draft_token_ids, seeds)


@pytest.mark.parametrize("sampler", [_Exits(), _Exits(after=3), _Exits(from_output=True)],
                         ids=["first_call", "later", "from_output"])
def test_a_sampler_that_exits_fails_the_run(sampler):
    """SystemExit is a BaseException: it used to go through every `except Exception` and
    end `specops check` with exit status 0 and no output."""
    rep = C.check_chain(sampler, scale=0.002, designs=["markov"])
    assert not rep.passed
    assert any("SystemExit" in c.detail for c in rep.failed), rep.to_text()


def test_keyboard_interrupt_is_not_swallowed():
    def interrupted(*args):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        C.check_chain(interrupted, scale=0.002, designs=["markov"])


_release = threading.Event()


def _hangs_after(calls):
    count = [0]

    def sampler(target_probs, draft_probs, draft_token_ids, seeds):
        count[0] += 1
        if count[0] > calls:
            _release.wait(60)                   # a hang the test ends afterwards
        return NG.exact_chain(target_probs, draft_probs, draft_token_ids, seeds)
    return sampler


@pytest.mark.parametrize("calls", [0, 2], ids=["first_call", "later"])
def test_a_hanging_sampler_fails_naming_the_timeout(calls):
    t0 = time.perf_counter()
    try:
        rep = C.check_chain(_hangs_after(calls), scale=0.002, designs=["markov", "sun_toy"],
                            timeout=0.3)
    finally:
        _release.set()
    assert time.perf_counter() - t0 < 10
    assert not rep.passed
    timeout = rep.check("sampler.timeout")
    assert timeout.failed and "0.3 s" in timeout.detail and "sun_toy" in timeout.detail
    _release.clear()
    fine = C.check_chain(_hangs_after(10 ** 6), scale=0.002, designs=["markov"], timeout=5)
    assert fine.passed, fine.to_text()                  # a limit that is not hit: no check
    assert all(c.name != "sampler.timeout" for c in fine.checks)


def test_the_sampler_thread_keeps_the_callers_grad_mode():
    seen = set()

    def sampler(*args):
        seen.add((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
        return NG.exact_chain(*args)
    with torch.no_grad():
        C.check_chain(sampler, scale=0.002, designs=["markov"])
    with torch.inference_mode():
        C.check_chain(sampler, scale=0.002, designs=["markov"])
    assert seen == {(False, False), (False, True)}


def test_usage_errors_of_the_api():
    with pytest.raises(ValueError, match="valid for chain: sun_toy, markov"):
        C.check_chain(NG.exact_chain, designs=[])
    with pytest.raises(ValueError, match="valid for tree: v4_two_children"):
        C.check_tree(NG.exact_tree, designs=["markov"])
    for scale in (float("inf"), float("nan"), 1e9, -1, "x"):
        with pytest.raises(ValueError, match="scale"):
            C.check_chain(NG.exact_chain, scale=scale)
    with pytest.raises(ValueError, match="--kind chain"):
        C.check_tree(NG.exact_chain)
    with pytest.raises(ValueError, match="--kind tree"):
        C.check_chain(NG.exact_tree)
    with pytest.raises(ValueError, match="timeout"):
        C.check_chain(NG.exact_chain, timeout=-1)
    # a signature that takes anything is not refused
    rep = C.check_chain(lambda *args: NG.exact_chain(*args), scale=0.002, designs=["markov"])
    assert rep.passed, rep.to_text()


# ----------------------------------------------------------------------------- the report
def test_a_short_output_is_malformed_not_unseeded():
    """[B, K] instead of [B, K+1]: every row is unreadable, so the seed probe compares
    nothing (not "unseeded: ignores its seeds"), and the zero-probability rule checked nothing
    (not "pass")."""
    rep = C.check_chain(_bad("shape"), scale=0.002, designs=["markov"])
    assert not rep.unseeded
    assert rep.check("seeds.reproducible[markov]").status == "fail"
    assert "no well-formed output" in rep.check("seeds.reproducible[markov]").detail
    assert rep.check("boundary.zero_target_prob").status == "fail"
    assert rep.hint == ""                          # a malformed output gets no pattern hint


def test_failing_rows_show_what_failed():
    """A law check failed by outcomes of probability 0 shows their count and p = 0, not the
    Pearson figures of its other cells (which look like a pass); the exact sampler's row
    shows its Pearson test."""
    bad = C.check_chain(NG.wrong_fallback, scale=0.05, designs=["sun_toy"])
    row = bad.check("law.next_token[sun_toy]")
    assert row.failed and row.forbidden > 0 and row.pvalue == 0.0
    assert "after the accepted prefix (empty)" in row.detail
    line = next(x for x in bad.to_text().splitlines() if x.startswith(row.id))
    assert f"{row.forbidden:,} forbidden" in line and "X2=" not in line
    good = C.check_chain(NG.exact_chain, scale=0.05, designs=["sun_toy", "disjoint"])
    line = next(x for x in good.to_text().splitlines()
                if x.startswith("law.next_token[sun_toy]"))
    assert "X2=" in line and "forbidden" not in line
    single = good.check("law.length[disjoint]")      # every draft is rejected: one outcome
    assert not single.failed and "single outcome" in single.detail


def test_the_detail_column_is_wrapped_not_cut():
    rep = C.check_chain(_bad("raise"), scale=0.002, designs=["markov"])
    long = "word " * 60 + "the end"
    rep.checks[0].detail = long
    for width in (60, 100, 200):
        text = rep.to_text(width=width)
        assert " ".join(long.split()) in " ".join(text.split())
        table = text[text.index("check "):text.index("\nFAIL")]
        assert max(len(x) for x in table.splitlines()) <= max(width, len(
            table.splitlines()[1]) + 2 + 40)
    assert rep.to_text(width=80).count(rep.sampler) == 1


@pytest.mark.parametrize("name,designs", [
    ("wrong_fallback", ["sun_toy", "markov", "one_hot_draft"]),
    ("coin_reused_for_residual", ["random_prefix", "accept_residual", "positions"])])
def test_the_hint_names_the_matching_negative_control(name, designs):
    rep = C.check_chain(getattr(NG, name), scale=0.05, designs=designs)
    assert rep.hint.startswith(f"this failure pattern matches the negative control {name!r}")
    assert rep.hint in rep.to_text() and json.loads(rep.to_json())["hint"] == rep.hint
    assert C.check_chain(NG.exact_chain, scale=0.05, designs=designs).hint == ""


# ----------------------------------------------------------------------------- CLI
def test_cli_exit_codes(tmp_path, capsys):
    base = ["check", "--quick", "--scale", "0.002", "--designs", "markov,equal_rows"]
    html = tmp_path / "r.html"
    assert cli.main(base + ["specops.conformance.negative:exact_chain", "--report",
                            str(html)]) == 0
    assert "<svg" in html.read_text()
    assert cli.main(base + ["specops.conformance.negative:exact_chain", "--repeat", "2"]) == 0
    assert "2 of 2 runs passed" in capsys.readouterr().out
    assert cli.main(base + ["specops.conformance.negative:target_row_off_by_one",
                            "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is False and "boundary[equal_rows]" in out["failed"]
    for bad in (["nosuch.module:f"], ["specops.conformance.negative:nothing"],
                ["specops.conformance.negative"], ["specops.conformance:__doc__"],
                ["specops.conformance.negative:exact_chain", "--method", "rsd"],
                ["specops.conformance.negative:exact_tree", "--kind", "tree", "--method",
                 "block"],
                ["specops.conformance.negative:exact_chain", "--report", str(tmp_path)],
                ["specops.conformance.negative:exact_chain", "--scale", "0"]):
        assert cli.main(["check"] + bad) == 2, bad
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "x:y", "--kind", "graph"])
    assert exc.value.code == 2


def _exits(target_probs, draft_probs, draft_token_ids, seeds):
    raise SystemExit(0)


def _prints(target_probs, draft_probs, draft_token_ids, seeds):
    print("DEBUG: verifying", tuple(target_probs.shape), "{not json")
    os.write(1, b"C-level print {not json\n")
    return NG.exact_chain(target_probs, draft_probs, draft_token_ids, seeds)


def _hangs(target_probs, draft_probs, draft_token_ids, seeds):
    _release.wait(60)
    return NG.exact_chain(target_probs, draft_probs, draft_token_ids, seeds)


TINY = ["--quick", "--scale", "0.002", "--designs", "markov"]


def test_cli_a_sampler_that_exits_or_hangs_exits_1(capsys):
    assert cli.main(["check", "tests.test_conformance:_exits", *TINY]) == 1
    assert "SystemExit" in capsys.readouterr().out
    _release.clear()
    try:
        t0 = time.perf_counter()
        assert cli.main(["check", "tests.test_conformance:_hangs", *TINY, "--timeout",
                         "0.3"]) == 1
        assert time.perf_counter() - t0 < 10
    finally:
        _release.set()
    out = capsys.readouterr().out
    assert "sampler.timeout" in out and "did not return within 0.3 s" in out
    _release.clear()
    try:                                # --repeat: no second run beside the hung call
        assert cli.main(["check", "tests.test_conformance:_hangs", *TINY, "--timeout",
                         "0.3", "--repeat", "3"]) == 1
    finally:
        _release.set()
    assert "0 of 1 runs passed (kit seeds 0..0; stopped after a timeout, 2 not run)" in \
        capsys.readouterr().out


def test_cli_a_module_that_exits_on_import_is_a_usage_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "kit_exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    ns = tmp_path / "kit_namespace_pkg"
    ns.mkdir()
    (ns / "sampler.py").write_text("def sampler(*a):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["check", "kit_exits_on_import:sampler", *TINY]) == 2
    assert "SystemExit" in capsys.readouterr().err
    assert cli.main(["check", "kit_namespace_pkg:sampler", *TINY]) == 2
    err = capsys.readouterr().err
    assert "namespace package" in err and str(ns) in err       # the directory it imported


@pytest.mark.parametrize("args,says", [
    (["--scale", "inf"], "--scale"), (["--scale", "nan"], "--scale"),
    (["--scale", "1e9"], "scale <= 1000"), (["--designs", ","], "valid for --kind chain"),
    (["--designs", "nosuch"], "sun_toy, markov"), (["--report", "DIR.html"], "directory"),
    (["--timeout", "-1"], "--timeout"), (["--timeout", "inf"], "--timeout"),
    (["--kind", "tree"], "--kind chain"), (["--seed", "-1"], "--seed")])
def test_cli_usage_errors_are_one_line(args, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR.html").mkdir()
    assert cli.main(["check", "specops.conformance.negative:exact_chain", "--quick",
                     *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured
    assert says in captured.err and "Traceback" not in captured.err


def test_cli_a_tree_sampler_under_the_chain_protocol_is_a_usage_error(capsys):
    assert cli.main(["check", "specops.conformance.negative:exact_tree", "--quick"]) == 2
    assert "run it with --kind tree" in capsys.readouterr().err


def test_cli_sampler_prints_do_not_corrupt_json(capfd):
    assert cli.main(["check", "tests.test_conformance:_prints", *TINY, "--json"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["passed"] is True
    assert "DEBUG: verifying" in err and "C-level print" in err
    print("after")                                             # stdout is stdout again
    os.write(1, b"fd after\n")
    assert capfd.readouterr().out == "after\nfd after\n"


def test_cli_prints_the_preamble_once(capsys):
    assert cli.main(["check", "specops.conformance.negative:exact_chain", *TINY]) == 0
    captured = capsys.readouterr()
    both = captured.out + captured.err
    assert both.count("quick run:") == 1 and both.count("(chain, method token") == 1
    assert captured.out.index("quick run:") < captured.out.index("output.well_formed")


def test_cli_help_states_the_protocol(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("CPU torch tensors passed positionally", "numpy array", "seeds[b]",
                   'pip install "specops[check]"', "--timeout", "one_hot_draft",
                   "v4_two_children"):
        assert phrase in text, phrase
    doc = " ".join(C.__doc__.split())
    for phrase in ("CPU torch tensors", "passed positionally", "numpy array",
                   "``seeds[b]`` alone", "any integer dtype"):
        assert phrase in doc, phrase


def _kit_subprocess(tmp_path, sampler_code, *args, timeout=120):
    (tmp_path / "kit_sampler_mod.py").write_text(sampler_code)
    return subprocess.run([sys.executable, "-m", "specops", "check", "kit_sampler_mod:f",
                           *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=timeout)


@pytest.mark.full                        # fresh interpreters, and a watchdog's 5 s of grace
def test_cli_hangs_end_in_a_failing_exit_status(tmp_path):
    """A sleeping sampler: the report names the limit, exit 1.  One stuck in C code that
    holds the GIL (where even the kit's wait cannot wake): faulthandler's watchdog ends the
    process with exit status 1 a few seconds later, never 0, never a hang."""
    t0 = time.perf_counter()
    p = _kit_subprocess(tmp_path, "import time\ndef f(*a):\n    time.sleep(3600)\n",
                        "--quick", "--timeout", "1")
    assert p.returncode == 1, p.stderr
    assert "sampler.timeout" in p.stdout and time.perf_counter() - t0 < 60
    p = _kit_subprocess(tmp_path, "import ctypes\ndef f(*a):\n"
                        "    ctypes.PyDLL(None).sleep(3600)\n", "--quick", "--timeout", "1")
    assert p.returncode == 1 and "Timeout" in p.stderr, p.stderr
