"""Caller-supplied uniforms (reference section 13): sgl-kernel's tree walk, one program per
request.  The tree arrives renumbered by ``specops.integrations.sglang.convert_tree`` (the
children of a node are the present nodes with that parent, in sgl-kernel's try order; nodes
deeper than the level cap are absent), so a level is decided in registers over the
request's ``N_P2`` node lanes: the children's integer masses, their cumulative sum against the
coin's threshold, the first accepted child.  Each visited row is read once for its masses
and check; the final draw reads the stopping node's row again.  The coins arrive as their
integer grid values ``m(u)`` (computed by the launcher's caller with torch ops).
"""
import torch
import triton
import triton.language as tl

from ._common import NO_INDEX
from ._launch import launch_opts, tree_outputs, tree_sizes

W60 = tl.constexpr(1152921504606846976.0)      # 2**60: trunc(p * 2**60) is the mass
MASS_MAX = tl.constexpr(17179869184)            # 2**34: section 3's mass bound (2**32 units)


@triton.jit
def _thr(m, M):
    """floor(m * M / 2**24), exact in int64 for 0 <= m < 2**24, 0 <= M < 2**63."""
    hi = M >> 32
    lo = M - (hi << 32)
    return ((m * hi) << 8) + ((m * lo) >> 24)


@triton.jit
def _weights(p, m):
    """trunc(p * 2**60) where p is in [0, 1] (NaN fails) and the lane is in the row."""
    inside = m & (p >= 0.0) & (p <= 1.0)
    return tl.where(inside, p * W60, 0.0).to(tl.int64)


@triton.jit
def _row_mass(row, V, BLOCK_V: tl.constexpr):
    """(A = sum w, the section 3 check) of one target row."""
    offs = tl.arange(0, BLOCK_V)
    A = tl.full([], 0, tl.int64)
    mass = tl.full([], 0, tl.int64)
    bad = tl.full([], 0, tl.int32)
    for start in range(0, V, BLOCK_V):
        idx = start + offs
        m = idx < V
        p = tl.load(row + idx, mask=m, other=0.0)
        w = _weights(p, m)
        A += tl.sum(w, axis=0)
        mass += tl.sum(w >> 28, axis=0)
        bad += tl.sum((m & ~((p >= 0.0) & (p <= 1.0))).to(tl.int32), axis=0)
    return A, (bad == 0) & (mass > 0) & (mass <= MASS_MAX)


