"""Greedy multi-path block verification, GBV (reference section 15, ``reference/gbv.py``):
two Triton kernels with a few exact torch ops between them, no host synchronisation.

What runs where (one call):

1. ``_gbv_path_kernel`` (Triton, one program per request): the tree checks of section 11
   (``verify_tree._tree_shape``) and section 15's shape (a root with K chains of one length
   L: every chain's node count and depth are L; point-mass drafts with K >= 2 are
   malformed), then

   * malformed requests: the output row (-1, 0, -1, False), done;
   * greedy requests: section 11's greedy walk (``verify_tree._greedy_node``), done;
   * sampled requests: the path selection (``select_path``: chain k against the best one at
     the first depth where their tokens differ, ranked in the order of best's node above it
     by ``rank_below``'s cross products; the node's rows are transformed for that compare
     and an invalid p or unusable q orders by id), then along the selected path Y, positions
     ``j = 0..L`` in order up to the first cut (section 9's cuts: an invalid target row, an
     unusable draft row), the rows of each position materialised in scratch: ``P[b, j]``
     (float32: the transform of the logits, or the probabilities, checked), and for
     ``j < L`` with draft rows ``Qf[b, j]`` (float32 q), ``Qw[b, j] = trunc(q * 2**60)``
     (int64), their sum ``Q`` and the sort key ``KEY[b, j] = float64(p) / float64(q)`` (+inf
     where q = 0).  Y's tokens and nodes go to the output rows; ``(mode, e, end_ok, K)`` to a
     [B, 4] int64 state row.
2. torch, on the device (only with draft rows): ``torch.sort(KEY, stable=True)`` (the rank
   order: section 15's freedom, ``(q = 0, p / q, id)`` sorted ascending, ties by id through
   the stable sort), ``Qw`` gathered in that order, an int64 ``cumsum_`` and a
   ``scatter_`` back to vocabulary order: ``Fw[b, j, t]`` = the integer mass of the tokens
   ranked ``<= t``.  Integer sums and data movement: exact, in any order, sync-free.  (The
   float64 quotient is one correctly rounded division per entry in kernel 1.)
3. ``_gbv_block_kernel`` (Triton, one program per sampled request; the others return at
   once): section 9 on Y with ``q~``.  For ``j < e``: ``q~_j`` tile by tile from ``Qf``,
   ``Fw``, ``Qw`` and the rescaled ``(a, b)`` (``skew_row``: ``X = a + b F``,
   ``Y = a + b Fm``, ``S`` by the fixed recurrence, ``q~ = (q S) (1 / Z)``; K = 1 reads no
   ``Fw``: ``q~ = q``), ``S_j`` = the integer mass of ``trunc(max(rho p - q~, 0) * 2**60)``
   and ``h_j`` (``j >= 1``), the coin, ``rho_{j+1}`` from ``q~_j(y)``, the next ``(a, b)``
   (``skew_step``); then ``h_e = rho_e``, ``tau``, and section 5's draw at ``(tau, tag 1)``
   over ``D_tau`` (recomputed from ``rho_tau``, ``(a, b)_tau``; ``p_tau`` when it sums to 0)
   or over ``p_e`` at ``tau = e`` (an invalid cut: -1).  ``q~`` is never stored: every pass
   recomputes it from the same numbers, so it is the same float64 each time.

Launches per call: 2 Triton kernels, plus 4 torch ops (sort, gather, cumsum, scatter) when
there are draft rows (point-mass drafts have K <= 1: ``q~ = q``, no ranking).

Scratch, allocated per call (D = max_depth; the draft-side rows have ``max(D, 1)``
positions): ``P`` [B, D + 1, V] float32; with draft rows ``Qf`` [B, D, V] float32, ``Qw``
[B, D, V] int64 and ``KEY`` [B, D, V] float64 (reused in place as ``Fw`` int64 after the
sort), ``Q`` [B, D] int64, the [B, 4] state: 24 bytes per (request, position, token) held
across the launches (4 with point-mass drafts), plus the sort's temporaries (its values and
indices, then the gathered prefix sums: 16 bytes at a time, and torch's sort workspace).  For
example B = 64, D = 4, V = 128256: 0.8 GB held, about 1.3 GB at the sort.  Why materialise:
the ranking needs a device sort between the path selection and the block recursion, so the
rows of Y are transformed once and kept (as the traversal kernel keeps its stack's rows)
instead of transformed again in every pass of kernel 2.  Rows of positions past a request's
cut (and of malformed or greedy requests) are sorted but never read.

Every float operation is the reference's, in its order, correctly rounded and unfused
(``enable_fp_fusion=False``).  Kernel 1 never reads back what it stores (kernel 2 reads the
scratch after the launch boundary); kernel 2 reads Y's tokens and nodes from the output rows
before a ``tl.debug_barrier()`` and overwrites them after it.
"""
import torch
import triton
import triton.language as tl

