"""specops' Hugging Face integration against the real transformers package.

Tiny randomly initialised Llama models are built in the test (no downloads).  Skipped as a
module where transformers is not installed.
"""
import inspect

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from scipy import stats as scipy_stats  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation.utils import _speculative_sampling as hf_speculative_sampling  # noqa: E402,E501

import specops  # noqa: E402
from specops.integrations import hf  # noqa: E402

ALPHA = 1e-6
V = 64


def chi2_pvalue(observed, probs):
    """Chi-square goodness of fit over the tokens of positive probability; a token of
    probability 0 that was observed fails outright."""
    observed = np.asarray(observed, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    keep = probs > 0
    if observed[~keep].sum() > 0:
        return 0.0
    if keep.sum() < 2:
        return 1.0
    exp = probs[keep] / probs[keep].sum() * observed.sum()
    return float(scipy_stats.chisquare(observed[keep], exp).pvalue)


def tiny(layers, hidden, seed, heads=4):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():                 # peaked next-token laws (logit std ~3), so that
        model.lm_head.weight.mul_(20.0)   # the statistical tests have power
    return model


# the tiny models are built once per process: keep this module on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("hf-tiny-models")


@pytest.fixture(scope="module")
def models():
    target = tiny(2, 64, 0)
    # a draft that agrees with the target often: the target's weights plus noise
    close = tiny(2, 64, 0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in close.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g) * p.abs().mean())
    small = tiny(1, 32, 7)                             # an unrelated, cheaper draft
    return target, close, small


def prompts():
    ids = torch.tensor([[0, 0, 5, 17, 33, 9],
                        [4, 8, 15, 16, 23, 42],
                        [0, 0, 0, 0, 11, 3]])
    mask = (torch.arange(6)[None] >= torch.tensor([[2], [0], [4]])).long()
    return ids, mask


# ----------------------------------------------------------------------------- drop-in
def test_drop_in_signature_matches_transformers():
    ours = list(inspect.signature(hf.speculative_sampling).parameters)
    theirs = list(inspect.signature(hf_speculative_sampling).parameters)
    assert ours == theirs


def _hf_unit_vector():
    """transformers' own unit-test vector (tests/generation/test_utils.py,
    UtilsFunctionsTest.test_speculative_sampling)."""
    candidate_input_ids = torch.tensor([[8, 0, 3, 9, 8, 1, 4, 5]])
    candidate_logits = torch.full((1, 3, 10), -10.0)
    for j, t in enumerate((1, 4, 5)):
        candidate_logits[0, j, t] = 10.0
    inf = float("inf")
    new_logits = torch.full((1, 4, 10), -10.0)
    new_logits[0, 0, 1] = 10.0                         # accepts 1
    new_logits[0, 1, 4] = 10.0                         # accepts 4
    new_logits[0, 2] = -inf
    new_logits[0, 2, 8] = 10.0                         # rejects 5, emits 8
    return candidate_input_ids, candidate_logits, 3, new_logits


@pytest.mark.parametrize("seed", range(5))
def test_drop_in_reproduces_transformers_unit_vector(seed):
    args = _hf_unit_vector()
    torch.manual_seed(seed)
    tokens, n = hf.speculative_sampling(*args)
    assert n.item() == 2 and tokens.tolist() == [[1, 4, 8]]
    assert tokens.dtype == torch.long
    torch.manual_seed(seed)
    t2, n2 = hf_speculative_sampling(*args)
    assert t2.tolist() == tokens.tolist() and n2.item() == n.item()


def test_drop_in_all_accepted_returns_bonus():
    ids = torch.tensor([[3, 1, 4]])
    cand = torch.full((1, 2, 6), -20.0)
    cand[0, 0, 1] = cand[0, 1, 4] = 20.0
    new = torch.full((1, 3, 6), -20.0)
    new[0, 0, 1] = new[0, 1, 4] = new[0, 2, 5] = 20.0
    tokens, n = hf.speculative_sampling(ids, cand, 2, new)
    assert n.item() == 2 and tokens.tolist() == [[1, 4, 5]]


