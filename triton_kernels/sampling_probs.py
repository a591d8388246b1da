"""Op 1: fused softmax with the sampling transform (reference.sampling_probs_ref)."""
import torch
import triton
import triton.language as tl

from ._common import logits_argmax, row_stats, probs_from_logits, NEG_INF
from ._launch import block_v, launch_opts


@triton.jit(do_not_specialize=["stride_row", "V"])
def _sampling_probs_kernel(logits_ptr, stride_row, out_ptr, valid_ptr, inv_t_ptr, top_k_ptr,
                           top_p_ptr, min_p_ptr, V, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    o_ptr = out_ptr + row * V
    inv_t = tl.load(inv_t_ptr + row)
    offs = tl.arange(0, BLOCK_V)
    if inv_t == 0.0:
        valid, am = logits_argmax(row_ptr, V, BLOCK_V)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            msk = idx < V
            p = tl.where((idx == am) & ((idx * 0 + valid.to(tl.int32)) != 0), 1.0, 0.0)
            tl.store(o_ptr + idx, p, mask=msk)
    else:
        top_k = tl.load(top_k_ptr + row)
        top_p = tl.load(top_p_ptr + row)
        min_p = tl.load(min_p_ptr + row)
        valid, m, thr, tau, mp, s_kept = row_stats(row_ptr, V, inv_t, top_k, top_p, min_p,
                                                   BLOCK_V)
        s_safe = tl.where(valid & (s_kept > 0), s_kept, 1)
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            msk = idx < V
            l = tl.load(row_ptr + idx, mask=msk & ((idx * 0 + valid.to(tl.int32)) != 0), other=NEG_INF).to(tl.float32)
            p = probs_from_logits(l, inv_t, m, thr, tau, mp, s_safe)
            p = tl.where(valid, p, 0.0)
            tl.store(o_ptr + idx, p, mask=msk)
    tl.store(valid_ptr + row, valid)


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    """logits [N, V] (float32/bfloat16/float16, stride(1) == 1) -> (probs [N, V] float32,
    valid [N] bool)."""
    N, V = logits.shape
    probs = torch.empty((N, V), dtype=torch.float32, device=logits.device)
    valid = torch.empty((N,), dtype=torch.bool, device=logits.device)
    if N == 0 or V == 0:
        valid.fill_(False)
        probs.zero_()
        return probs, valid
    _sampling_probs_kernel[(N,)](
        logits, logits.stride(0), probs, valid, inv_temp.to(torch.float32).contiguous(),
        top_k.to(torch.int64).contiguous(), top_p.to(torch.float32).contiguous(),
        min_p.to(torch.float32).contiguous(), V, BLOCK_V=block_v(V, logits.device),
        **launch_opts(logits.device))
    return probs, valid
