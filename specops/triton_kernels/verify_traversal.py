"""Traversal verification (reference section 14, ``reference/traversal.py``): one program
per request walks its tree depth first with an explicit stack of the nodes on the current
path, testing each node once it has no child left (leaf to root).

Each stack level k (0: the root) keeps its node's rows in global scratch, because a level
must survive while its descendants are visited: the target row ``P[k]`` (float32, the
transform materialised or the probabilities copied), the draft row ``Qf[k]`` (float32), the
residual ``R[k]`` and the draft weights ``QW[k]`` (int64), all [B, D + 1, V], allocated by the
launcher.  Its scalars (node, weight rho, A, Q, flags, cursor, the token of the child being
visited) live in registers as [OUT_P2] vectors indexed by level.  A ``tl.debug_barrier()``
separates a pass that writes a scratch row from anything that reads it.  Greedy requests use
section 11's greedy walk (``verify_tree._greedy_node``) and read no scratch.
"""
import torch
import triton
import triton.language as tl

from ._common import (NO_INDEX, P_CHECK_MAX, TAG_SAMPLE, U32_TO_UNIT, W_SCALE,
                      check_probs_tile, mulhi_u64, probs_tile, request_ok, row_stats,
                      stream_words)
from ._launch import launch_opts, tree_launch, tree_sizes
from ._tree_rows import find_weight, store_weights
from ._walk_common import load_params, no_stats
from .verify_tree import _greedy_node, _tree_shape


