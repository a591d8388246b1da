"""The vLLM drop-in's bonus token: drawn in specops' own pass (vLLM's Sampler is not called),
with the bonus row processed as vLLM's Sampler processes it, in vLLM's order; vLLM's Sampler
draws it only without bonus rows or when it is not vLLM's own class.  Skipped as a module
where vLLM is not installed (ci/setup_vllm_env.sh makes the venv that has it)."""
import importlib.util

import pytest
import torch

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (see ci/setup_vllm_env.sh)", allow_module_level=True)

from tests.integrations import _vllm_setup  # noqa: E402

_vllm_setup.prepare()

from vllm.v1.sample.logits_processor import LogitsProcessors  # noqa: E402
from vllm.v1.sample.sampler import Sampler  # noqa: E402

import specops  # noqa: E402
from bench.vllm_layout import make_md  # noqa: E402
from specops.integrations import vllm as sv  # noqa: E402
from tests.integrations._vllm_cases import (P, logit_bias, logits_for, make_sm,  # noqa: E402
                                            ours, theirs)


class _FixedBonus(Sampler):
    """vLLM's Sampler whose bonus draw is replaced by given tokens (as vLLM's tests mock it)."""

    def __init__(self, tokens, **kw):
        super().__init__(**kw)
        self.tokens = torch.tensor(tokens).reshape(-1, 1)
        self.calls = 0

    def forward(self, logits, sampling_metadata, predict_bonus_token=False,
                logprobs_mode_override=None):
        self.calls += 1
        real = super().forward(logits, sampling_metadata, predict_bonus_token,
                               logprobs_mode_override)
        return type(real)(sampled_token_ids=self.tokens, logprobs_tensors=real.logprobs_tensors)


def test_bonus_drawn_in_specops_pass_without_the_sampler(monkeypatch):
    """With vLLM's own Sampler and bonus rows, the bonus token is specops' end-of-block draw
    from the bonus row (vLLM's Sampler is never called: on vLLM-CPU it sorts every bonus row
    for top-k / top-p): the drop-in's tokens are verify_block's on the same rows and seeds."""
    def no_call(*a, **kw):
        raise AssertionError("vLLM's Sampler was called")

    monkeypatch.setattr(Sampler, "forward", no_call)
    V, B = 30, 40
    g = torch.Generator().manual_seed(11)
    ks = [int(k) for k in torch.randint(0, 4, (B,), generator=g)]
    logits = torch.randn(sum(ks) + B, V, generator=g) * 3.0
    spec, row = [], 0
    for k in ks:                                    # drafts = the row argmax: often accepted
        spec.append([int(logits[row + j].argmax()) for j in range(k)])
        row += k + 1
    dp = torch.softmax(torch.randn(sum(ks), V, generator=g), -1)
    temp = torch.full((B,), 0.7)
    top_k, top_p = torch.full((B,), 8), torch.full((B,), 0.9)
    sm = make_sm(temperature=temp, top_k=top_k, top_p=top_p,
                 generators={i: torch.Generator().manual_seed(50 + i) for i in range(B)})
    out = ours()(make_md(spec), dp, logits, sm).sampled_token_ids
    seeds = torch.stack([torch.randint(-(2 ** 63), 2 ** 63 - 1, (1,), dtype=torch.int64,
                                       generator=torch.Generator().manual_seed(50 + i))[0]
                         for i in range(B)])
    md = make_md(spec)
    want = specops.verify_block(logits, md.draft_token_ids, dp,
                                cu_num_draft_tokens=md.cu_num_draft_tokens, temperature=temp,
                                top_k=top_k, top_p=top_p, seed=seeds, offset=0)
    assert torch.equal(out, want.token_ids)
    full = want.num_accepted == torch.tensor(ks)
    assert int(full.sum()) >= 5                      # bonus tokens were drawn