from ._block_rows import next_rho, stop_probability
from ._common import (NO_INDEX, POS_INF, TAG_SAMPLE, W_SCALE, accept_uniform, mulhi_u64,
                      prob_at, probs_tile, request_ok, stream_words)
from ._launch import launch_opts, tree_launch, tree_sizes
from ._walk_common import load_params, no_stats, target_row
from .verify_tree import _greedy_node, _tree_shape

MODE_DONE = tl.constexpr(0)        # state: outputs written by kernel 1 (malformed / greedy)
MODE_BLOCK = tl.constexpr(1)       # state: a sampled request, finished by kernel 2


@triton.jit
def _at(vec, k, OUT_P2: tl.constexpr):
    """vec[k] of a register vector indexed by position."""
    return tl.sum(tl.where(tl.arange(0, OUT_P2) == k, vec, 0), axis=0)


@triton.jit
def _depths(par_ptr, base, child, N_P2: tl.constexpr):
    """(depth, first) [N_P2] of the present nodes: the depth (root 0) and the depth-1
    ancestor (the chain's first node), by walking up the parents (strictly decreasing once
    the tree is well formed: ``child`` is all false otherwise)."""
    nodes = tl.arange(0, N_P2)
    cur = tl.where(child, nodes.to(tl.int64), 0)
    depth = tl.zeros([N_P2], tl.int64)
    first = tl.zeros([N_P2], tl.int64)
    while tl.max(cur, axis=0) > 0:
        up = tl.load(par_ptr + base + cur, mask=cur > 0, other=0)
        depth += (cur > 0).to(tl.int64)
        first = tl.where(cur > 0, cur, first)
        cur = tl.where(up > 0, up, 0)
    return depth, first


@triton.jit
def _ranks_below(p_ok, q_ok, p_a, p_b, q_a, q_b, a, b):
    """``rank_below``: token a ranks strictly below token b (a != b) at a node with rows
    p, q: q = 0 ranks above q > 0; else the float64 cross products (exact); ties, and a node
    whose p or q cannot be used, by id."""
    by_id = a < b
    za = ~(q_a > 0.0)
    zb = ~(q_b > 0.0)
    lhs = p_a.to(tl.float64) * q_b.to(tl.float64)
    rhs = p_b.to(tl.float64) * q_a.to(tl.float64)
    res = tl.where(za != zb, zb, tl.where((~za) & (lhs != rhs), lhs < rhs, by_id))
    return tl.where(p_ok & q_ok, res, by_id)


