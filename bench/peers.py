"""What an engine runs without specops, measured beside it.

* ``eager_verify``: a batched torch-eager verifier (softmax, sort-based top-p, min-p mask,
  gather, rand, cumprod, clamped residual, multinomial) — what an engine author writes by hand.
* ``hf_verify``: Hugging Face transformers' ``_speculative_sampling`` called once per request
  (it handles batch 1 only), on logits already scaled by the temperature.
* ``floor``: reading the target logits and the draft probabilities once (a torch sum of each),
  the memory-bandwidth floor of any verifier that reads its inputs.
"""
from __future__ import annotations

import torch


def floor(target, draft):
    s = target.sum()
    if draft is not None:
        s = s + draft.sum()
    return s


def _transform(logits, temperature, top_k, top_p, min_p=0.0):
    """Temperature, top-k, top-p, then min-p (keep p >= min_p * max p), renormalised: the
    order of specops.reference section 2.  min-p compares ratios to the top token, which no
    renormalisation changes, so applying it after top-p masks the same tokens."""
    x = logits.float() / temperature
    if top_k:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    p = torch.softmax(x, dim=-1)
    if top_p < 1.0:
        sp, idx = torch.sort(p, dim=-1, descending=True)
        drop = (sp.cumsum(-1) - sp) > top_p
        sp = sp.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter_(-1, idx, sp)
        p = p / p.sum(-1, keepdim=True)
    if min_p > 0.0:
        p = p.masked_fill(p < min_p * p.amax(-1, keepdim=True), 0.0)
        p = p / p.sum(-1, keepdim=True)
    return p


def eager_verify(logits, draft_ids, draft_probs, temperature=1.0, top_k=0, top_p=1.0,
                 min_p=0.0, generator=None):
    """Batched verification in plain torch. Returns (token_ids [B, K+1], num_accepted [B])."""
    B, K1, V = logits.shape
    K = K1 - 1
    ar = torch.arange(B)
    if temperature == 0:
        arg = logits.argmax(-1)
        accept = arg[:, :K] == draft_ids
        nacc = accept.int().cumprod(-1).sum(-1)
        last = arg[ar, nacc]
    else:
        p = _transform(logits, temperature, top_k, top_p, min_p)
        p_y = p[:, :K].gather(-1, draft_ids[..., None]).squeeze(-1)
        q_y = draft_probs.gather(-1, draft_ids[..., None]).squeeze(-1)
        u = torch.rand((B, K), generator=generator)
        accept = u * q_y < p_y
        nacc = accept.int().cumprod(-1).sum(-1)
        residual = (p[:, :K] - draft_probs).clamp_min(0.0)
        rows = torch.cat([residual, p[:, K:]], dim=1)[ar, nacc]
        rows = rows / rows.sum(-1, keepdim=True)
        last = torch.multinomial(rows, 1, generator=generator).squeeze(-1)
    j = torch.arange(K1)
    out = torch.where(j[None] < nacc[:, None], torch.cat([draft_ids, draft_ids[:, :1]], 1), -1)
    out[ar, nacc] = last
    return out, nacc


def hf_available() -> bool:
    try:
        from transformers.generation.utils import _speculative_sampling  # noqa: F401
    except Exception:
        return False
    return True


def hf_verify(logits, draft_ids, draft_logits, temperature=1.0):
    """transformers' _speculative_sampling, once per request (batch 1 is all it supports)."""
    from transformers.generation.utils import _speculative_sampling
    B, K1, V = logits.shape
    K = K1 - 1
    outs = []
    scaled_t = logits.float() / temperature
    scaled_d = draft_logits.float() / temperature
    for b in range(B):
        ids = torch.cat([torch.zeros(1, 1, dtype=torch.long), draft_ids[b:b + 1].long()], 1)
        tokens, n = _speculative_sampling(ids, scaled_d[b:b + 1], K, scaled_t[b:b + 1])
        outs.append((tokens, n))
    return outs
