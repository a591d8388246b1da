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


def _hist(index: torch.Tensor, weights, R: int) -> torch.Tensor:
    """[R, 256] int64: the weights (counts if None) of each (row, digit) bin."""
    if weights is None:
        return torch.bincount(index, minlength=R * 256).view(R, 256)
    return torch.zeros(R * 256, dtype=torch.int64, device=index.device).index_add_(
        0, index, weights).view(R, 256)


def _choose(hist, above, reached):
    """The largest digit whose weight from the top (plus ``above``) is ``reached``."""
    from_top = hist.flip(1).cumsum(1).flip(1)              # weight of digits >= d
    d = (reached(above[:, None] + from_top).sum(1) - 1).clamp(min=0)
    last = hist.gather(1, d[:, None]).squeeze(1)
    return d, above + from_top.gather(1, d[:, None]).squeeze(1) - last, last


Chunks = Callable[[], Iterator[Tuple[int, torch.Tensor, object]]]


def radix_select(comm, R: int, chunks: Chunks, reached, what: str, device, hist_of=None):
    """Per row, the largest key k such that ``reached(total weight of keys >= k)`` (a
    monotone test) holds, 8 bits per round with one [R, 256] sum-reduction each.
    ``chunks()`` yields ``(r0, keys, weights)`` for consecutive row ranges of a few rows:
    keys [c, n] int32 (``signed_key`` order), weights [c, n] int64 or None to count
    entries; it is called once per round, and each round counts the entries whose higher
    digits match those chosen so far (nothing of the rows' size is kept between rounds).
    ``hist_of(shift, prefix, hist)``, where given, adds each round's histogram into ``hist``
    instead (the C++ passes, specops.backends.cpu_shard; ``chunks`` is then not called).
    Returns (key [R] int64 in int32 range, weight of the keys >= key [R])."""
    above = torch.zeros(R, dtype=torch.int64, device=device)
    prefix = torch.zeros(R, dtype=torch.int64, device=device)   # unsigned key order
    for shift in (24, 16, 8, 0):
        hist = torch.zeros((R, 256), dtype=torch.int64, device=device)
        if hist_of is not None:
            hist_of(shift, prefix, hist)
        for r0, keys, weights in (() if hist_of is not None else chunks()):
            c = keys.shape[0]
            k = keys.to(torch.int64) + (1 << 31)
            if shift == 24:
                r_i = torch.arange(c, device=device, dtype=torch.int64)[:, None]
                index, w = r_i * 256 + (k >> 24), weights
            else:                                                # inside the chosen bucket
                r_i, c_i = ((k >> (shift + 8)) == (prefix[r0:r0 + c, None] >> (shift + 8))
                            ).nonzero(as_tuple=True)
                index = r_i * 256 + ((k[r_i, c_i] >> shift) & 255)
                w = None if weights is None else weights[r_i, c_i]
            hist[r0:r0 + c] += _hist(index.reshape(-1), None if w is None else w.reshape(-1),
                                     c)
        hist = comm.all_reduce(hist, "sum", what)
        d, above, last = _choose(hist, above, reached)
        prefix = prefix | (d << shift)
    return prefix - (1 << 31), above + last
