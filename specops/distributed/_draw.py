"""The integer inverse-CDF draw of reference section 5 over a vocabulary shard: each rank
sums its weights, the sums are gathered, the rank holding the threshold finds the token
(section 12)."""
from __future__ import annotations

import torch

from specops.drafting import philox4x32

M32 = 0xFFFFFFFF


def _mul32(a: torch.Tensor, b: torch.Tensor):
    """(hi, lo) 32-bit words of a * b for a, b in [0, 2**32), without int64 overflow."""
    t_lo = (a & 0xFFFF) * b                    # < 2**48
    t_hi = (a >> 16) * b                       # < 2**48
    lo = (((t_hi & 0xFFFF) << 16) + t_lo) & M32
    hi = (t_hi + (t_lo >> 16)) >> 16
    return hi, lo


def mulhi64(U: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """floor(U * S / 2**64) for U a 64-bit pattern held in int64 and 0 <= S < 2**63: the
    exact 128-bit product in 32-bit limbs."""
    u0, u1 = U & M32, (U >> 32) & M32
    s0, s1 = S & M32, (S >> 32) & M32
    h00, _ = _mul32(u0, s0)
    h01, l01 = _mul32(u0, s1)
    h10, l10 = _mul32(u1, s0)
    h11, l11 = _mul32(u1, s1)
    w1 = h00 + l01 + l10                               # < 3 * 2**32
    w2 = h01 + h10 + l11 + (w1 >> 32)
    return ((h11 + (w2 >> 32)) << 32) | (w2 & M32)     # < 2**63 since S < 2**63


def stream(seed: torch.Tensor, offset: torch.Tensor, positions: int, tag: int):
    """Philox words (w0, w1) [B, positions] of every request's stream at (j, tag)."""
    j = torch.arange(positions, device=seed.device, dtype=torch.int64)[None, :]
    s0, s1 = (seed & M32)[:, None], ((seed >> 32) & M32)[:, None]
    o0, o1 = (offset & M32)[:, None], ((offset >> 32) & M32)[:, None]
    w0, w1, _, _ = philox4x32(j, torch.full_like(j, tag), o0, o1, s0, s1)
    return w0, w1


def draw(comm, W: torch.Tensor, Wp: torch.Tensor, U: torch.Tensor, vocab_start: int):
    """W, Wp [B, V_local] int64: this shard's weights and fallback weights; U [B] the 64-bit
    draw uniforms.  Returns [B] int64 global token ids on every rank (-1: no mass)."""
    B = W.shape[0]
    mine = torch.cat([W.sum(1), Wp.sum(1),
                      torch.tensor([vocab_start], device=W.device, dtype=torch.int64)])
    every = comm.all_gather(mine, "draw weight sums")                 # [world, 2B + 1]
    before = (every[:, -1] < vocab_start)[:, None]
    sums, fallback = every[:, :B], every[:, B:2 * B]
    use_w = sums.sum(0) > 0
    total = torch.where(use_w, sums.sum(0), fallback.sum(0))
    prefix = torch.where(use_w, (sums * before).sum(0), (fallback * before).sum(0))
    weights = torch.where(use_w[:, None], W, Wp)
    local = weights.sum(1)
    t = mulhi64(U, total) - prefix
    owner = (total > 0) & (t >= 0) & (t < local)
    idx = torch.searchsorted(weights.cumsum(1), t.clamp(min=0)[:, None], right=True).squeeze(1)
    tok = torch.where(owner, idx + vocab_start, -1)
    return comm.all_reduce(tok, "max", "drawn token")
