"""The integer inverse-CDF draw of reference section 5 over a vocabulary shard: each rank
sums its weights, the sums are gathered, the rank holding the threshold finds the token
(section 12).  The weights are computed a few requests at a time (twice: for the sums, then
for the search), so the draw holds no [B, V_local] buffer."""
from __future__ import annotations

from typing import Callable, Tuple

import torch

from specops._contract import mulhi64

Weights = Callable[[int, int], Tuple[torch.Tensor, torch.Tensor]]


def draw(comm, weights: Weights, B: int, step: int, U: torch.Tensor, vocab_start: int):
    """``weights(b0, b1)`` -> (W, Wp) [b1 - b0, V_local] int64: this shard's weights and
    fallback weights of requests b0..b1-1; U [B] the 64-bit draw uniforms.  Returns [B]
    int64 global token ids on every rank (-1: no mass)."""
    dev = U.device
    sums = torch.empty((2, B), dtype=torch.int64, device=dev)
    for b0 in range(0, B, step):
        W, Wp = weights(b0, min(B, b0 + step))
        sums[0, b0:b0 + W.shape[0]] = W.sum(1)
        sums[1, b0:b0 + W.shape[0]] = Wp.sum(1)

    def search(use_w, t, owner):
        idx = torch.zeros(B, dtype=torch.int64, device=dev)
        for b0 in range(0, B, step):
            W, Wp = weights(b0, min(B, b0 + step))
            b1 = b0 + W.shape[0]
            cum = torch.where(use_w[b0:b1, None], W, Wp).cumsum(1)
            idx[b0:b1] = torch.searchsorted(cum, t[b0:b1].clamp(min=0)[:, None],
                                            right=True).squeeze(1)
        return idx
    return finish(comm, sums, U, vocab_start, search)


def finish(comm, sums: torch.Tensor, U: torch.Tensor, vocab_start: int, search):
    """The draw from this shard's weight sums ``sums`` [2, B] (W, Wp): the exchange, the
    owner of each threshold, and ``search(use_w, t, owner)`` -> [B] local indices (read
    where owner) of the first token whose prefix sum exceeds t."""
    dev, B = U.device, U.shape[0]
    mine = torch.cat([sums.reshape(-1),
                      torch.tensor([vocab_start], device=dev, dtype=torch.int64)])
    every = comm.all_gather(mine, "draw weight sums")                 # [world, 2B + 1]
    before = (every[:, -1] < vocab_start)[:, None]
    w_sums, fallback = every[:, :B], every[:, B:2 * B]
    use_w = w_sums.sum(0) > 0
    total = torch.where(use_w, w_sums.sum(0), fallback.sum(0))
    prefix = torch.where(use_w, (w_sums * before).sum(0), (fallback * before).sum(0))
    local = torch.where(use_w, sums[0], sums[1])
    t = mulhi64(U, total) - prefix
    owner = (total > 0) & (t >= 0) & (t < local)
    idx = search(use_w, t, owner)
    tok = torch.where(owner, idx + vocab_start, -1)
    return comm.all_reduce(tok, "max", "drawn token")
