"""The conformance kit (``specops check``), fast tier: its statistics against scipy, its exact
laws against the reference's, the kit end to end on the reference at tiny N, a negative
control caught by a boundary probe, malformed and unseeded samplers, and the CLI's exit codes.
The slow runs (quick runs of every backend, every negative control) are in
``tests/test_conformance_full.py``."""
from __future__ import annotations

import json
import os

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

scipy_stats = pytest.importorskip("scipy.stats")


# ----------------------------------------------------------------------------- statistics
def test_chi_square_tails_match_scipy():
    for df in (1, 2, 7, 40, 300):
        for x in (0.05, 1.0, 6.0, 45.0, 150.0, 900.0):
            want = scipy_stats.chi2.sf(x, df)
            assert abs(S.chi2_sf(x, df) - want) <= 1e-12 + 1e-9 * want, (df, x)
        for alpha in (1e-6, 1e-3, 0.5):
            want = scipy_stats.chi2.isf(alpha, df)
            assert abs(S.chi2_isf(alpha, df) - want) <= 1e-7 * want
        for lam in (0.3, 12.0, 150.0):
            for x in (3.0, 60.0, 250.0):
                assert abs(S.ncx2_sf(x, df, lam) - scipy_stats.ncx2.sf(x, df, lam)) < 1e-9


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