def test_drop_in_refuses_ensemble_weight():
    with pytest.raises(NotImplementedError):
        hf.speculative_sampling(*_hf_unit_vector(), assistant_ensemble_weight=0.5)


def test_drop_in_first_token_law():
    g = torch.Generator().manual_seed(0)
    cand_logits = torch.randn(1, 2, 6, generator=g)
    new_logits = torch.randn(1, 3, 6, generator=g)
    q0 = torch.softmax(cand_logits[0, 0], -1)
    p0 = torch.softmax(new_logits[0, 0], -1).double().numpy()
    draws = torch.Generator().manual_seed(0)
    counts = np.zeros(6)
    for _ in range(3000):
        d = torch.multinomial(q0, 1, generator=draws).item()
        ids = torch.tensor([[7, d, 0]])
        tokens, _ = hf.speculative_sampling(ids, cand_logits, 2, new_logits)
        counts[tokens[0, 0].item()] += 1
    assert chi2_pvalue(counts, p0) > ALPHA


# ----------------------------------------------------------------------------- generate
def hf_greedy(model, ids, mask, n, eos=None):
    out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n,
                         min_new_tokens=0 if eos is not None else n, eos_token_id=eos,
                         pad_token_id=0)
    return out[:, ids.shape[1]:]


@pytest.mark.parametrize("draft_name", ["close", "small", "same"])
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_equals_target_greedy_generate(models, draft_name, gamma):
    target, close, small = models
    draft = {"close": close, "small": small, "same": target}[draft_name]
    ids, mask = prompts()
    n = 24
    out = specops.generate(target, draft, ids, mask, max_new_tokens=n, num_draft_tokens=gamma,
                           temperature=0.0, eos_token_id=[])
    ref = hf_greedy(target, ids, mask, n)
    assert torch.equal(out.sequences[:, ids.shape[1]:], ref)
    assert out.num_new_tokens.tolist() == [n] * 3
    st = out.stats
    assert st["target_calls"] == st["steps"] + 1           # prefill + one pass per step
    assert st["draft_calls"] == st["steps"] * gamma + 1
    assert sum(st["accept_length_hist"]) > 0
    if draft_name == "same":
        assert st["accepted"] == st["proposed"]             # a copy of the target: all kept
        assert st["accept_length_hist"][gamma] >= st["steps"]  # a copy is always accepted


def test_eos_requests_drop_out(models):
    target, close, _ = models
    ids, mask = prompts()
    n = 20
    ref = hf_greedy(target, ids, mask, n)
    eos = int(ref[0, 5])                               # request 0 ends at its 6th token
    out = specops.generate(target, close, ids, mask, max_new_tokens=n, num_draft_tokens=3,
                           temperature=0.0, eos_token_id=eos, pad_token_id=0)
    ref_eos = hf_greedy(target, ids, mask, n, eos=eos)
    new = out.sequences[:, ids.shape[1]:]
    for b in range(3):
        k = int(out.num_new_tokens[b])
        r = ref_eos[b].tolist()
        stop = r.index(eos) + 1 if eos in r else n
        assert k == stop
        assert new[b, :k].tolist() == r[:k]
        assert (new[b, k:] == 0).all()
    assert int(out.num_new_tokens[0]) <= 6


