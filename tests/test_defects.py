"""Defects found by fuzzing (issue 9, A-G), each reproduced first, and a fuzz run holding the
composed single-purpose steps to the fused walk on random adversarial inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import specops
from specops import reference as R

BACKENDS = [b for b in ("reference", "cpu", "triton") if b in specops.available_backends()]
FAST = [b for b in ("reference", "cpu") if b in BACKENDS]


def _both(kw, backend):
    return (specops.verify_block(**kw, backend=backend),
            specops.verify_block_unfused(**kw, backend=backend))


def _assert_same(a, b):
    assert torch.equal(a.token_ids, b.token_ids), (a.token_ids, b.token_ids)
    assert torch.equal(a.num_accepted, b.num_accepted)
    assert torch.equal(a.valid, b.valid)


@pytest.mark.parametrize("backend", BACKENDS)
def test_A_unfused_rejects_at_an_invalid_target_row_with_negative_q(backend):
    """A: +inf in target row 0, q(y) < 0: the fused walk reports the row invalid; the composed
    steps used to accept the draft (u * q < 0 = p) and report valid=True."""
    V = 4
    t = torch.zeros(1, 2, V)
    t[0, 0, 0] = float("inf")
    q = torch.full((1, 1, V), 0.25)
    q[0, 0, 1] = -0.25
    kw = dict(target_logits=t, draft_token_ids=torch.tensor([[1]]), draft_probs=q, seed=3,
              offset=0, validate=False)       # q is checked (and refused) where values are
    fused, unfused = _both(kw, backend)
    assert fused.token_ids.tolist() == [[-1, -1]] and not fused.valid.item()
    _assert_same(fused, unfused)


def _fuzz_case(rng, V, K, B):
    """Random inputs with the adversarial values the fuzzing run used: NaN / +-inf logits,
    negative and > 1 draft entries, padding, greedy and filtered requests."""
    t = torch.from_numpy((rng.standard_normal((B, K + 1, V)) * 3).astype(np.float32))
    dl = torch.from_numpy((rng.standard_normal((B, K, V)) * 3).astype(np.float32))
    for x in (t, dl):
        flat = x.view(-1)
        n = flat.numel()
        if n == 0:
            continue
        for val in (float("nan"), float("inf"), -float("inf")):
            idx = torch.from_numpy(rng.integers(0, n, size=max(1, n // 97)))
            if rng.random() < 0.5:
                flat[idx] = val
        if rng.random() < 0.2 and x.numel():
            x[rng.integers(0, x.shape[0]), rng.integers(0, x.shape[1])] = -float("inf")
    kind = rng.integers(0, 3)
    draft = {}
    if kind == 0:
        q = torch.softmax(dl, -1)
        q = torch.where(torch.isnan(q), torch.zeros_like(q), q)
        if rng.random() < 0.5 and K:
            q[0, 0, rng.integers(0, V)] = -0.25
        if rng.random() < 0.3 and K:
            q[-1, -1, rng.integers(0, V)] = 1.5
        draft = dict(draft_probs=q)
    elif kind == 1:
        draft = dict(draft_logits=dl)
    ids = torch.from_numpy(rng.integers(-1, V, size=(B, K)))
    temp = torch.from_numpy(rng.choice([0.0, 0.5, 1.0, 1.7], size=B).astype(np.float32))
    kw = dict(target_logits=t, draft_token_ids=ids, temperature=temp,
              top_k=torch.from_numpy(rng.choice([0, 1, 3], size=B)),
              top_p=torch.from_numpy(rng.choice([1.0, 0.9, 0.3], size=B).astype(np.float32)),
              min_p=torch.from_numpy(rng.choice([0.0, 0.2], size=B).astype(np.float32)),
              seed=torch.from_numpy(rng.integers(-2 ** 62, 2 ** 62, size=B)),
              offset=int(rng.integers(0, 1000)), validate=False, **draft)
    if rng.random() < 0.5:
        kw["num_draft_tokens"] = torch.from_numpy(rng.integers(0, K + 1, size=B))
    return kw


@pytest.mark.parametrize("backend", FAST)
def test_fuzz_unfused_equals_fused(backend):
    rng = np.random.default_rng(20260901)
    for i in range(150):
        V, K, B = int(rng.choice([1, 2, 5, 13])), int(rng.integers(0, 4)), int(rng.integers(1, 5))
        kw = _fuzz_case(rng, V, K, B)
        fused, unfused = _both(kw, backend)
        _assert_same(fused, unfused)
        assert ((fused.token_ids >= -1) & (fused.token_ids < V)).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_C_sampling_probs_vocabulary_limit(backend):
    """C: V >= 2**23 equal logits overflowed the integer mass (an all-zero row, valid=True);
    sampling_probs now has verify_block's limit V <= 2**22, checked before any kernel."""
    big = torch.zeros(1, R.MAX_VOCAB + 1).expand(1, R.MAX_VOCAB + 1)
    with pytest.raises(ValueError, match="V"):
        specops.sampling_probs(big, backend=backend)
    with pytest.raises(ValueError, match="V"):
        specops.sampling_probs(torch.zeros(2, 0), backend=backend)


