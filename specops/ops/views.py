"""The single-purpose steps as views over the one verification walk (reference section 7).

``accept_op`` returns the number of accepted drafts of each request, given final target and
draft probabilities: ``specops::verify``'s ``num_accepted`` on the same rows (the walk's accept
test reads the same values; the draw it then makes is discarded).  ``residual_sample_op``
draws the token at position ``j* = min(num_accepted, block length)``: the residual
``max(p - q, 0)`` normalised after a rejection there, or the bonus token from ``p`` when the
whole block was accepted (``-1`` where the row is invalid or num_accepted < 0): the walk's
forced mode, which skips the accept tests.  Greedy rows accept iff the draft is the
lowest-index argmax of a valid row.
"""
from __future__ import annotations

import torch

from specops.ops.library import verify_op


def probs_params(greedy: torch.Tensor):
    """The transform parameters of final probabilities: inv_temp 0 (greedy) or 1, no filters."""
    B, dev = greedy.shape[0], greedy.device
    one = torch.ones((), dtype=torch.float32, device=dev)
    inv_temp = torch.where(greedy.to(torch.bool), torch.zeros_like(one), one)
    return dict(inv_temp=inv_temp, top_k=torch.zeros((), dtype=torch.int64, device=dev).expand(B),
                top_p=one.expand(B), min_p=torch.zeros_like(one).expand(B))


def _walk(target_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft_probs,
          greedy, seed, offset, max_k, forced, backend):
    return verify_op(target_probs, True, target_row_start, draft_ids, draft_row_start,
                     num_draft, draft_probs, True, seed=seed, offset=offset, max_k=max_k,
                     method="token", want_rates=False, check_draft=False,
                     forced_num_accepted=forced, backend=backend, **probs_params(greedy))


def accept_op(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
              draft_probs, greedy, seed, offset, max_k, backend):
    """-> num_accepted [B] int32 (see the module docstring)."""
    return _walk(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
                 draft_probs, greedy, seed, offset, max_k, None, backend)[1]


def residual_sample_op(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
                       draft_probs, greedy, seed, offset, num_accepted, max_k, backend):
    """-> token [B] int32 (see the module docstring)."""
    tokens, j_star = _walk(target_probs, target_row_start, draft_ids, draft_row_start,
                           num_draft, draft_probs, greedy, seed, offset, max_k, num_accepted,
                           backend)[:2]
    return tokens.gather(1, j_star.long()[:, None])[:, 0]
