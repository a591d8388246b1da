"""What the vLLM drop-in's tests share: vLLM's metadata and logits built as its model runner
builds them, the drop-in and vLLM's own sampler, a logit-bias processor.  vLLM is set up by
``_vllm_setup.prepare()`` first (its Triton kernels through the interpreter), so import this
module after that or instead of it."""
import pytest
import torch

from tests.integrations import _vllm_setup

_vllm_setup.prepare()

from vllm.v1.sample.logits_processor import LogitsProcessors  # noqa: E402
from vllm.v1.sample.metadata import SamplingMetadata  # noqa: E402
from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID  # noqa: E402
from vllm.v1.sample.rejection_sampler import RejectionSampler as VllmRS  # noqa: E402
from vllm.v1.sample.sampler import Sampler  # noqa: E402

from specops.integrations import vllm as sv  # noqa: E402

P = PLACEHOLDER_TOKEN_ID
needs_vllm_kernels = pytest.mark.skipif(not _vllm_setup.VLLM_KERNELS,
                                        reason="vLLM's Triton kernels cannot run here")


def make_sm(*, temperature=None, top_k=None, top_p=None, generators=None, logitsprocs=None,
            output_token_ids=None, spec_token_ids=None, prompt_token_ids=None,
            repetition=None, frequency=None, presence=None, bad_words=None,
            allowed_mask=None, max_num_logprobs=None, B=None):
    all_greedy = temperature is None
    penal = any(x is not None for x in (repetition, frequency, presence))
    B = B if B is not None else (len(temperature) if temperature is not None else 1)
    return SamplingMetadata(
        temperature=temperature,
        all_greedy=all_greedy,
        all_random=(not all_greedy) and bool((temperature >= 1e-5).all()),
        top_p=top_p, top_k=top_k, generators=generators or {},
        max_num_logprobs=max_num_logprobs, no_penalties=not penal,
        prompt_token_ids=prompt_token_ids,
        frequency_penalties=torch.tensor(frequency if frequency else [0.0] * B),
        presence_penalties=torch.tensor(presence if presence else [0.0] * B),
        repetition_penalties=torch.tensor(repetition if repetition else [1.0] * B),
        output_token_ids=output_token_ids if output_token_ids is not None else [[]] * B,
        spec_token_ids=spec_token_ids if spec_token_ids is not None else [],
        allowed_token_ids_mask=allowed_mask,
        bad_words_token_ids=bad_words or {},
        logitsprocs=logitsprocs or LogitsProcessors(),
    )


def logits_for(spec_tokens, output_tokens, V=100, dtype=torch.float32):
    """Standard-layout [T + B, V] logits whose row argmaxes are output_tokens (vLLM's test
    helper, extended with the bonus rows that specops verifies itself)."""
    rows = []
    for ids, out in zip(spec_tokens, output_tokens):
        assert len(out) == len(ids) + 1
        for tok in out:
            r = torch.full((V,), -100.0)
            r[tok] = 100.0
            rows.append(r)
    return torch.stack(rows).to(dtype)


def ours(**kw):
    return sv.SpecopsRejectionSampler(Sampler(), **kw)


def theirs():
    return VllmRS(Sampler())


def logit_bias(biases):
    """vLLM's LogitBiasLogitsProcessor holding ``{request: {token: bias}}``."""
    from vllm.v1.sample.logits_processor.builtin import LogitBiasLogitsProcessor
    p = LogitBiasLogitsProcessor(None, torch.device("cpu"), False)
    reqs, toks, vals = [], [], []
    for r, d in biases.items():
        for t, v in d.items():
            reqs.append(r), toks.append(t), vals.append(v)
    p.biases = biases
    p.bias_tensor = torch.tensor(vals)
    p.logits_slice = (torch.tensor(reqs, dtype=torch.int32), torch.tensor(toks, dtype=torch.int32))
    return p
