"""Tree verification (reference section 11): one program per request walks its draft tree
from the root, trying the children of the current node in rank order (node order) against
the integer residual, and draws the correction / bonus token where every child is rejected.

The tree's shape (presence, depth) is computed in registers over the request's N nodes
(``N_P2`` lanes; a node's depth by walking up its parents, which the shape check has proved
strictly decreasing).  The residual ``R`` and the draft weights ``Qw`` of the current node
live in two int64 rows of global scratch per request ([B, V] each, allocated by the
launcher), because the residual must survive across the sibling trials: see
``_tree_rows.py``.  Greedy requests read no draft and no scratch.  Malformed requests
(section 8 and the tree rules of section 11) read no target or draft row.
"""
import torch
import triton
import triton.language as tl

from ._common import (NO_INDEX, TAG_SAMPLE, U32_TO_UNIT, draw_row, logits_scan, mulhi_u64,
                      probs_check_argmax, request_ok, row_stats, stream_words)
from ._launch import launch_opts, tree_launch, tree_sizes
from ._tree_rows import find_weight, store_weights, update_residual
from ._walk_common import load_params, no_stats


@triton.jit
def _tree_shape(par_ptr, ids_ptr, base, n_nodes, N, V, max_depth, N_P2: tl.constexpr):
    """-> (ok, child, par, toks): ``ok`` the tree is well formed (num_nodes in [1, N],
    parent[0] == -1, parent[n] in [-1, n) for 1 <= n < num_nodes, every present node's token
    in [0, V) and depth <= max_depth); ``child`` [N_P2] marks the present nodes n >= 1,
    ``par`` / ``toks`` [N_P2] their parents and tokens."""
    nodes = tl.arange(0, N_P2)
    in_rows = nodes < N
    par = tl.load(par_ptr + base + nodes, mask=in_rows, other=-1)
    toks = tl.load(ids_ptr + base + nodes, mask=in_rows, other=0)
    in_tree = in_rows & (nodes >= 1) & (nodes < n_nodes)
    root_par = tl.sum(tl.where(nodes == 0, par, 0), axis=0)
    ok = (n_nodes >= 1) & (n_nodes <= N) & (root_par == -1)
    bad_par = in_tree & ((par < -1) | (par >= nodes))
    ok = ok & (tl.max(bad_par.to(tl.int32), axis=0) == 0)
    # depth: walk up (parents strictly decrease once ok); a -1 on the way: absent
    cur = tl.where(in_tree & ok, par * 0 + nodes, 0)
    depth = tl.zeros([N_P2], tl.int64)
    absent = (nodes != 0) & (~in_tree)
    while tl.max(cur, axis=0) > 0:
        up = tl.load(par_ptr + base + cur, mask=cur > 0, other=0)
        absent = absent | ((cur > 0) & (up == -1))
        depth += (cur > 0).to(tl.int64)
        cur = tl.where(up > 0, up, 0)
    child = (nodes >= 1) & (~absent)
    bad = child & ((toks < 0) | (toks >= V) | (depth > max_depth))
    ok = ok & (tl.max(bad.to(tl.int32), axis=0) == 0)
    return ok, child, par, toks


@triton.jit
def _greedy_node(t_row, V, kids, toks, T_PROBS: tl.constexpr, BLOCK_V: tl.constexpr,
                 N_P2: tl.constexpr):
    """Greedy request at a node -> (next, token): the first child (rank order) whose token
    is the row's lowest-index argmax (next = -1 if none; token: the argmax, -1 if the row
    is invalid)."""
    if T_PROBS:
        row_ok, arg = probs_check_argmax(t_row, V, BLOCK_V)
    else:
        row_ok, x_max, arg = logits_scan(t_row, V, 1.0, BLOCK_V)
    nodes = tl.arange(0, N_P2)
    nxt = tl.min(tl.where(kids & (toks == arg) & row_ok, nodes, NO_INDEX), axis=0)
    return tl.where(nxt < NO_INDEX, nxt, -1), tl.where(row_ok, arg, -1)


