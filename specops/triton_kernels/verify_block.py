"""Block verification (reference section 9): one program per request reads every row of
its block, keeps the last position whose stopping test passes (``tau``) and draws once at
tau.  Greedy requests take the walk of section 1 (``_walk_common.visit``).  Like the token-wise
kernel it reads no row outside the tensors and guards malformed requests (section 8).

Every position's row statistics are computed once in the scan; the row drawn from at tau is
transformed again (keeping K rows of statistics per program would cost registers, and it is
one row of the block).  The vocabulary-split pipeline does not run this method yet: block
verification always takes this path.
"""
import triton
import triton.language as tl

from ._block_rows import block_mass, next_rho, stop_probability
from ._common import TAG_SAMPLE, accept_uniform, draw_row, prob_at, stream_words
from ._launch import launch_opts, row_args, verify_outputs, walk_sizes
from ._walk_common import draft_row, load_request, target_row, visit, write_row


@triton.jit
def _block_walk(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V, kb, draft_oob, req,
                T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """-> (tau, token): the stopping point and the token drawn at tau (-1: invalid)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    rho = tl.full([], 1.0, tl.float64)
    rho_tau = tl.full([], 1.0, tl.float64)
    tau = tl.full([], 0, tl.int32)
    e = kb
    end_ok = tl.full([], 1, tl.int32)
    j = tl.full([], 0, tl.int32)
    scanning = tl.full([], 1, tl.int32)
    while scanning != 0:
        t_index = t0 + j
        exists = (t_index >= 0) & (t_index < N) & ((draft_oob & (j == kb)) == 0)
        if exists:
            t_row = t_ptr + t_index * t_stride
            t_ok, t_stats = target_row(t_row, V, req, T_PROBS, BLOCK_V)
            if t_ok == 0:
                e = j
                end_ok = 0
                scanning = 0
            elif j == kb:
                scanning = 0
            else:
                q_row = q_ptr + (d0 + j) * q_stride
                y = tl.load(ids_ptr + d0 + j)
                q_ok, q_stats = draft_row(q_row, V, req, Q_MODE, BLOCK_V)
                if q_ok == 0:              # an unusable draft row ends the block here
                    e = j
                    scanning = 0
                else:
                    if j >= 1:
                        S = block_mass(t_row, q_row, V, y, rho, inv_t, t_stats, q_stats,
                                       T_PROBS, Q_MODE, BLOCK_V)
                        if accept_uniform(seed, offset, j - 1) < stop_probability(S, rho):
                            tau = j
                            rho_tau = rho
                    p_y = prob_at(t_row, y, inv_t, t_stats, T_PROBS)
                    if Q_MODE == 0:
                        q_y = tl.full([], 1.0, tl.float32)
                    else:
                        q_y = prob_at(q_row, y, inv_t, q_stats, Q_MODE == 1)
                    rho = next_rho(rho, p_y, q_y)
                    j += 1
        else:
            e = j
            end_ok = 0
            scanning = 0
    if e >= 1:
        if accept_uniform(seed, offset, e - 1) < rho:
            tau = e
            rho_tau = rho
    token = tl.full([], -1, tl.int32)
    if (tau == e) & (end_ok != 0):         # the bonus / end-of-block draw from p_e
        t_row = t_ptr + (t0 + e) * t_stride
        t_ok, t_stats = target_row(t_row, V, req, T_PROBS, BLOCK_V)
        if t_ok:
            u_lo, u_hi = stream_words(seed, offset, e, TAG_SAMPLE)
            token = draw_row(t_row, t_row, V, -1, u_lo, u_hi, inv_t, t_stats, True, None,
                             T_PROBS, 0, BLOCK_V)
    elif tau < e:                          # the scaled residual of row tau
        t_row = t_ptr + (t0 + tau) * t_stride
        q_row = q_ptr + (d0 + tau) * q_stride
        y = tl.load(ids_ptr + d0 + tau)
        t_ok, t_stats = target_row(t_row, V, req, T_PROBS, BLOCK_V)
        q_ok, q_stats = draft_row(q_row, V, req, Q_MODE, BLOCK_V)
        if t_ok:
            u_lo, u_hi = stream_words(seed, offset, tau, TAG_SAMPLE)
            token = draw_row(t_row, q_row, V, y, u_lo, u_hi, inv_t, t_stats, q_ok, q_stats,
                             T_PROBS, Q_MODE, BLOCK_V, rho_tau)
    return tau, token


@triton.jit(do_not_specialize=["t_stride", "N", "n_ids", "q_stride", "n_draft_rows", "V",
                               "MAXK"])
def _verify_block_kernel(
    t_ptr,             # [N, V] target logits (float32 / bfloat16 / float16) or float32 probs
    t_stride,          # elements between consecutive target rows
    N,                 # target rows: a row index outside [0, N) makes its request invalid
    t_start_ptr,       # [B] int64 first target row of each request
    ids_ptr,           # [n_ids] int64 draft token ids, request b's at d_start[b] + j
    d_start_ptr,       # [B] int64 first draft id (and draft row) of each request
    n_draft_ptr,       # [B] int64 number of draft tokens of each request
    n_ids,             # draft ids in the id tensor
    n_draft_rows,      # draft indices in [0, n_draft_rows) exist
    q_ptr,             # [T, V] draft probs (Q_MODE 1) or logits (Q_MODE 2); t_ptr if Q_MODE 0
    q_stride,          # elements between consecutive draft rows
    inv_t_ptr,         # [B] float32 host 1/T, 0 for greedy requests
    top_k_ptr,         # [B] int64 top-k (0: off)
    top_p_ptr,         # [B] float32 top-p (1: off)
    min_p_ptr,         # [B] float32 min-p (0: off)
    seed_ptr,          # [B] int64 Philox key
    offset_ptr,        # [B] int64 Philox counter words 2-3
    tok_ptr,           # [B, MAXK + 1] int32 out: accepted drafts, token, then -1
    nacc_ptr,          # [B] int32 out: num_accepted (tau)
    valid_ptr,         # [B] bool out
    V,                 # vocabulary size
    MAXK,              # max_k; output width MAXK + 1
    T_PROBS: tl.constexpr,   # target holds probabilities (else logits)
    Q_MODE: tl.constexpr,    # 0: point-mass drafts, 1: draft probs, 2: draft logits
    BLOCK_V: tl.constexpr,   # vocabulary tile (power of 2)
    MAXK_P2: tl.constexpr,   # power of 2 >= MAXK
    OUT_P2: tl.constexpr,    # power of 2 >= MAXK + 1
):
    b = tl.program_id(0).to(tl.int64)
    t0, d0, params, kb, draft_oob, ok = load_request(
        b, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows, inv_t_ptr,
        top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    req = params + (tl.load(seed_ptr + b), tl.load(offset_ptr + b))
    nacc = tl.full([], 0, tl.int32)
    token = tl.full([], -1, tl.int32)
    if ok:
        if req[0] == 0.0:                  # greedy: the walk of section 1
            walking = tl.full([], True, tl.int1)
            while walking:
                walking, token = visit(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0,
                                        V, nacc, kb, draft_oob, req, True, T_PROBS, Q_MODE,
                                        BLOCK_V)
                nacc += walking.to(tl.int32)
        else:
            nacc, token = _block_walk(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V,
                                      kb, draft_oob, req, T_PROBS, Q_MODE, BLOCK_V)
    write_row(tok_ptr, nacc_ptr, valid_ptr, b, ids_ptr, d0, nacc, token, token >= 0,
              tl.full([], False, tl.int1), MAXK, OUT_P2)


def verify_block(target, target_is_probs, target_row_start, draft_ids, draft_row_start,
                 num_draft, draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                 max_k):
    """Block verification on the canonical arguments (contiguous [B] tensors) ->
    (token_ids [B, max_k + 1] int32, num_accepted [B] int32, valid [B] bool)."""
    B, dev = num_draft.shape[0], target.device
    max_k = int(max_k)
    tok, nacc, valid = verify_outputs(B, max_k, dev)
    if B == 0:
        return tok, nacc, valid
    rows, q_mode = row_args(target, target_row_start, draft_ids, draft_row_start, num_draft,
                            draft, draft_is_probs, inv_temp, top_k, top_p, min_p)
    _verify_block_kernel[(B,)](*rows, seed, offset, tok, nacc, valid, target.shape[1], max_k,
                               T_PROBS=bool(target_is_probs), Q_MODE=q_mode,
                               **walk_sizes(max_k, target.shape[1], dev), **launch_opts(dev))
    return tok, nacc, valid