def test_D_torch_compile_fullgraph_flattened_layout():
    """D: the flattened layout read int(num_draft.max()) on the host, which breaks
    fullgraph tracing; max_num_draft_tokens gives the output width instead."""
    from tests.cases import make_case
    kw = make_case("flat", 17, 3, B=4)
    cu = kw.pop("cu_num_draft_tokens")

    def step(logits, ids, q, cu, seed, offset):
        out = specops.verify_block(logits, ids, q, cu_num_draft_tokens=cu, seed=seed,
                                   offset=offset, temperature=0.7, top_k=20,
                                   max_num_draft_tokens=3)
        return out.token_ids, out.num_accepted, out.valid

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = (kw["target_logits"], kw["draft_token_ids"], kw["draft_probs"], cu, kw["seed"],
            kw["offset"])
    got, want = compiled(*args), step(*args)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    eager = specops.verify_block(**kw, cu_num_draft_tokens=cu)
    assert torch.equal(want[0], eager.token_ids)       # same width: the longest block is 3

    def no_width(logits, ids, q, cu, seed, offset):
        return specops.verify_block(logits, ids, q, cu_num_draft_tokens=cu, seed=seed,
                                    offset=offset).token_ids

    with pytest.raises(Exception, match="max_num_draft_tokens"):
        torch.compile(no_width, fullgraph=True, backend="aot_eager")(*args)


def test_D_wider_output_with_max_num_draft_tokens():
    from tests.cases import make_case
    kw = make_case("flat", 11, 3, B=3)
    narrow = specops.verify_block(**kw, backend="reference")
    wide = specops.verify_block(**kw, max_num_draft_tokens=6, backend="reference")
    assert wide.token_ids.shape == (3, 7)
    assert torch.equal(wide.token_ids[:, :narrow.token_ids.shape[1]], narrow.token_ids)
    assert (wide.token_ids[:, narrow.token_ids.shape[1]:] == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tiny", [1e-45, 1e-30, 9.9e-6])
def test_G_tiny_temperature_is_greedy(backend, tiny):
    """G: a positive T whose 1/T overflows used to pass the check and turn every request
    invalid; T < 1e-5 is greedy (reference section 1), as in vLLM."""
    g = torch.Generator().manual_seed(5)
    t = torch.randn(3, 3, 9, generator=g)
    ids = t[:, :2].argmax(-1)
    ids[1, 0] = (ids[1, 0] + 1) % 9
    for temperature in (tiny, torch.tensor([tiny] * 3)):
        out = specops.verify_block(t, ids, None, temperature=temperature, seed=1,
                                   backend=backend)
        greedy = specops.verify_block(t, ids, None, temperature=0.0, backend=backend)
        assert out.valid.all()
        _assert_same(out, greedy)
    assert R.inv_temperature(tiny) == 0 and R.inv_temperature(1e-5) > 0


def test_G_greedy_threshold_in_sampling_probs():
    x = torch.tensor([[0.5, 2.0, 1.0]])
    p, ok = specops.sampling_probs(x, temperature=1e-30, backend="reference")
    assert ok.all() and p.tolist() == [[0.0, 1.0, 0.0]]