@triton.jit
def _sampled_node(t_row, q_row, r_row, qw_row, V, j, kids, toks, req, T_PROBS: tl.constexpr,
                  Q_MODE: tl.constexpr, RSD: tl.constexpr, BLOCK_V: tl.constexpr,
                  N_P2: tl.constexpr):
    """Sampled request at a node of depth j -> (next, token): the accepted child and its
    token, or next = -1 and the token drawn after every child was rejected (-1: the target
    row is invalid)."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    nodes = tl.arange(0, N_P2)
    tl.debug_barrier()                     # the previous node's reads of the scratch rows
    A = tl.full([], 0, tl.int64)
    if T_PROBS:
        t_stats = no_stats()
        A, row_ok = store_weights(t_row, r_row, V, inv_t, t_stats, True, BLOCK_V)
    else:
        row_ok, t_stats = row_stats(t_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
        if row_ok:
            A, _ = store_weights(t_row, r_row, V, inv_t, t_stats, False, BLOCK_V)
    nxt = tl.full([], -1, tl.int32)
    token = tl.full([], -1, tl.int32)
    if row_ok:
        has_kids = tl.max(kids.to(tl.int32), axis=0) > 0
        Q = tl.full([], 0, tl.int64)
        if Q_MODE != 0:
            if has_kids:                   # the draft row is read only for a node with children
                if Q_MODE == 2:
                    q_ok, q_stats = row_stats(q_row, V, inv_t, top_k, top_p, min_p, BLOCK_V)
                    if q_ok:
                        Q, _ = store_weights(q_row, qw_row, V, inv_t, q_stats, False, BLOCK_V)
                else:
                    Q, q_ok = store_weights(q_row, qw_row, V, inv_t, no_stats(), True, BLOCK_V)
                    Q = tl.where(q_ok, Q, 0)
        tl.debug_barrier()                 # R and Qw written before the trials read them
        rank = tl.full([], 0, tl.int32)
        last = tl.full([], 0, tl.int32) - 1
        trying = has_kids
        while trying:
            x = tl.min(tl.where(kids & (nodes > last), nodes, NO_INDEX), axis=0)
            if x == NO_INDEX:
                trying = False
            else:
                y = tl.sum(tl.where(nodes == x, toks, 0), axis=0)
                usable = A > 0
                if Q_MODE != 0:
                    usable = usable & (Q > 0)
                if RSD:                    # a token an earlier sibling had: skipped
                    dup = tl.max((kids & (nodes < x) & (toks == y)).to(tl.int32), axis=0)
                    usable = usable & (dup == 0)
                if usable:
                    w0, w1 = stream_words(seed, offset, j, 2 * rank)
                    u = w0.to(tl.float64) * U32_TO_UNIT
                    rn = tl.load(r_row + y).to(tl.float64) * (1.0 / A.to(tl.float64))
                    if Q_MODE == 0:
                        qn = tl.full([], 1.0, tl.float64)
                        qw_y = tl.full([], 0, tl.int64)
                    else:
                        qw_y = tl.load(qw_row + y)
                        qn = qw_y.to(tl.float64) * (1.0 / Q.to(tl.float64))
                    if u * qn < rn:
                        nxt = x
                        token = y.to(tl.int32)
                        trying = False
                    else:
                        tl.debug_barrier()             # every lane read R(y) and Qw(y)
                        A = update_residual(r_row, qw_row, V, y, A, Q, Q_MODE, BLOCK_V)
                        if RSD:
                            if Q_MODE != 0:            # y leaves the draft
                                Q = Q - qw_y
                                tl.debug_barrier()
                                tl.store(qw_row + y, tl.full([], 0, tl.int64))
                        tl.debug_barrier()             # R' (and Qw') before the next trial
                last = x
                rank += 1
        if nxt < 0:                        # every child rejected (or none): the draw at j
            u_lo, u_hi = stream_words(seed, offset, j, TAG_SAMPLE)
            if A > 0:
                token = find_weight(r_row, V, mulhi_u64(u_lo, u_hi, A), BLOCK_V)
            else:
                token = draw_row(t_row, t_row, V, -1, u_lo, u_hi, inv_t, t_stats, True, None,
                                 T_PROBS, 0, BLOCK_V)
    return nxt, token


@triton.jit(do_not_specialize=["t_stride", "q_stride", "N", "V", "D"])
def _verify_tree_kernel(
    t_ptr,             # [B * N, V] target logits (float32 / bfloat16 / float16) or float32 probs
    t_stride,          # elements between consecutive target rows
    ids_ptr,           # [B, N] int64 token of every node (the root's is ignored)
    par_ptr,           # [B, N] int64 parent of every node (-1: root / absent)
    n_nodes_ptr,       # [B] int64 nodes of each request
    q_ptr,             # [B * N, V] draft probs (Q_MODE 1) or logits (Q_MODE 2); t_ptr if Q_MODE 0
    q_stride,          # elements between consecutive draft rows
    inv_t_ptr,         # [B] float32 host 1/T, 0 for greedy requests
    top_k_ptr,         # [B] int64 top-k (0: off)
    top_p_ptr,         # [B] float32 top-p (1: off)
    min_p_ptr,         # [B] float32 min-p (0: off)
    seed_ptr,          # [B] int64 Philox key
    offset_ptr,        # [B] int64 Philox counter words 2-3
    r_ptr,             # [B, V] int64 scratch: the residual weights R of the current node
    qw_ptr,            # [B, V] int64 scratch: the draft weights Qw (unused with Q_MODE 0)
    tok_ptr,           # [B, D + 1] int32 out: accepted tokens, the drawn token, then -1
    nacc_ptr,          # [B] int32 out: num_accepted
    nodes_ptr,         # [B, D] int32 out: node of each accepted token, then -1
    valid_ptr,         # [B] bool out
    N,                 # nodes per request
    V,                 # vocabulary size
    D,                 # max_depth
    T_PROBS: tl.constexpr,   # target holds probabilities (else logits)
    Q_MODE: tl.constexpr,    # 0: point-mass drafts, 1: draft probs, 2: draft logits
    RSD: tl.constexpr,       # method "rsd" (else "mss")
    BLOCK_V: tl.constexpr,   # vocabulary tile (power of 2)
    N_P2: tl.constexpr,      # power of 2 >= N
    OUT_P2: tl.constexpr,    # power of 2 >= D + 1
):
    b = tl.program_id(0).to(tl.int64)
    base = b * N
    req = load_params(b, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr) + (
        tl.load(seed_ptr + b), tl.load(offset_ptr + b))
    ok, child, par, toks = _tree_shape(par_ptr, ids_ptr, base, tl.load(n_nodes_ptr + b), N, V,
                                       D, N_P2)
    pos = tl.arange(0, OUT_P2)
    out_tok = tl.full([OUT_P2], -1, tl.int32)
    out_node = tl.full([OUT_P2], -1, tl.int32)
    j = tl.full([], 0, tl.int32)
    token = tl.full([], -1, tl.int32)
    if ok & request_ok(req, T_PROBS):
        r_row = r_ptr + b * V
        qw_row = qw_ptr + b * V
        c = tl.full([], 0, tl.int32)
        walking = tl.full([], True, tl.int1)
        while walking:
            t_row = t_ptr + (base + c) * t_stride
            kids = child & (par == c)
            if req[0] == 0.0:
                nxt, token = _greedy_node(t_row, V, kids, toks, T_PROBS, BLOCK_V, N_P2)
            else:
                nxt, token = _sampled_node(t_row, q_ptr + (base + c) * q_stride, r_row, qw_row,
                                           V, j, kids, toks, req, T_PROBS, Q_MODE, RSD,
                                           BLOCK_V, N_P2)
            if nxt >= 0:
                out_tok = tl.where(pos == j, token, out_tok)
                out_node = tl.where(pos == j, nxt, out_node)
                j += 1
                c = nxt
            else:
                walking = False
    row = tl.where(pos < j, out_tok, tl.where(pos == j, token, -1))
    tl.store(tok_ptr + b * (D + 1) + pos, row, mask=pos < D + 1)
    tl.store(nodes_ptr + b * D + pos, out_node, mask=pos < D)
    tl.store(nacc_ptr + b, j)
    tl.store(valid_ptr + b, token >= 0)


def verify_tree(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
                inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method="rsd"):
    """Tree verification on the canonical arguments (contiguous [B, N] node ids / parents,
    [B] tensors) -> (token_ids [B, max_depth + 1] int32, num_accepted [B] int32,
    accepted_nodes [B, max_depth] int32, valid [B] bool).  Reads no tensor value on the
    host; the scratch rows are allocated here ([B, V] int64 each)."""
    B, N, V, D, outs, q, q_mode = tree_launch(target, node_ids, draft, draft_is_probs, max_depth)
    tok, nacc, nodes, valid = outs
    if B == 0:
        return outs
    dev = target.device
    r = torch.empty((B, V), dtype=torch.int64, device=dev)
    qw = r if draft is None else torch.empty((B, V), dtype=torch.int64, device=dev)
    _verify_tree_kernel[(B,)](
        target, target.stride(0), node_ids, parents, num_nodes, q, q.stride(0), inv_temp,
        top_k, top_p, min_p, seed, offset, r, qw, tok, nacc, nodes, valid, N, V, D,
        T_PROBS=bool(target_is_probs), Q_MODE=q_mode, RSD=method == "rsd",
        **tree_sizes(N, D, V, dev), **launch_opts(dev))
    return tok, nacc, nodes, valid
