"""Acceptance rates (reference section 10): beta_j = sum_x min(p_j(x), q_j(x)) for every
position the verifier read, NaN elsewhere.  One program per request, after the walk: it reads
positions ``j <= num_accepted`` (token-wise) or every ``j`` up to the block's cut (block), so
its cost is one more pass over those rows (the CPU path computes beta inside the walk)."""
import triton
import triton.language as tl

from ._block_rows import accept_rate
from ._common import logits_scan, probs_check_argmax
from ._launch import launch_opts, row_args, walk_sizes
from ._walk_common import draft_row, load_request, target_row


@triton.jit(do_not_specialize=["t_stride", "N", "n_ids", "q_stride", "n_draft_rows", "V",
                               "MAXK"])
def _accept_rates_kernel(
    t_ptr,             # [N, V] target logits or float32 probs
    t_stride,          # elements between consecutive target rows
    N,                 # target rows
    t_start_ptr,       # [B] int64 first target row of each request
    ids_ptr,           # [n_ids] int64 draft token ids
    d_start_ptr,       # [B] int64 first draft id (and draft row) of each request
    n_draft_ptr,       # [B] int64 number of draft tokens of each request
    n_ids,             # draft ids in the id tensor
    n_draft_rows,      # draft indices in [0, n_draft_rows) exist
    q_ptr,             # [T, V] draft probs / logits; t_ptr if Q_MODE 0
    q_stride,          # elements between consecutive draft rows
    inv_t_ptr,         # [B] float32 host 1/T, 0 for greedy requests
    top_k_ptr,         # [B] int64
    top_p_ptr,         # [B] float32
    min_p_ptr,         # [B] float32
    nacc_ptr,          # [B] int32 num_accepted of the walk (token-wise: the last position read)
    rates_ptr,         # [B, MAXK] float32 out
    V,                 # vocabulary size
    MAXK,              # max_k
    BLOCK: tl.constexpr,     # block verification (else token-wise)
    T_PROBS: tl.constexpr,
    Q_MODE: tl.constexpr,
    BLOCK_V: tl.constexpr,
    MAXK_P2: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    t0, d0, params, kb, draft_oob, ok = load_request(
        b, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows, inv_t_ptr,
        top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    req = params + (tl.full([], 0, tl.int64), tl.full([], 0, tl.int64))   # no stream
    inv_t = req[0]
    greedy = inv_t == 0.0
    last = tl.minimum(kb - 1, tl.load(nacc_ptr + b))        # token-wise: j <= num_accepted
    if BLOCK:
        last = tl.where(greedy, last, kb - 1)
    if ok == 0:
        last = -1
    j = tl.full([], 0, tl.int32)
    while j <= last:
        rate = tl.full([], float("nan"), tl.float32)
        t_index = t0 + j
        y = tl.load(ids_ptr + d0 + j)
        if (t_index >= 0) & (t_index < N):
            t_row = t_ptr + t_index * t_stride
            if greedy:
                if T_PROBS:
                    ok, arg = probs_check_argmax(t_row, V, BLOCK_V)
                else:
                    ok, x_max, arg = logits_scan(t_row, V, 1.0, BLOCK_V)
                if ok:
                    rate = tl.where(y == arg, 1.0, 0.0).to(tl.float32)
            else:
                ok, t_stats = target_row(t_row, V, req, T_PROBS, BLOCK_V)
                if ok:
                    q_row = q_ptr + (d0 + j) * q_stride
                    q_ok, q_stats = draft_row(q_row, V, req, Q_MODE, BLOCK_V)
                    if q_ok:
                        rate = accept_rate(t_row, q_row, V, y, inv_t, t_stats, q_stats,
                                           T_PROBS, Q_MODE, BLOCK_V)
                    else:
                        rate = tl.full([], 0.0, tl.float32)
                        if BLOCK:
                            last = j               # the block ends on an unusable draft row
                elif BLOCK:
                    last = j                       # the block ends on an invalid target row
        tl.store(rates_ptr + b * MAXK + j, rate)
        j += 1
    pos = tl.arange(0, MAXK_P2)
    tl.store(rates_ptr + b * MAXK + pos, float("nan"), mask=(pos > last) & (pos < MAXK))


def accept_rates(target, target_is_probs, target_row_start, draft_ids, draft_row_start,
                 num_draft, draft, draft_is_probs, inv_temp, top_k, top_p, min_p, max_k,
                 num_accepted, block):
    """[B, max_k] float32 beta (reference section 10) after the walk gave num_accepted."""
    import torch
    B, dev = num_draft.shape[0], target.device
    max_k = int(max_k)
    rates = torch.empty((B, max_k), dtype=torch.float32, device=dev)
    if B == 0 or max_k == 0:
        return rates
    rows, q_mode = row_args(target, target_row_start, draft_ids, draft_row_start, num_draft,
                            draft, draft_is_probs, inv_temp, top_k, top_p, min_p)
    sizes = walk_sizes(max_k, target.shape[1], dev)
    _accept_rates_kernel[(B,)](*rows, num_accepted, rates, target.shape[1], max_k,
                               BLOCK=bool(block), T_PROBS=bool(target_is_probs), Q_MODE=q_mode,
                               BLOCK_V=sizes["BLOCK_V"], MAXK_P2=sizes["MAXK_P2"],
                               **launch_opts(dev))
    return rates
