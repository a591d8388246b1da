"""The rejection-sampling lab: model, one-token algebra, speed accounting, traces."""
import math

import numpy as np
import pytest
import torch

import specops
from specops import audit, lab
from specops import reference as R

BACKENDS = lab.available_backends()
KNOB_SETS = [lab.DEFAULT_KNOBS,
             lab.Knobs(certainty=0.0, match=0.0, gamma=2, seed=3),
             lab.Knobs(certainty=1.0, match=0.3, gamma=3, seed=5),
             lab.Knobs(certainty=0.9, match=1.0, gamma=1, seed=11),
             lab.Knobs(certainty=0.3, match=0.5, gamma=16, cost=0.0, seed=2 ** 63 - 1)]


# ----------------------------------------------------------------------------- knobs
@pytest.mark.parametrize("name,value", [
    ("certainty", -0.01), ("certainty", 1.01), ("certainty", float("nan")),
    ("certainty", "abc"), ("match", float("inf")), ("match", [0.5]), ("gamma", 0),
    ("gamma", 17), ("gamma", 2.5), ("gamma", True), ("gamma", "three"), ("cost", -0.1),
    ("cost", 101), ("length", 0), ("length", 100_001), ("seed", -1), ("seed", 2 ** 63),
    ("seed", 0.5)])
def test_bad_knob_rejected_with_its_name(name, value):
    with pytest.raises(lab.KnobError, match=repr(name)) as info:
        lab.sanitize_knobs(**{name: value})
    assert isinstance(info.value, ValueError)
    assert "must be" in str(info.value)


def test_unknown_knob_rejected():
    with pytest.raises(lab.KnobError, match="unknown knob 'temperature'"):
        lab.sanitize_knobs(temperature=0.5)


def test_knobs_sanitised():
    k = lab.sanitize_knobs(gamma="5", length=10.0, cost="0.25", seed=np.int64(9), match=1)
    assert (k.gamma, k.length, k.cost, k.seed, k.match) == (5, 10, 0.25, 9, 1.0)
    assert isinstance(k.gamma, int) and isinstance(k.length, int)
    assert isinstance(k.match, float)
    assert lab.sanitize_knobs() == lab.DEFAULT_KNOBS
    assert lab.sanitize_knobs(k, cost=None) == k          # None keeps the current value
    with pytest.raises(lab.KnobError):
        lab.build_model(lab.Knobs(gamma=0))


# ----------------------------------------------------------------------------- model
def test_quantize_exact():
    rng = np.random.default_rng(0)
    for _ in range(50):
        x = rng.random(8) ** 4
        x[rng.random(8) < 0.3] = 0
        if x.sum() == 0:
            continue
        q = lab.quantize(x)
        assert q.dtype == np.float32
        assert q.astype(np.float64).sum() == 1.0
        assert np.float32(q.sum(dtype=np.float32)) == 1.0
        assert ((q == 0) >= (x == 0)).all()                 # zeros stay zero
        assert np.all(lab.counts_of(q) == q.astype(np.float64) * 2 ** 20)
        assert np.abs(q - x / x.sum()).max() <= 2.0 ** -20
    with pytest.raises(ValueError):
        lab.quantize(np.zeros(8))


@pytest.mark.parametrize("knobs", KNOB_SETS)
def test_model_rows(knobs):
    m = lab.build_model(knobs)
    for rows in (m.target, m.draft):
        assert rows.shape == (8, 8) and rows.dtype == np.float32
        assert (rows >= 0).all()
        assert (rows.astype(np.float64).sum(axis=1) == 1.0).all()
    if knobs.match == 1.0:
        assert np.array_equal(m.target, m.draft)
    if knobs.certainty == 1.0:
        assert ((m.target == 1.0).sum(axis=1) == 1).all()
    if knobs.certainty == 0.0:
        assert np.abs(m.target - 0.125).max() <= 2.0 ** -20
    m2 = lab.build_model(knobs)
    assert np.array_equal(m.target, m2.target) and np.array_equal(m.draft, m2.draft)


