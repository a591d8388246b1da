"""The vocabulary-split verify pipeline: the launch sequence of its three stages.

1. ``split_transform``: statistics, [8 top-k radix rounds], masses, [8 top-p radix rounds],
   each a launch over (slot, vocabulary chunk);
2. ``split_accept``: the walk, one program per request;
3. ``split_draw``: the draw's weight sums, then the find, over (request, chunk).

The filter rounds are launched only when a filter can be on: a Python-number ``top_k`` of 0
or ``top_p`` of 1 (or final probabilities without draft logits) leaves them out; a tensor
brings them in (its values are not read: the rounds' programs of unfiltered rows return at
once).  No allocation or grid depends on a tensor value, so the sequence can be captured in
a CUDA graph.  Tokens equal the fused kernel's (``verify.py``) and the reference's.
"""
import torch
import triton

from ._launch import block_v, chunk_size, launch_opts, next_pow2, row_args, verify_outputs
from .split_accept import _walk_kernel
from .split_draw import _draw_find_kernel, _draw_sums_kernel
from .split_transform import _mass_kernel, _select_kernel, _stats_kernel

N_ROUNDS = 8


def filters_on(top_k, top_p):
    """(has_topk, has_topp) from the argument types: a Python number is known, a tensor may
    hold anything."""
    has_topk = isinstance(top_k, torch.Tensor) or int(top_k) != 0
    has_topp = isinstance(top_p, torch.Tensor) or float(top_p) < 1.0
    return has_topk, has_topp


def verify_split(target, target_is_probs, target_row_start, draft_ids, draft_row_start,
                 num_draft, draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                 max_k, forced_num_accepted, has_topk, has_topp):
    """Same arguments and results as ``verify.verify`` (contiguous [B] tensors)."""
    B = num_draft.shape[0]
    dev = target.device
    max_k = int(max_k)
    tok, nacc, valid = verify_outputs(B, max_k, dev)
    if B == 0:
        return tok, nacc, valid
    V = target.shape[1]
    common, q_mode = row_args(target, target_row_start, draft_ids, draft_row_start, num_draft,
                              draft, draft_is_probs, inv_temp, top_k, top_p, min_p)
    q = common[9]
    logit_rows = (not target_is_probs) or q_mode == 2
    has_topk, has_topp = has_topk and logit_rows, has_topp and logit_rows
    R = B * (max_k + 1)
    S = R + (B * max_k if q_mode == 2 else 0)
    chunk = chunk_size(V, dev)
    C = triton.cdiv(V, chunk)
    tile = min(block_v(V, dev), chunk)
    i64 = dict(dtype=torch.int64, device=dev)
    pmax = torch.empty((S, C), dtype=torch.float32, device=dev)
    parg = torch.empty((S, C), dtype=torch.int32, device=dev)
    pcnt = torch.empty((S, C, 3), **i64)
    pmk = torch.empty((S, C), **i64)
    pmm = torch.empty((S, C), **i64)
    filters = has_topk or has_topp
    hist = torch.empty((S if filters else 1, 2, N_ROUNDS, 16), **i64)
    ans = torch.empty((S if filters else 1, 2, N_ROUNDS), **i64)
    info_i = torch.empty((B, 4), **i64)
    info_f = torch.empty((B, 8), dtype=torch.float32, device=dev)
    info_m = torch.empty((B, 2), **i64)
    psum = torch.empty((B, C, 4), **i64)
    opts = launch_opts(dev)
    sizes = dict(BLOCK_V=tile, MAXK_P2=max(16, next_pow2(max_k)))
    tp = bool(target_is_probs)
    _stats_kernel[(S, C)](*common, pmax, parg, pcnt, hist, V, max_k, R, C, chunk,
                          T_PROBS=tp, FILTERS=filters, **sizes, **opts)
    for rnd in range(N_ROUNDS if has_topk else 0):
        _select_kernel[(S, C)](*common, pmax, parg, pcnt, pmk, hist, ans, V, max_k, R, C, chunk,
                               rnd, T_PROBS=tp, TOP_P=False, HAS_TOPK=True, **sizes,
                               CP2=next_pow2(C), **opts)
    if logit_rows:
        _mass_kernel[(S, C)](*common, pmax, parg, pcnt, hist, ans, pmk, pmm, V, max_k, R, C,
                             chunk, T_PROBS=tp, HAS_TOPK=has_topk, **sizes, CP2=next_pow2(C),
                             **opts)
    for rnd in range(N_ROUNDS if has_topp else 0):
        _select_kernel[(S, C)](*common, pmax, parg, pcnt, pmk, hist, ans, V, max_k, R, C, chunk,
                               rnd, T_PROBS=tp, TOP_P=True, HAS_TOPK=has_topk, **sizes,
                               CP2=next_pow2(C), **opts)
    forced = forced_num_accepted
    _walk_kernel[(B,)](*common, seed, offset, forced, pmax, parg, pcnt, pmk, pmm, hist, ans,
                       info_i, info_f, info_m, tok, nacc, valid, V, max_k, R, C,
                       T_PROBS=tp, Q_MODE=q_mode, FORCED=forced is not None, HAS_TOPK=has_topk,
                       HAS_TOPP=has_topp, MAXK_P2=sizes["MAXK_P2"],
                       OUT_P2=max(16, next_pow2(max_k + 1)), CP2=next_pow2(C), **opts)
    rows = (target, target.stride(0), target_row_start, q, q.stride(0), draft_row_start,
            inv_temp)
    _draw_sums_kernel[(B, C)](*rows, info_i, info_f, info_m, psum, V, C, chunk, T_PROBS=tp,
                              Q_MODE=q_mode, BLOCK_V=tile, **opts)
    _draw_find_kernel[(B, C)](*rows, draft_ids, seed, offset, info_i, info_f, info_m, psum,
                              tok, nacc, valid, V, max_k, C, chunk, T_PROBS=tp, Q_MODE=q_mode,
                              BLOCK_V=tile, OUT_P2=max(16, next_pow2(max_k + 1)),
                              CP2=next_pow2(C), **opts)
    return tok, nacc, valid
