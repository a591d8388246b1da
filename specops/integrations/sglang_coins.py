"""The caller-coin tree walk (contract section 13) as vectorised integer torch ops.

Every device runs the same code: the decisions are integer compares of int64 masses
(``trunc(p * 2**60)``, exact in float32 since 2**60 is a power of two), the coin thresholds
are exact int64 products split into 32-bit limbs, and the only float64 operation (the
relaxed ``Ath = floor(float64(A) * ta)``) is one correctly rounded conversion and product.
So the tokens are the reference's bit for bit on the CPU, on CUDA, or anywhere torch runs,
without a kernel per backend (see the module docstring of ``specops.integrations.sglang``).

The walk runs on ``convert_tree``'s renumbering (children of a node in try order, nodes
deeper than the level cap absent), one tree level per step: ``min(num_spec, n)`` vectorised
steps over the batch finish every request, with no host synchronisation and no
data-dependent shape.  Cost: one [B, V] pass per level over the current node's row (its
masses and its check, read in full as section 13 requires), [B, n, n] compares for repeated
sibling tokens, and one [B, V] pass for the final draw.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from specops.reference.coins import ACC_CAP, COIN_BITS, Thresholds

_W_SCALE = float(2 ** 60)
_LO32 = 0xFFFFFFFF


class CoinWalk(NamedTuple):
    token_ids: torch.Tensor       # [B, D + 1] int64: accepted tokens, final token, then -1
    num_accepted: torch.Tensor    # [B] int64
    accepted_nodes: torch.Tensor  # [B, D] int64: sgl slots of the accepted nodes, -1 after
    valid: torch.Tensor           # [B] bool


def coin_grid(u: torch.Tensor) -> torch.Tensor:
    """m(u) of section 13, int64 (NaN and u <= 0: 0; u >= 1: 2**24 - 1)."""
    x = u.to(torch.float32).to(torch.float64) * float(1 << COIN_BITS)   # a float32 uniform
    x = torch.where(x > 0, x, torch.zeros_like(x))          # NaN fails x > 0
    x = torch.clamp(torch.floor(x), max=float((1 << COIN_BITS) - 1))
    return x.to(torch.int64)


def coin_threshold(m: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """floor(m * M / 2**24) exactly, for 0 <= m < 2**24 and 0 <= M < 2**63 (int64)."""
    hi, lo = M >> 32, M & _LO32
    return ((m * hi) << (32 - COIN_BITS)) + ((m * lo) >> COIN_BITS)


def _weights(p: torch.Tensor) -> torch.Tensor:
    return (p * _W_SCALE).to(torch.int64)


def _row_stats(p: torch.Tensor):
    """(w [B, V] int64, A [B], valid [B]) of one row per request: ``w = trunc(p * 2**60)``
    (0 outside [0, 1], NaN included), ``A = sum w``, and section 3's probability-row check
    (``sum trunc(p * 2**32) = sum (w >> 28)``: both truncate the same exact product)."""
    inside = (p >= 0) & (p <= 1)                      # NaN fails both
    w = torch.where(inside, p * _W_SCALE, torch.zeros_like(p)).to(torch.int64)
    mass = (w >> 28).sum(1)
    return w, w.sum(1), inside.all(1) & (mass > 0) & (mass <= (1 << 34))


def final_weights(w: torch.Tensor, tried: torch.Tensor) -> torch.Tensor:
    """The final draw's weights: w with the tried tokens zeroed, or w if nothing is left
    (a named step, so that the tests' negative control can substitute it)."""
    W = torch.where(tried, torch.zeros_like(w), w)
    return torch.where((W.sum(1) == 0)[:, None], w, W)


def coin_walk(candidates, tree, coins, final_coins, target, num_spec: int,
              th: Thresholds) -> CoinWalk:
    """The walk of section 13 on ``tree`` (``sglang.convert_tree``'s renumbering, in which
    the children of a node are the present nodes with that parent, in sgl-kernel's try
    order, and nodes deeper than ``num_spec - 1`` are absent).  One level per step: the
    current node's row is read once (its masses and check), its children are decided
    together (a cumulative sum of their masses against the coin's threshold), and the walk
    moves to the first accepted child.  ``min(num_spec, n)`` steps, all on the device."""
    B, N, V = target.shape
    dev = target.device
    D = max(0, min(num_spec, N) - 1)
    order, par, present = tree.order, tree.parent_ids, tree.present
    bi = torch.arange(B, device=dev)
    cand = candidates.to(torch.int64).gather(1, order)
    y = cand.clamp(0, V - 1)
    m_coin = coin_grid(coins.reshape(B, -1)[:, :N]).gather(1, order)
    earlier = torch.ones(N, N, dtype=torch.bool, device=dev).tril(-1)   # [i, k]: k < i
    same = (y[:, :, None] == y[:, None, :]) & earlier                   # [B, i, k]
    relaxed = not th.exact
    acc_scale = 1.0 if th.acc >= 1.0 else max(th.acc, ACC_CAP)

    c = torch.zeros(B, dtype=torch.int64, device=dev)
    j = torch.zeros_like(c)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    valid = torch.ones(B, dtype=torch.bool, device=dev)
    acc_nodes = torch.full((B, max(D, 1)), -1, dtype=torch.int64, device=dev)
    tok_acc = torch.full((B, D + 1), -1, dtype=torch.int64, device=dev)
    for level in range(D + 1):
        p = target[bi, order[bi, c]]
        w, A, row_ok = _row_stats(p)
        bad = ~done & ~row_ok
        valid = valid & ~bad
        done = done | bad
        if level == D:
            break
        kids = present & (par == c[:, None]) & ~done[:, None]
        dup = (same & kids[:, None, :]).any(2)
        C = torch.where(kids & ~dup, w.gather(1, y), torch.zeros_like(y)).cumsum(1)
        Ath = A if acc_scale == 1.0 else torch.floor(
            A.to(torch.float64) * acc_scale).to(torch.int64)
        t = coin_threshold(m_coin[bi, c], Ath)
        accm = kids & (C > t[:, None])
        if relaxed:
            accm = accm | (kids & (p.gather(1, y) >= th.single))
        move = accm.any(1)
        first = accm.to(torch.int8).argmax(1)
        done = done | ~move
        acc_nodes[:, level] = torch.where(move, order[bi, first], acc_nodes[:, level])
        tok_acc[:, level] = torch.where(move, cand[bi, first], tok_acc[:, level])
        c = torch.where(move, first, c)
        j = j + move.long()

    # the final draw at node c from w with the tokens of its children (all tried) removed
    p = target[bi, order[bi, c]]
    w, _, _ = _row_stats(p)
    kids = present & (par == c[:, None]) & (j < D)[:, None]
    tried = torch.zeros(B, V + 1, dtype=torch.bool, device=dev)
    tried.scatter_(1, torch.where(kids, y, torch.full_like(y, V)), True)
    W = final_weights(w, tried[:, :V])
    S = W.sum(1)
    tf = coin_threshold(coin_grid(final_coins.reshape(B)), S)
    final = torch.searchsorted(W.cumsum(1), tf[:, None], right=True)[:, 0].clamp(max=V - 1)
    valid = valid & (S > 0)
    final = torch.where(valid, final, torch.full_like(final, -1))
    tokens = tok_acc.scatter(1, j.clamp(max=D)[:, None], final[:, None])
    return CoinWalk(tokens, j, acc_nodes[:, :D], valid)


def greedy_walk(candidates, next_token, next_sibling, retrive_index, target_predict,
                num_spec: int) -> CoinWalk:
    """sgl-kernel's ``verify_tree_greedy`` walk: at node c the target token is
    ``target_predict.flatten()[retrive_index[b, c]]`` (sgl-kernel's flat read); accept the
    first child in next-sibling order whose candidate equals it."""
    B, N = candidates.shape
    dev = candidates.device
    D = max(0, min(num_spec, N) - 1)
    cand = candidates.to(torch.int64)
    nt, ns = next_token.to(torch.int64), next_sibling.to(torch.int64)
    ri = retrive_index.to(torch.int64)
    flat = target_predict.reshape(-1).to(torch.int64)
    bi = torch.arange(B, device=dev)

    def target_at(node):
        pos = ri[bi, node]
        ok = (pos >= 0) & (pos < flat.numel())
        return torch.where(ok, flat[pos.clamp(0, max(flat.numel() - 1, 0))],
                           torch.full_like(pos, -1))
    c = torch.zeros(B, dtype=torch.int64, device=dev)
    j = torch.zeros_like(c)
    x = nt[:, 0] if D > 0 else torch.full_like(c, -1)
    want = target_at(c)
    done = x < 0
    acc_nodes = torch.full((B, max(D, 1)), -1, dtype=torch.int64, device=dev)
    tokens = torch.full((B, D + 1), -1, dtype=torch.int64, device=dev)
    for _ in range(N + 1):
        active = ~done & (x >= 0)
        xs = x.clamp(min=0)
        y = cand.gather(1, xs[:, None])[:, 0]
        acc = active & (y == want)
        col = j.clamp(max=max(D, 1) - 1)
        acc_nodes.scatter_(1, col[:, None], torch.where(
            acc, xs, acc_nodes.gather(1, col[:, None])[:, 0])[:, None])
        tokens.scatter_(1, j.clamp(max=D)[:, None], torch.where(
            acc, y, tokens.gather(1, j.clamp(max=D)[:, None])[:, 0])[:, None])
        c = torch.where(acc, xs, c)
        j = j + acc.long()
        want = torch.where(acc, target_at(c), want)
        nxt = torch.where(j < D, nt[bi, c], torch.full_like(c, -1))
        x = torch.where(acc, nxt, torch.where(active, ns.gather(1, xs[:, None])[:, 0], x))
        done = done | (x < 0)
    tokens = tokens.scatter(1, j.clamp(max=D)[:, None], want[:, None])
    return CoinWalk(tokens, j, acc_nodes[:, :D], torch.ones(B, dtype=torch.bool, device=dev))


# ----------------------------------------------------------------------------- C++
def native_walk():
    """specops._C's ``coin_walk`` (csrc/verify/coins.cpp), or None where it is not built."""
    try:
        from specops import _C
    except ImportError:
        return None
    return getattr(_C, "coin_walk", None)


def coin_walk_cpu(candidates, next_token, next_sibling, coins, final_coins, target,
                  num_spec: int, th: Thresholds) -> CoinWalk:
    """The same walk by the C++ kernel, on CPU tensors (walks sgl-kernel's links directly;
    the caller has checked them).  Same outputs as ``coin_walk``, bit for bit."""
    fn = native_walk()
    if fn is None:
        raise RuntimeError("backend='cpu' needs specops._C with coin_walk: rebuild it with "
                           "`pip install -e .`")
    B, N, V = target.shape
    if target.device.type != "cpu":
        raise ValueError(f"backend='cpu' needs CPU tensors, got {target.device}")
    D = max(0, min(num_spec, N) - 1)
    keep = [target.contiguous(), candidates.to(torch.int64).contiguous(),
            next_token.to(torch.int64).contiguous(), next_sibling.to(torch.int64).contiguous(),
            coins.reshape(B, N).to(torch.float32).contiguous(),
            final_coins.reshape(B).to(torch.float32).contiguous()]
    tokens = torch.empty(B, D + 1, dtype=torch.int32)
    nacc = torch.empty(B, dtype=torch.int32)
    nodes = torch.empty(B, max(D, 1), dtype=torch.int32)
    valid = torch.empty(B, dtype=torch.uint8)
    acc = 1.0 if th.exact or th.acc >= 1.0 else max(th.acc, ACC_CAP)
    fn(*(t.data_ptr() for t in keep), B, N, V, D, not th.exact, th.single, acc,
       tokens.data_ptr(), nacc.data_ptr(), nodes.data_ptr(), valid.data_ptr(),
       torch.get_num_threads())
    return CoinWalk(tokens.long(), nacc.long(), nodes[:, :D].long(), valid.bool())


def coin_walk_triton(candidates, tree, coins, final_coins, target, num_spec: int,
                     th: Thresholds) -> CoinWalk:
    """The same walk by the Triton kernel (``specops/triton_kernels/verify_coins.py``) on
    ``convert_tree``'s renumbering; the coins' grid values are computed here with torch."""
    from specops.triton_kernels import verify_coins
    B, N, V = target.shape
    order = tree.order
    m = coin_grid(coins.reshape(B, -1)[:, :N]).gather(1, order)
    acc = 1.0 if th.exact or th.acc >= 1.0 else max(th.acc, ACC_CAP)
    tok, nacc, nodes, valid = verify_coins.coin_walk(
        target, order, tree.parent_ids, tree.present,
        candidates.to(torch.int64).gather(1, order), m, coin_grid(final_coins.reshape(B)),
        max(0, min(num_spec, N) - 1), th.single, acc, not th.exact)
    return CoinWalk(tok.long(), nacc.long(), nodes.long(), valid)


# ----------------------------------------------------------------------------- renorms
def _per_row(v, B, dev, dtype):
    if isinstance(v, torch.Tensor):
        return v.to(device=dev, dtype=dtype).reshape(-1).expand(B) if v.numel() in (1, B) \
            else _bad_rows(v, B)
    return torch.full((B,), v, device=dev, dtype=dtype)


def _bad_rows(v, B):
    raise ValueError(f"expected a number or a [{B}] tensor, got shape {tuple(v.shape)}")


def top_k_renorm_prob_fallback(probs: torch.Tensor, top_k) -> torch.Tensor:
    """SGLang's torch fallback of ``top_k_renorm_prob``: keep the entries at least as large as
    the k-th largest of their row (ties kept; k <= 0 or k >= V keeps the row), renormalise.
    ``top_k``: int or [B] tensor.  (A host-side helper of SGLang's sampling, not a
    verification step: its float sums are torch's, not the contract's.)"""
    B, V = probs.shape
    k = _per_row(top_k, B, probs.device, torch.int64)
    full = (k <= 0) | (k >= V)
    kk = k.clamp(1, V)
    srt = probs.sort(dim=1, descending=True).values
    thr = srt.gather(1, (kk - 1)[:, None])
    keep = (probs >= thr) | full[:, None]
    out = torch.where(keep, probs, torch.zeros_like(probs))
    return out / out.sum(1, keepdim=True)


def top_p_renorm_prob_fallback(probs: torch.Tensor, top_p) -> torch.Tensor:
    """SGLang's torch fallback of ``top_p_renorm_prob``: keep the smallest set of largest
    entries whose mass reaches ``top_p`` (ties with its smallest member kept), renormalise.
    ``top_p``: float or [B] tensor."""
    B, V = probs.shape
    p = _per_row(top_p, B, probs.device, torch.float64)
    srt = probs.sort(dim=1, descending=True).values
    cum = srt.to(torch.float64).cumsum(1)
    total = cum[:, -1:]
    # the first sorted position whose mass from the top reaches top_p of the row's mass
    idx = (cum < p[:, None] * total).sum(1, keepdim=True).clamp(max=V - 1)
    thr = srt.gather(1, idx)
    out = torch.where(probs >= thr, probs, torch.zeros_like(probs))
    return out / out.sum(1, keepdim=True)
