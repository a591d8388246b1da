"""The accept step as a view over the one verification walk (``specops::verify``).

``accept_op`` returns the number of accepted drafts of each request, given final target and
draft probabilities; it is ``verify``'s ``num_accepted`` on the same rows (the walk's accept
test reads the same values; the draw it then makes is discarded).  Greedy rows accept iff the
draft is the lowest-index argmax of a valid row.
"""
from __future__ import annotations

import torch

from specops.ops.verify import verify_op


def probs_params(greedy: torch.Tensor):
    """The transform parameters of final probabilities: inv_temp 0 (greedy) or 1, no filters."""
    B, dev = greedy.shape[0], greedy.device
    one = torch.ones((), dtype=torch.float32, device=dev)
    inv_temp = torch.where(greedy.to(torch.bool), torch.zeros_like(one), one)
    return dict(inv_temp=inv_temp, top_k=torch.zeros((), dtype=torch.int64, device=dev).expand(B),
                top_p=one.expand(B), min_p=torch.zeros_like(one).expand(B))


def accept_op(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
              draft_probs, greedy, seed, offset, max_k, backend):
    """-> num_accepted [B] int32 (see the module docstring)."""
    _, num_accepted, _ = verify_op(target_probs, True, target_row_start, draft_ids,
                                   draft_row_start, num_draft, draft_probs, True,
                                   seed=seed, offset=offset, max_k=max_k, backend=backend,
                                   **probs_params(greedy))
    return num_accepted
