"""specops::residual_sample — residual (or bonus) normalisation + integer inverse-CDF draw."""
from __future__ import annotations

from typing import Optional

import torch

from specops.backends import registry


@torch.library.custom_op("specops::residual_sample", mutates_args=(),
                         device_types=("cpu", "cuda"))
def residual_sample_op(target_probs: torch.Tensor, target_row_start: torch.Tensor,
                       draft_ids: torch.Tensor, draft_row_start: torch.Tensor,
                       num_draft: torch.Tensor, draft_probs: Optional[torch.Tensor],
                       greedy: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor,
                       num_accepted: torch.Tensor, max_k: int, backend: str) -> torch.Tensor:
    return registry.load(backend).residual_sample(target_probs, target_row_start, draft_ids,
                                                  draft_row_start, num_draft, draft_probs,
                                                  greedy, seed, offset, num_accepted, max_k)


@residual_sample_op.register_fake
def _(target_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft_probs, greedy,
      seed, offset, num_accepted, max_k, backend):
    return torch.empty(num_draft.shape, dtype=torch.int32, device=target_probs.device)
