"""Walk helpers shared by the per-request Triton kernels (reference sections 1, 7-10):
the request prologue (``load_request``), the output row (``write_row``), the accept test
(``accept_test``) and one position of the token walk (``visit``), and the row transforms of
the block, rate and tree kernels (``target_row``, ``draft_row``, ``no_stats``).  A kernel
module takes shared device code from the underscore modules (``_common``, ``_walk_common``,
``_split_common``, ``_block_rows``, ``_tree_rows``), never from another kernel module.

Per-request scalars travel as the tuple ``req = (inv_t, top_k, top_p, min_p, seed, offset)``;
row statistics as ``stats`` (see ``_common``).
"""
import triton
import triton.language as tl

from ._common import (TAG_SAMPLE, accept_uniform, block_length, draw_row, logits_scan,
                      prob_at, probs_check_argmax, request_ok, row_stats, stream_words)


# ----------------------------------------------------------------------------- a request
@triton.jit
def load_params(b, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr):
    """Request b's sampling parameters (inv_t, top_k, top_p, min_p)."""
    return (tl.load(inv_t_ptr + b), tl.load(top_k_ptr + b), tl.load(top_p_ptr + b),
            tl.load(min_p_ptr + b))


@triton.jit
def load_request(b, t_start_ptr, ids_ptr, d_start_ptr, n_draft_ptr, n_ids, n_draft_rows,
                 inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V, MAXK, T_PROBS: tl.constexpr,
                 MAXK_P2: tl.constexpr):
    """The prologue of request b of a chain kernel -> (t0, d0, params, kb, oob, ok): its
    first target row and first draft index, its sampling parameters (``load_params``), its
    block length and ``oob`` (``_common.block_length``), and ``ok``: the request is not
    malformed (reference section 8)."""
    t0 = tl.load(t_start_ptr + b)
    d0 = tl.load(d_start_ptr + b)
    params = load_params(b, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr)
    kb, oob, ids_ok = block_length(ids_ptr, d0, tl.load(n_draft_ptr + b), n_ids, n_draft_rows,
                                   V, MAXK, MAXK_P2)
    return t0, d0, params, kb, oob, ids_ok & request_ok(params + (0, 0), T_PROBS)


@triton.jit
def write_row(tok_ptr, nacc_ptr, valid_ptr, b, ids_ptr, d0, nacc, token, valid, skip_token,
              MAXK, OUT_P2: tl.constexpr):
    """Output row b: accepted drafts, the token at nacc (unless ``skip_token``, an int1
    tensor: its owner writes it), then -1; num_accepted and valid."""
    pos = tl.arange(0, OUT_P2)
    ids = tl.load(ids_ptr + d0 + pos, mask=pos < nacc, other=-1).to(tl.int32)
    row = tl.where(pos < nacc, ids, tl.where(pos == nacc, token, -1))
    # the scalar is widened by hand: the interpreter broadcasts an int1 scalar into an
    # int32 mask, which its store refuses
    m = (pos <= MAXK) & ((pos != nacc) | (pos * 0 + skip_token.to(tl.int32) == 0))
    tl.store(tok_ptr + b * (MAXK + 1) + pos, row, mask=m)
    tl.store(nacc_ptr + b, nacc)
    tl.store(valid_ptr + b, valid)


# ----------------------------------------------------------------------------- rows
@triton.jit
def no_stats():
    """Placeholder row statistics for rows that need none (probabilities, point masses):
    compiled kernels cannot return None inside a tuple."""
    return (tl.full([], 0.0, tl.float32), tl.full([], float("-inf"), tl.float32),
            tl.full([], 0.0, tl.float32), tl.full([], 0.0, tl.float32),
            tl.full([], 1, tl.int64))


