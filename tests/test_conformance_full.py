"""The conformance kit, full tier: quick runs on specops' backends and methods, every negative
control failing for the reason it was built for, the slow exact laws, and the calibration of
the kit's chi-square tests at its own N (simulated from the exact laws)."""
from __future__ import annotations

import numpy as np
import pytest

import specops
from specops import conformance as C
from specops.conformance import designs as D
from specops.conformance import laws as L
from specops.conformance import negative as NG
from specops.conformance import runner
from specops.conformance import stats as S
from specops.conformance.adapters import flashinfer, native, sglang

pytestmark = pytest.mark.full


@pytest.mark.parametrize("sampler,method", [
    (native.chain_cpu, "token"), (native.chain_cpu_block, "block"),
    (native.chain_unfused, "token"),
    (flashinfer.specops_flashinfer_signature, "token")])
def test_quick_run_passes_specops_chain_samplers(sampler, method):
    if "cpu" not in specops.available_backends():
        pytest.skip("C++ backend not built")
    rep = C.check_chain(sampler, method, quick=True, seed=3)
    assert rep.passed, rep.to_text()
    assert not rep.unseeded and len(rep.statistical) >= 25


@pytest.mark.parametrize("method", D.KIT_TREE_METHODS)
def test_quick_run_passes_specops_tree_verifier(method):
    if "cpu" not in specops.available_backends():
        pytest.skip("C++ backend not built")
    rep = C.check_tree(native.tree_cpu, method, quick=True, seed=4)
    assert rep.passed, rep.to_text()
    sgl = C.check_tree(sglang.specops_tree, method, scale=0.05, seed=5)
    assert sgl.passed, sgl.to_text()


def test_reference_and_block_reference_pass_at_small_n():
    for sampler, method in ((native.chain_reference, "token"),
                            (native.chain_reference_block, "block")):
        rep = C.check_chain(sampler, method, scale=0.01, seed=6)
        assert rep.passed, rep.to_text()
    rep = C.check_tree(native.tree_reference, "rsd", scale=0.01, seed=6)
    assert rep.passed, rep.to_text()


def test_the_wrong_method_is_caught():
    """Block verification is exact but is not token-wise: its length law differs."""
    rep = C.check_chain(native.chain_cpu_block, "token", quick=True, seed=8)
    assert any(c.name == "law.length" for c in rep.failed), rep.to_text()
    assert all(c.name != "law.output" for c in rep.failed), rep.to_text()


@pytest.mark.parametrize("name", sorted(NG.EXPECTED))
def test_every_negative_control_fails_for_its_reason(name):
    kind, method, expected = NG.EXPECTED[name]
    check = C.check_chain if kind == "chain" else C.check_tree
    rep = check(getattr(NG, name), method, quick=True, seed=9)
    assert not rep.passed
    caught = [c.id for c in rep.failed if c.name in expected]
    assert caught, (name, [c.id for c in rep.failed])
    assert all(c.id in rep.to_text() for c in rep.failed)
    # the report's hint names the control itself (its pattern, NG.PATTERNS, is this run's)
    assert rep.hint.startswith(f"this failure pattern matches the negative control {name!r}"), \
        (rep.hint, [c.id for c in rep.failed])


@pytest.mark.parametrize("name", sorted(NG.POSITIVE))
def test_positive_controls_pass(name):
    kind, method = NG.POSITIVE[name]
    check = C.check_chain if kind == "chain" else C.check_tree
    rep = check(getattr(NG, name), method, quick=True, seed=10)
    assert rep.passed, rep.to_text()
    assert rep.unseeded == (name == "unseeded_chain")
    assert rep.hint == ""


@pytest.mark.parametrize("method", D.KIT_TREE_METHODS)
def test_binary_tree_laws_complete_to_the_reference_law(method):
    d = next(d for d in D.tree_designs() if d.name == "binary_depth2")
    raw = L.output_marginal(L.tree_joint(d, method))
    ref = L.tree_reference(d, method)
    comp = L.complete(raw, d.target, d.V, 3)
    assert np.abs(comp - ref["law"]).max() <= 1e-12


def _simulated_pvalues(design, method, n, reps, rng):
    """p-values of the kit's three law tests on samples drawn from the exact laws."""
    raw = L.output_marginal(L.chain_joint(design, method))
    ref = L.chain_reference(design, method)
    outs = list(raw)
    praw = np.array([raw[o] for o in outs])
    prefixes = sorted({o[:-1] for o in outs})
    toks = sorted({o[-1] for o in outs})
    cell = np.array([prefixes.index(o[:-1]) * len(toks) + toks.index(o[-1]) for o in outs])
    cond = np.bincount(cell, praw, len(prefixes) * len(toks)).reshape(len(prefixes), -1)
    cond /= cond.sum(1, keepdims=True)
    length, law = ref["length_law"], ref["law"].ravel()
    lens = np.array([len(o) - 1 for o in outs])
    draws = rng.multinomial(n, praw / praw.sum(), size=reps)
    full = rng.multinomial(n, law / law.sum(), size=reps)
    res = []
    for c, f in zip(draws, full):
        nxt = np.bincount(cell, c, cond.size).reshape(cond.shape)
        res.append((S.stratified_gof([f], [law], 1e-6).pvalue,
                    S.stratified_gof([np.bincount(lens, c, len(length))], [length],
                                     1e-6).pvalue,
                    S.stratified_gof(nxt, cond, 1e-6).pvalue))
    return np.array(res)


def test_chi_square_tests_are_calibrated_at_the_kits_n():
    """Under the exact laws (multinomial samples at the quick run's N), the fraction of
    p-values below 1e-3 stays near 1e-3: pooling at MIN_EXPECTED keeps the asymptotics in the
    tail (1e-6 itself cannot be simulated; the 20 repeated quick runs are that check)."""
    rng = np.random.default_rng(11)
    reps = 1000
    total = below = 0
    for d in D.chain_designs():
        if d.role != "law":
            continue
        p = _simulated_pvalues(d, "token", runner.QUICK_N, reps, rng)
        below += int((p < 1e-3).sum())
        total += p.size
    # 7 designs x 3 tests x 1000 = 21000 p-values, 21 expected below 1e-3; P(>= 50) < 1e-6
    assert below < 50, (below, total)
