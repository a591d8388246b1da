"""The C++ block walk's one-read passes (csrc/simd/draw_passes.cpp pq_masses, csrc/verify/verify.cpp
run_block) at every ISA level this CPU runs.

The block walk keeps only two row slots, the per-block sums of the row tau stops at, and checks
the end row without transforming it until the draw lands there; these tests make every stop
position occur (tau = 0, a middle position, the end row) on rows with masked tokens and
zero-mass tails, and hold the tokens and rates to the reference bit for bit."""
from __future__ import annotations

import math

import pytest
import torch

import specops
from tests.cases import make_case

pytestmark = pytest.mark.skipif("cpu" not in specops.available_backends(),
                                reason="C++ backend not built")


def _levels():
    from specops import _C
    return _C, _C.available_isas()


def _wide_case(B, K, V, seed):
    """Rows with a long zero-mass tail (logits spread 40: most tokens sit more than 27.75 below
    the max, so the exp pass keeps d instead of e) and a mix of top-k / top-p / min-p rows:
    the p the block pass computes from e must be what materialize would store."""
    kw = make_case("full", V, K, B=B, seed=seed)
    g = torch.Generator().manual_seed(seed)
    kw["target_logits"] = kw["target_logits"] * 13.0
    kw["temperature"] = torch.tensor([0.8, 1.0, 1.3, 0.6] * (B // 4))
    kw["top_k"] = torch.tensor([0, 40, 0, 0] * (B // 4))
    kw["top_p"] = torch.tensor([1.0, 1.0, 0.9, 1.0] * (B // 4))
    kw["min_p"] = torch.tensor([0.0, 0.0, 0.0, 0.02] * (B // 4))
    # draft rows close to the target's own probabilities, so that long blocks are accepted
    per_row = {k: kw[k][:, None].expand(B, K) for k in ("top_k", "top_p", "min_p")}
    p, _ = specops.sampling_probs(kw["target_logits"][:, :K],
                                  temperature=kw["temperature"][:, None].expand(B, K),
                                  backend="reference", **per_row)
    mix = torch.rand((B, K, 1), generator=g)
    q = (1 - mix) * p + mix * torch.softmax(torch.randn((B, K, V), generator=g), -1)
    q = q / q.sum(-1, keepdim=True)
    kw["draft_probs"] = q.float()
    flat = q.reshape(-1, V).double()
    kw["draft_token_ids"] = torch.multinomial(flat, 1, generator=g).reshape(B, K)
    return kw


def test_block_every_stop_position_every_isa():
    """Catches: the draw at tau reading another slot's row or block sums, the end row's deferred
    transform, tau = 0 (summed only at the end), the pass's p differing from materialize's on
    masked / zero-mass tokens: tokens or rates differ from the reference at some level."""
    C, levels = _levels()
    B, K, V = 64, 4, 2500  # V: two whole draw blocks and a ragged third, vector tails
    kw = _wide_case(B, K, V, seed=5)
    want = specops.verify_block(**kw, method="block", return_accept_rates=True,
                                backend="reference")
    # the case must make every stop position occur, or the test could not see a slot mix-up
    taus = set(want.num_accepted.tolist())
    assert {0, K} <= taus and len(taus & {1, 2, 3}) >= 2, taus
    before = C.isa()
    try:
        for level in levels:
            C.set_isa(level)
            for rates in (False, True):
                got = specops.verify_block(**kw, method="block", return_accept_rates=rates,
                                           backend="cpu")
                assert torch.equal(got.token_ids, want.token_ids), level
                assert torch.equal(got.num_accepted, want.num_accepted), level
                if rates:
                    assert torch.equal(got.accept_rates.nan_to_num(-1),
                                       want.accept_rates.nan_to_num(-1)), level
            got = specops.verify_block(**kw, return_accept_rates=True, backend="cpu")
            ref = specops.verify_block(**kw, return_accept_rates=True, backend="reference")
            assert torch.equal(got.token_ids, ref.token_ids), level
            assert torch.equal(got.accept_rates.nan_to_num(-1),
                               ref.accept_rates.nan_to_num(-1)), level
    finally:
        C.set_isa(before)


def test_block_end_row_invalid_without_transform():
    """The end row is only scanned (NaN / all -inf checks) unless drawn from.  Catches a scan
    that misses an invalid end row: the request must end with -1 where tau reaches it, and
    still draw at tau < kb where it does not (the reference decides which)."""
    C, levels = _levels()
    B, K, V = 32, 3, 700
    kw = _wide_case(B, K, V, seed=9)
    tl = kw["target_logits"].clone()
    tl[0::2, K, 17] = float("nan")
    tl[1::4, K] = -float("inf")
    kw["target_logits"] = tl
    want = specops.verify_block(**kw, method="block", backend="reference")
    assert not bool(want.valid.all()) and bool(want.valid[0::2].any())
    before = C.isa()
    try:
        for level in levels:
            C.set_isa(level)
            got = specops.verify_block(**kw, method="block", backend="cpu")
            assert torch.equal(got.token_ids, want.token_ids), level
            assert torch.equal(got.valid, want.valid), level
    finally:
        C.set_isa(before)


