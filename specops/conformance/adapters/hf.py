"""transformers' ``_speculative_sampling`` (and anything with its signature) as a chain sampler.

transformers verifies one request at a time: ``_speculative_sampling(candidate_input_ids
[1, prompt + K], candidate_logits [1, K, V], candidate_length, new_logits [1, K + 1, V])``
returns the kept tokens and the number of matches, drawing its coins and its residual token
from torch's global generator.  The adapter hands it ``log q`` and ``log p`` as logits (its
softmax gives q and p back; zero probabilities become -inf), a one-hot q for point-mass
drafts, and seeds torch's generator with the request's seed inside ``torch.random.fork_rng``
(the caller's generator state is left alone), so a request's tokens depend on its seed only.

``transformers_speculative_sampling``: the installed transformers' function (imported on the
first call); ``specops_speculative_sampling``: specops' drop-in with the same signature
(``specops.integrations.hf.speculative_sampling``).
"""
from __future__ import annotations

import inspect

import torch


def chain(fn=None, name: str = "transformers_speculative_sampling"):
    """A chain sampler calling ``fn`` (default: transformers' ``_speculative_sampling``)."""
    state = {"fn": fn}

    def sampler(target_probs, draft_probs, draft_token_ids, seeds):
        f = state["fn"]
        if f is None:
            from transformers.generation.utils import _speculative_sampling as f
            state["fn"] = f
        extra = {"is_done_candidate": False} if "is_done_candidate" in \
            inspect.signature(f).parameters else {}
        B, K1, V = target_probs.shape
        K = K1 - 1
        q = (torch.nn.functional.one_hot(draft_token_ids, V).float() if draft_probs is None
             else draft_probs)
        new_logits, cand_logits = torch.log(target_probs), torch.log(q)
        out = torch.full((B, K1), -1, dtype=torch.long)
        for b in range(B):
            ids = torch.cat([torch.zeros(1, 1, dtype=torch.long), draft_token_ids[b:b + 1]], 1)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seeds[b]) & (2 ** 63 - 1))
                tokens, _ = f(ids, cand_logits[b:b + 1], K, new_logits[b:b + 1], **extra)
            out[b, :tokens.shape[1]] = tokens[0]
        return out
    sampler.__name__ = sampler.__qualname__ = name
    sampler.conformance_batch_size = 1024
    return sampler


def _specops_fn(*args, **kwargs):
    from specops.integrations.hf import speculative_sampling
    return speculative_sampling(*args, **kwargs)


transformers_speculative_sampling = chain()
specops_speculative_sampling = chain(_specops_fn, "specops_speculative_sampling")