def test_bonus_row_processing_is_vllms_sampler():
    """Processors on the bonus row (penalties over output + draft tokens, bad words,
    allowed_token_ids, logit bias) as vLLM's Sampler applies them: greedy, every draft
    accepted, the bonus token equals the Sampler's on the same rows (and not the raw
    argmax, so the processing mattered)."""
    V, B = 16, 3
    spec = [[1, 2], [3], [4, 5]]
    bonus_raw = [7, 9, 11]                        # each bonus row's raw argmax ...
    logits = logits_for(spec, [s + [t] for s, t in zip(spec, bonus_raw)], V=V)
    bonus_pos = [2, 4, 7]
    for b, r in enumerate(bonus_pos):             # ... then the runner-up, then the rest
        logits[r] = torch.linspace(0.0, 1.0, V)
        logits[r, bonus_raw[b]] = 3.0
    allowed = torch.zeros(B, V, dtype=torch.bool)
    allowed[1, 9] = True                          # request 1: 9 masked out
    lb = logit_bias({2: {0: 50.0}})
    kw = dict(output_token_ids=[[7, 7], [], [1]], spec_token_ids=spec,
              prompt_token_ids=torch.tensor([[0, 0], [0, 0], [0, 0]]),
              repetition=[4.0, 1.0, 1.0], allowed_mask=allowed,
              logitsprocs=LogitsProcessors([lb]), B=B)
    out = ours()(make_md(spec), None, logits, make_sm(**kw)).sampled_token_ids
    assert all(out[b, :len(ids)].tolist() == ids for b, ids in enumerate(spec))
    got = [int(out[b, len(spec[b])]) for b in range(B)]
    theirs_ = Sampler()(logits[bonus_pos], make_sm(**kw), predict_bonus_token=True)
    assert got == theirs_.sampled_token_ids.reshape(-1).tolist()
    assert all(g != r for g, r in zip(got, bonus_raw))


def test_thinking_budget_state_advances_once_per_step_as_in_vllm():
    """vLLM runs its Sampler on the bonus rows first (the thinking-budget state advances
    there, once per step), then the rejection sampler's processors on the draft rows; the
    drop-in, drawing the bonus itself, makes the same calls in the same order."""
    from dataclasses import replace

    class Holder:                                  # records what vLLM's holder is asked
        def __init__(self):
            self.calls = []

        def has_tracked_requests(self):
            return True

        def update_state(self, output_token_ids, spec_token_ids, repeat_indices=None):
            self.calls.append("update")

        def apply_to_logits(self, logits, predict_bonus_token, spec_token_ids):
            self.calls.append("bonus rows" if predict_bonus_token else "draft rows")
            return logits

    spec = [[1, 2], [3]]
    logits = logits_for(spec, [[1, 2, 4], [3, 4]], V=10)

    def calls(rs):
        h = Holder()
        sm = replace(make_sm(temperature=torch.ones(2), spec_token_ids=spec,
                             output_token_ids=[[], []]), thinking_budget_state_holder=h)
        rs(make_md(spec), None, logits.clone(), sm)
        return h.calls

    assert calls(ours()) == ["update", "bonus rows", "draft rows"]
    if _vllm_setup.VLLM_KERNELS:
        assert calls(theirs()) == ["update", "bonus rows", "draft rows"]


def test_bonus_token_is_the_samplers():
    """A sampler that is not vLLM's own Sampler class (here a subclass returning fixed
    tokens, as vLLM's tests mock it) draws the bonus token (all drafts accepted); specops'
    own end-of-block draw from that row is what it replaces, nothing else."""
    spec = [[1, 2], [3], []]
    logits = logits_for(spec, [[1, 2, 4], [5, 4], [6]])
    fixed = _FixedBonus([7, 8, 9])
    out = sv.SpecopsRejectionSampler(fixed)(make_md(spec), None, logits, make_sm(B=3))
    assert fixed.calls == 1
    assert out.sampled_token_ids.tolist() == [[1, 2, 7], [5, P, P], [9, P, P]]


def test_missing_bonus_rows_need_the_samplers_tokens():
    """No bonus rows (bonus_logits_indices empty): the Sampler must supply B tokens."""
    spec = [[1, 2]]
    md = make_md(spec)
    md.bonus_logits_indices = torch.empty(0, dtype=torch.int32)
    logits = logits_for(spec, [[1, 2, 4]])[:2]
    out = sv.SpecopsRejectionSampler(_FixedBonus([6]))(md, None, logits, make_sm())
    assert out.sampled_token_ids.tolist() == [[1, 2, 6]]
    with pytest.raises(ValueError, match="bonus tokens"):
        ours()(md, None, logits, make_sm())      # a real Sampler on no rows: 0 tokens
