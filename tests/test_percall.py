"""The per-call fast paths of the argument layer (issue 32, per call): the layout checks are
derived once per argument layout and cached (``specops._args.Layout``), a few [B] values are
read as a list, and a [B] temperature shared by every request is passed as one number.  Each
test says which breakage it catches; the tokens are compared bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import specops
from specops import _args, _cache
from specops import reference as _ref
from tests.cases import make_case
from tests.test_api import BAD, FLAT_BAD, base

BACKENDS = [b for b in ("reference", "cpu") if b in specops.available_backends()]


def _fresh(kw, backend):
    """verify_block with every per-call cache emptied first: the tokens as the first call
    of a process derives them."""
    for c in _cache.CACHES:
        c.clear()
    return specops.verify_block(**kw, backend=backend)


@pytest.mark.parametrize("name,mutate,exc,word", BAD, ids=[b[0] for b in BAD])
def test_bad_input_after_a_cached_call_still_raises(name, mutate, exc, word):
    """Catches a stale layout: a layout key that misses something a check read (which of
    target_logits / target_probs was given, a dtype, a shape, a device, the kind of a
    parameter) would let a call with the same key skip that check after a good call."""
    specops.verify_block(**base())                       # caches base()'s layout
    kw = base()
    mutate(kw)
    with pytest.raises(exc, match=word):
        specops.verify_block(**kw)


@pytest.mark.parametrize("name,mutate,word", FLAT_BAD, ids=[b[0] for b in FLAT_BAD])
def test_bad_flattened_layout_after_a_cached_call_still_raises(name, mutate, word):
    """The same for the flattened layout (the shapes of cu_num_draft_tokens are in the key,
    its values are read on every call)."""
    specops.verify_block(**make_case("flat", 11, 3, B=2))
    kw = make_case("flat", 11, 3, B=2)
    mutate(kw)
    with pytest.raises(ValueError, match=word):
        specops.verify_block(**kw)


def _layouts():
    """The same requests in layouts that differ in one thing each (stride, dtype, which
    target / draft argument, K, B, ids dtype, the flattened form)."""
    kw = base(B=3, K=4, V=13, seed=5)
    tgt, ids, q = kw["target_logits"], kw["draft_token_ids"], kw["draft_probs"]
    common = dict(seed=kw["seed"], offset=kw["offset"], temperature=0.9)
    wide = torch.zeros(3, 5, 26)
    wide[..., ::2] = tgt                                    # column stride 2: copied
    flat_t = torch.cat([torch.cat([tgt[b, :4], tgt[b, 4:]]) for b in range(3)])
    return {
        "padded": dict(target_logits=tgt, draft_token_ids=ids, draft_probs=q, **common),
        "strided target": dict(target_logits=wide[..., ::2], draft_token_ids=ids,
                               draft_probs=q, **common),
        "bf16 target": dict(target_logits=tgt.bfloat16(), draft_token_ids=ids, draft_probs=q,
                            **common),
        "int32 ids": dict(target_logits=tgt, draft_token_ids=ids.int(), draft_probs=q,
                          **common),
        "draft logits": dict(target_logits=tgt, draft_token_ids=ids,
                             draft_logits=torch.log(q), **common),
        "point drafts": dict(target_logits=tgt, draft_token_ids=ids, **common),
        "target probs": dict(target_probs=torch.softmax(tgt, -1), draft_token_ids=ids,
                             draft_probs=q, seed=kw["seed"], offset=kw["offset"]),
        "K=2": dict(target_logits=tgt[:, :3], draft_token_ids=ids[:, :2],
                    draft_probs=q[:, :2], **common),
        "B=2": dict(target_logits=tgt[:2], draft_token_ids=ids[:2], draft_probs=q[:2],
                    seed=kw["seed"][:2], offset=kw["offset"][:2], temperature=0.9),
        "ragged": dict(target_logits=tgt, draft_token_ids=ids, draft_probs=q,
                       num_draft_tokens=torch.tensor([4, 1, 0]), **common),
        "flattened": dict(target_logits=flat_t, draft_token_ids=ids.reshape(-1),
                          draft_probs=q.reshape(-1, 13),
                          cu_num_draft_tokens=torch.tensor([4, 8, 12]), **common),
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_layout_after_the_others_gets_its_own_tokens(backend):
    """Catches a stale layout that passes the checks but carries the wrong B, K, V or row
    starts into the call (wrong tokens, or the previous layout's): every layout, called
    twice after all the others, equals its fresh first call bit for bit."""
    cases = _layouts()
    fresh = {k: _fresh(kw, backend) for k, kw in cases.items()}
    for _ in range(2):
        for k, kw in cases.items():
            out = specops.verify_block(**kw, backend=backend)
            for got, want in zip(out, fresh[k]):
                assert torch.equal(got, want), k


def test_layout_cache_is_bypassed_while_tracing(monkeypatch):
    """Catches a layout read or written under torch.compile / CUDA-graph capture (the cache
    policy of specops._cache): no entry is added while a graph is built."""
    _args._LAYOUTS.clear()
    monkeypatch.setattr(_args, "tracing", lambda: True)
    monkeypatch.setattr(_cache, "building_graph", lambda: True)
    specops.verify_block(**base(), backend="reference")
    assert not _args._LAYOUTS.entries


F32 = np.float32
EDGE_T = [0.0, float(np.nextafter(F32(1e-5), F32(0))), float(F32(1e-5)),
          float(np.nextafter(F32(1e-5), F32(1))), 1e-30, 2e-5, 0.1, 0.8, 1.0, 1.7, 3.0,
          123.456, 1e30, float(np.finfo(F32).max), float(np.finfo(F32).tiny)]


def test_few_temperatures_take_the_tensor_rule_bit_for_bit():
    """Catches a divergence between the two spellings of 1/T (the per-value rule on a few
    readable values and the tensor rule on many or unreadable ones): the greedy threshold
    compared in float32, float32(1 / float64(T)), for edge temperatures."""
    temp = torch.tensor(EDGE_T, dtype=torch.float32)
    want = _args.inv_temperature(temp)
    got = torch.tensor([_args.inv_temperature_scalar(v) for v in temp.tolist()],
                       dtype=torch.float32)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    ref = np.asarray(_ref.inv_temperature(np.asarray(EDGE_T, dtype=F32)), dtype=F32)
    assert np.array_equal(got.numpy().view(np.int32), ref.view(np.int32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temps", [[0.7, 0.7, 0.7], [0.7, 1.3, 0.0], [1e-6, 1e-6, 1e-6]],
                         ids=["shared", "mixed", "all greedy"])
def test_few_tensor_temperatures_equal_the_unread_path(backend, temps):
    """Catches the list path (a few readable [B] temperatures; one shared value passed as a
    number) emitting other tokens than the tensor path the same call takes when no value is
    read (validate=False): same requests, bit-identical outputs."""
    kw = base(B=3, K=4, V=13, seed=2)
    kw["temperature"] = torch.tensor(temps)
    read = specops.verify_block(**kw, backend=backend)
    unread = specops.verify_block(**kw, validate=False, backend=backend)
    for got, want in zip(read, unread):
        assert torch.equal(got, want)


@pytest.mark.parametrize("B", [3, 70], ids=["list read", "aminmax"])
def test_value_checks_of_few_and_many(B):
    """Catches a value check lost on either side of the few / many threshold (``_args.FEW``):
    a negative temperature and an out-of-range draft id raise for B*K ids below and above it,
    and a NaN temperature (which Python's min / max would order arbitrarily) raises too."""
    kw = base(B=B, K=1, V=11)
    t = torch.ones(B)
    t[-1] = -1.0
    with pytest.raises(ValueError, match="temperature"):
        specops.verify_block(**kw, temperature=t)
    t[-1] = float("nan")
    with pytest.raises(ValueError, match="temperature"):
        specops.verify_block(**kw, temperature=t)
    for bad in (11, -2):
        kw = base(B=B, K=1, V=11)
        kw["draft_token_ids"][-1, 0] = bad
        with pytest.raises(ValueError, match="draft_token_ids"):
            specops.verify_block(**kw)


@pytest.mark.skipif("triton" not in specops.available_backends(),
                    reason="Triton is not importable here (TRITON_INTERPRET=1 on CPU)")
def test_shared_tensor_temperature_on_triton_equals_the_unread_path():
    """Catches the Triton backend mishandling a shared [B] temperature passed as a Python
    number (the list path) where it used to get a [B] tensor: two launches, bitwise equal."""
    kw = base(B=3, K=4, V=13, seed=2)
    kw["temperature"] = torch.tensor([0.7, 0.7, 0.7])
    read = specops.verify_block(**kw, backend="triton")
    unread = specops.verify_block(**kw, validate=False, backend="triton")
    for got, want in zip(read, unread):
        assert torch.equal(got, want)
