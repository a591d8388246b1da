"""The sync-free call (issue 10): ``validate=False`` reads no tensor value on the host, and
the backends' guards (reference section 8) stand in for the host checks.

* No host read: every way of reading a tensor value on the host is patched to fail when the
  caller is specops code; a ``validate=False`` call (with ``max_num_draft_tokens`` in the
  flattened layout) must make none, on every backend, and give the default call's tokens.
* Guards: each malformed value, in one request of a batch, blanks that request only, on every
  backend and both Triton paths (fused, vocabulary-split); the host checks still raise where
  they run.
"""
from __future__ import annotations

import math

import pytest
import torch

import specops
from specops import reference as R
from tests._sync import no_host_reads, triton_path

BACKENDS = [b for b in ("reference", "cpu", "triton") if b in specops.available_backends()]
# the Triton backend twice: its one-program-per-request kernel and the vocabulary-split
# pipeline (several chunks per row at these V: the combining is exercised)
PATHS = [(b, None) for b in BACKENDS if b != "triton"]
if "triton" in BACKENDS:
    PATHS += [("triton", "fused"), ("triton", "split")]
# the vocabulary-split pipeline's share runs in the full tier (each of its programs is a
# separate interpreter call)
PATHS_TIERED = [pytest.param(*p, marks=pytest.mark.full) if p[1] == "split" else p
                for p in PATHS]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _inputs(seed, B=4, K=3, V=37, flat=False, tensors=True):
    """Random inputs; per-request parameter tensors, or (``tensors=False``, cheaper under the
    interpreter: no radix rounds) the same values as Python scalars where they agree."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn((B, K + 1, V), generator=g) * 3
    q = torch.softmax(torch.randn((B, K, V), generator=g), -1)
    ids = torch.randint(0, V, (B, K), generator=g)
    if tensors:
        kw = dict(temperature=torch.tensor([0.7, 0.0, 1.0, 1.3])[:B],
                  top_k=torch.tensor([0, 5, 0, 9])[:B],
                  top_p=torch.tensor([1.0, 0.9, 0.8, 1.0])[:B])
    else:
        kw = dict(temperature=torch.tensor([0.7, 0.0, 1.0, 1.3])[:B], top_k=0, top_p=1.0)
    kw.update(min_p=0.02, seed=torch.arange(B) * 7 + seed, offset=3)
    if not flat:
        return dict(target_logits=t, draft_token_ids=ids, draft_probs=q,
                    num_draft_tokens=torch.tensor([3, 1, 0, 2])[:B], **kw)
    nd = torch.tensor([3, 1, 0, 2])[:B]
    rows_t = torch.cat([t[b, :int(nd[b]) + 1] for b in range(B)])
    rows_q = torch.cat([q[b, :int(nd[b])] for b in range(B)])
    flat_ids = torch.cat([ids[b, :int(nd[b])] for b in range(B)])
    return dict(target_logits=rows_t, draft_token_ids=flat_ids, draft_probs=rows_q,
                cu_num_draft_tokens=torch.cumsum(nd, 0), **kw)


def _same(a, b):
    assert torch.equal(a.token_ids, b.token_ids), (a.token_ids, b.token_ids)
    assert torch.equal(a.num_accepted, b.num_accepted)
    assert torch.equal(a.valid, b.valid)


@pytest.mark.parametrize("backend,path", [p for p in PATHS_TIERED if p[0] != "reference"])
@pytest.mark.parametrize("flat", [False, True], ids=["padded", "flattened"])
def test_validate_false_reads_nothing_on_the_host(backend, path, flat):
    """(The reference backend is numpy on the host by design: it is the oracle.)"""
    kw = _inputs(1, flat=flat)
    with triton_path(path):
        want = specops.verify_block(**kw, backend=backend)
        extra = dict(max_num_draft_tokens=3) if flat else {}
        with no_host_reads() as seen:
            got = specops.verify_block(**kw, **extra, validate=False, backend=backend)
            got_p = specops.sampling_probs(kw["target_logits"], temperature=0.8,
                                           top_p=torch.full(kw["target_logits"].shape[:-1], 0.9),
                                           validate=False, backend=backend)
    assert not seen, seen
    if flat:
        assert got.token_ids.shape[1] == 4
    _same(want, got)
    assert got_p[1].all()


def test_the_patch_sees_a_host_read():
    """Negative control: the default call on CPU tensors does read values (its checks)."""
    kw = _inputs(2)
    with no_host_reads() as seen:
        specops.verify_block(**kw, backend="reference")
    assert seen


def test_flattened_validate_false_needs_the_width():
    kw = _inputs(3, flat=True)
    with pytest.raises(ValueError, match="max_num_draft_tokens"):
        specops.verify_block(**kw, validate=False)
    with pytest.raises(TypeError, match="validate"):
        specops.verify_block(**kw, validate="no")


MALFORMED = {
    "temperature<0": dict(temperature=-1.0),
    "temperature nan": dict(temperature=math.nan),
    "temperature inf": dict(temperature=math.inf),
    "top_p=0": dict(top_p=0.0),
    "top_p>1": dict(top_p=1.5),
    "top_p nan": dict(top_p=math.nan),
    "top_k<0": dict(top_k=-2),
    "min_p>1": dict(min_p=2.0),
    "min_p nan": dict(min_p=math.nan),
    "id>=V": dict(id=37),
    "id<-1": dict(id=-2),
    "id>=V after -1": dict(id=-1, id2=40),
    "num_draft>K": dict(num_draft=4),
    "num_draft<0": dict(num_draft=-1),
}


def _with_bad_request(kw, bad, b=1):
    """kw with request b's value replaced by a malformed one (as [B] tensors)."""
    kw = dict(kw)
    B = kw["draft_token_ids"].shape[0]
    for name in ("temperature", "top_p", "top_k", "min_p"):
        if name in bad:
            v = kw[name] if isinstance(kw[name], torch.Tensor) else torch.full((B,), kw[name])
            v = v.clone().to(torch.float32 if name != "top_k" else torch.int64)
            v[b] = bad[name]
            kw[name] = v
    if "id" in bad:
        ids = kw["draft_token_ids"].clone()
        ids[b, 0] = bad["id"]
        if "id2" in bad:
            ids[b, 1] = bad["id2"]
        kw["draft_token_ids"] = ids
    if "num_draft" in bad:
        nd = kw["num_draft_tokens"].clone()
        nd[b] = bad["num_draft"]
        kw["num_draft_tokens"] = nd
    return kw