@triton.jit
def _coin_kernel(t_ptr, order_ptr, par_ptr, present_ptr, cand_ptr, m_ptr, mf_ptr, acc_ptr,
                 tok_ptr, nacc_ptr, nodes_ptr, valid_ptr, N, V, D, single,
                 RELAXED: tl.constexpr, ACC1: tl.constexpr, BLOCK_V: tl.constexpr,
                 N_P2: tl.constexpr, OUT_P2: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, N_P2)
    inr = lanes < N
    base = b * N
    order = tl.load(order_ptr + base + lanes, mask=inr, other=0)
    par = tl.load(par_ptr + base + lanes, mask=inr, other=-2)
    present = tl.load(present_ptr + base + lanes, mask=inr, other=0) != 0
    cand = tl.load(cand_ptr + base + lanes, mask=inr, other=0)
    mco = tl.load(m_ptr + base + lanes, mask=inr, other=0)
    acc_scale = tl.load(acc_ptr)
    pos = tl.arange(0, OUT_P2)
    out_tok = tl.full([OUT_P2], -1, tl.int32)
    out_node = tl.full([OUT_P2], -1, tl.int32)
    c = tl.full([], 0, tl.int32)
    j = tl.full([], 0, tl.int32)
    ok = tl.full([], 1, tl.int32)
    walking = tl.full([], 1, tl.int32)
    A_stop = tl.full([], 0, tl.int64)
    removed = tl.full([], 0, tl.int64)
    tried = lanes < 0
    while walking != 0:
        slot = tl.sum(tl.where(lanes == c, order, 0), axis=0)
        row = t_ptr + (base + slot) * V
        A, row_ok = _row_mass(row, V, BLOCK_V)
        if row_ok:
            kids = present & (par == c) & ((lanes * 0 + j) < D)
            py = tl.load(row + cand, mask=kids, other=0.0)
            wy = _weights(py, kids)
            same = ((cand[:, None] == cand[None, :]) & (lanes[None, :] < lanes[:, None])
                    & kids[None, :])
            dup = tl.max(same.to(tl.int32), axis=1) > 0
            contrib = tl.where(kids & ~dup, wy, 0)
            C = tl.cumsum(contrib, axis=0)
            if ACC1:
                Ath = A
            else:
                Ath = tl.floor(A.to(tl.float64) * acc_scale).to(tl.int64)
            t = _thr(tl.sum(tl.where(lanes == c, mco, 0), axis=0), Ath)
            acc = kids & (C > t)
            if RELAXED:
                acc = acc | (kids & (py >= single))
            first = tl.min(tl.where(acc, lanes, NO_INDEX), axis=0)
            if first < NO_INDEX:
                tok = tl.sum(tl.where(lanes == first, cand, 0), axis=0).to(tl.int32)
                nslot = tl.sum(tl.where(lanes == first, order, 0), axis=0).to(tl.int32)
                out_tok = tl.where(pos == j, tok, out_tok)
                out_node = tl.where(pos == j, nslot, out_node)
                j += 1
                c = first
            else:
                A_stop = A
                removed = tl.sum(contrib, axis=0)
                tried = kids
                walking = 0
        else:
            ok = 0
            walking = 0

    # the final draw at c: w without the tried tokens (w itself if that leaves nothing)
    token = tl.full([], -1, tl.int32)
    if ok != 0:
        slot = tl.sum(tl.where(lanes == c, order, 0), axis=0)
        row = t_ptr + (base + slot) * V
        S = A_stop - removed
        use_all = S == 0
        S = tl.where(use_all, A_stop, S)
        tried = tried & ~use_all
        tf = _thr(tl.load(mf_ptr + b), S)
        offs = tl.arange(0, BLOCK_V)
        cum = tl.full([], 0, tl.int64)
        start = tl.full([], 0, tl.int32)
        while (token < 0) & (start < V):
            idx = start + offs
            m = idx < V
            w = _weights(tl.load(row + idx, mask=m, other=0.0), m)
            out = tl.max(((idx[:, None] == cand[None, :]) & tried[None, :]).to(tl.int32),
                         axis=1) > 0
            w = tl.where(out, 0, w)
            hit = m & (cum + tl.cumsum(w, axis=0) > tf)
            first_v = tl.min(tl.where(hit, idx, NO_INDEX), axis=0)
            token = tl.where(first_v < NO_INDEX, first_v, token)
            cum += tl.sum(w, axis=0)
            start += BLOCK_V
    row_out = tl.where(pos < j, out_tok, tl.where(pos == j, token, -1))
    tl.store(tok_ptr + b * (D + 1) + pos, row_out, mask=pos < D + 1)
    tl.store(nodes_ptr + b * D + pos, out_node, mask=pos < D)
    tl.store(nacc_ptr + b, j)
    tl.store(valid_ptr + b, token >= 0)


def coin_walk(target, order, parents, present, candidates, m_coins, m_final, max_depth,
              single, acc_scale, relaxed):
    """The section 13 walk on ``convert_tree``'s renumbering: target [B, N, V] float32,
    order / parents / candidates (in the new order) / m_coins (the coins' grid values, new
    order) [B, N] int64, present [B, N] bool, m_final [B] int64; ``acc_scale`` 1.0 means
    ``Ath = A``.  -> (token_ids [B, D + 1] int32, num_accepted [B] int32, accepted_nodes
    [B, D] int32 (sgl slots), valid [B] bool).  Reads no tensor value on the host."""
    B, N, V = target.shape
    dev = target.device
    D = max(int(max_depth), 0)
    tok, nacc, nodes, valid = tree_outputs(B, D, dev)
    if B == 0:
        return tok, nacc, nodes, valid
    acc = torch.full((1,), float(acc_scale), dtype=torch.float64, device=dev)
    _coin_kernel[(B,)](
        target.contiguous(), order.contiguous(), parents.contiguous(),
        present.to(torch.int8).contiguous(), candidates.contiguous(), m_coins.contiguous(),
        m_final.contiguous(), acc, tok, nacc, nodes, valid, N, V, D, float(single),
        RELAXED=bool(relaxed), ACC1=float(acc_scale) == 1.0,
        **tree_sizes(N, D, V, dev), **launch_opts(dev))
    return tok, nacc, nodes, valid