def test_certainty_and_match_do_what_they_say():
    ent = []
    for c in (0.0, 0.3, 0.6, 0.9):
        p = lab.build_model(lab.Knobs(certainty=c)).target.astype(np.float64)
        ent.append(float(-(p * np.log(np.where(p > 0, p, 1))).sum()))
    assert ent == sorted(ent, reverse=True)
    alphas = [lab.mean_alpha(lab.build_model(lab.Knobs(match=m))) for m in (0.0, 0.5, 1.0)]
    assert alphas == sorted(alphas) and alphas[-1] == 1.0


# ----------------------------------------------------------------------------- one token
@pytest.mark.parametrize("knobs", KNOB_SETS)
def test_one_token_algebra(knobs):
    m = lab.build_model(knobs)
    for s in range(lab.V):
        v = lab.one_token_view(m, s)
        p, q = v["p"], v["q"]
        assert np.array_equal(v["accepted"], np.minimum(p, q))
        assert abs(v["alpha"] - (1 - v["tv_pq"])) <= 1e-15
        assert abs(v["residual_mass"] - (1 - v["alpha"])) <= 1e-15
        assert abs(v["rejection_mass"] - (1 - v["alpha"])) <= 1e-15
        assert abs(v["residual"].sum() - 1) <= 1e-15
        if v["residual_mass"] > 0:
            assert np.abs(v["residual"] - v["residual_raw"] / v["residual_mass"]).max() <= 1e-15
        assert v["corrected_tv"] <= 1e-12
        assert np.abs(v["corrected"] - p).max() <= 1e-15
        # wrong fallback: min(p, q) + (1 - alpha) p, off by (1 - alpha) TV(p, residual)
        expect = v["rejection_mass"] * lab.tv(p, v["residual"])
        assert abs(v["wrong_tv"] - expect) <= 1e-14


def test_wrong_fallback_biased_at_defaults():
    v = lab.one_token_view(lab.build_model())
    assert v["wrong_tv"] > 1e-3
    assert 0.3 < v["alpha"] < 0.95


def test_no_bias_when_draft_equals_target():
    v = lab.one_token_view(lab.build_model(lab.Knobs(match=1.0)))
    assert v["alpha"] == 1.0 and v["wrong_tv"] == 0.0 and v["rejection_mass"] == 0.0


@pytest.mark.parametrize("knobs", KNOB_SETS[:4])
def test_exact_law(knobs):
    m = lab.build_model(knobs)
    K = min(knobs.gamma, 2)
    res = lab.exact_law(m, K)
    assert res["tv"] <= 1e-12
    assert np.abs(audit.length_law_markov(m, K) - res["length_law"]).max() <= 1e-12
    wrong = lab.exact_law(m, K, fallback="p")
    if knobs.match < 1 and knobs.certainty < 1:
        assert wrong["tv"] > 1e-4


def test_exact_law_first_token_marginal_is_the_one_token_view():
    m = lab.build_model()
    res = lab.exact_law(m, 1)
    v = lab.one_token_view(m)
    assert np.abs(res["law"].sum(axis=1) - v["p"]).max() <= 1e-15
    wrong = lab.exact_law(m, 1, fallback="p")
    assert np.abs(wrong["law"].sum(axis=1) - v["wrong"]).max() <= 1e-15


# ----------------------------------------------------------------------------- speed
def test_speedup_estimate():
    for a in (0.0, 0.3, 0.77, 0.999):
        for g in (1, 4, 16):
            for c in (0.0, 0.1, 2.0):
                geo = sum(a ** i for i in range(g + 1))
                closed = (1 - a ** (g + 1)) / ((1 - a) * (g * c + 1))
                assert math.isclose(lab.estimated_speedup(a, g, c), geo / (g * c + 1),
                                    rel_tol=1e-12)
                assert math.isclose(lab.estimated_speedup(a, g, c), closed, rel_tol=1e-12)
    assert lab.estimated_speedup(1.0, 4, 0.5) == 5 / 3
    assert lab.estimated_speedup(0.0, 4, 0.5) == 1 / 3
    curve = lab.speedup_curve(0.8, 0.1)
    assert curve["gammas"] == list(range(1, 17))
    assert curve["best_speedup"] == max(curve["speedups"])
    assert curve["speedups"][curve["best_gamma"] - 1] == curve["best_speedup"]
    assert lab.speedup_curve(1.0, 0.0)["best_gamma"] == 16
    assert lab.speedup_curve(0.0, 0.5)["best_gamma"] == 1


