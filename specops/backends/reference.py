"""The numpy reference as a backend (CPU tensors in, CPU tensors out)."""
from __future__ import annotations

import numpy as np
import torch

from specops import reference as R


def _np(t, B=None):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):          # a Python number shared by every request
        return np.full(B, t, dtype=np.float32 if isinstance(t, float) else np.int64)
    t = t.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()          # exact upcast; the reference computes in float32 from here
    return t.numpy()


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
           forced_num_accepted=None, method="token", want_rates=False):
    B = num_draft.shape[0]
    out = R.verify_rows_ref(
        _np(target), target_is_probs, _np(target_row_start), _np(draft_ids),
        _np(draft_row_start), _np(num_draft), _np(draft), draft_is_probs, _np(inv_temp, B),
        _np(top_k, B), _np(top_p, B), _np(min_p, B), _np(seed, B), _np(offset, B), int(max_k),
        _np(forced_num_accepted), method=method, want_rates=want_rates)
    dev = target.device
    return tuple(torch.from_numpy(t).to(dev) for t in out)


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    N = logits.shape[0]
    probs, valid = R.sampling_probs_ref(_np(logits), _np(inv_temp, N), _np(top_k, N),
                                        _np(top_p, N), _np(min_p, N))
    return torch.from_numpy(probs).to(logits.device), torch.from_numpy(valid).to(logits.device)


def verify_tree(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
                inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method="rsd"):
    B, N = node_ids.shape
    V = target.shape[-1]
    draft_np = None if draft is None else _np(draft).reshape(B, N, V)
    walk = R.verify_traversal_ref if method in ("traversal", "traversal_iid") else R.verify_tree_ref
    out = walk(
        _np(target).reshape(B, N, V), target_is_probs, _np(node_ids), _np(parents),
        _np(num_nodes, B), draft_np, draft_is_probs, _np(inv_temp, B), _np(top_k, B),
        _np(top_p, B), _np(min_p, B), _np(seed, B), _np(offset, B), int(max_depth), method)
    dev = target.device
    return tuple(torch.from_numpy(t).to(dev) for t in out)
