"""Op 2: the accept walk over blocks of probabilities (reference.accept_ref)."""
import torch
import triton
import triton.language as tl

from ._common import accept_uniform, block_length, probs_check_argmax
from ._launch import block_v, launch_opts, next_pow2


@triton.jit(do_not_specialize=["p_stride", "q_stride", "V", "MAXK"])
def _accept_kernel(p_ptr, p_stride, t_start_ptr, ids_ptr, d_start_ptr, nd_ptr, q_ptr, q_stride,
                   greedy_ptr, seed_ptr, off_ptr, out_ptr, V, MAXK,
                   HAS_Q: tl.constexpr, BLOCK_V: tl.constexpr, MAXK_P2: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    t0 = tl.load(t_start_ptr + b)
    d0 = tl.load(d_start_ptr + b)
    nd = tl.load(nd_ptr + b)
    greedy = tl.load(greedy_ptr + b) != 0
    seed = tl.load(seed_ptr + b)
    off = tl.load(off_ptr + b)
    kb = block_length(ids_ptr, d0, nd, V, MAXK, MAXK_P2)
    nacc = kb * 0
    done = kb * 0
    for j in range(0, kb):
        if done == 0:
            y = tl.load(ids_ptr + d0 + j)
            row_ptr = p_ptr + (t0 + j) * p_stride
            if greedy:
                vld, am = probs_check_argmax(row_ptr, V, BLOCK_V)
                ok = vld & (am == y)
            else:
                u = accept_uniform(seed, off, j)
                p_y = tl.load(row_ptr + y).to(tl.float64)
                if HAS_Q:
                    q_y = tl.load(q_ptr + (d0 + j) * q_stride + y).to(tl.float64)
                    ok = u * q_y < p_y
                else:
                    ok = u < p_y
            if ok:
                nacc = j + 1
            else:
                done = 1
    tl.store(out_ptr + b, nacc)


def accept(target_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft_probs,
           greedy, seed, offset, max_k):
    B = num_draft.shape[0]
    dev = target_probs.device
    out = torch.zeros((B,), dtype=torch.int32, device=dev)
    if B == 0:
        return out
    V = target_probs.shape[1]
    has_q = draft_probs is not None
    q = draft_probs if has_q else target_probs
    _accept_kernel[(B,)](
        target_probs, target_probs.stride(0), target_row_start, draft_ids, draft_row_start,
        num_draft, q, q.stride(0), greedy, seed, offset, out, V, int(max_k),
        HAS_Q=has_q, BLOCK_V=block_v(V, dev), MAXK_P2=max(16, next_pow2(max_k)), **launch_opts(dev))
    return out