def test_mean_alpha():
    m = lab.build_model()
    assert lab.mean_alpha(m, 1) == lab.one_token_view(m)["alpha"]
    assert 0 < lab.mean_alpha(m) <= 1


# ----------------------------------------------------------------------------- traces
@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.full) if b == "triton"
                                     else b for b in BACKENDS])
def test_trace_exact_length_deterministic_and_balanced(backend):
    for knobs in (lab.DEFAULT_KNOBS, lab.Knobs(gamma=3, length=7, seed=4, cost=0.3)):
        m = lab.build_model(knobs)
        t = lab.run_trace(m, backend)
        assert len(t.tokens) == knobs.length and not t.errors
        assert all(0 <= x < 8 for x in t.tokens)
        assert t.target_calls == len(t.ledger)
        assert t.draft_calls == knobs.gamma * t.target_calls
        assert math.isclose(t.total_cost, t.target_calls + knobs.cost * t.draft_calls,
                            rel_tol=1e-12)
        assert sum(e["kept"] for e in t.ledger) == knobs.length
        assert all(e["kept"] == e["emitted"] == e["accepted"] + 1 for e in t.ledger[:-1])
        assert math.isclose(t.toy_speedup, knobs.length / t.total_cost)
        t2 = lab.run_trace(m, backend)
        assert t.tokens == t2.tokens and t.ledger == t2.ledger


def test_trace_agrees_across_backends():
    m = lab.build_model(lab.Knobs(length=40, seed=8))
    ref = lab.run_trace(m, "reference").tokens
    for b in BACKENDS:
        assert lab.run_trace(m, b).tokens == ref


def test_trace_first_step_is_verify_block_with_offset_zero():
    """The trace's first block, redone by hand through the oracle's canonical entry point."""
    k = lab.Knobs(gamma=3, length=30, seed=12)
    m = lab.build_model(k)
    t = lab.run_trace(m, "reference")
    run = lab._Run(m, "reference")
    ids, tp, dp = run.propose()
    tok, nacc, valid = R.verify_rows_ref(
        tp, True, np.array([0]), ids, np.array([0]), np.array([3]), dp, True,
        np.ones(1, np.float32), np.zeros(1, np.int64), np.ones(1, np.float32),
        np.zeros(1, np.float32), np.array([k.seed]), np.array([0]), 3)
    assert valid[0]
    assert t.tokens[:int(nacc[0]) + 1] == [int(x) for x in tok[0, :int(nacc[0]) + 1]]
    assert t.ledger[0]["accepted"] == int(nacc[0])


def test_trace_batch_invariant():
    models = [lab.build_model(k) for k in (lab.Knobs(gamma=2, length=20, seed=1),
                                           lab.DEFAULT_KNOBS,
                                           lab.Knobs(gamma=4, match=0.2, length=33, seed=1))]
    batched = lab.run_traces(models, "reference")
    for m, t in zip(models, batched):
        assert t.tokens == lab.run_trace(m, "reference").tokens


def test_trace_acceptance_matches_alpha_roughly():
    """Not a statistical test, a sanity one: tokens per call near the estimate."""
    m = lab.build_model(lab.Knobs(length=2000))
    t = lab.run_trace(m)
    expect = lab.expected_tokens_per_step(lab.mean_alpha(m), m.knobs.gamma)
    assert abs(len(t.tokens) / t.target_calls - expect) < 0.35


def test_sequence_view_keys():
    m = lab.build_model()
    s = lab.sequence_view(m, "reference")
    for key in ("tokens", "target_calls", "draft_calls", "toy_speedup", "estimated_speedup",
                "alpha_mean", "curve", "total_cost"):
        assert key in s
    assert s["length"] == lab.DEFAULT_KNOBS.length == 96
    assert s["curve"]["best_gamma"] in range(1, 17)
    assert math.isfinite(s["toy_speedup"]) and math.isfinite(s["estimated_speedup"])


def test_best_backend_order():
    assert lab.best_backend(["reference"]) == "reference"
    assert lab.best_backend(["reference", "cpu"]) == "cpu"
    assert lab.best_backend(["reference", "cpu", "triton"]) == "cpu"
    assert lab.best_backend(BACKENDS) in specops.available_backends()


