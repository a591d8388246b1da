"""Grammar masks and penalties (contract section 16) in the reference: the bit layout, vLLM's
penalty arithmetic, each row's history, malformed requests, and the exact laws with the
engines' classic mistakes as negative controls that must show a bias."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from specops import reference as R
from specops.reference import penalties as P

V = 7


def _mask(allowed: np.ndarray) -> np.ndarray:
    """bool [..., V] -> int32 words [..., W] (bit j of word w allows token 32 w + j)."""
    Vn = allowed.shape[-1]
    W = P.mask_words(Vn)
    words = np.zeros(allowed.shape[:-1] + (W,), dtype=np.int64)
    for t in range(Vn):
        words[..., t // 32] |= allowed[..., t].astype(np.int64) << (t % 32)
    return (words.astype(np.uint32)).view(np.int32)


def test_bit_layout_is_xgrammars():
    """Bit j of word w allows 32 w + j; -1 (all bits) allows everything; bits past V are
    ignored.  (vLLM / xgrammar: apply_token_bitmask_inplace reads the same words.)"""
    rng = np.random.default_rng(0)
    for Vn in (1, 31, 32, 33, 64, 100):
        allowed = rng.random(Vn) < 0.5
        assert (P.allowed_tokens(_mask(allowed), Vn) == allowed).all()
        assert P.allowed_tokens(np.full(P.mask_words(Vn), -1, np.int32), Vn).all()
    words = np.array([0, 1 << 4], np.int32)                  # token 36 only
    assert P.allowed_tokens(words, 40).nonzero()[0].tolist() == [36]
    assert not P.allowed_tokens(words, 36).any()             # bit 36 is past V = 36


def _vllm_penalties(logits, prompt_ids, output_ids, rep, pres, freq):
    """vLLM's apply_penalties (vllm/model_executor/layers/utils.py), transcribed in torch:
    the definition the contract follows."""
    B, Vn = logits.shape
    prompt_mask = torch.zeros(B, Vn + 1, dtype=torch.bool)
    prompt_mask.scatter_(1, torch.where(prompt_ids < 0, Vn, prompt_ids), True)
    counts = torch.zeros(B, Vn + 1, dtype=torch.int64)
    counts.scatter_add_(1, torch.where(output_ids < 0, Vn, output_ids),
                        torch.ones_like(output_ids))
    prompt_mask, counts = prompt_mask[:, :Vn], counts[:, :Vn]
    output_mask = counts > 0
    r = rep[:, None].repeat(1, Vn)
    r[~(prompt_mask | output_mask)] = 1.0
    logits = torch.where(logits > 0, logits / r, logits * r)
    logits -= freq[:, None] * counts
    logits -= pres[:, None] * output_mask
    return logits


def test_penalties_are_vllms_bit_for_bit():
    g = torch.Generator().manual_seed(1)
    B, Vn = 16, 50
    logits = torch.randn(B, Vn, generator=g) * 3
    prompt = torch.randint(-1, Vn, (B, 12), generator=g)
    output = torch.randint(-1, Vn, (B, 9), generator=g)
    rep = torch.rand(B, generator=g) * 1.5 + 0.5
    pres = torch.randn(B, generator=g)
    freq = torch.randn(B, generator=g)
    want = _vllm_penalties(logits.clone(), prompt, output, rep, pres, freq)
    for b in range(B):
        adj = P.Adjust(Vn, None, float(rep[b]), float(pres[b]), float(freq[b]),
                       prompt[b].numpy(), output[b].numpy())
        got = adj.row(0, logits[b].numpy())
        assert np.array_equal(got, want[b].numpy()), b


def _chain_inputs(rng, B=6, K=3, Vn=V):
    q = rng.dirichlet(np.ones(Vn), size=B * K).astype(np.float32)
    ids = np.array([rng.choice(Vn, p=row / row.sum()) for row in q], dtype=np.int64)
    # the target close to the draft (log q plus a little): most blocks reach their last rows
    t = np.log(np.concatenate([q.reshape(B, K, Vn), np.full((B, 1, Vn), 1.0 / Vn)], 1)
               .reshape(-1, Vn)).astype(np.float32)
    t = (t + rng.normal(size=t.shape) * 0.2).astype(np.float32)
    allowed = rng.random((B * (K + 1), Vn)) < 0.9
    allowed[np.arange(B * (K + 1)), rng.integers(0, Vn, B * (K + 1))] = True
    extra = dict(allowed_token_bitmask=_mask(allowed),
                 repetition_penalty=rng.uniform(0.8, 1.25, B).astype(np.float32),
                 presence_penalty=rng.normal(size=B).astype(np.float32) * 0.3,
                 frequency_penalty=rng.normal(size=B).astype(np.float32) * 0.3,
                 prompt_token_ids=rng.integers(-1, Vn, (B, 5)),
                 output_token_ids=rng.integers(-1, Vn, (B, 4)))
    inv = rng.choice([0.0, 1.0, 1.25], size=B).astype(np.float32)
    base = (t, False, np.arange(B) * (K + 1), ids, np.arange(B) * K, np.full(B, K), q, True,
            inv, np.zeros(B, np.int64), np.ones(B, np.float32), np.zeros(B, np.float32),
            rng.integers(0, 2 ** 62, B), np.zeros(B, np.int64), K)
    return base, extra


def _adjusted_by_hand(base, extra):
    """The same rows adjusted outside the walk, each with the history the contract names."""
    t, K, B = base[0].copy(), base[14], len(base[5])
    ids = base[3]
    for b in range(B):
        adj = P.Adjust(t.shape[1], extra["allowed_token_bitmask"],
                       extra["repetition_penalty"][b], extra["presence_penalty"][b],
                       extra["frequency_penalty"][b], extra["prompt_token_ids"][b],
                       extra["output_token_ids"][b])
        for j in range(K + 1):
            r = b * (K + 1) + j
            t[r] = adj.row(r, base[0][r], ids[b * K:b * K + j].tolist())
    return (t,) + base[1:]


@pytest.mark.parametrize("method", ["token", "block"])
def test_chain_rows_are_adjusted_with_their_own_history(method):
    """Row j's history is the output plus y_0..y_{j-1}: the walk with section 16's inputs
    equals the plain walk on rows adjusted by hand.  Catches a history of the committed
    output only, one token per step, or the bonus row alone."""
    rng = np.random.default_rng(2)
    deep = 0
    for _ in range(8):
        base, extra = _chain_inputs(rng, B=8, K=4)
        got = R.verify_rows_ref(*base, method=method, **extra)
        want = R.verify_rows_ref(*_adjusted_by_hand(base, extra), method=method)
        for x, y in zip(got, want):
            assert np.array_equal(x, y)
        deep += int((got[1] >= 2).sum())
    assert deep >= 16                             # rows with two drafts before them were read


def test_a_forbidden_draft_is_rejected_by_the_ordinary_rule():
    """p(y) = 0 for a forbidden draft: never accepted, and the residual norm(max(0, p_m - q))
    (the law below is the target's; dropping the draft and sampling p_m is not)."""
    rng = np.random.default_rng(3)
    B = 400
    t = np.zeros((B * 2, 3), np.float32)
    q = np.tile(np.array([[.5, .25, .25]], np.float32), (B, 1))
    ids = np.full(B, 2)
    allowed = np.tile(np.array([[True, True, False], [True, True, True]]), (B, 1))
    out = R.verify_rows_ref(t, False, np.arange(B) * 2, ids, np.arange(B), np.ones(B, np.int64),
                            q, True, np.ones(B, np.float32), np.zeros(B, np.int64),
                            np.ones(B, np.float32), np.zeros(B, np.float32),
                            rng.integers(0, 2 ** 62, B), np.zeros(B, np.int64), 1,
                            allowed_token_bitmask=_mask(allowed))
    assert (out[1] == 0).all() and out[2].all()
    assert set(out[0][:, 0].tolist()) <= {0, 1}


def _law_rows(V3=3):
    """A prefix-dependent target over 3 tokens whose rows a history changes (penalties) and
    whose mask forbids token 2 after a 0 (grammar), with a draft that proposes token 2."""
    base = np.array([1.0, 0.5, 0.8], np.float32)
    q = np.array([0.25, 0.25, 0.5], np.float32)

    def adjusted(prefix, history):
        adj = P.Adjust(V3, None, 1.3, 0.4, 0.3, [1], [0])
        x = adj.row(0, base, list(history))
        if prefix and prefix[-1] == 0:
            x = np.where(np.arange(V3) == 2, np.float32(-np.inf), x).astype(np.float32)
        return R.transform_row(x, 1.0)[0]
    return adjusted, (lambda prefix: q)


def _law_against_truth(verifier_rows, truth_rows, q, K=2, V3=3, method="token"):
    law = R.exact_output_law(verifier_rows, q, K, V3, method=method)
    _, _, truth = R.completion(R._as_fn(truth_rows), V3, K + 1)
    return R.against_target(law["law"], truth, V3, law["length_law"])["tv"]


@pytest.mark.parametrize("method", ["token", "block"])
def test_exact_law_holds_and_the_engines_mistakes_do_not(method):
    """By enumeration: verifying against rows adjusted with the contract's history is the
    adjusted target's law; the negative controls -- penalties counting one token per step
    (sglang#33643), the penalty on the bonus row only (sglang#28200), no penalty on the drafts'
    rows -- are biased against that same target."""
    adjusted, q = _law_rows()
    K = 2
    truth = lambda prefix: adjusted(prefix, prefix)                        # noqa: E731
    assert _law_against_truth(truth, truth, q, K, method=method) < 1e-7   # float32 rows
    controls = {
        "one token per step": lambda prefix: adjusted(prefix, prefix[-1:]),
        "bonus row only": lambda prefix: adjusted(prefix, prefix if len(prefix) == K else ()),
        "committed history only": lambda prefix: adjusted(prefix, ()),
    }
    for name, rows in controls.items():
        assert _law_against_truth(rows, truth, q, K, method=method) > 1e-3, name


def test_trimming_a_forbidden_probabilistic_draft_is_biased():
    """q = (1/2, 1/4, 1/4), token 2 forbidden, p_m = (1/2, 1/2, 0): the ordinary rule gives
    the target's (1/2, 1/2); dropping the forbidden draft and sampling p_m gives (5/8, 3/8)."""
    p_m = np.array([.5, .5, 0.], np.float32)
    q = np.array([.5, .25, .25], np.float32)
    law = R.exact_output_law(lambda prefix: p_m, lambda prefix: q, 1, 3)
    first = law["law"].sum(axis=1)                        # the first token's marginal
    assert np.allclose(first, [.5, .5, 0], atol=1e-9)
    trimmed = np.zeros(3)          # accept y != 2 with min(1, p/q); y = 2 or rejected: p_m
    for y in range(3):
        acc = 0.0 if y == 2 else min(1.0, p_m[y] / q[y])
        trimmed[y] += q[y] * acc
        trimmed += q[y] * (1 - acc) * (p_m if y == 2 else
                                       np.maximum(p_m - q, 0) / np.maximum(p_m - q, 0).sum())
    assert np.allclose(trimmed, [5 / 8, 3 / 8, 0])


def _one(extra_updates, target_is_probs=False):
    rng = np.random.default_rng(4)
    base, extra = _chain_inputs(rng, B=3, K=2)
    base = list(base)
    if target_is_probs:
        base[0] = np.full_like(base[0], 1.0 / base[0].shape[1])
        base[1] = True
        base[8] = np.ones(3, np.float32)
    extra.update(extra_updates)
    return R.verify_rows_ref(*base, **extra)


@pytest.mark.parametrize("name,updates,probs,bad", [
    ("target probs", {}, True, [0, 1, 2]),
    ("rep <= 0", {"repetition_penalty": np.array([1.0, 0.0, 1.0], np.float32)}, False, [1]),
    ("pres nan", {"presence_penalty": np.array([np.nan, 0, 0], np.float32)}, False, [0]),
    ("history id >= V", {"output_token_ids": np.array([[0, V, -1, -1], [0] * 4, [0] * 4])},
     False, [0]),
])
def test_malformed_requests(name, updates, probs, bad):
    tok, nacc, valid = _one(updates, probs)
    for b in bad:
        assert (tok[b] == -1).all() and nacc[b] == 0 and not valid[b], name
    assert all(valid[b] for b in range(3) if b not in bad) or probs


def test_a_row_that_allows_nothing_is_malformed_where_it_may_be_read():
    rng = np.random.default_rng(5)
    base, extra = _chain_inputs(rng, B=2, K=2)
    mask = extra["allowed_token_bitmask"].copy()
    mask[1] = 0                                   # request 0, row 1 (read: j <= kb)
    tok, nacc, valid = R.verify_rows_ref(*base, **dict(extra, allowed_token_bitmask=mask))
    assert (tok[0] == -1).all() and not valid[0] and valid[1]
    nd = np.array([1, 2])                         # request 0's block is 1 long: rows 0, 1 read
    mask2 = extra["allowed_token_bitmask"].copy()
    mask2[2] = 0                                  # request 0, row 2: not read
    base2 = base[:5] + (nd,) + base[6:]
    assert R.verify_rows_ref(*base2, **dict(extra, allowed_token_bitmask=mask2))[2][0]


@pytest.mark.parametrize("walk,method", [(R.verify_tree_ref, "rsd"), (R.verify_tree_ref, "mss"),
                                         (R.verify_traversal_ref, "traversal"),
                                         (R.verify_gbv_ref, "gbv")])
def test_tree_rows_are_adjusted_with_their_paths(walk, method):
    """A node's history is its path's tokens; a malformed request (a present node that
    allows nothing) emits nothing.  Every tree method through the same adjustment."""
    rng = np.random.default_rng(6)
    B, N = 4, 5
    parents = np.array([[-1, 0, 1, 0, 3]] * B)              # two chains of two (gbv's shape)
    target = rng.normal(size=(B, N, V)).astype(np.float32)
    q = rng.dirichlet(np.ones(V), size=(B, N)).astype(np.float32)
    ids = rng.integers(0, V, (B, N))
    allowed = rng.random((B, N, V)) < 0.7
    allowed[..., 0] = True
    extra = dict(allowed_token_bitmask=_mask(allowed),
                 repetition_penalty=np.full(B, 1.4, np.float32),
                 presence_penalty=np.full(B, 0.5, np.float32),
                 frequency_penalty=np.full(B, 0.3, np.float32),
                 prompt_token_ids=rng.integers(-1, V, (B, 3)),
                 output_token_ids=rng.integers(-1, V, (B, 3)))
    common = (ids, parents, np.full(B, N), q, True, np.ones(B, np.float32),
              np.zeros(B, np.int64), np.ones(B, np.float32), np.zeros(B, np.float32),
              rng.integers(0, 2 ** 62, B), np.zeros(B, np.int64), 2, method)
    got = R.adjusted_tree_walk(walk, target, False, *common, **extra)
    by_hand = target.copy()
    for b, n in itertools.product(range(B), range(N)):
        adj = P.Adjust(V, extra["allowed_token_bitmask"][b], 1.4, 0.5, 0.3,
                       extra["prompt_token_ids"][b], extra["output_token_ids"][b])
        by_hand[b, n] = adj.row(n, target[b, n], P.path_tokens(n, parents[b], ids[b]))
    want = walk(by_hand, False, *common)
    for x, y in zip(got, want):
        assert np.array_equal(x, y)
    blocked = extra["allowed_token_bitmask"].copy()
    blocked[2, 4] = 0
    out = R.adjusted_tree_walk(walk, target, False, *common,
                               **dict(extra, allowed_token_bitmask=blocked))
    assert not out[3][2] and (out[0][2] == -1).all()
