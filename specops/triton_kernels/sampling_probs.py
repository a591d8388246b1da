"""The transform of rows of logits into probabilities (reference.sampling_probs_ref)."""
import torch
import triton
import triton.language as tl

from ._common import NEG_INF, load_f32, logits_scan, params_ok, probs_from_logits, row_stats
from ._launch import block_v, launch_opts


@triton.jit(do_not_specialize=["l_stride", "V"])
def _sampling_probs_kernel(
    l_ptr,             # [N, V] logits (float32 / bfloat16 / float16)
    l_stride,          # elements between consecutive logits rows
    out_ptr,           # [N, V] float32 out: probabilities (contiguous)
    valid_ptr,         # [N] bool out: the row was valid (else its probabilities are 0)
    inv_t_ptr,         # [N] float32 host 1/T, 0 for greedy rows
    top_k_ptr,         # [N] int64 top-k (0: off)
    top_p_ptr,         # [N] float32 top-p (1: off)
    min_p_ptr,         # [N] float32 min-p (0: off)
    V,                 # vocabulary size
    BLOCK_V: tl.constexpr,   # vocabulary tile (power of 2)
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = l_ptr + row * l_stride
    o_ptr = out_ptr + row * V
    inv_t = tl.load(inv_t_ptr + row)
    top_k = tl.load(top_k_ptr + row)
    top_p = tl.load(top_p_ptr + row)
    min_p = tl.load(min_p_ptr + row)
    offs = tl.arange(0, BLOCK_V)
    if not params_ok(inv_t, top_k, top_p, min_p):  # malformed row: zeros, invalid
        valid = tl.full([], False, tl.int1)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            tl.store(o_ptr + idx, tl.zeros([BLOCK_V], tl.float32), mask=idx < V)
    elif inv_t == 0.0:                             # greedy: one-hot at the lowest argmax
        valid, x_max, arg = logits_scan(row_ptr, V, 1.0, BLOCK_V)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            one_hot = tl.where(idx == arg, 1.0, 0.0)
            tl.store(o_ptr + idx, tl.where(valid, one_hot, 0.0), mask=idx < V)
    else:
        valid, stats = row_stats(row_ptr, V, inv_t, top_k, top_p, min_p, BLOCK_V)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            msk = idx < V
            l = load_f32(row_ptr + idx, msk, NEG_INF)
            p = tl.where(valid, probs_from_logits(l, inv_t, stats), 0.0)
            tl.store(o_ptr + idx, p, mask=msk)
    tl.store(valid_ptr + row, valid)


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    """logits [N, V] (unit column stride), contiguous [N] parameters (float32 / int64) ->
    (probs [N, V] float32, valid [N] bool)."""
    N, V = logits.shape
    probs = torch.empty((N, V), dtype=torch.float32, device=logits.device)
    valid = torch.empty((N,), dtype=torch.bool, device=logits.device)
    if N == 0 or V == 0:
        valid.fill_(False)
        probs.zero_()
        return probs, valid
    _sampling_probs_kernel[(N,)](
        logits, logits.stride(0), probs, valid, inv_temp, top_k, top_p, min_p, V,
        BLOCK_V=block_v(V, logits.device), **launch_opts(logits.device))
    return probs, valid