def _requests(kw, idx):
    """kw's batch restricted to (or repeating) the requests ``idx``."""
    B = kw["draft_token_ids"].shape[0]
    return {k: (v[idx] if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == B
                else v) for k, v in kw.items()}


@pytest.mark.parametrize("backend,path", PATHS_TIERED)
def test_a_malformed_request_emits_nothing(backend, path):
    """The malformed-request table in one batch (one launch per call): a clean 4-request
    batch followed by one copy of its request 1 per malformed case, each carrying its case.
    Every malformed request emits nothing, the clean ones equal the clean batch's; the host
    checks refuse each case where they run; the unfused composition equals the fused walk."""
    kw = _inputs(4, tensors=False)
    kw["num_draft_tokens"] = torch.tensor([3, 3, 2, 3])
    cases = list(MALFORMED)
    bad = _requests(kw, torch.tensor([0, 1, 2, 3] + [1] * len(cases)))
    for m, case in enumerate(cases):
        bad = _with_bad_request(bad, MALFORMED[case], b=4 + m)
        with pytest.raises(ValueError):                    # checked on the host where free
            specops.verify_block(**_with_bad_request(kw, MALFORMED[case]), backend=backend)
    with triton_path(path):
        want = specops.verify_block(**kw, backend=backend)
        got = specops.verify_block(**bad, validate=False, backend=backend)
        unfused = specops.verify_block_unfused(**bad, validate=False, backend=backend)
    for m, case in enumerate(cases):
        assert got.token_ids[4 + m].tolist() == [-1] * 4, case
        assert int(got.num_accepted[4 + m]) == 0 and not bool(got.valid[4 + m]), case
    assert torch.equal(got.token_ids[:4], want.token_ids)
    assert torch.equal(got.num_accepted[:4], want.num_accepted)
    assert torch.equal(got.valid[:4], want.valid)
    _same(got, unfused)