def test_batch_equals_per_request_sampled(models):
    target, close, _ = models
    ids, mask = prompts()
    kw = dict(max_new_tokens=16, num_draft_tokens=3, temperature=[0.9, 1.0, 0.7],
              top_k=[0, 20, 10], top_p=[0.95, 1.0, 0.9], eos_token_id=[])
    seeds = [11, 22, 33]
    batch = specops.generate(target, close, ids, mask, seed=seeds, **kw)
    for b in range(3):
        k = int(mask[b].sum())
        one = specops.generate(target, close, ids[b:b + 1, -k:], None, seed=[seeds[b]],
                               max_new_tokens=16, num_draft_tokens=3,
                               temperature=kw["temperature"][b], top_k=kw["top_k"][b],
                               top_p=kw["top_p"][b], eos_token_id=[])
        assert batch.sequences[b, 6:].tolist() == one.sequences[0, k:].tolist()
    again = specops.generate(target, close, ids, mask, seed=seeds, **kw)
    assert torch.equal(again.sequences, batch.sequences)


@pytest.mark.parametrize("setting", [dict(temperature=1.0), dict(temperature=0.8, top_p=0.9),
                                     dict(temperature=1.2, top_k=8)])
def test_sampled_first_tokens_match_target_law(models, setting):
    """First two new tokens of speculative sampling vs the target's own law (chi-square at
    FPR 1e-6): token 1 marginal, token 2 conditional on the most frequent token 1."""
    target, _, small = models
    n = 3000
    prompt = torch.tensor([[5, 17, 33, 9]])
    out = specops.generate(target, small, prompt.repeat(n, 1), max_new_tokens=2,
                           num_draft_tokens=2, seed=1234, eos_token_id=[], **setting)
    first = out.sequences[:, 4].numpy()
    second = out.sequences[:, 5].numpy()
    with torch.no_grad():
        logits = target(prompt).logits[0, -1:].float()
    p = specops.sampling_probs(logits, **setting)[0][0].double().numpy()
    assert chi2_pvalue(np.bincount(first, minlength=V), p) > ALPHA
    top = int(np.bincount(first, minlength=V).argmax())
    sel = second[first == top]
    with torch.no_grad():
        logits2 = target(torch.cat([prompt, torch.tensor([[top]])], 1)).logits[0, -1:].float()
    p2 = specops.sampling_probs(logits2, **setting)[0][0].double().numpy()
    assert chi2_pvalue(np.bincount(sel, minlength=V), p2) > ALPHA


def test_sampled_negative_control_fails(models, monkeypatch):
    """The same first-token test rejects generate when the verifier is told the wrong draft
    distribution (uniform instead of the q the drafts were sampled from; a point mass would
    not do: point-mass verification is exact for any proposal)."""
    target, _, small = models
    real = specops.verify_block

    def lying(target_logits, draft_token_ids, draft_probs=None, **kw):
        uniform = torch.full(target_logits[:, :-1].shape, 1.0 / target_logits.shape[-1])
        return real(target_logits, draft_token_ids, uniform, **kw)

    monkeypatch.setattr(specops, "verify_block", lying)
    n = 3000
    prompt = torch.tensor([[5, 17, 33, 9]])
    out = specops.generate(target, small, prompt.repeat(n, 1), max_new_tokens=1,
                           num_draft_tokens=2, seed=99, eos_token_id=[], temperature=1.0)
    with torch.no_grad():
        p = torch.softmax(target(prompt).logits[0, -1].float(), -1).double().numpy()
    first = out.sequences[:, 4].numpy()
    assert chi2_pvalue(np.bincount(first, minlength=V), p) < ALPHA


def test_max_new_tokens_zero_and_bad_args(models):
    target, close, _ = models
    ids, mask = prompts()
    out = specops.generate(target, close, ids, mask, max_new_tokens=0, num_draft_tokens=2)
    assert torch.equal(out.sequences, ids)
    with pytest.raises(ValueError, match="left-padded"):
        specops.generate(target, close, ids, mask.flip(1), max_new_tokens=2)


def test_mixed_greedy_and_sampled_batch(models):
    """Greedy requests in a batch with sampled ones still equal the target's greedy output."""
    target, close, _ = models
    ids, mask = prompts()
    out = specops.generate(target, close, ids, mask, max_new_tokens=12, num_draft_tokens=3,
                           temperature=[0.0, 1.0, 0.0], seed=5, eos_token_id=[])
    ref = hf_greedy(target, ids, mask, 12)
    assert torch.equal(out.sequences[[0, 2], 6:], ref[[0, 2]])


