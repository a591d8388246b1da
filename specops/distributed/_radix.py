"""Radix selection over vocabulary shards (reference section 12): the top-k and top-p
thresholds from [rows, 256] histograms summed across ranks, and the order keys and packed
maxima the row statistics use."""
from __future__ import annotations

from typing import Callable, Iterator, Tuple

import torch

M32 = 0xFFFFFFFF


def signed_key(v: torch.Tensor) -> torch.Tensor:
    """float32 -> int32 ordered like the floats (-0.0 taken as +0.0): a negative float's
    magnitude bits are flipped."""
    bits = (v + 0.0).view(torch.int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def key_float(key: torch.Tensor) -> torch.Tensor:
    """The inverse of ``signed_key`` (the same bit flip), from any integer dtype."""
    k = key.to(torch.int32)
    return (k ^ ((k >> 31) & 0x7FFFFFFF)).view(torch.float32)


def pack_max(v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """One int64 whose maximum over ranks is the largest v at its lowest global index."""
    return signed_key(v).to(torch.int64) * (1 << 32) + (M32 - index)


def unpack_max(packed: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    hi = torch.div(packed, 1 << 32, rounding_mode="floor")
    return key_float(hi), M32 - (packed - hi * (1 << 32))


def _hist(index: torch.Tensor, weights: torch.Tensor, R: int) -> torch.Tensor:
    """[R, 256] int64: the int64 weights of each (row, digit) bin (exact integer sums)."""
    return torch.zeros(R * 256, dtype=torch.int64, device=index.device).index_add_(
        0, index.reshape(-1), weights.reshape(-1)).view(R, 256)


def _choose(hist, above, reached):
    """The largest digit whose weight from the top (plus ``above``) is ``reached``."""
    from_top = hist.flip(1).cumsum(1).flip(1)              # weight of digits >= d
    d = (reached(above[:, None] + from_top).sum(1) - 1).clamp(min=0)
    last = hist.gather(1, d[:, None]).squeeze(1)
    return d, above + from_top.gather(1, d[:, None]).squeeze(1) - last, last


Chunks = Callable[[], Iterator[Tuple[int, torch.Tensor, object]]]


def radix_select(comm, R: int, chunks: Chunks, reached, what: str, device):
    """Per row, the largest key k such that ``reached(total weight of keys >= k)`` (a
    monotone test) holds, 8 bits per round with one [R, 256] sum-reduction each.
    ``chunks()`` yields ``(r0, keys, weights)`` for consecutive row ranges of a few rows:
    keys [c, n] int32 (``signed_key`` order), weights [c, n] int64 or None to count
    entries; it is called once per round, and each round counts the entries whose higher
    digits match those chosen so far (nothing of the rows' size is kept between rounds,
    and no value is read on the host).  Returns (key [R] int64 in int32 range, weight of
    the keys >= key [R])."""
    above = torch.zeros(R, dtype=torch.int64, device=device)
    prefix = torch.zeros(R, dtype=torch.int64, device=device)   # unsigned key order
    for shift in (24, 16, 8, 0):
        hist = torch.zeros((R, 256), dtype=torch.int64, device=device)
        for r0, keys, weights in chunks():
            c = keys.shape[0]
            k = keys.to(torch.int64) + (1 << 31)
            w = torch.ones_like(k) if weights is None else weights
            if shift < 24:                                       # inside the chosen bucket
                w = w * ((k >> (shift + 8)) == (prefix[r0:r0 + c, None] >> (shift + 8)))
            rows = torch.arange(c, device=device, dtype=torch.int64)[:, None]
            hist[r0:r0 + c] += _hist(rows * 256 + ((k >> shift) & 255), w, c)
        hist = comm.all_reduce(hist, "sum", what)
        d, above, last = _choose(hist, above, reached)
        prefix = prefix | (d << shift)
    return prefix - (1 << 31), above + last