@pytest.mark.parametrize("backend,path", PATHS_TIERED)
def test_target_probs_with_a_transform_is_malformed(backend, path):
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn((3, 3, 11), generator=g), -1)
    ids = torch.randint(0, 11, (3, 2), generator=g)
    temp = torch.tensor([1.0, 0.5, 0.0])
    with triton_path(path):
        got = specops.verify_block(target_probs=p, draft_token_ids=ids, temperature=temp,
                                   seed=1, validate=False, backend=backend)
    assert got.valid.tolist() == [True, False, True]
    assert got.token_ids[1].tolist() == [-1, -1, -1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampling_probs_guards_a_row(backend):
    x = torch.randn(3, 9, generator=torch.Generator().manual_seed(9))
    p, ok = specops.sampling_probs(x, top_p=torch.tensor([0.9, 0.0, 1.0]), validate=False,
                                   backend=backend)
    assert ok.tolist() == [True, False, True]
    assert not p[1].any()
    want, _ = R.sampling_probs_ref(x.numpy(), R.inv_temperature([1.0] * 3), [0] * 3,
                                   [0.9, 0.0, 1.0], [0.0] * 3)
    assert torch.equal(p, torch.from_numpy(want))


def test_reference_guard_contract():
    assert R.params_ok(1.0, 0, 1.0, 0.0)
    for bad in ((math.nan, 0, 1, 0), (-1, 0, 1, 0), (1, -1, 1, 0), (1, 0, 0, 0), (1, 0, 1.01, 0),
                (1, 0, 1, -0.1), (1, 0, 1, 1.5), (math.inf, 0, 1, 0)):
        assert not R.params_ok(*bad), bad
    assert math.isnan(R.inv_temperature(-1.0)) and math.isnan(R.inv_temperature(math.nan))
    assert math.isnan(R.inv_temperature(math.inf)) and R.inv_temperature(0.0) == 0


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "reference"])
@pytest.mark.parametrize("flat", [False, True], ids=["padded", "flattened"])
def test_block_and_rates_read_nothing_on_the_host(backend, flat):
    """method="block" and return_accept_rates=True keep the sync-free contract."""
    kw = _inputs(1, flat=flat)
    extra = dict(max_num_draft_tokens=3) if flat else {}
    for method, rates in (("block", False), ("block", True), ("token", True)):
        want = specops.verify_block(**kw, method=method, return_accept_rates=rates,
                                    backend=backend)
        with no_host_reads() as seen:
            got = specops.verify_block(**kw, **extra, validate=False, method=method,
                                       return_accept_rates=rates, backend=backend)
        assert not seen, (method, rates, seen)
        _same(want, got)
        if rates:
            assert torch.equal(want.accept_rates.nan_to_num(-1), got.accept_rates.nan_to_num(-1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_block_malformed_request_emits_nothing(backend):
    """method="block" with rates: the malformed cases in one batch, as above."""
    kw = _inputs(4, tensors=False)
    kw["num_draft_tokens"] = torch.tensor([3, 3, 2, 3])
    cases = ["temperature nan", "top_p>1", "id>=V", "num_draft>K"]
    bad = _requests(kw, torch.tensor([0, 1, 2, 3] + [1] * len(cases)))
    for m, case in enumerate(cases):
        bad = _with_bad_request(bad, MALFORMED[case], b=4 + m)
    want = specops.verify_block(**kw, method="block", backend=backend)
    got = specops.verify_block(**bad, validate=False, method="block", return_accept_rates=True,
                               backend=backend)
    for m, case in enumerate(cases):
        b = 4 + m
        assert got.token_ids[b].tolist() == [-1] * 4 and got.accept_rates[b].isnan().all(), case
        assert int(got.num_accepted[b]) == 0 and not bool(got.valid[b]), case
    assert torch.equal(got.token_ids[:4], want.token_ids)
    assert torch.equal(got.valid[:4], want.valid)