def test_one_token_prompts(models):
    """L = 1 (no prefill): the draft's first step has a masked placeholder slot."""
    target, close, small = models
    ids = torch.tensor([[5], [9]])
    for draft in (close, small):
        out = specops.generate(target, draft, ids, max_new_tokens=10, num_draft_tokens=2,
                               temperature=0.0, eos_token_id=[])
        assert torch.equal(out.sequences[:, 1:], hf_greedy(target, ids, None, 10))


# ----------------------------------------------------------------------------- block, auto K
@pytest.mark.parametrize("method,k", [("block", 3), ("token", "auto"), ("block", "auto")])
def test_greedy_block_and_auto_equal_target_greedy(models, method, k):
    target, close, _ = models
    ids, mask = prompts()
    out = specops.generate(target, close, ids, mask, max_new_tokens=20, num_draft_tokens=k,
                           temperature=0.0, eos_token_id=[], method=method,
                           max_num_draft_tokens=6, draft_cost=0.05)
    assert torch.equal(out.sequences[:, ids.shape[1]:], hf_greedy(target, ids, mask, 20))
    ks = out.stats["num_draft_tokens"]
    assert len(ks) == out.stats["steps"] and all(1 <= x <= 6 for x in ks)


def test_auto_draft_length_follows_the_rates(models):
    """A copy of the target is always accepted: the planner goes to the longest K; an
    unrelated draft at a high draft cost is kept short.  Seeded runs repeat exactly."""
    target, close, small = models
    ids, mask = prompts()
    kw = dict(max_new_tokens=24, num_draft_tokens="auto", max_num_draft_tokens=6,
              eos_token_id=[], seed=[1, 2, 3])
    same = specops.generate(target, target, ids, mask, draft_cost=0.05, **kw)
    assert same.stats["num_draft_tokens"][-1] == 6
    far = specops.generate(target, small, ids, mask, draft_cost=0.6, **kw)
    assert max(far.stats["num_draft_tokens"][2:]) < 6
    again = specops.generate(target, small, ids, mask, draft_cost=0.6, **kw)
    assert torch.equal(again.sequences, far.sequences)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        specops.generate(target, small, ids, mask, max_new_tokens=2, num_draft_tokens="best")
    with pytest.raises(ValueError, match="method"):
        specops.generate(target, small, ids, mask, max_new_tokens=2, method="tree")


def test_block_sampled_first_tokens_match_target_law(models):
    target, _, small = models
    n = 3000
    prompt = torch.tensor([[5, 17, 33, 9]])
    setting = dict(temperature=0.9, top_p=0.95)
    out = specops.generate(target, small, prompt.repeat(n, 1), max_new_tokens=2,
                           num_draft_tokens=3, seed=4321, eos_token_id=[], method="block",
                           **setting)
    first = out.sequences[:, 4].numpy()
    with torch.no_grad():
        logits = target(prompt).logits[0, -1:].float()
    p = specops.sampling_probs(logits, **setting)[0][0].double().numpy()
    assert chi2_pvalue(np.bincount(first, minlength=V), p) > ALPHA


# ----------------------------------------------------------------------------- cache kwarg
def test_generate_emits_no_warning(models):
    """transformers 5.x renamed forward's ``past_key_values`` to ``cache`` (FutureWarning
    until its removal in 5.40): generate uses whichever name the installed forward takes,
    and nothing on its path warns."""
    import warnings
    target, close, _ = models
    ids, mask = prompts()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = specops.generate(target, close, ids, mask, max_new_tokens=6, num_draft_tokens=2,
                               temperature=[0.0, 1.0, 0.7], seed=3, eos_token_id=[])
    assert out.num_new_tokens.tolist() == [6, 6, 6]


