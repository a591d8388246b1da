"""The numpy reference as a backend (CPU tensors in, CPU tensors out)."""
from __future__ import annotations

import numpy as np
import torch

from specops import reference as R
from specops._contract import TRAVERSAL_METHODS
from specops.reference.coins import verify_coins_ref
from specops._sgl_tree import malformed_sgl_requests


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
           method="token", want_rates=False, check_draft=False, forced_num_accepted=None):
    B = num_draft.shape[0]
    out = R.verify_rows_ref(
        _np(target), target_is_probs, _np(target_row_start), _np(draft_ids),
        _np(draft_row_start), _np(num_draft), _np(draft), draft_is_probs, _np(inv_temp, B),
        _np(top_k, B), _np(top_p, B), _np(min_p, B), _np(seed, B), _np(offset, B), int(max_k),
        _np(forced_num_accepted), method=method, want_rates=want_rates,
        check_draft=check_draft)
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
    walk = (R.verify_gbv_ref if method == "gbv" else
            R.verify_traversal_ref if method in TRAVERSAL_METHODS else R.verify_tree_ref)
    out = walk(
        _np(target).reshape(B, N, V), target_is_probs, _np(node_ids), _np(parents),
        _np(num_nodes, B), draft_np, draft_is_probs, _np(inv_temp, B), _np(top_k, B),
        _np(top_p, B), _np(min_p, B), _np(seed, B), _np(offset, B), int(max_depth), method)
    dev = target.device
    return tuple(torch.from_numpy(t).to(dev) for t in out)


def coin_walk(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
              threshold_single, threshold_acc):
    """``R.verify_coins_ref`` on the well-formed requests; a malformed one (section 13's
    links, or a present node's candidate outside [0, V)) emits nothing."""
    B, N, V = target.shape
    D = int(max_depth)
    bad = malformed_sgl_requests(next_token, next_sibling, candidates, D, V).cpu().numpy()
    tok = np.full((B, D + 1), -1, dtype=np.int32)
    nacc = np.zeros(B, dtype=np.int32)
    nodes = np.full((B, D), -1, dtype=np.int32)
    valid = np.zeros(B, dtype=bool)
    ok = np.flatnonzero(~bad)
    if ok.size:
        accepted, tokens, val = verify_coins_ref(
            _np(candidates)[ok], _np(next_token)[ok], _np(next_sibling)[ok], _np(coins)[ok],
            _np(final_coins)[ok], _np(target)[ok], D + 1, threshold_single, threshold_acc)
        for i, b in enumerate(ok):
            n = len(accepted[i])
            nacc[b] = n
            nodes[b, :n] = accepted[i]
            tok[b, :len(tokens[i])] = tokens[i]
            valid[b] = val[i]
    dev = target.device
    return tuple(torch.from_numpy(t).to(dev) for t in (tok, nacc, nodes, valid))
