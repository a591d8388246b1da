"""FlashInfer's ``chain_speculative_sampling`` signature as a chain sampler.

``chain_speculative_sampling(draft_probs [B, K, V], draft_token_ids [B, K] int32,
target_probs [B, K + 1, V], maybe_output_accepted_token_num=None,
maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None, seed=None,
offset=None)`` returns the output token ids [B, K + 1] (-1 after the emitted token; older
releases return a tuple whose first element they are).  ``chain(fn, device)`` adapts any
callable with that signature: the kit's seeds go in as the per-request ``seed`` tensor with
``offset=0``, point-mass drafts as one-hot draft rows (FlashInfer always takes q), tensors move
to ``device`` and back.

``flashinfer_gpu``: the installed FlashInfer on CUDA (imported on the first call).
``specops_chain_speculative_sampling``: specops' verifier behind FlashInfer's signature
(float32 probabilities, per-request Philox seeds), so an engine written against FlashInfer's
call can switch, and so this adapter is exercised where FlashInfer does not install.
"""
from __future__ import annotations

import torch

import specops


def specops_chain_speculative_sampling(draft_probs, draft_token_ids, target_probs,
                                       maybe_output_accepted_token_num=None,
                                       maybe_output_emitted_draft_token_num=None,
                                       deterministic=True, generator=None, seed=None,
                                       offset=None):
    """FlashInfer's chain_speculative_sampling, verified by specops.verify_block."""
    del deterministic                  # specops is always deterministic
    out = specops.verify_block(target_probs=target_probs,
                               draft_token_ids=draft_token_ids.to(torch.int64),
                               draft_probs=draft_probs, seed=seed,
                               offset=0 if offset is None else offset, generator=generator)
    if maybe_output_accepted_token_num is not None:
        maybe_output_accepted_token_num.copy_(out.num_accepted)
    if maybe_output_emitted_draft_token_num is not None:
        maybe_output_emitted_draft_token_num.copy_(out.num_accepted)
    return out.token_ids


def chain(fn=None, device="cpu", name: str = "flashinfer_chain_speculative_sampling"):
    """A chain sampler calling ``fn`` (default: flashinfer.sampling.chain_speculative_sampling)
    on ``device``."""
    state = {"fn": fn}

    def sampler(target_probs, draft_probs, draft_token_ids, seeds):
        f = state["fn"]
        if f is None:
            from flashinfer.sampling import chain_speculative_sampling as f
            state["fn"] = f
        V = target_probs.shape[-1]
        q = (torch.nn.functional.one_hot(draft_token_ids, V).float() if draft_probs is None
             else draft_probs)
        res = f(q.to(device), draft_token_ids.to(device=device, dtype=torch.int32),
                target_probs.to(device), seed=seeds.to(device), offset=0)
        ids = res[0] if isinstance(res, (tuple, list)) else res
        return ids.cpu()
    sampler.__name__ = sampler.__qualname__ = name
    return sampler


specops_flashinfer_signature = chain(specops_chain_speculative_sampling,
                                     name="specops_chain_speculative_sampling")
flashinfer_gpu = chain(device="cuda", name="flashinfer_gpu")