class _OldApi(torch.nn.Module):
    """A causal LM whose forward takes the cache as ``past_key_values`` only (the API of
    transformers 4.x, and of models not renamed yet): it forwards to the wrapped Llama
    under the name that Llama takes."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config
        self.generation_config = inner.generation_config
        self.calls = 0

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None,
                past_key_values=None, use_cache=None):
        self.calls += 1
        return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=use_cache,
                          **{hf._cache_kwarg(self.inner): past_key_values})


def test_generate_passes_the_cache_under_the_forwards_name(models):
    target, close, _ = models
    ids, mask = prompts()
    assert hf._cache_kwarg(_OldApi(target)) == "past_key_values"
    new_name = "cache" in inspect.signature(target.forward).parameters
    assert hf._cache_kwarg(target) == ("cache" if new_name else "past_key_values")
    old_t, old_d = _OldApi(target), _OldApi(close)
    out = specops.generate(old_t, old_d, ids, mask, max_new_tokens=10, num_draft_tokens=3,
                           temperature=0.0, eos_token_id=[])
    assert torch.equal(out.sequences[:, ids.shape[1]:], hf_greedy(target, ids, mask, 10))
    assert old_t.calls == out.stats["target_calls"] and old_d.calls == out.stats["draft_calls"]


# ----------------------------------------------------------------------------- sliding window
def _tiny_mistral(layers, seed, window):
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(seed)
    cfg = MistralConfig(vocab_size=V, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                        pad_token_id=0, sliding_window=window)
    model = MistralForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model


def test_sliding_window_models_exact_inside_the_window_refused_beyond():
    """A windowed layer masks by cache slot, and rejected drafts keep their slots: inside the
    window generate equals the model's own greedy generate; where the slots could outgrow
    the window it is refused up front (it used to die mid-run in the cache's crop)."""
    ids, mask = prompts()
    target, draft = _tiny_mistral(2, 0, 64), _tiny_mistral(1, 7, 64)
    assert hf._attention_window(target) == 64 and hf._attention_window(tiny(1, 32, 0)) is None
    out = specops.generate(target, draft, ids, mask, max_new_tokens=12, num_draft_tokens=3,
                           temperature=0.0, eos_token_id=[])      # 5 + 12 * 4 = 53 slots
    assert torch.equal(out.sequences[:, 6:], hf_greedy(target, ids, mask, 12))
    with pytest.raises(ValueError, match="target_model has sliding-window"):
        specops.generate(target, draft, ids, mask, max_new_tokens=15, num_draft_tokens=3)
    llama = tiny(1, 32, 7)
    with pytest.raises(ValueError, match="draft_model has sliding-window"):
        specops.generate(llama, _tiny_mistral(1, 7, 8), ids, mask, max_new_tokens=4,
                         num_draft_tokens=2)


# ----------------------------------------------------------------------------- cache growth
def test_cache_grows_with_kept_tokens_not_proposed_drafts(models):
    """A draft that the requests accept by different amounts leaves rolled-back slots in the
    middle of the shared cache (crop only removes the ones at its end); they are gathered
    away, so the target cache stays near prompt + new tokens (without that: 86 slots here),
    and the output is still the target's greedy output."""
    target = models[0]
    mixed = tiny(2, 64, 0)                         # the target's weights plus more noise
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in mixed.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g) * p.abs().mean())
    ids, mask = prompts()
    n, gamma = 40, 3
    out = specops.generate(target, mixed, ids, mask, max_new_tokens=n, num_draft_tokens=gamma,
                           temperature=0.0, eos_token_id=[])
    assert torch.equal(out.sequences[:, 6:], hf_greedy(target, ids, mask, n))
    st = out.stats
    hist = st["accept_length_hist"]
    assert hist[0] > 0 and hist[gamma] > 0                  # some steps reject, some keep all
    limit = 6 + n + 16 + 2 * (gamma + 1)
    assert st["max_cache_slots"] <= limit, (st["max_cache_slots"], limit)
