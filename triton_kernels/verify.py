"""The fused verifier (reference.verify_rows_ref): the whole step without materialising
probabilities, reading only the target / draft rows each request needs."""
import torch
import triton
import triton.language as tl

from ._common import (accept_uniform, block_length, draw_row, logits_argmax,
                      probs_check_argmax, probs_from_logits, row_stats, stream_words)
from ._launch import block_v, launch_opts, next_pow2


@triton.jit(do_not_specialize=["t_stride", "q_stride", "V", "MAXK"])
def _verify_kernel(t_ptr, t_stride, t_start_ptr, ids_ptr, d_start_ptr, nd_ptr, q_ptr, q_stride,
                   inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr, seed_ptr, off_ptr,
                   tok_ptr, nacc_ptr, valid_ptr, V, MAXK,
                   T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr,
                   MAXK_P2: tl.constexpr, OUT_P2: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    t0 = tl.load(t_start_ptr + b)
    d0 = tl.load(d_start_ptr + b)
    nd = tl.load(nd_ptr + b)
    inv_t = tl.load(inv_t_ptr + b)
    top_k = tl.load(top_k_ptr + b)
    top_p = tl.load(top_p_ptr + b)
    min_p = tl.load(min_p_ptr + b)
    seed = tl.load(seed_ptr + b)
    off = tl.load(off_ptr + b)
    greedy = inv_t == 0.0
    kb = block_length(ids_ptr, d0, nd, V, MAXK, MAXK_P2)
    zero = kb * 0
    nacc = zero
    emitted = zero - 1
    valid = zero + 1
    done = zero
    f_one = inv_t * 0.0 + 1.0
    i_one = top_k * 0 + 1
    for j in range(0, kb + 1):
        if done == 0:
            row_ptr = t_ptr + (t0 + j) * t_stride
            q_row_ptr = q_ptr + (d0 + j) * q_stride
            is_last = j == kb
            y = tl.load(ids_ptr + d0 + j, mask=j < kb, other=-1)
            if greedy:
                if T_PROBS:
                    vld, am = probs_check_argmax(row_ptr, V, BLOCK_V)
                else:
                    vld, am = logits_argmax(row_ptr, V, BLOCK_V)
                if vld == 0:
                    valid = 0
                    done = 1
                elif is_last:
                    emitted = am
                    done = 1
                elif y == am:
                    nacc = j + 1
                else:
                    emitted = am
                    done = 1
            else:
                # target row: the transform's scalars (logits) -- validity checked here
                if T_PROBS:
                    tvalid = kb >= 0
                    tm = f_one
                    tthr = f_one
                    ttau = f_one
                    tmp = f_one
                    ts = i_one
                else:
                    tvalid, tm, tthr, ttau, tmp, ts = row_stats(row_ptr, V, inv_t, top_k, top_p,
                                                               min_p, BLOCK_V)
                    ts = tl.where(ts > 0, ts, 1)
                if tvalid == 0:
                    valid = 0
                    done = 1
                else:
                    qvalid = kb >= 0
                    qm = f_one
                    qthr = f_one
                    qtau = f_one
                    qmp = f_one
                    qs = i_one
                    draw = is_last
                    if not is_last:
                        if Q_MODE == 2:
                            qvalid, qm, qthr, qtau, qmp, qs = row_stats(
                                q_row_ptr, V, inv_t, top_k, top_p, min_p, BLOCK_V)
                            qs = tl.where(qvalid & (qs > 0), qs, 1)
                        if T_PROBS:
                            p_y = tl.load(row_ptr + y).to(tl.float32)
                        else:
                            p_y = probs_from_logits(tl.load(row_ptr + y).to(tl.float32), inv_t,
                                                    tm, tthr, ttau, tmp, ts)
                        u = accept_uniform(seed, off, j)
                        if Q_MODE == 0:
                            acc = u < p_y.to(tl.float64)
                        else:
                            if Q_MODE == 1:
                                q_y = tl.load(q_row_ptr + y).to(tl.float32)
                            else:
                                q_y = probs_from_logits(tl.load(q_row_ptr + y).to(tl.float32),
                                                        inv_t, qm, qthr, qtau, qmp, qs)
                                q_y = tl.where(qvalid, q_y, float("nan"))
                            acc = u * q_y.to(tl.float64) < p_y.to(tl.float64)
                        if acc:
                            nacc = j + 1
                        else:
                            draw = kb >= 0
                    if draw:
                        pvalid = kb >= 0
                        if T_PROBS:
                            pvalid, am2 = probs_check_argmax(row_ptr, V, BLOCK_V)
                        if pvalid:
                            w0, w1 = stream_words(seed, off, j, 1)
                            tok = draw_row(row_ptr, q_row_ptr, V, y, is_last.to(tl.int32), w0, w1,
                                           inv_t, tm, tthr, ttau, tmp, ts,
                                           qvalid.to(tl.int32), qm, qthr, qtau, qmp, qs,
                                           T_PROBS, Q_MODE, BLOCK_V)
                            emitted = tok
                            if tok < 0:
                                valid = 0
                        else:
                            valid = 0
                        done = 1
    # output row: accepted drafts, then the correction / bonus token, then -1
    pos = tl.arange(0, OUT_P2)
    ids = tl.load(ids_ptr + d0 + pos, mask=pos < nacc, other=-1).to(tl.int32)
    row = tl.where(pos < nacc, ids, tl.where(pos == nacc, emitted, -1))
    tl.store(tok_ptr + b * (MAXK + 1) + pos, row, mask=pos < MAXK + 1)
    tl.store(nacc_ptr + b, nacc)
    tl.store(valid_ptr + b, valid != 0)


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k):
    B = num_draft.shape[0]
    dev = target.device
    max_k = int(max_k)
    tok = torch.empty((B, max_k + 1), dtype=torch.int32, device=dev)
    nacc = torch.empty((B,), dtype=torch.int32, device=dev)
    valid = torch.empty((B,), dtype=torch.bool, device=dev)
    if B == 0:
        return tok, nacc, valid
    V = target.shape[1]
    q_mode = 0 if draft is None else (1 if draft_is_probs else 2)
    q = target if draft is None else draft
    _verify_kernel[(B,)](
        target, target.stride(0), target_row_start, draft_ids, draft_row_start, num_draft,
        q, q.stride(0), inv_temp, top_k, top_p, min_p, seed, offset, tok, nacc, valid,
        V, max_k, T_PROBS=bool(target_is_probs), Q_MODE=q_mode, BLOCK_V=block_v(V, dev),
        MAXK_P2=max(16, next_pow2(max_k)), OUT_P2=max(16, next_pow2(max_k + 1)), **launch_opts(dev))
    return tok, nacc, valid