@triton.jit
def _replaces(t_ptr, t_stride, q_ptr, q_stride, base, n, s, t, V, req, T_PROBS: tl.constexpr,
              Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """The candidate's token t replaces best's token s at best's node n (``replaces``):
    t ranks strictly above s in n's order.  n's target row is transformed (checked); its
    draft row is read only if the target row is valid."""
    inv_t, top_k, top_p, min_p, seed, offset = req
    t_row = t_ptr + (base + n) * t_stride
    q_row = q_ptr + (base + n) * q_stride
    p_ok, t_stats = target_row(t_row, V, req, T_PROBS, BLOCK_V)
    q_ok = tl.full([], False, tl.int1)
    q_stats = no_stats()
    p_s = tl.full([], 0.0, tl.float32)
    p_t = tl.full([], 0.0, tl.float32)
    q_s = tl.full([], 0.0, tl.float32)
    q_t = tl.full([], 0.0, tl.float32)
    if p_ok:
        q_ok, q_stats = target_row(q_row, V, req, Q_MODE == 1, BLOCK_V)
        p_s = prob_at(t_row, s, inv_t, t_stats, T_PROBS)
        p_t = prob_at(t_row, t, inv_t, t_stats, T_PROBS)
        if q_ok:
            q_s = prob_at(q_row, s, inv_t, q_stats, Q_MODE == 1)
            q_t = prob_at(q_row, t, inv_t, q_stats, Q_MODE == 1)
    return _ranks_below(p_ok, q_ok, p_s, p_t, q_s, q_t, s, t)


@triton.jit
def _select(t_ptr, t_stride, q_ptr, q_stride, base, child, par, toks, depth, first, L, V,
            req, T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr,
            N_P2: tl.constexpr):
    """``select_path``: the first node of the selected chain (NO_INDEX when K = 0).  Chains
    in increasing order of their first nodes; chain k replaces best iff at the first depth
    where their tokens differ its token ranks above best's, in the order of best's node one
    depth above (the root at depth 1)."""
    nodes = tl.arange(0, N_P2)
    roots = child & (par == 0)
    best = tl.min(tl.where(roots, nodes, NO_INDEX), axis=0)
    cand = best
    scanning = best < NO_INDEX
    while scanning:
        cand = tl.min(tl.where(roots & (nodes > cand), nodes, NO_INDEX), axis=0)
        if cand == NO_INDEX:
            scanning = False
        else:
            in_b = child & (first == best)
            in_k = child & (first == cand)
            d = tl.full([], 1, tl.int64)
            n = tl.full([], 0, tl.int64)          # best's node at depth d - 1
            s = tl.full([], 0, tl.int64)
            t = tl.full([], 0, tl.int64)
            differs = tl.full([], False, tl.int1)
            walking = L >= 1
            while walking:
                s = tl.sum(tl.where(in_b & (depth == d), toks, 0), axis=0)
                t = tl.sum(tl.where(in_k & (depth == d), toks, 0), axis=0)
                if s != t:
                    differs = True
                    walking = False
                else:
                    n = tl.sum(tl.where(in_b & (depth == d), nodes, 0), axis=0).to(tl.int64)
                    d += 1
                    walking = d <= L
            if differs:
                if _replaces(t_ptr, t_stride, q_ptr, q_stride, base, n, s, t, V, req,
                             T_PROBS, Q_MODE, BLOCK_V):
                    best = cand
    return best


@triton.jit
def _store_rows(t_row, q_row, p_dst, q_dst, w_dst, key_dst, V, inv_t, t_stats, q_stats,
                with_q, T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr):
    """One position's rows into scratch: p (float32); with ``with_q`` also q (float32),
    Qw = trunc(q * 2**60) (int64) and the rank key float64(p) / float64(q) (+inf where
    q = 0) -> Q = sum Qw."""
    offs = tl.arange(0, BLOCK_V)
    total = tl.full([], 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        msk = idx < V
        p = probs_tile(t_row, idx, msk, inv_t, t_stats, T_PROBS)
        tl.store(p_dst + idx, p, mask=msk)
        if Q_MODE != 0:
            if with_q:
                q = probs_tile(q_row, idx, msk, inv_t, q_stats, Q_MODE == 1)
                w = tl.where(msk, (q * W_SCALE).to(tl.int64), 0)
                pos = q > 0.0
                key = tl.where(pos, p.to(tl.float64) / tl.where(pos, q, 1.0).to(tl.float64),
                               POS_INF)
                tl.store(q_dst + idx, q, mask=msk)
                tl.store(w_dst + idx, w, mask=msk)
                tl.store(key_dst + idx, key, mask=msk)
                total += tl.sum(w, axis=0)
    return total


@triton.jit(do_not_specialize=["t_stride", "q_stride", "N", "V", "D"])
def _gbv_path_kernel(
    t_ptr, t_stride, ids_ptr, par_ptr, n_nodes_ptr, q_ptr, q_stride, inv_t_ptr, top_k_ptr,
    top_p_ptr, min_p_ptr,
    p_ptr,             # [B, D + 1, V] float32 scratch: p along Y
    qf_ptr,            # [B, D, V] float32 scratch: q along Y (Q_MODE != 0)
    qw_ptr,            # [B, D, V] int64 scratch: trunc(q * 2**60)
    key_ptr,           # [B, D, V] float64 scratch: the rank keys
    qs_ptr,            # [B, D] int64 scratch: Q = sum Qw
    st_ptr,            # [B, 4] int64 state: mode, e, end_ok, K
    tok_ptr, nacc_ptr, nodes_ptr, valid_ptr, N, V, D,
    T_PROBS: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr,
    N_P2: tl.constexpr, OUT_P2: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    base = b * N
    req = load_params(b, inv_t_ptr, top_k_ptr, top_p_ptr, min_p_ptr) + (0, 0)
    inv_t, top_k, top_p, min_p, seed, offset = req
    ok, child, par, toks = _tree_shape(par_ptr, ids_ptr, base, tl.load(n_nodes_ptr + b), N, V,
                                       D, N_P2)
    ok = ok & request_ok(req, T_PROBS)
    child = child & ok
    nodes = tl.arange(0, N_P2)
    pos = tl.arange(0, OUT_P2)
    out_tok = tl.full([OUT_P2], -1, tl.int32)
    out_node = tl.full([OUT_P2], -1, tl.int32)
    j_out = tl.full([], 0, tl.int32)
    token = tl.full([], -1, tl.int32)
    mode = tl.full([], MODE_DONE, tl.int64)
    e = tl.full([], 0, tl.int64)
    end_ok = tl.full([], 0, tl.int64)
    K = tl.full([], 0, tl.int64)
    if ok:
        depth, first = _depths(par_ptr, base, child, N_P2)
        roots = child & (par == 0)
        K = tl.sum(roots.to(tl.int64), axis=0)
        L = tl.max(tl.where(child, depth, 0), axis=0)
        # section 15's shape: every chain holds L nodes and reaches depth L
        shape_ok = tl.full([], True, tl.int1)
        f = tl.full([], -1, tl.int32)
        looking = K > 0
        while looking:
            f = tl.min(tl.where(roots & (nodes > f), nodes, NO_INDEX), axis=0)
            if f == NO_INDEX:
                looking = False
            else:
                in_f = child & (first == f)
                shape_ok = shape_ok & (tl.sum(in_f.to(tl.int64), axis=0) == L) & (
                    tl.max(tl.where(in_f, depth, 0), axis=0) == L)
        if Q_MODE == 0:
            shape_ok = shape_ok & (K <= 1)      # q~ needs the draft rows
        if shape_ok:
            if inv_t == 0.0:                    # greedy: section 11's walk
                c = tl.full([], 0, tl.int32)
                walking = tl.full([], True, tl.int1)
                while walking:
                    nxt, token = _greedy_node(t_ptr + (base + c) * t_stride, V,
                                              child & (par == c), toks, T_PROBS, BLOCK_V,
                                              N_P2)
                    if nxt >= 0:
                        out_tok = tl.where(pos == j_out, token, out_tok)
                        out_node = tl.where(pos == j_out, nxt, out_node)
                        j_out += 1
                        c = nxt
                    else:
                        walking = False
            else:
                mode = tl.full([], MODE_BLOCK, tl.int64)
                best = _select(t_ptr, t_stride, q_ptr, q_stride, base, child, par, toks,
                               depth, first, L, V, req, T_PROBS, Q_MODE, BLOCK_V, N_P2)
                in_y = child & (first == best)
                for dd in range(0, L):           # Y's nodes and tokens by depth
                    sel = in_y & (depth == dd + 1)
                    n_d = tl.sum(tl.where(sel, nodes, 0), axis=0)
                    out_node = tl.where(pos == dd, n_d, out_node)
                    out_tok = tl.where(pos == dd, tl.sum(tl.where(sel, toks, 0), axis=0)
                                       .to(tl.int32), out_tok)
                # positions 0..L of Y up to the first cut: the rows into scratch
                e = L
                end_ok = tl.full([], 1, tl.int64)
                j = tl.full([], 0, tl.int64)
                scanning = tl.full([], True, tl.int1)
                while scanning:
                    n = tl.where(j == 0, 0, _at(out_node, j - 1, OUT_P2)).to(tl.int64)
                    t_row = t_ptr + (base + n) * t_stride
                    q_row = q_ptr + (base + n) * q_stride
                    p_ok, t_stats = target_row(t_row, V, req, T_PROBS, BLOCK_V)
                    if p_ok:
                        has_q = j < L
                        q_ok = tl.full([], True, tl.int1)
                        q_stats = no_stats()
                        if Q_MODE != 0:
                            if has_q:
                                q_ok, q_stats = target_row(q_row, V, req, Q_MODE == 1,
                                                           BLOCK_V)
                        with_q = has_q & q_ok
                        row = b * D + j
                        Q = _store_rows(t_row, q_row, p_ptr + (b * (D + 1) + j) * V,
                                        qf_ptr + row * V, qw_ptr + row * V, key_ptr + row * V,
                                        V, inv_t, t_stats, q_stats, with_q, T_PROBS, Q_MODE,
                                        BLOCK_V)
                        if Q_MODE != 0:
                            if with_q:
                                tl.store(qs_ptr + row, Q)
                        if not has_q:
                            scanning = False
                        elif not q_ok:             # an unusable draft row: a valid cut
                            e = j
                            scanning = False
                        else:
                            j += 1
                    else:                          # an invalid target row: an invalid cut
                        e = j
                        end_ok = tl.full([], 0, tl.int64)
                        scanning = False
    tl.debug_barrier()
    tl.store(st_ptr + b * 4 + 0, mode)
    tl.store(st_ptr + b * 4 + 1, e)
    tl.store(st_ptr + b * 4 + 2, end_ok)
    tl.store(st_ptr + b * 4 + 3, K)
    # sampled requests: Y's tokens and nodes (kernel 2 cuts them at tau and adds the token)
    is_done = mode == MODE_DONE
    row = tl.where(is_done, tl.where(pos < j_out, out_tok, tl.where(pos == j_out, token, -1)),
                   out_tok)
    tl.store(tok_ptr + b * (D + 1) + pos, row, mask=pos < D + 1)
    tl.store(nodes_ptr + b * D + pos, out_node, mask=pos < D)
    tl.store(nacc_ptr + b, j_out)
    tl.store(valid_ptr + b, is_done & (token >= 0))


@triton.jit
def _tile(p_row, q_row, qw_row, fw_row, idx, msk, y, rho, a, bb, iq, iz, K, resid,
          Q_MODE: tl.constexpr):
    """(D, W of p) over a tile of position j: D = trunc(max(rho p - q~, 0) * 2**60)
    (``gbv_residual``; 0 unless ``resid``), W = trunc(p * 2**60)."""
    p = tl.load(p_row + idx, mask=msk, other=0.0)
    w_p = (p * W_SCALE).to(tl.int64)
    w_r = tl.zeros_like(w_p)
    if resid:
        qt = _qtilde_tile(q_row, qw_row, fw_row, idx, msk, y, a, bb, iq, iz, K, Q_MODE)
        pd = p.to(tl.float64) * rho
        w_r = (tl.where(pd > qt, pd - qt, 0.0) * W_SCALE).to(tl.int64)
    return w_r, w_p


@triton.jit
def _qtilde_tile(q_row, qw_row, fw_row, idx, msk, y, a, bb, iq, iz, K, Q_MODE: tl.constexpr):
    """q~ (float64) at the tokens ``idx`` (a tile or one token): ``skew_row`` with
    F = Fw * iq, Fm = (Fw - Qw) * iq, S by the recurrence, (q * S) * (1 / Z)."""
    if Q_MODE == 0:
        q = tl.where(idx == y, 1.0, 0.0).to(tl.float64)
    else:
        q = tl.load(q_row + idx, mask=msk, other=0.0).to(tl.float64)
    s = tl.zeros_like(q) + 1.0
    if Q_MODE != 0:
        if K > 1:
            qw = tl.load(qw_row + idx, mask=msk, other=0)
            fw = tl.load(fw_row + idx, mask=msk, other=0)
            X = a + bb * (fw.to(tl.float64) * iq)
            Yv = a + bb * ((fw - qw).to(tl.float64) * iq)
            yv = tl.zeros_like(q) + 1.0
            for _ in range(1, K):
                yv = yv * Yv
                s = s * X + yv
    return (q * s) * iz


@triton.jit
def _skew_z(a, bb, K):
    """Z = skew_sum(a + b * 1, a + b * 0, K) (float64)."""
    X = a + bb * 1.0
    Yv = a + bb * 0.0
    s = tl.full([], 1.0, tl.float64)
    yv = tl.full([], 1.0, tl.float64)
    for _ in range(1, K):
        yv = yv * Yv
        s = s * X + yv
    return s


@triton.jit(do_not_specialize=["V", "D"])
def _gbv_block_kernel(
    p_ptr, qf_ptr, qw_ptr, fw_ptr, qs_ptr, st_ptr, seed_ptr, offset_ptr,
    tok_ptr, nacc_ptr, nodes_ptr, valid_ptr, V, D,
    Q_MODE: tl.constexpr, BLOCK_V: tl.constexpr, OUT_P2: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    if tl.load(st_ptr + b * 4) == MODE_BLOCK:
        e = tl.load(st_ptr + b * 4 + 1)
        end_ok = tl.load(st_ptr + b * 4 + 2)
        K = tl.load(st_ptr + b * 4 + 3)
        seed = tl.load(seed_ptr + b)
        offset = tl.load(offset_ptr + b)
        pos = tl.arange(0, OUT_P2)
        ys = tl.load(tok_ptr + b * (D + 1) + pos, mask=pos < e, other=0)
        yn = tl.load(nodes_ptr + b * D + pos, mask=pos < e, other=-1)
        offs = tl.arange(0, BLOCK_V)
        rho = tl.full([], 1.0, tl.float64)
        a = tl.full([], 0.0, tl.float64)
        bb = tl.full([], 1.0, tl.float64)
        tau = tl.full([], 0, tl.int64)
        rho_tau = rho
        a_tau = a
        b_tau = bb
        j = tl.full([], 0, tl.int64)
        while j < e:
            y = _at(ys, j, OUT_P2).to(tl.int64)
            row = b * D + j
            p_row = p_ptr + (b * (D + 1) + j) * V
            q_row = qf_ptr + row * V
            qw_row = qw_ptr + row * V
            fw_row = fw_ptr + row * V
            iq = tl.full([], 1.0, tl.float64)
            if Q_MODE != 0:
                iq = 1.0 / tl.load(qs_ptr + row).to(tl.float64)
            iz = 1.0 / _skew_z(a, bb, K)
            if j >= 1:                               # S_j and h_j, the coin at j - 1
                S = tl.full([], 0, tl.int64)
                for start in range(0, V, BLOCK_V):
                    idx = start + offs
                    w_r, w_p = _tile(p_row, q_row, qw_row, fw_row, idx, idx < V, y, rho, a,
                                     bb, iq, iz, K, True, Q_MODE)
                    S += tl.sum(w_r, axis=0)
                if accept_uniform(seed, offset, j - 1) < stop_probability(S, rho):
                    tau = j
                    rho_tau = rho
                    a_tau = a
                    b_tau = bb
            p_y = tl.load(p_row + y)
            qt_y = _qtilde_tile(q_row, qw_row, fw_row, y, y >= 0, y, a, bb, iq, iz, K, Q_MODE)
            rho = next_rho(rho, p_y, qt_y)
            if Q_MODE == 0:
                fm_y = tl.full([], 0.0, tl.float64)
                qn_y = tl.full([], 1.0, tl.float64)
            else:
                qw_y = tl.load(qw_row + y)
                fw_y = tl.zeros_like(qw_y)
                if K > 1:
                    fw_y = tl.load(fw_row + y)
                fm_y = (fw_y - qw_y).to(tl.float64) * iq
                qn_y = qw_y.to(tl.float64) * iq
            na = a + bb * fm_y                       # skew_step
            nb = bb * qn_y
            den = na + nb
            safe = tl.where(den > 0.0, den, 1.0)
            a = tl.where(den > 0.0, na / safe, 1.0)
            bb = tl.where(den > 0.0, nb / safe, 0.0)
            j += 1
        if e >= 1:                                   # h_e = rho_e
            if accept_uniform(seed, offset, e - 1) < rho:
                tau = e
        token = tl.full([], -1, tl.int32)
        if (tau < e) | (end_ok != 0):                # the draw at tau (tag 1)
            resid = tau < e
            y = _at(ys, tau, OUT_P2).to(tl.int64)
            row = b * D + tau
            p_row = p_ptr + (b * (D + 1) + tau) * V
            q_row = qf_ptr + row * V
            qw_row = qw_ptr + row * V
            fw_row = fw_ptr + row * V
            iq = tl.full([], 1.0, tl.float64)
            if Q_MODE != 0:
                if resid:
                    iq = 1.0 / tl.load(qs_ptr + row).to(tl.float64)
            iz = 1.0 / _skew_z(a_tau, b_tau, K)
            tot_r = tl.full([], 0, tl.int64)
            tot_p = tl.full([], 0, tl.int64)
            for start in range(0, V, BLOCK_V):
                idx = start + offs
                w_r, w_p = _tile(p_row, q_row, qw_row, fw_row, idx, idx < V, y, rho_tau,
                                 a_tau, b_tau, iq, iz, K, resid, Q_MODE)
                tot_r += tl.sum(w_r, axis=0)
                tot_p += tl.sum(w_p, axis=0)
            use_p = tot_r == 0
            total = tl.where(use_p, tot_p, tot_r)
            u_lo, u_hi = stream_words(seed, offset, tau, TAG_SAMPLE)
            t = mulhi_u64(u_lo, u_hi, total)
            hi = tl.where(total > 0, V, 0)
            cum = tl.full([], 0, tl.int64)
            start = tl.full([], 0, tl.int32)
            while (token < 0) & (start < hi):
                idx = start + offs
                msk = idx < V
                w_r, w_p = _tile(p_row, q_row, qw_row, fw_row, idx, msk, y, rho_tau, a_tau,
                                 b_tau, iq, iz, K, resid & (~use_p), Q_MODE)
                w = tl.where(use_p, w_p, w_r)
                hit = msk & (cum + tl.cumsum(w, axis=0) > t)
                first = tl.min(tl.where(hit, idx, NO_INDEX), axis=0)
                token = tl.where(first < NO_INDEX, first, token)
                cum += tl.sum(w, axis=0)
                start += BLOCK_V
        tl.debug_barrier()                           # every lane read ys / yn first
        tl.store(tok_ptr + b * (D + 1) + pos,
                 tl.where(pos < tau, ys, tl.where(pos == tau, token, -1)), mask=pos < D + 1)
        tl.store(nodes_ptr + b * D + pos, tl.where(pos < tau, yn, -1), mask=pos < D)
        tl.store(nacc_ptr + b, tau.to(tl.int32))
        tl.store(valid_ptr + b, token >= 0)


def verify_gbv(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
               inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method="gbv"):
    """GBV on the canonical arguments of ``verify_tree.verify_tree`` -> (token_ids
    [B, max_depth + 1] int32, num_accepted [B] int32, accepted_nodes [B, max_depth] int32,
    valid [B] bool).  Reads no tensor value on the host (see the module docstring for the
    launches and the scratch)."""
    if method != "gbv":
        raise ValueError(f"method must be 'gbv', got {method!r}")
    B, N, V, D, outs, q, q_mode = tree_launch(target, node_ids, draft, draft_is_probs, max_depth)
    tok, nacc, nodes, valid = outs
    if B == 0:
        return outs
    dev = target.device
    Dq = max(D, 1)
    pf = torch.empty((B, D + 1, V), dtype=torch.float32, device=dev)
    state = torch.empty((B, 4), dtype=torch.int64, device=dev)
    if q_mode == 0:                       # point-mass drafts: K <= 1, no q rows, no ranking
        qf = qw = key = fw = qs = pf
    else:
        qf = torch.empty((B, Dq, V), dtype=torch.float32, device=dev)
        qw = torch.empty((B, Dq, V), dtype=torch.int64, device=dev)
        key = torch.empty((B, Dq, V), dtype=torch.float64, device=dev)
        qs = torch.empty((B, Dq), dtype=torch.int64, device=dev)
    sizes = tree_sizes(N, D, V, dev)
    opts = launch_opts(dev)
    _gbv_path_kernel[(B,)](
        target, target.stride(0), node_ids, parents, num_nodes, q, q.stride(0), inv_temp,
        top_k, top_p, min_p, pf, qf, qw, key, qs, state, tok, nacc, nodes, valid, N, V, D,
        T_PROBS=bool(target_is_probs), Q_MODE=q_mode, **sizes, **opts)
    if q_mode != 0:
        # the rank order of every position (section 15's freedom: a stable sort of the
        # quotient keys), then Fw = the integer prefix sums of Qw in that order
        order = torch.sort(key, dim=-1, stable=True).indices
        cums = torch.gather(qw, -1, order).cumsum_(-1)
        fw = key.view(torch.int64).scatter_(-1, order, cums)
        del order, cums
    _gbv_block_kernel[(B,)](
        pf, qf, qw, fw, qs, state, seed, offset, tok, nacc, nodes, valid, V, D,
        Q_MODE=q_mode, BLOCK_V=sizes["BLOCK_V"], OUT_P2=sizes["OUT_P2"], **opts)
    return tok, nacc, nodes, valid