def test_verify_probs_shapes():
    m = lab.build_model()
    run = lab._Run(m, "reference")
    ids, tp, dp = run.propose()
    tok, nacc, valid = lab.verify_probs(tp[None], ids[None], dp[None], [0], [0], "reference")
    assert tok.shape == (1, m.knobs.gamma + 1) and tok.dtype == np.int32 and nacc.shape == (1,)
    assert valid.dtype == np.bool_
    assert torch.is_tensor(specops.verify_block(
        target_probs=torch.from_numpy(tp[None]), draft_token_ids=torch.from_numpy(ids[None]),
        draft_probs=torch.from_numpy(dp[None]), seed=0, offset=0,
        backend="reference").token_ids)


def test_lab_shows_block_and_planner():
    """The audit reports block verification's exact law and the planner's K on the toy."""
    from specops import audit, lab
    model = lab.build_model(lab.DEFAULT_KNOBS)
    view = lab.one_token_view(model, model.start)
    checks, info = audit.exact_law_checks(model, view, 3)
    names = {c["name"]: c["passed"] for c in checks}
    assert names["block_law_tv"] and names["block_accepts_at_least_token_wise"]
    assert info["expected_accepted_block"] > info["expected_accepted_token"]
    pl = lab.planner_view(model)
    e = [sum(np.prod(pl["rates"][:i]) for i in range(k + 1)) / (k * 0.09 + 1)
         for k in range(len(pl["rates"]) + 1)]
    assert pl["best_k"] == int(np.argmax(e))
    # the per-position rates are the alpha chain's: their products give the length law
    ll = audit.length_law_markov(model, 3)
    surv = [float(np.prod(pl["rates"][:i])) for i in range(1, 4)]
    np.testing.assert_allclose(surv, [ll[i:].sum() for i in range(1, 4)], atol=1e-12)


# ----------------------------------------------------------------------------- issue 27, defect 4
@pytest.mark.parametrize("seed", [196, 0, 1, 7])
def test_rates_of_an_exact_draft_are_probabilities(seed):
    """match = 1 (q = p): the per-position rates are quotients of equal sums, which float64
    can round to 1 + 2**-52; the planner refuses that, so `specops audit --match 1` died."""
    m = lab.build_model(lab.Knobs(match=1.0, seed=seed))
    rates = lab.position_rates(m, 16)
    assert rates.max() <= 1.0 and np.abs(rates - 1.0).max() <= 1e-15
    assert lab.planner_view(m)["best_k"] == 16             # free, always-accepted drafts


def test_rsd_siblings_past_the_draft_support_are_absent():
    """A draft row with one token of positive mass cannot yield two distinct rsd siblings:
    the second is absent (sample_without_replacement's -1), so the two-sibling tree's law is
    the one-child tree's, with mass 1 (it was 0: `--certainty 0.99 --match 1` reported
    tree_rsd_law_tv 0.5)."""
    m = lab.build_model(lab.Knobs(certainty=0.99, match=1.0))
    assert (m.draft[m.start] > 0).sum() == 1
    two = R.exact_tree_law(m.target_fn(), m.draft_fn(), [-1, 0, 0], lab.V, "rsd")
    one = R.exact_tree_law(m.target_fn(), m.draft_fn(), [-1, 0], lab.V, "rsd")
    assert two["tv"] <= 1e-12 and abs(two["law"].sum() - 1.0) <= 1e-12
    assert np.array_equal(two["law"], one["law"])
    # two tokens of mass, three siblings: the third is absent, the law stays exact
    p = np.array([0.5, 0.25, 0.25, 0.0], np.float32)
    q = np.array([0.0, 0.75, 0.0, 0.25], np.float32)
    three = R.exact_tree_law(lambda pre: p, lambda pre: q, [-1, 0, 0, 0], 4, "rsd")
    assert three["tv"] <= 1e-12 and abs(three["law"].sum() - 1.0) <= 1e-12
    checks, _ = audit.exact_law_checks(m, lab.one_token_view(m), 3)
    assert all(c["passed"] for c in checks), [c for c in checks if not c["passed"]]
