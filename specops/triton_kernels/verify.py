"""The fused verifier (reference.verify_rows_ref): one program per request walks its block
without materialising probabilities, reading only the target / draft rows the request needs.
``dispatch.verify`` chooses between it and the vocabulary-split pipeline (``split.py``).

The walk repeats ``_walk_common.visit`` (one position j: the accept test and, on a rejection
or at the end of the block, the draw) while drafts are accepted.  The forced mode
(``FORCED``, the residual-sample view, reference section 7) takes the positions before
``j* = min(forced_num_accepted, kb)`` as accepted without reading their rows and visits
``j*`` alone, with no accept test.
"""
import triton
import triton.language as tl

from ._launch import launch_opts, row_args, verify_outputs, walk_sizes
from ._walk_common import load_request, visit, write_row


@triton.jit(do_not_specialize=["t_stride", "N", "n_ids", "q_stride", "n_draft_rows", "V",
                               "MAXK"])
def _verify_kernel(
    t_ptr,             # [N, V] target logits (float32 / bfloat16 / float16) or float32 probs
    t_stride,          # elements between consecutive target rows (t_ptr's row stride)
    N,                 # target rows: a row index outside [0, N) makes its request invalid
    t_start_ptr,       # [B] int64 first target row of each request
    ids_ptr,           # [n_ids] int64 draft token ids, request b's at d_start[b] + j
    d_start_ptr,       # [B] int64 first draft id (and draft row) of each request
    n_draft_ptr,       # [B] int64 number of draft tokens of each request
    n_ids,             # draft ids in the id tensor
    n_draft_rows,      # draft indices in [0, n_draft_rows) exist: n_ids, or min(n_ids, T)
    q_ptr,             # [T, V] draft probs (Q_MODE 1) or logits (Q_MODE 2); t_ptr if Q_MODE 0
    q_stride,          # elements between consecutive draft rows
    inv_t_ptr,         # [B] float32 host 1/T, 0 for greedy requests
    top_k_ptr,         # [B] int64 top-k (0: off)
    top_p_ptr,         # [B] float32 top-p (1: off)
    min_p_ptr,         # [B] float32 min-p (0: off)
    seed_ptr,          # [B] int64 Philox key (two's complement bits)
    offset_ptr,        # [B] int64 Philox counter words 2-3
    forced_ptr,        # [B] int64 forced num_accepted (FORCED); None otherwise
    tok_ptr,           # [B, MAXK + 1] int32 out: accepted drafts, token, then -1
    nacc_ptr,          # [B] int32 out: num_accepted
    valid_ptr,         # [B] bool out: no row the request read was invalid
    V,                 # vocabulary size (columns of target and draft)
    MAXK,              # max_k: block lengths are cut to it; output width MAXK + 1
    T_PROBS: tl.constexpr,   # target holds probabilities (else logits)
    Q_MODE: tl.constexpr,    # 0: point-mass drafts (no q), 1: draft probs, 2: draft logits
    FORCED: tl.constexpr,    # forced mode: forced_ptr gives num_accepted
    BLOCK_V: tl.constexpr,   # vocabulary tile (power of 2)
    MAXK_P2: tl.constexpr,   # power of 2 >= MAXK (block-length scan)
    OUT_P2: tl.constexpr,    # power of 2 >= MAXK + 1 (output row)
):
    b = tl.program_id(0).to(tl.int64)
    t0, d0, params, kb, draft_oob, ok = load_request(
        b, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows, inv_t_ptr,
        top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS, MAXK_P2)
    req = params + (tl.load(seed_ptr + b), tl.load(offset_ptr + b))
    if not ok:                                            # malformed: nothing emitted
        nacc = tl.full([], 0, tl.int32)
        token = tl.full([], -1, tl.int32)
    elif FORCED:
        forced = tl.load(forced_ptr + b)
        nacc = tl.minimum(tl.maximum(forced, 0), kb).to(tl.int32)
        token = tl.full([], -1, tl.int32)
        if forced >= 0:
            _, token = visit(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V, nacc,
                              kb, draft_oob, req, False, T_PROBS, Q_MODE, BLOCK_V)
    else:
        nacc = tl.full([], 0, tl.int32)
        token = tl.full([], -1, tl.int32)
        walking = tl.full([], True, tl.int1)
        while walking:
            walking, token = visit(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V,
                                    nacc, kb, draft_oob, req, True, T_PROBS, Q_MODE, BLOCK_V)
            nacc += walking.to(tl.int32)
    write_row(tok_ptr, nacc_ptr, valid_ptr, b, ids_ptr, d0, nacc, token, token >= 0,
              tl.full([], False, tl.int1), MAXK, OUT_P2)


def verify_fused(target, target_is_probs, target_row_start, draft_ids, draft_row_start,
                 num_draft, draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                 max_k, forced_num_accepted=None):
    """The fused kernel on the canonical arguments (contiguous [B] tensors, target and draft
    rows with unit column stride), one program per request -> (token_ids [B, max_k + 1]
    int32, num_accepted [B] int32, valid [B] bool)."""
    B = num_draft.shape[0]
    dev = target.device
    max_k = int(max_k)
    V = target.shape[1]
    tok, nacc, valid = verify_outputs(B, max_k, dev)
    if B == 0:
        return tok, nacc, valid
    rows, q_mode = row_args(target, target_row_start, draft_ids, draft_row_start, num_draft,
                            draft, draft_is_probs, inv_temp, top_k, top_p, min_p)
    _verify_kernel[(B,)](*rows, seed, offset, forced_num_accepted, tok, nacc, valid, V, max_k,
                         T_PROBS=bool(target_is_probs), Q_MODE=q_mode,
                         FORCED=forced_num_accepted is not None, **walk_sizes(max_k, V, dev),
                         **launch_opts(dev))
    return tok, nacc, valid
