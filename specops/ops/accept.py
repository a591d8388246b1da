"""specops::accept — the vectorised accept walk over a batch of blocks of probabilities."""
from __future__ import annotations

from typing import Optional

import torch

from specops.backends import registry


@torch.library.custom_op("specops::accept", mutates_args=(), device_types=("cpu", "cuda"))
def accept_op(target_probs: torch.Tensor, target_row_start: torch.Tensor,
              draft_ids: torch.Tensor, draft_row_start: torch.Tensor, num_draft: torch.Tensor,
              draft_probs: Optional[torch.Tensor], greedy: torch.Tensor, seed: torch.Tensor,
              offset: torch.Tensor, max_k: int, backend: str) -> torch.Tensor:
    return registry.load(backend).accept(target_probs, target_row_start, draft_ids,
                                         draft_row_start, num_draft, draft_probs, greedy, seed,
                                         offset, max_k)


@accept_op.register_fake
def _(target_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft_probs, greedy,
      seed, offset, max_k, backend):
    return torch.empty(num_draft.shape, dtype=torch.int32, device=target_probs.device)
