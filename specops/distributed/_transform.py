"""The sampling transform (reference section 2) and the row checks (section 3) on a
vocabulary shard, with the row statistics reduced across ranks (section 12).

Plain torch operations on the shard's device, each one correctly rounded on its own (eager
torch never fuses a multiply into an add), so ``pexp`` and the masses equal the reference's
bit for bit.  Rows arrive as blocks (the target's rows, the draft-logits rows); their
statistics share each collective.
"""
from __future__ import annotations

from typing import List, NamedTuple, Tuple

import torch

from specops import reference as _ref

M32 = 0xFFFFFFFF
_HALF = 1 << 31
_F32 = {name: float(getattr(_ref, name)) for name in
        ("EXP_CUTOFF", "EXP_LOG2E", "EXP_ROUND", "EXP_LN2_HI", "EXP_LN2_LO")}
_COEFFS = [float(c) for c in _ref.EXP_COEFFS]
_FLT_MIN = float(_ref.FLT_MIN)


class ShardRows(NamedTuple):
    """p [R, V_local] float32: this shard's columns of each row's probabilities (a
    probability row's own values where it is not greedy); valid [R] bool; argmax [R] int64:
    the global lowest-index argmax of the row (logits, or probabilities)."""
    p: torch.Tensor
    valid: torch.Tensor
    argmax: torch.Tensor


def pexp(d: torch.Tensor) -> torch.Tensor:
    """The reference's portable float32 exp for d <= 0, in torch float32 operations."""
    ok = d >= _F32["EXP_CUTOFF"]
    dd = torch.where(ok, d, 0.0)
    n = (dd * _F32["EXP_LOG2E"] + _F32["EXP_ROUND"]) - _F32["EXP_ROUND"]
    r = (dd - n * _F32["EXP_LN2_HI"]) - n * _F32["EXP_LN2_LO"]
    s = torch.full_like(r, _COEFFS[0])
    for c in _COEFFS[1:]:
        s = s * r + c
    scale = ((n.to(torch.int32) + 127) << 23).view(torch.float32)
    return torch.where(ok, s * scale, 0.0)


def order_key(v: torch.Tensor) -> torch.Tensor:
    """float32 -> int64 in [0, 2**32), monotone in the float order (-0.0 taken as +0.0)."""
    bits = (v + 0.0).view(torch.int32).to(torch.int64) & M32
    return torch.where(bits >= _HALF, bits ^ M32, bits | _HALF)


def key_value(key: torch.Tensor) -> torch.Tensor:
    """The inverse of ``order_key``."""
    bits = torch.where(key >= _HALF, key ^ _HALF, key ^ M32)
    return torch.where(bits >= _HALF, bits - (1 << 32), bits).to(torch.int32).view(
        torch.float32)


