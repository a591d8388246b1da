"""specops::verify — the fused verification step (no probability tensor materialised)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from specops.backends import registry


@torch.library.custom_op("specops::verify", mutates_args=(), device_types=("cpu", "cuda"))
def verify_op(target: torch.Tensor, target_is_probs: bool, target_row_start: torch.Tensor,
              draft_ids: torch.Tensor, draft_row_start: torch.Tensor, num_draft: torch.Tensor,
              draft: Optional[torch.Tensor], draft_is_probs: bool, inv_temp: torch.Tensor,
              top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
              seed: torch.Tensor, offset: torch.Tensor, max_k: int, backend: str
              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return registry.load(backend).verify(
        target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
        draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k)


@verify_op.register_fake
def _(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft,
      draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, backend):
    B = num_draft.shape[0]
    dev = target.device
    return (target.new_empty((B, max_k + 1), dtype=torch.int32),
            torch.empty((B,), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.bool, device=dev))
