"""Every backend equals specops.reference token for token (the second of the
three checks in specops.reference's docstring).

From probabilities and from logits alike: the transform is defined with correctly rounded
float32/float64 operations, integer sums and a fixed polynomial exp, so the C++ path and the
Triton interpreter compute bit-identical probabilities on every row (asserted below through
``sampling_probs``), and therefore identical tokens on every request.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import specops
from specops import reference as R
from tests.cases import DTYPES, KINDS, case_ids, make_case, reference_output, shared_case
from tests._rows import count_rows

NATIVE = [b for b in ("cpu", "triton") if b in specops.available_backends()]
# The Triton interpreter runs every lane in numpy: keep its share of the cases small.
TRITON_MAX_V = 1000
# Triton's fast-tier share: every kind at (V=7, K=4) and (V=1000, K=1), V=1, and one case of
# each low-precision dtype; the other Triton cases and V=32000 run in the full tier.
TRITON_FAST = {(kind, V, K, "fp32") for kind in KINDS for V, K in ((7, 4), (1000, 1))} | {
    ("full", 1, 1, "fp32"), ("full", 7, 4, "bf16"), ("mixed", 1000, 1, "fp16")}


def _cases_for(backend):
    for kind, V, K, dt in case_ids():
        if backend == "triton" and (V > TRITON_MAX_V or K > 4):
            continue
        full = V > 1000 or (backend == "triton" and (kind, V, K, dt) not in TRITON_FAST)
        yield pytest.param(backend, kind, V, K, dt, id=f"{backend}-{kind}-V{V}-K{K}-{dt}",
                           marks=[pytest.mark.full] if full else [])


PARAMS = [p for b in NATIVE for p in _cases_for(b)]


@pytest.mark.skipif(not NATIVE, reason="no native backend built (specops._C / triton)")
@pytest.mark.parametrize("backend,kind,V,K,dt", PARAMS)
def test_verify_equals_reference(backend, kind, V, K, dt):
    kw = shared_case(kind, V, K, B=4, dt=dt)
    want = reference_output(kind, V, K, B=4, dt=dt)
    got = specops.verify_block(**kw, backend=backend)
    assert torch.equal(got.token_ids, want.token_ids)
    assert torch.equal(got.num_accepted, want.num_accepted)
    assert torch.equal(got.valid, want.valid)
    unfused = specops.verify_block_unfused(**kw, backend=backend)
    assert torch.equal(unfused.token_ids, want.token_ids)
    count_rows(f"{backend} verify requests", want.token_ids.shape[0])


@pytest.mark.skipif(not NATIVE, reason="no native backend built (specops._C / triton)")
@pytest.mark.parametrize("backend,dt,V", [
    pytest.param(b, dt, V, marks=[pytest.mark.full] if V > 1000 else [])
    for b in NATIVE for dt in DTYPES for V in (1, 2, 7, 1000, 32000)
    if not (b == "triton" and V > TRITON_MAX_V)])
def test_probabilities_bit_identical(backend, dt, V):
    g = torch.Generator().manual_seed(V)
    rows = 12
    x = (torch.randn(rows, V, generator=g) * 4).to(DTYPES[dt])
    x[1] = x[1].float().round().to(x.dtype)                      # many exact ties
    x[2, ::3] = -float("inf")
    x[3, 0] = float("nan")
    temp = torch.tensor([1.0, 0.8, 0.0, 1.3, 0.5, 1.0, 0.7, 2.0, 1.0, 0.9, 1.1, 0.6])
    top_k = torch.tensor([0, 50, 0, 5, 1, 0, 0, 3, 0, 0, 100, 7])
    top_p = torch.tensor([1.0, 0.95, 1.0, 0.9, 1.0, 0.5, 0.99, 1.0, 0.3, 1.0, 0.8, 0.6])
    min_p = torch.tensor([0.0, 0.0, 0.0, 0.05, 0.0, 0.0, 0.1, 0.0, 0.0, 0.02, 0.0, 0.3])
    want, wv = specops.sampling_probs(x, temp, top_k, top_p, min_p, backend="reference")
    got, gv = specops.sampling_probs(x, temp, top_k, top_p, min_p, backend=backend)
    assert torch.equal(gv, wv)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))      # bitwise
    count_rows(f"{backend} probability rows", rows)


@pytest.mark.skipif(not NATIVE, reason="no native backend built (specops._C / triton)")
@pytest.mark.parametrize("backend", NATIVE)
def test_malformed_draft_probs_stay_in_range_and_agree(backend):
    """Negative, huge, -inf and NaN draft probabilities: r = p - max(q, 0) keeps 0 <= r <= p."""
    kw = make_case("full", 50, 4, B=6)
    q = kw["draft_probs"].clone()
    q[0] = -1e30
    q[1, :, ::2] = -float("inf")
    q[2] = float("nan")
    q[3] = 1e30
    q[4, :, 3] = -0.5
    kw["draft_probs"] = q
    kw["validate"] = False            # unchecked: where values are checked these are refused
    want = specops.verify_block(**kw, backend="reference")
    got = specops.verify_block(**kw, backend=backend)
    assert torch.equal(got.token_ids, want.token_ids)
    assert ((got.token_ids >= -1) & (got.token_ids < 50)).all()
    assert got.valid.all()


# ----------------------------------------------------------------------------- draw boundaries
def _boundary_case(V, a, b, y, B=16):
    """A residual whose integer weights are W_a = 1, W_b = 2 and 0 elsewhere (S = 3): the
    target row is [2^-60 at a, 2^-59 at b, 2^-31 at the draft y] (mass 2^-31: valid), the
    draft a point mass at y, so y is rejected (u < 2^-31 essentially never holds) and the
    draw's threshold t = floor(U * 3 / 2^64) is 0, 1 or 2.  At t = 1 the cumulative weight
    of a equals t: the contract's strict ``W_0 + ... + W_i > t`` picks b, a search that
    compares with ``>=`` (or stops one index early) picks a."""
    p = torch.zeros(B, 2, V)
    p[:, 0, a], p[:, 0, b], p[:, 0, y] = 2.0 ** -60, 2.0 ** -59, 2.0 ** -31
    p[:, 1] = 1.0 / V
    q = torch.zeros(B, 1, V)
    q[:, 0, y] = 1.0
    return dict(target_probs=p, draft_token_ids=torch.full((B, 1), y), draft_probs=q,
                seed=torch.arange(B), offset=0)


# (V, a, b, y, Triton pipeline): the split pipeline with 16-lane chunks gets a and b in two
# different chunks
BOUNDARY = [pytest.param(3, 0, 1, 2, None, id="V3"),
            pytest.param(37, 15, 16, 36, "split", id="V37-two-chunks", marks=pytest.mark.full)]


@pytest.mark.parametrize("backend", ["reference"] + NATIVE)
@pytest.mark.parametrize("V,a,b,y,path", BOUNDARY)
def test_draw_threshold_on_a_cumulative_boundary(backend, V, a, b, y, path):
    from tests._sync import triton_path
    kw = _boundary_case(V, a, b, y)
    B = kw["seed"].shape[0]
    U = R.sample_uniform64(kw["seed"].numpy(), np.zeros(B, np.int64), np.zeros(B, np.int64))
    t = [(int(u) * 3) >> 64 for u in U]
    assert set(t) == {0, 1, 2}                           # the seeds reach the boundary (t = 1)
    want = torch.tensor([a if ti == 0 else b for ti in t])
    env = {"SPECOPS_TRITON_PIPELINE": path, "SPECOPS_TRITON_CHUNK": "16"} if path else {}
    with triton_path(path):
        old = os.environ.get("SPECOPS_TRITON_CHUNK")
        os.environ.update({k: v for k, v in env.items() if k == "SPECOPS_TRITON_CHUNK"})
        try:
            out = specops.verify_block(**kw, backend=backend)
        finally:
            if old is None:
                os.environ.pop("SPECOPS_TRITON_CHUNK", None)
            else:
                os.environ["SPECOPS_TRITON_CHUNK"] = old
    assert out.valid.all() and (out.num_accepted == 0).all()
    assert torch.equal(out.token_ids[:, 0].long(), want)