def pack_max(v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """One int64 whose maximum over ranks is the largest v at its lowest global index."""
    return (order_key(v) - _HALF) * (1 << 32) + (M32 - index)


def unpack_max(packed: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    hi = torch.div(packed, 1 << 32, rounding_mode="floor")
    return key_value(hi + _HALF), M32 - (packed - hi * (1 << 32))


def radix_select(comm, keys, weights, reached, what: str):
    """Per row, the largest 32-bit key k such that ``reached(total weight of keys >= k)``
    holds (``reached`` is monotone), found 8 bits per round with one [R, 256] sum-reduction
    each.  keys [R, n] int64 in [0, 2**32); weights [R, n] int64.  Returns (key [R],
    weight of the keys >= key [R])."""
    R = keys.shape[0]
    dev = keys.device
    prefix = torch.zeros(R, dtype=torch.int64, device=dev)
    above = torch.zeros(R, dtype=torch.int64, device=dev)
    base = (torch.arange(R, device=dev, dtype=torch.int64) * 257)[:, None]
    for shift in (24, 16, 8, 0):
        digit = (keys >> shift) & 255
        if shift < 24:                         # outside the bucket found so far: bin 256
            inside = (keys >> (shift + 8)) == (prefix >> (shift + 8))[:, None]
            digit = torch.where(inside, digit, 256)
        hist = torch.zeros(R * 257, dtype=torch.int64, device=dev)
        hist.index_add_(0, (base + digit).reshape(-1), weights.reshape(-1))
        hist = comm.all_reduce(hist.view(R, 257)[:, :256].contiguous(), "sum", what)
        from_top = hist.flip(1).cumsum(1).flip(1)          # weight of digits >= d
        ok = reached(above[:, None] + from_top)
        d = (ok.sum(1) - 1).clamp(min=0)[:, None]
        last = hist.gather(1, d).squeeze(1)
        above = above + from_top.gather(1, d).squeeze(1) - last
        prefix = prefix | (d.squeeze(1) << shift)
    return prefix, above + last


def transform(comm, blocks: List[Tuple[torch.Tensor, bool]], inv_t, top_k, top_p, min_p,
              vocab_start: int, V: int, has_topk: bool, has_topp: bool) -> ShardRows:
    """Rows of every block (``(rows [R_i, V_local], is_probs)``) with per-row parameters
    [R] (the blocks' rows in order) -> ``ShardRows``.  ``has_topk`` / ``has_topp``: whether
    any row may filter (False leaves the radix rounds out)."""
    dev = inv_t.device
    Vl = blocks[0][0].shape[-1]
    cols = torch.arange(Vl, device=dev, dtype=torch.int64)
    gidx = cols + vocab_start
    greedy = inv_t == 0

    # Round 1 (max): validity flags, max x, lowest-index argmax.
    stats, xs, rows_of = [], [], []
    start = 0
    for rows, is_probs in blocks:
        n = rows.shape[0]
        g = greedy[start:start + n, None]
        if is_probs:
            p = rows.float()
            inside = (p >= 0) & (p <= 1)
            bad = (~inside).any(1)
            pz = torch.where(inside, p, -1.0)
            am = pz.argmax(1)
            one = torch.ones_like(bad, dtype=torch.int64)
            stats.append(torch.stack([pack_max(pz.gather(1, am[:, None]).squeeze(1), gidx[am]),
                                      one, bad.long(), one, one], 1))
            xs.append(None)
        else:
            lg = rows.float()
            x = lg * inv_t[start:start + n, None]
            bad = (torch.isnan(lg) | (lg == float("inf"))).any(1)
            bad |= ((torch.isnan(x) | (x == float("inf"))) & ~g).any(1)
            lz = torch.where(torch.isnan(lg), float("-inf"), lg)
            am = lz.argmax(1)
            xz = torch.where(torch.isnan(x), float("-inf"), x)
            stats.append(torch.stack([pack_max(lz.gather(1, am[:, None]).squeeze(1), gidx[am]),
                                      pack_max(xz.amax(1), torch.zeros_like(am)), bad.long(),
                                      (lg != float("-inf")).any(1).long(),
                                      (x != float("-inf")).any(1).long()], 1))
            xs.append(x)
        rows_of.append((start, n, is_probs))
        start += n
    st = comm.all_reduce(torch.cat(stats), "max", "row max / argmax / validity")
    _, argmax = unpack_max(st[:, 0])
    m, _ = unpack_max(st[:, 1])
    params_ok = ((inv_t >= 0) & (inv_t < float("inf")) & (top_k >= 0) & (top_p > 0)
                 & (top_p <= 1) & (min_p >= 0) & (min_p <= 1))
    valid = (st[:, 2] == 0) & (st[:, 3] == 1) & (greedy | (st[:, 4] == 1)) & params_ok
    is_logits = torch.zeros_like(valid)
    for start, n, is_probs in rows_of:
        is_logits[start:start + n] = not is_probs
    hot = is_logits & valid & ~greedy

    # The logits rows, as one [R_logits, V_local] block for the filters and the masses.
    x = torch.cat([x for x in xs if x is not None]) if any(x is not None for x in xs) else None
    lrows = is_logits.nonzero().squeeze(1) if x is not None else None
    probs_blocks = [(s, n) for s, n, pr in rows_of if pr]

    e = E = keep = None
    if x is not None:
        li = lambda t: t[lrows]                                    # noqa: E731
        keep = torch.ones_like(x, dtype=torch.bool)
        k = li(top_k)
        if has_topk:
            k_on = li(hot) & (k > 0) & (k < V)
            keys = order_key(torch.where(torch.isnan(x), float("-inf"), x))
            thr_key, _ = radix_select(comm, keys, torch.ones_like(keys),
                                      lambda c: c >= k[:, None], "top-k histogram")
            keep = ~k_on[:, None] | (x >= key_value(thr_key)[:, None])
        e = torch.where(keep & li(hot)[:, None], pexp(x - li(m)[:, None]), 0.0)
        E = (e * float(2 ** _ref.E_SCALE_BITS)).to(torch.int64)
        mp = li(min_p)[:, None]
        masses = torch.stack([E.sum(1), torch.where(e >= mp, E, 0).sum(1)], 1)
    p32 = []
    for s, n in probs_blocks:
        p = blocks[[r[0] for r in rows_of].index(s)][0].float()
        inside = (p >= 0) & (p <= 1)
        p32.append(torch.where(inside, p.double() * float(2 ** _ref.P_CHECK_BITS), 0.0)
                   .to(torch.int64).sum(1))

    # Round 2 (sum): the masses S and the min-p mass (logits), the checked mass (probs).
    mass = torch.zeros((valid.shape[0], 2), dtype=torch.int64, device=dev)
    if x is not None:
        mass[lrows] = masses
    for (s, n), m32 in zip(probs_blocks, p32):
        mass[s:s + n, 0] = m32
    mass = comm.all_reduce(mass, "sum", "masses")

    p_out = torch.zeros((valid.shape[0], Vl), dtype=torch.float32, device=dev)
    for (s, n), (rows, is_probs) in zip([(r[0], r[1]) for r in rows_of], blocks):
        if is_probs:
            total = mass[s:s + n, 0]
            valid[s:s + n] &= (total > 0) & (total <= (1 << (_ref.P_CHECK_BITS + 2)))
            p_out[s:s + n] = rows.float()
    if x is not None:
        S, S_mp = mass[lrows, 0], mass[lrows, 1]
        tp = li(top_p)
        mpv = li(min_p)
        S_keep = torch.where(mpv > 0, S_mp, S)
        if has_topp:
            p_on = li(hot) & (tp < 1)
            target = tp.double() * S.double()
            tau_key, S_tau = radix_select(
                comm, e.view(torch.int32).to(torch.int64), E,
                lambda c: c.double() >= target[:, None], "top-p histogram")
            tau = tau_key.to(torch.int32).view(torch.float32)     # e >= 0: bits < 2**31
            keep &= ~p_on[:, None] | (e >= tau[:, None])
            S_keep = torch.where(p_on & ~((mpv > 0) & (mpv > tau)), S_tau, S_keep)
        keep &= e >= mp
        p = (e.double() * float(2 ** _ref.E_SCALE_BITS) / S_keep.clamp(min=1).double()[:, None]
             ).float()
        p_out[lrows] = torch.where(keep & (p >= _FLT_MIN), p, 0.0)
    # Greedy rows (logits or probabilities): one-hot at the global argmax.
    own = (argmax >= vocab_start) & (argmax < vocab_start + Vl)
    onehot = (gidx[None, :] == argmax[:, None]) & own[:, None]
    p_out = torch.where(greedy[:, None] & valid[:, None], onehot.float(), p_out)
    return ShardRows(p_out, valid, argmax)
