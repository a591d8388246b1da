"""Which verify path runs: the fused kernel (``verify.py``, one program per request) or the
vocabulary-split pipeline (``split.py``), chosen from the shapes alone by the bandwidth model
of ``_launch.use_split`` (no tensor value is read, so the choice never synchronises)."""
import torch

from ._launch import chunk_size, q_mode_of, use_split
from .split import verify_split
from .verify import verify_fused


def filters_on(top_k, top_p):
    """(has_topk, has_topp) from the argument types: a Python number is known, a tensor may
    hold anything."""
    has_topk = isinstance(top_k, torch.Tensor) or int(top_k) != 0
    has_topp = isinstance(top_p, torch.Tensor) or float(top_p) < 1.0
    return has_topk, has_topp


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
           forced_num_accepted=None, has_topk=True, has_topp=True):
    """Contiguous [B] tensors (int64 / float32), target and draft rows with unit column
    stride; ``has_topk`` / ``has_topp``: whether a filter can be on (``filters_on``).
    -> (token_ids [B, max_k + 1] int32, num_accepted [B] int32, valid [B] bool)."""
    q_mode = q_mode_of(draft, draft_is_probs)
    logit_rows = (not target_is_probs) or q_mode == 2
    V = target.shape[1]
    if use_split(num_draft.shape[0], int(max_k), V, target.element_size(),
                 0 if q_mode == 0 else draft.element_size(), has_topk, has_topp, logit_rows,
                 chunk_size(V, target.device)):
        return verify_split(target, target_is_probs, target_row_start, draft_ids,
                            draft_row_start, num_draft, draft, draft_is_probs, inv_temp, top_k,
                            top_p, min_p, seed, offset, max_k, forced_num_accepted, has_topk,
                            has_topp)
    return verify_fused(target, target_is_probs, target_row_start, draft_ids, draft_row_start,
                        num_draft, draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed,
                        offset, max_k, forced_num_accepted)