@triton.jit
def _materialize(row, dst, V, req, IS_PROBS: tl.constexpr, BLOCK_V: tl.constexpr):
    """The row's probabilities into ``dst`` (float32) -> ok: the transform of a row of logits
    (invalid: not ok), or probabilities copied and checked (reference section 3)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    offs = tl.arange(0, BLOCK_V)
    ok = tl.full([], True, tl.int1)
    n_bad = tl.full([], 0, tl.int32)
    mass = tl.full([], 0, tl.int64)
    if IS_PROBS:
        for start in range(0, V, BLOCK_V):
            idx = start + offs
            msk = idx < V
            bad, m, cand = check_probs_tile(row, idx, msk)
            n_bad += bad
            mass += m
            tl.store(dst + idx, tl.load(row + idx, mask=msk, other=0.0), mask=msk)
        ok = (n_bad == 0) & (mass > 0) & (mass <= P_CHECK_MAX)
    else:
        ok, stats = row_stats(row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
        if ok:
            for start in range(0, V, BLOCK_V):
                idx = start + offs
                msk = idx < V
                tl.store(dst + idx, probs_tile(row, idx, msk, inv_t, stats, False), mask=msk)
    return ok


@triton.jit
def _at(vec, k, OUT_P2: tl.constexpr):
    """vec[k] of a register vector indexed by level."""
    return tl.sum(tl.where(tl.arange(0, OUT_P2) == k, vec, 0), axis=0)


@triton.jit
def _child_weight(rho, m, s):
    """min(rho * m / s, 1) with the product rounded first (reference child_weight)."""
    t = rho * m
    safe = tl.where(s > 0.0, s, 1.0)
    return tl.where((t > 0.0) & (t >= s), 1.0, tl.where((t > 0.0) & (s > 0.0), t / safe, 0.0))


@triton.jit
def _delete(p_row, q_row, r_row, qw_row, V, y, rho, A, Q, updated, removed,
            POINT_MASS: tl.constexpr, BLOCK_V: tl.constexpr):
    """The parent's rows after deleting its child of token y (reference delete_update):
    R = trunc(max(rho * m - s, 0) * 2**60) in place -> (A', rho')."""
    offs = tl.arange(0, BLOCK_V)
    ia = 1.0 / tl.where(updated, A, 1).to(tl.float64)
    iq = 1.0 / tl.where(removed, Q, 1).to(tl.float64)
    total = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        if updated:
            m = tl.load(r_row + idx, mask=msk, other=0).to(tl.float64) * ia
        else:
            m = tl.load(p_row + idx, mask=msk, other=0.0).to(tl.float64)
        if POINT_MASS:
            s = tl.where(idx == y, 1.0, 0.0).to(tl.float64)
        elif removed:
            s = tl.load(qw_row + idx, mask=msk, other=0).to(tl.float64) * iq
        else:
            s = tl.load(q_row + idx, mask=msk, other=0.0).to(tl.float64)
        pd = m * rho
        d = tl.where(pd > s, pd - s, 0.0)
        w = tl.where(msk, (d * W_SCALE).to(tl.int64), 0)
        tl.store(r_row + idx, w, mask=msk)
        total += tl.sum(w, axis=0)
    z = total.to(tl.float64) * (1.0 / W_SCALE)
    den = z + (1.0 - rho)
    return total, tl.where(den > 0.0, z / tl.where(den > 0.0, den, 1.0), 1.0)


@triton.jit(do_not_specialize=["t_stride", "q_stride", "N", "V", "D"])
def _verify_traversal_kernel(
    t_ptr, t_stride, ids_ptr, par_ptr, n_nodes_ptr, q_ptr, q_stride, inv_t_ptr, top_k_ptr,
    top_p_ptr, min_p_ptr, seed_ptr, offset_ptr,
    p_ptr,             # [B, D + 1, V] float32 scratch: each level's target row
    qf_ptr,            # [B, D + 1, V] float32 scratch: each level's draft row
    r_ptr,             # [B, D + 1, V] int64 scratch: each level's residual R
    qw_ptr,            # [B, D + 1, V] int64 scratch: each level's draft weights Qw
    tok_ptr, nacc_ptr, nodes_ptr, valid_ptr, N, V, D,
    T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, WOR: tl.constexpr, BLOCK_V: tl.constexpr,
    N_P2: tl.constexpr, OUT_P2: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    base = b * N
    req = load_params(b, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr) + (
        tl.load(seed_ptr + b), tl.load(offset_ptr + b))
    inv_t, top_k, top_p, min_p, seed, offset = req
    ok, child, par, toks = _tree_shape(par_ptr, ids_ptr, base, tl.load(n_nodes_ptr + b), N, V,
                                       D, N_P2)
    nodes = tl.arange(0, N_P2)
    pos = tl.arange(0, OUT_P2)
    out_tok = tl.full([OUT_P2], -1, tl.int32)
    out_node = tl.full([OUT_P2], -1, tl.int32)
    j = tl.full([], 0, tl.int32)
    token = tl.full([], -1, tl.int32)
    if ok & request_ok(req, T_PROBS):
        if inv_t == 0.0:                               # greedy: section 11's walk
            c = tl.full([], 0, tl.int32)
            walking = tl.full([], True, tl.int1)
            while walking:
                nxt, token = _greedy_node(t_ptr + (base + c) * t_stride, V,
                                          child & (par == c), toks, T_PROBS, BLOCK_V, N_P2)
                if nxt >= 0:
                    out_tok = tl.where(pos == j, token, out_tok)
                    out_node = tl.where(pos == j, nxt, out_node)
                    j += 1
                    c = nxt
                else:
                    walking = False
        else:
            lv = (b * (D + 1)) * V                     # level k's rows at lv + k * V
            # per-level registers
            L_c = tl.zeros([OUT_P2], tl.int32)
            L_rho = tl.full([OUT_P2], 1.0, tl.float64)
            L_A = tl.zeros([OUT_P2], tl.int64)
            L_Q = tl.zeros([OUT_P2], tl.int64)
            L_upd = tl.zeros([OUT_P2], tl.int32)
            L_rem = tl.zeros([OUT_P2], tl.int32)
            L_live = tl.zeros([OUT_P2], tl.int32)
            L_pok = tl.zeros([OUT_P2], tl.int32)
            L_cur = tl.zeros([OUT_P2], tl.int32)
            L_y = tl.zeros([OUT_P2], tl.int32)
            k = tl.full([], 0, tl.int32)
            x_new = tl.full([], 0, tl.int32)          # the node entering level k
            rho_new = tl.full([], 1.0, tl.float64)
            entering = tl.full([], True, tl.int1)
            walking = tl.full([], True, tl.int1)
            while walking:
                if entering:                           # push x_new at level k
                    tl.debug_barrier()
                    row_p = p_ptr + lv + k * V
                    pok = _materialize(t_ptr + (base + x_new) * t_stride, row_p, V, req,
                                       T_PROBS, BLOCK_V)
                    has_kids = tl.max((child & (par == x_new)).to(tl.int32), axis=0) > 0
                    live = tl.full([], True, tl.int1)
                    Q = tl.full([], 0, tl.int64)
                    if Q_MODE != 0:
                        if pok & has_kids:
                            row_q = qf_ptr + lv + k * V
                            qok = _materialize(q_ptr + (base + x_new) * q_stride, row_q, V,
                                               req, Q_MODE == 1, BLOCK_V)
                            tl.debug_barrier()
                            if qok:
                                Q, qok = store_weights(row_q, qw_ptr + lv + k * V, V, inv_t,
                                                       no_stats(), True, BLOCK_V)
                            live = qok & (Q > 0)
                    sel = pos == k
                    L_c = tl.where(sel, x_new, L_c)
                    L_rho = tl.where(sel, rho_new, L_rho)
                    L_A = tl.where(sel, 0, L_A)
                    L_Q = tl.where(sel, Q, L_Q)
                    L_upd = tl.where(sel, 0, L_upd)
                    L_rem = tl.where(sel, 0, L_rem)
                    L_live = tl.where(sel, live.to(tl.int32), L_live)
                    L_pok = tl.where(sel, pok.to(tl.int32), L_pok)
                    L_cur = tl.where(sel, x_new, L_cur)
                    entering = False
                    tl.debug_barrier()
                c = _at(L_c, k, OUT_P2)
                rho = _at(L_rho, k, OUT_P2)
                cur = _at(L_cur, k, OUT_P2)
                open_ = (_at(L_pok, k, OUT_P2) != 0) & (_at(L_live, k, OUT_P2) != 0)
                kids = child & (par == c) & (nodes > cur) & open_
                if WOR:                                # a token an earlier sibling had
                    sib = child & (par == c)
                    for i in range(0, N_P2):
                        ti = tl.sum(tl.where(nodes == i, toks, 0), axis=0)
                        si = tl.sum(tl.where(nodes == i, sib.to(tl.int32), 0), axis=0) != 0
                        kids = kids & ~(si & (nodes > i) & (toks == ti))
                x = tl.min(tl.where(kids, nodes, NO_INDEX), axis=0)
                if x < NO_INDEX:                       # visit x
                    y = tl.sum(tl.where(nodes == x, toks, 0), axis=0)
                    A = _at(L_A, k, OUT_P2)
                    Q = _at(L_Q, k, OUT_P2)
                    upd = _at(L_upd, k, OUT_P2) != 0
                    if upd:
                        m = tl.load(r_ptr + lv + k * V + y).to(tl.float64) * (
                            1.0 / A.to(tl.float64))
                    else:
                        m = tl.load(p_ptr + lv + k * V + y).to(tl.float64)
                    if Q_MODE == 0:
                        s = tl.full([], 1.0, tl.float64)
                    elif _at(L_rem, k, OUT_P2) != 0:
                        s = tl.load(qw_ptr + lv + k * V + y).to(tl.float64) * (
                            1.0 / Q.to(tl.float64))
                    else:
                        s = tl.load(qf_ptr + lv + k * V + y).to(tl.float64)
                    L_cur = tl.where(pos == k, x, L_cur)
                    L_y = tl.where(pos == k, y, L_y)
                    out_tok = tl.where(pos == k, y, out_tok)
                    out_node = tl.where(pos == k, x, out_node)
                    rho_new = _child_weight(rho, m, s)
                    x_new = x
                    k += 1
                    entering = True
                else:                                  # c is a leaf: its test
                    w0, w1 = stream_words(seed, offset, c - 1, 0)
                    if (c == 0) | (w0.to(tl.float64) * U32_TO_UNIT < rho):
                        walking = False
                    else:
                        k -= 1
                        tl.debug_barrier()
                        y = _at(L_y, k, OUT_P2)
                        Q = _at(L_Q, k, OUT_P2)
                        rem = _at(L_rem, k, OUT_P2) != 0
                        A, rho2 = _delete(p_ptr + lv + k * V, qf_ptr + lv + k * V,
                                          r_ptr + lv + k * V, qw_ptr + lv + k * V, V, y,
                                          _at(L_rho, k, OUT_P2), _at(L_A, k, OUT_P2), Q,
                                          _at(L_upd, k, OUT_P2) != 0, rem, Q_MODE == 0,
                                          BLOCK_V)
                        tl.debug_barrier()
                        live = A > 0
                        if WOR & (Q_MODE != 0) & live:
                            qw_y = tl.load(qw_ptr + lv + k * V + y)
                            tl.debug_barrier()
                            tl.store(qw_ptr + lv + k * V + y, tl.full([], 0, tl.int64))
                            Q = Q - qw_y
                            live = Q > 0
                            rem = rem | live
                            tl.debug_barrier()
                        sel = pos == k
                        L_A = tl.where(sel, A, L_A)
                        L_rho = tl.where(sel, rho2, L_rho)
                        L_upd = tl.where(sel, 1, L_upd)
                        L_Q = tl.where(sel, Q, L_Q)
                        L_rem = tl.where(sel, rem.to(tl.int32), L_rem)
                        L_live = tl.where(sel, live.to(tl.int32), L_live)
            # level k accepted: the path's tokens are out_tok[:k], then the draw at depth k
            j = k
            if _at(L_pok, k, OUT_P2) != 0:
                u_lo, u_hi = stream_words(seed, offset, k, TAG_SAMPLE)
                A = _at(L_A, k, OUT_P2)
                r_row = r_ptr + lv + k * V
                if (_at(L_upd, k, OUT_P2) == 0) | (A == 0):   # the bonus: trunc(p * 2**60)
                    tl.debug_barrier()
                    A, _ = store_weights(p_ptr + lv + k * V, r_row, V, inv_t,
                                         no_stats(), True, BLOCK_V)
                    tl.debug_barrier()
                token = find_weight(r_row, V, mulhi_u64(u_lo, u_hi, A), BLOCK_V)
    row = tl.where(pos < j, out_tok, tl.where(pos == j, token, -1))
    tl.store(tok_ptr + b * (D + 1) + pos, row, mask=pos < D + 1)
    tl.store(nodes_ptr + b * D + pos, tl.where(pos < j, out_node, -1), mask=pos < D)
    tl.store(nacc_ptr + b, j)
    tl.store(valid_ptr + b, token >= 0)


def verify_traversal(target, target_is_probs, node_ids, parents, num_nodes, draft,
                     draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_depth,
                     method="traversal"):
    """Traversal verification on the canonical arguments of ``verify_tree.verify_tree`` ->
    (token_ids, num_accepted, accepted_nodes, valid).  Reads no tensor value on the host;
    the scratch rows are allocated here (4 x [B, max_depth + 1, V], 24 bytes per entry)."""
    B, N, V, D, outs, q, q_mode = tree_launch(target, node_ids, draft, draft_is_probs, max_depth)
    tok, nacc, nodes, valid = outs
    if B == 0:
        return outs
    dev = target.device
    pf = torch.empty((B, D + 1, V), dtype=torch.float32, device=dev)
    qf = pf if draft is None else torch.empty_like(pf)
    r = torch.empty((B, D + 1, V), dtype=torch.int64, device=dev)
    qw = r if draft is None else torch.empty_like(r)
    _verify_traversal_kernel[(B,)](
        target, target.stride(0), node_ids, parents, num_nodes, q, q.stride(0), inv_temp,
        top_k, top_p, min_p, seed, offset, pf, qf, r, qw, tok, nacc, nodes, valid, N, V, D,
        T_PROBS=bool(target_is_probs), Q_MODE=q_mode, WOR=method == "traversal",
        **tree_sizes(N, D, V, dev), **launch_opts(dev))
    return tok, nacc, nodes, valid
