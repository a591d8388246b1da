"""Acceptance rates (reference section 10), the draft-length planner, and the public API of
``method=`` / ``return_accept_rates=``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import specops
from specops import reference as R
from tests.cases import make_case

BACKENDS = ["reference"] + [b for b in ("cpu", "triton") if b in specops.available_backends()]


# the interpreter's fast-tier share: block rates on draft probabilities, token-wise on
# point-mass drafts; its other combinations run in the full tier
TRITON_FAST = {("block", "probs"), ("token", "point")}


@pytest.mark.parametrize("backend,method,draft", [
    pytest.param(b, m, d, marks=[pytest.mark.full] if b == "triton" and (m, d) not in TRITON_FAST
                 else []) for b in BACKENDS for m in ("token", "block")
    for d in ("probs", "logits", "point")])
def test_rates_equal_float64_of_the_same_rows(backend, method, draft):
    """beta_j equals sum min(p_j, q_j) in float64 of the transformed rows to 1e-6, at every
    position read; NaN at the others."""
    V, K, B = 200 if backend != "triton" else 40, 4, 6
    kw = make_case("full", V, K, B=B, seed=3)
    kw.update(temperature=0.7, top_p=0.9, seed=torch.arange(B) + 11)
    logits = kw["target_logits"]
    dl = (logits[:, :K] + 0.3 * torch.randn(B, K, V, generator=torch.Generator().manual_seed(1)))
    q, _ = specops.sampling_probs(dl, temperature=0.7, top_p=0.9, backend="reference")
    kw["draft_probs"] = q if draft == "probs" else None
    if draft == "logits":
        kw["draft_logits"] = dl
    out = specops.verify_block(**kw, method=method, return_accept_rates=True, backend=backend)
    p, _ = specops.sampling_probs(logits, temperature=0.7, top_p=0.9, backend="reference")
    ids = kw["draft_token_ids"]
    for b in range(B):
        read = K if method == "block" else min(int(out.num_accepted[b]) + 1, K)
        for j in range(K):
            beta = out.accept_rates[b, j]
            if j >= read:
                assert torch.isnan(beta)
                continue
            if draft == "point":
                want = float(p[b, j, ids[b, j]])
            else:
                want = float(torch.minimum(p[b, j].double(), q[b, j].double()).sum())
            assert abs(float(beta) - want) <= 1e-6


@pytest.mark.skipif("cpu" not in specops.available_backends(), reason="C++ backend not built")
def test_mean_rate_matches_acceptance_frequency():
    """beta_j is P(accept at j | reached j): over many requests whose rows differ, the sum of
    beta over the requests that reached j matches the number accepted there (5 sigma)."""
    B, K, V = 4000, 3, 12
    g = torch.Generator().manual_seed(5)
    t = torch.randn(B, K + 1, V, generator=g) * 2
    d = t[:, :K] + torch.randn(B, K, V, generator=g) * torch.rand(B, 1, 1, generator=g) * 3
    q = torch.softmax(d, -1)
    ids = q.reshape(-1, V).multinomial(1, generator=g).reshape(B, K)
    out = specops.verify_block(t, ids, q, seed=torch.arange(B), offset=0,
                               return_accept_rates=True, backend="cpu")
    nacc = out.num_accepted.long()
    for j in range(K):
        reached = nacc >= j
        beta = out.accept_rates[reached, j].double()
        accepted = (nacc[reached] > j).double()
        sd = float((beta * (1 - beta)).sum().sqrt())
        assert abs(float(accepted.sum() - beta.sum())) <= 5 * sd + 1e-9, (j, sd)
        assert float(beta.std()) > 0.05                 # the rows really differ


def test_greedy_and_malformed_rates():
    kw = make_case("greedy", 50, 4, B=4)
    out = specops.verify_block(**kw, return_accept_rates=True, backend="reference")
    for b in range(4):
        n = int(out.num_accepted[b])
        assert out.accept_rates[b, :n].eq(1).all()
        if n < 4:
            assert out.accept_rates[b, n] == 0 and out.accept_rates[b, n + 1:].isnan().all()
    kw = make_case("full", 50, 4, B=3)
    kw["draft_token_ids"] = kw["draft_token_ids"].clone()
    kw["draft_token_ids"][1, 2] = 50
    out = specops.verify_block(**kw, validate=False, method="block", return_accept_rates=True,
                               backend="reference")
    assert out.accept_rates[1].isnan().all() and out.accept_rates[0].isfinite().all()


def test_api_checks_and_output_type():
    kw = make_case("full", 20, 3, B=2)
    with pytest.raises(ValueError, match="method"):
        specops.verify_block(**kw, method="tree")
    with pytest.raises(TypeError, match="return_accept_rates"):
        specops.verify_block(**kw, return_accept_rates=1)
    with pytest.raises(ValueError, match="unfused"):
        specops.verify_block_unfused(**kw, method="block")
    out = specops.verify_block(**kw, return_accept_rates=True, backend="reference")
    tok, nacc, valid = out                               # still the three-tuple
    assert isinstance(out, specops.VerifyOutput) and out.accept_rates.shape == (2, 3)
    assert out.accept_rates.dtype == torch.float32
    assert not hasattr(specops.verify_block(**kw, backend="reference"), "accept_rates")


@pytest.mark.skipif("cpu" not in specops.available_backends(), reason="C++ backend not built")
@pytest.mark.parametrize("method,rates", [("block", False), ("block", True), ("token", True)])
def test_verify_method_opcheck(method, rates):
    from specops._args import prepare
    kw = make_case("full", 30, 3, B=4)
    # q = the target's own probabilities: every draft is accepted, so no rate is NaN (the
    # opcheck compares outputs with NaN != NaN)
    kw["draft_probs"] = specops.sampling_probs(kw["target_logits"][:, :3])[0]
    a = prepare(**kw).to_op_tensors()
    torch.library.opcheck(torch.ops.specops.verify.default,
                          (*a.op_args(), method, rates, False, None, "cpu"))


@pytest.mark.skipif("cpu" not in specops.available_backends(), reason="C++ backend not built")
def test_block_under_torch_compile():
    kw = make_case("full", 30, 3, B=4)
    kw["seed"], kw["offset"] = torch.arange(4), torch.zeros(4, dtype=torch.long)

    def step(t, ids, q, seed, offset):
        out = specops.verify_block(t, ids, q, seed=seed, offset=offset, method="block",
                                   temperature=1.0, backend="cpu")
        return out.token_ids, out.num_accepted

    args = (kw["target_logits"], kw["draft_token_ids"], kw["draft_probs"], kw["seed"],
            kw["offset"])
    got = torch.compile(step, fullgraph=True, backend="eager")(*args)
    want = step(*args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# ----------------------------------------------------------------------------- planner
def test_expected_tokens_matches_closed_form():
    a = 0.8
    e = specops.expected_tokens([a] * 6)
    for k in range(7):
        assert abs(float(e[k]) - (1 - a ** (k + 1)) / (1 - a)) <= 1e-12


def _brute(rates, c, kmax):
    best, arg = -1.0, 0
    for k in range(min(kmax, len(rates)) + 1):
        e = sum(np.prod(rates[:i]) for i in range(k + 1))
        if e / (k * c + 1) > best + 1e-15:
            best, arg = e / (k * c + 1), k
    return arg


@pytest.mark.parametrize("seed", range(20))
def test_best_num_draft_tokens_is_the_argmax(seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 9))
    rates = np.sort(rng.random(K))[::-1] if seed % 2 else rng.random(K)
    c = float(rng.random() * 0.5)
    kmax = int(rng.integers(0, 10))
    assert specops.best_num_draft_tokens(rates.tolist(), c, kmax) == _brute(rates, c, kmax)
    batch = torch.tensor(np.stack([rates, rates[::-1].copy()]))
    got = specops.best_num_draft_tokens(batch, c, kmax)
    assert got.tolist() == [_brute(rates, c, kmax), _brute(rates[::-1], c, kmax)]


def test_planner_edges_and_errors():
    assert specops.best_num_draft_tokens([1.0] * 5, 0.0, 3) == 3      # free drafts: all
    assert specops.best_num_draft_tokens([0.0] * 5, 0.01, 5) == 0     # never accepted: none
    assert specops.best_num_draft_tokens([0.9] * 4, 0.1, 0) == 0
    with pytest.raises(ValueError, match="accept_rates"):
        specops.best_num_draft_tokens([0.5, float("nan")], 0.1, 2)
    with pytest.raises(ValueError, match="draft_cost"):
        specops.best_num_draft_tokens([0.5], -1.0, 2)
    with pytest.raises(TypeError, match="max_num_draft_tokens"):
        specops.best_num_draft_tokens([0.5], 0.1, 2.0)
    with pytest.raises(ValueError, match="accept_rates"):
        specops.best_num_draft_tokens(np.zeros((2, 2, 2)), 0.1, 2)
