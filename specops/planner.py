"""Choosing the draft length from per-position acceptance rates.

With per-position acceptance rates a_0, a_1, ... (for example the ``accept_rates`` that
``verify_block(..., return_accept_rates=True)`` returns, averaged over recent steps), a step
that drafts K tokens emits in expectation

    E(K) = sum_{i=0..K} prod_{j<i} a_j        (the accepted drafts plus the correction/bonus)

tokens for a cost of K draft steps and one target call: ``K * draft_cost + 1`` in units of
one target call.  ``best_num_draft_tokens`` returns the K in [0, max] that maximises
E(K) / (K * draft_cost + 1) (the seed lab's 1 - a^(K+1) / ((1 - a)(K c + 1)) generalised to
per-position rates); ties go to the smaller K.  Rates for positions beyond those given are
unknown: K never exceeds the number of rates given.
"""
from __future__ import annotations

import math
import numbers

import torch

__all__ = ["best_num_draft_tokens", "expected_tokens"]


def _rates(accept_rates) -> torch.Tensor:
    if isinstance(accept_rates, torch.Tensor):
        a = accept_rates.detach().to("cpu", torch.float64)
    else:
        try:
            a = torch.as_tensor(accept_rates, dtype=torch.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError("accept_rates must be a [K] or [B, K] tensor or sequence of "
                            f"floats, got {type(accept_rates).__name__}") from exc
    if a.dim() not in (1, 2):
        raise ValueError(f"accept_rates must be [K] or [B, K], got shape {tuple(a.shape)}")
    if a.numel() and not bool(((a >= 0) & (a <= 1)).all()):
        raise ValueError("accept_rates must be in [0, 1] (no NaN: average the rates the "
                         "verifier returned over the positions it read)")
    return a


def expected_tokens(accept_rates) -> torch.Tensor:
    """E(K) for K = 0..len(rates): [K + 1] (or [B, K + 1]) float64."""
    a = _rates(accept_rates)
    lead = a.shape[:-1]
    reach = torch.cat([torch.ones(lead + (1,), dtype=torch.float64), torch.cumprod(a, -1)], -1)
    return torch.cumsum(reach, -1)


def best_num_draft_tokens(accept_rates, draft_cost, max_num_draft_tokens):
    """The K in [0, min(max_num_draft_tokens, K given)] maximising
    E(K) / (K * draft_cost + 1).  [K] rates -> int; [B, K] -> [B] int64 tensor."""
    if isinstance(draft_cost, bool) or not isinstance(draft_cost, numbers.Real):
        raise TypeError(f"draft_cost must be a real number, got {type(draft_cost).__name__}")
    if not (math.isfinite(float(draft_cost)) and float(draft_cost) >= 0):
        raise ValueError(f"draft_cost must be finite and >= 0 (cost of one draft step in "
                         f"target calls), got {draft_cost}")
    if isinstance(max_num_draft_tokens, bool) or not isinstance(max_num_draft_tokens,
                                                                numbers.Integral):
        raise TypeError("max_num_draft_tokens must be an int")
    if max_num_draft_tokens < 0:
        raise ValueError(f"max_num_draft_tokens must be >= 0, got {max_num_draft_tokens}")
    a = _rates(accept_rates)
    kmax = min(int(max_num_draft_tokens), a.shape[-1])
    e = expected_tokens(a[..., :kmax])
    k = torch.arange(kmax + 1, dtype=torch.float64)
    score = e / (k * float(draft_cost) + 1.0)
    best = torch.argmax(score, -1)          # first maximum: the smallest K on ties
    return int(best) if a.dim() == 1 else best.to(torch.int64)
