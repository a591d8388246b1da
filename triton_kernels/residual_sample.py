"""Op 3: residual (or bonus) normalisation + integer inverse-CDF draw
(reference.residual_sample_ref)."""
import torch
import triton
import triton.language as tl

from ._common import block_length, draw_row, probs_check_argmax, stream_words
from ._launch import block_v, launch_opts, next_pow2


@triton.jit(do_not_specialize=["p_stride", "q_stride", "V", "MAXK"])
def _residual_sample_kernel(p_ptr, p_stride, t_start_ptr, ids_ptr, d_start_ptr, nd_ptr, q_ptr,
                            q_stride, greedy_ptr, seed_ptr, off_ptr, nacc_ptr, out_ptr, V, MAXK,
                            Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr,
                            MAXK_P2: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    t0 = tl.load(t_start_ptr + b)
    d0 = tl.load(d_start_ptr + b)
    nd = tl.load(nd_ptr + b)
    greedy = tl.load(greedy_ptr + b) != 0
    seed = tl.load(seed_ptr + b)
    off = tl.load(off_ptr + b)
    na = tl.load(nacc_ptr + b).to(tl.int32)
    kb = block_length(ids_ptr, d0, nd, V, MAXK, MAXK_P2)
    j = tl.maximum(tl.minimum(na, kb), 0)
    row_ptr = p_ptr + (t0 + j) * p_stride
    vld, am = probs_check_argmax(row_ptr, V, BLOCK_V)
    tok = am * 0 - 1
    if vld:
        if greedy:
            tok = am
        else:
            w0, w1 = stream_words(seed, off, j, 1)
            bonus = (j == kb).to(tl.int32)
            y = tl.load(ids_ptr + d0 + j, mask=bonus == 0, other=-1)
            q_row_ptr = q_ptr + (d0 + j) * q_stride
            one = tl.load(p_ptr + 0) * 0.0 + 1.0
            zi = seed * 0 + 1
            tok = draw_row(row_ptr, q_row_ptr, V, y, bonus, w0, w1,
                           one, one, one, one, one, zi,
                           bonus, one, one, one, one, zi,
                           True, Q_MODE, BLOCK_V)
    tl.store(out_ptr + b, tok)


def residual_sample(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
                    draft_probs, greedy, seed, offset, num_accepted, max_k):
    B = num_draft.shape[0]
    dev = target_probs.device
    out = torch.full((B,), -1, dtype=torch.int32, device=dev)
    if B == 0:
        return out
    V = target_probs.shape[1]
    has_q = draft_probs is not None
    q = draft_probs if has_q else target_probs
    _residual_sample_kernel[(B,)](
        target_probs, target_probs.stride(0), target_row_start, draft_ids, draft_row_start,
        num_draft, q, q.stride(0), greedy, seed, offset, num_accepted, out, V, int(max_k),
        Q_MODE=1 if has_q else 0, BLOCK_V=block_v(V, dev), MAXK_P2=max(16, next_pow2(max_k)), **launch_opts(dev))
    return out
