"""Calibrated statistical tests with negative controls that must fail (the third of the
three checks in specops.reference's docstring).

Drafts are sampled from q; at each position j the emitted token among requests that reached j
must follow p_j (chi-square goodness of fit), and num_accepted must follow its analytic law.
Each test is run at a false-positive rate of 1e-6.  The same tests must reject the three
classic mistakes: always accepting, sampling p on rejection, and reusing the accept uniform
for the draw.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import specops
from specops import reference as R
from tests._stats import (ALPHA, N, P_ROWS, Q_ROWS, chi2_pvalue, detectable_tv,  # noqa: F401
                          draft_ids, law_pvalues)
from tests._negative import verify_rows_variant


def run_reference_variant(variant, ids, p_rows, q_rows, seed0):
    n, K = ids.shape
    V = p_rows.shape[1]
    target = np.broadcast_to(p_rows, (n, K + 1, V)).reshape(-1, V)
    draft = np.broadcast_to(q_rows, (n, K, V)).reshape(-1, V)
    ar = np.arange(n)
    tok, nacc, valid = verify_rows_variant(
        variant, target, True, ar * (K + 1), ids.reshape(-1), ar * K, np.full(n, K), draft,
        True, np.ones(n, np.float32), np.zeros(n, np.int64), np.ones(n, np.float32),
        np.zeros(n, np.float32), seed0 + ar, np.zeros(n, np.int64), K)
    assert valid.all()
    return tok, nacc


def run_backend(backend, ids, p_rows, q_rows, seed0):
    n, K = ids.shape
    V = p_rows.shape[1]
    out = specops.verify_block(
        target_probs=torch.from_numpy(np.ascontiguousarray(np.broadcast_to(p_rows, (n, K + 1, V)))),
        draft_token_ids=torch.from_numpy(ids),
        draft_probs=torch.from_numpy(np.ascontiguousarray(np.broadcast_to(q_rows, (n, K, V)))),
        seed=torch.arange(n) + seed0, offset=0, backend=backend)
    assert out.valid.all()
    return out.token_ids.numpy(), out.num_accepted.numpy()


def test_reference_passes_and_negative_controls_fail():
    rng = np.random.default_rng(11)
    ids = draft_ids(rng, Q_ROWS, N)
    length_law = R.accepted_length_law(P_ROWS, Q_ROWS)
    results = {}
    for variant in ("exact", "always_accept", "wrong_fallback", "reused_uniform"):
        tok, nacc = run_reference_variant(variant, ids, P_ROWS, Q_ROWS, 1000)
        results[variant] = law_pvalues(tok, nacc, P_ROWS, length_law)
    assert min(results["exact"].values()) >= ALPHA, results["exact"]
    for variant in ("always_accept", "wrong_fallback", "reused_uniform"):
        assert min(results[variant].values()) < ALPHA, (variant, results[variant])


BACKENDS = [b for b in ("cpu", "triton") if b in specops.available_backends()]
NEGATIVE_CONTROLS = ("q reported as p", "q withheld (point mass)", "wrong_fallback",
                     "reused_uniform")


def run_control(control, backend, ids, seed0):
    """A mistake an engine could make, run at the same N on the same drafts and seeds: the
    first two through the backend itself (the draft's probabilities misreported), the others
    through the reference's negative-control variants."""
    n, K = ids.shape
    if control == "q reported as p":
        return run_backend(backend, ids, P_ROWS, P_ROWS[:K], seed0)
    if control == "q withheld (point mass)":
        out = specops.verify_block(
            target_probs=torch.from_numpy(np.ascontiguousarray(
                np.broadcast_to(P_ROWS, (n, K + 1, P_ROWS.shape[1])))),
            draft_token_ids=torch.from_numpy(ids), seed=torch.arange(n) + seed0, offset=0,
            backend=backend)
        return out.token_ids.numpy(), out.num_accepted.numpy()
    return run_reference_variant(control, ids, P_ROWS, Q_ROWS, seed0)


# (backend, N, controls): the C++ path at N = 20,000 with every control; the Triton
# interpreter (one program per request) at N = 300 in the fast tier with the control run
# through the backend itself, and at N = 1,000 with every control in the full tier.
STAT_RUNS = ([("cpu", N, NEGATIVE_CONTROLS)] if "cpu" in BACKENDS else []) + (
    [("triton", 300, NEGATIVE_CONTROLS[:1]),
     pytest.param("triton", 1000, NEGATIVE_CONTROLS[:1] + NEGATIVE_CONTROLS[2:],
                  marks=pytest.mark.full)] if "triton" in BACKENDS else [])


@pytest.mark.parametrize("backend,n,controls", STAT_RUNS)
def test_backend_from_probabilities(backend, n, controls):
    """Each backend passes at its N, and every negative control fails at that same N (so the
    test has the power to fail).  Power (tests/_stats.detectable_tv, at 1e-6 and power 0.99,
    worst direction): position 0 (6 tokens) and the length law (4 values) detect a TV of
    0.028 at N = 20,000, 0.13 at N = 1,000 and 0.23 at N = 300; "q reported as p" moves
    position 0's law by TV 0.45 (every draft accepted)."""
    rng = np.random.default_rng(12)
    ids = draft_ids(rng, Q_ROWS, n)
    length_law = R.accepted_length_law(P_ROWS, Q_ROWS)
    tok, nacc = run_backend(backend, ids, P_ROWS, Q_ROWS, 5000)
    pv = law_pvalues(tok, nacc, P_ROWS, length_law)
    assert min(pv.values()) >= ALPHA, pv
    for control in controls:
        tok, nacc = run_control(control, backend, ids, 5000)
        pv = law_pvalues(tok, nacc, P_ROWS, length_law)
        assert min(pv.values()) < ALPHA, (control, n, pv)


def test_stated_power_bounds():
    """The detectable TVs the docstrings state (a change of N or ALPHA must update them)."""
    assert round(detectable_tv(N, 6), 3) == 0.028
    assert round(detectable_tv(1000, 6), 2) == 0.13
    assert round(detectable_tv(300, 6), 2) == 0.23
    # and the control's own distance: drafts accepted always -> position 0 follows q_0
    assert round(0.5 * float(np.abs(P_ROWS[0] - Q_ROWS[0]).sum()), 2) == 0.45


@pytest.mark.skipif("cpu" not in specops.available_backends(), reason="C++ backend not built")
@pytest.mark.parametrize("setting", [dict(temperature=0.8), dict(temperature=0.8, top_p=0.9),
                                     dict(temperature=1.2, top_k=3, min_p=0.05)])
@pytest.mark.parametrize("point_mass", [False, True])
def test_cpu_from_logits_with_transforms(setting, point_mass):
    """The transform's output is the law: p and q come from the reference transform."""
    rng = np.random.default_rng(13)
    K, V = 3, 8
    tl = (rng.normal(size=(K + 1, V)) * 1.5).astype(np.float32)
    dl = (tl[:K] + rng.normal(size=(K, V)).astype(np.float32)).astype(np.float32)
    inv = R.inv_temperature(setting["temperature"])
    kw = dict(top_k=setting.get("top_k", 0), top_p=setting.get("top_p", 1.0),
              min_p=setting.get("min_p", 0.0))
    p = np.stack([R.transform_row(r, inv, **kw)[0] for r in tl])
    if point_mass:
        q = None
        # one fixed drafter guess per position, drawn from that position's target row
        guess = [rng.choice(V, p=p[j].astype(np.float64) / p[j].astype(np.float64).sum())
                 for j in range(K)]
        ids = np.tile(np.array(guess), (N, 1))
    else:
        q = np.stack([R.transform_row(r, inv, **kw)[0] for r in dl])
        ids = draft_ids(rng, q, N)
    target = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(tl, (N, K + 1, V))))

    def run(draft_logits):
        out = specops.verify_block(target, torch.from_numpy(ids), None,
                                   seed=torch.arange(N) + 77, offset=3,
                                   draft_logits=draft_logits, backend="cpu", **setting)
        return out.token_ids.numpy(), out.num_accepted.numpy()

    if point_mass:
        length = R.accepted_length_law(p, None, ids[0])
        honest = None
    else:
        length = R.accepted_length_law(p, q)
        honest = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(dl, (N, K, V))))
    pv = law_pvalues(*run(honest), p, length)
    assert min(pv.values()) >= ALPHA, pv
    # negative control at the same N: the draft reported as the target (q = p, so every
    # draft is accepted whatever it is) must fail
    liar = target[:, :K].contiguous()
    pv = law_pvalues(*run(liar), p, length)
    assert min(pv.values()) < ALPHA, ("draft reported as the target", pv)