@triton.jit
def target_row(t_row, V, req, T_PROBS: tl.constexpr, BLOCK_V: tl.constexpr):
    """(valid, stats) of a target row (probabilities: checked in full, no statistics)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    if T_PROBS:
        ok, arg = probs_check_argmax(t_row, V, BLOCK_V)
        stats = no_stats()
    else:
        ok, stats = row_stats(t_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
    return ok, stats


@triton.jit
def draft_row(q_row, V, req, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """(usable, stats) of a draft row: draft logits are transformed (an invalid row is
    unusable); probabilities and point masses are used as they are."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    if Q_MODE == 2:
        ok, stats = row_stats(q_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
    else:
        ok = tl.full([], True, tl.int1)
        stats = no_stats()
    return ok, stats


# ----------------------------------------------------------------------------- the token walk
@triton.jit
def _draw_at(t_row, q_row, V, y, j, req, t_stats, q_ok, q_stats,
          T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """The draw at position j (stream tag 1 at j) over the residual of p_j and the draft
    (y = -1, Q_MODE 0: over p_j, the bonus draw).  A probability row is checked in full
    first.  -> token, or -1 if the row is invalid."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    token = tl.full([], -1, tl.int32)
    if T_PROBS:
        row_ok, arg = probs_check_argmax(t_row, V, BLOCK_V)
    else:
        row_ok = True                      # logits rows are checked before the accept test
    if row_ok:
        u_lo, u_hi = stream_words(seed, offset, j, TAG_SAMPLE)
        token = draw_row(t_row, q_row, V, y, u_lo, u_hi, inv_t, t_stats, q_ok, q_stats,
                         T_PROBS, Q_MODE, BLOCK_V)
    return token


@triton.jit
def accept_test(t_row, q_row, y, j, req, t_stats, q_ok, q_stats,
                 T_PROBS: tl.constexpr, Q_MODE: tl.constexpr):
    """p_j(y) > 0 and u_j * q_j(y) < p_j(y) in float64 (q = 1 for a point-mass draft; NaN
    rejects; p > 0 keeps an unchecked negative q from accepting a token of probability 0)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    p_y = prob_at(t_row, y, inv_t, t_stats, T_PROBS).to(tl.float64)
    u = accept_uniform(seed, offset, j)
    if Q_MODE == 0:
        accepted = u < p_y
    else:
        q_y = prob_at(q_row, y, inv_t, q_stats, Q_MODE == 1)
        if Q_MODE == 2:
            q_y = tl.where(q_ok, q_y, float("nan"))
        accepted = (u * q_y.to(tl.float64) < p_y) & (p_y > 0)
    return accepted


@triton.jit
def _greedy_position(t_row, V, y, is_draft, TEST: tl.constexpr, T_PROBS: tl.constexpr,
                     BLOCK_V: tl.constexpr):
    """Greedy request at one position -> (accepted, token): the token is the row's
    lowest-index argmax (-1 if the row is invalid); a draft equal to it is accepted."""
    if T_PROBS:
        row_ok, arg = probs_check_argmax(t_row, V, BLOCK_V)
    else:
        row_ok, x_max, arg = logits_scan(t_row, V, 1.0, BLOCK_V)
    accepted = tl.full([], False, tl.int1)
    if TEST:
        accepted = row_ok & is_draft & (y == arg)
    return accepted, tl.where(row_ok, arg, -1)


@triton.jit
def _sampled_position(t_row, q_row, V, y, j, is_draft, req, TEST: tl.constexpr,
                      T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """Sampled (non-greedy) request at one position -> (accepted, token): the accept test
    (with TEST, at a draft position), then on a rejection the residual draw, or the bonus
    draw at the end of the block."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    accepted = tl.full([], False, tl.int1)
    token = tl.full([], -1, tl.int32)
    if T_PROBS:
        row_ok = True                      # checked in full only if drawn from
        t_stats = None
    else:
        row_ok, t_stats = row_stats(t_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
    if row_ok:
        if is_draft:
            if Q_MODE == 2:
                q_ok, q_stats = row_stats(q_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
            else:
                q_ok = True
                q_stats = None
            if TEST:
                accepted = accept_test(t_row, q_row, y, j, req, t_stats, q_ok, q_stats,
                                        T_PROBS, Q_MODE)
            if not accepted:
                token = _draw_at(t_row, q_row, V, y, j, req, t_stats, q_ok, q_stats,
                              T_PROBS, Q_MODE, BLOCK_V)
        else:
            token = _draw_at(t_row, q_row, V, -1, j, req, t_stats, True, None,
                          T_PROBS, 0, BLOCK_V)
    return accepted, token


@triton.jit
def visit(t_ptr, t_stride, N, t0, q_ptr, q_stride, ids_ptr, d0, V, j, kb, draft_oob, req,
           TEST: tl.constexpr, T_PROBS: tl.constexpr, Q_MODE: tl.constexpr,
           BLOCK_V: tl.constexpr):
    """Position j of the request's walk -> (accepted, token); token -1 (with accepted
    false) marks the request invalid at j.  A target row outside [0, N), or the draft row
    at j == kb when the block was cut by the end of the draft tensor, makes it invalid
    without reading anything."""
    t_index = t0 + j
    exists = (t_index >= 0) & (t_index < N) & ~(draft_oob & (j == kb))
    accepted = tl.full([], False, tl.int1)
    token = tl.full([], -1, tl.int32)
    if exists:
        t_row = t_ptr + t_index * t_stride
        q_row = q_ptr + (d0 + j) * q_stride
        is_draft = j < kb
        y = tl.load(ids_ptr + d0 + j, mask=is_draft, other=-1)
        if req[0] == 0.0:                  # inv_t == 0: greedy
            accepted, token = _greedy_position(t_row, V, y, is_draft, TEST, T_PROBS, BLOCK_V)
        else:
            accepted, token = _sampled_position(t_row, q_row, V, y, j, is_draft, req, TEST,
                                                T_PROBS, Q_MODE, BLOCK_V)
    return accepted, token
