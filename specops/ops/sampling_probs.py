"""specops::sampling_probs — fused softmax with the sampling transform, rows -> probabilities."""
from __future__ import annotations

from typing import Tuple

import torch

from specops.backends import registry


@torch.library.custom_op("specops::sampling_probs", mutates_args=(),
                         device_types=("cpu", "cuda"))
def sampling_probs_op(logits: torch.Tensor, inv_temp: torch.Tensor, top_k: torch.Tensor,
                      top_p: torch.Tensor, min_p: torch.Tensor, backend: str
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    return registry.load(backend).sampling_probs(logits, inv_temp, top_k, top_p, min_p)


@sampling_probs_op.register_fake
def _(logits, inv_temp, top_k, top_p, min_p, backend):
    return (torch.empty(logits.shape, dtype=torch.float32, device=logits.device),
            torch.empty(logits.shape[:1], dtype=torch.bool, device=logits.device))
