"""``specops.sample_without_replacement``: reproducible sibling draws for rsd trees.

Gumbel top-k in its exponential-race form: token x gets the key ``E_x / q(x)`` with
``E_x = -log(u_x)`` an Exp(1) variable (compared as ``log(E_x) - log(q(x))``, the same order,
finite for every q(x) > 0 however small), and the k smallest keys, in increasing order, are k
draws without replacement from q in the order sequential sampling would make them
(Plackett-Luce).  ``u_x`` comes from the specops Philox stream (reference section 4) at
counter ``(x, DRAFT_TAG, offset_lo, offset_hi)`` with key ``seed``: ``U = w0 | (w1 << 32)``,
``u = (floor(U / 2**11) + 0.5) * 2**-53`` in (0, 1).  The verifier's coins use tags 0, 1 and
``2 * i`` (``i`` a sibling rank, far below 2**31), so a drafter and the verifier may share a
seed and an offset and their streams still never overlap: the siblings stay independent of
the coins that judge them, which exactness needs.

Philox runs in torch int64 arithmetic (each 32x32-bit product split so that nothing
overflows), on the tensors' device; it equals ``reference.philox4x32`` word for word.  The
keys use torch's float64 ``log``, so the drawn ids are reproducible on one device; across
devices they agree except where two keys tie to the last bit of a float64 log.
"""
from __future__ import annotations

from typing import Union

import numpy as np
import torch

from specops import _args
from specops._contract import philox4x32, words

__all__ = ["sample_without_replacement", "philox4x32", "DRAFT_TAG"]

DRAFT_TAG = 0xFFFFFFFF


def sample_without_replacement(probs: torch.Tensor, k: int,
                               seed: Union[int, torch.Tensor, np.ndarray],
                               offset: Union[int, torch.Tensor, np.ndarray] = 0,
                               validate: bool | None = None) -> torch.Tensor:
    """k draws without replacement from each row of ``probs`` [..., V] (float, any scale:
    NaN and negative entries count as 0), in the order sequential sampling makes them.

    ``seed`` and ``offset``: Python ints or int tensors of shape [...] (one stream per row;
    rows that must be independent need distinct (seed, offset) pairs).  Returns int64
    [..., k]; entries past the number of tokens with positive probability are -1.  The
    siblings of an rsd tree (``specops.verify_tree(method="rsd")``) are these draws from the
    parent's draft row."""
    _args.check_validate(validate)
    _args.check_tensor("probs", probs, (torch.float32, torch.float64, torch.bfloat16,
                                        torch.float16))
    if probs.dim() < 1 or probs.shape[-1] < 1:
        raise ValueError(f"probs must have shape [..., V] with V >= 1, got "
                         f"{tuple(probs.shape)}")
    V = probs.shape[-1]
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) \
            or not 1 <= k <= V:
        raise ValueError(f"k must be an int in [1, V={V}], got {k!r}")
    lead = probs.shape[:-1]
    rows = probs.reshape(-1, V).double()
    M, dev = rows.shape[0], probs.device

    def per_row(name, v):
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            if tuple(v.shape) != tuple(lead):
                raise ValueError(f"{name} must be an int or have shape {tuple(lead)}, got "
                                 f"{tuple(v.shape)}")
            v = v.reshape(-1)
        return _args.per_request(name, v, M, torch.int64, dev, None, validate=validate)

    s0, s1 = words(per_row("seed", seed))
    o0, o1 = words(per_row("offset", offset))
    x = torch.arange(V, device=dev, dtype=torch.int64)[None, :]
    w0, w1, _, _ = philox4x32(x, torch.full_like(x, DRAFT_TAG), o0[:, None], o1[:, None],
                              s0[:, None], s1[:, None])
    U = w0 | (w1 << 32)                               # the 64-bit pattern, as int64
    top53 = (U >> 11) & ((1 << 53) - 1)
    u = (top53.double() + 0.5) * 2.0 ** -53
    q = torch.nan_to_num(rows, nan=0.0).clamp(min=0.0)
    # log(E / q) = log(E) - log(q): the order of E / q, finite for every q > 0 (E / q
    # overflows to inf when q is subnormal, which used to drop such tokens)
    keys = torch.where(q > 0, torch.log(-torch.log(u)) - torch.log(q),
                       torch.full_like(q, float("inf")))
    vals, idx = torch.topk(keys, int(k), dim=-1, largest=False, sorted=True)
    idx = torch.where(torch.isinf(vals), torch.full_like(idx, -1), idx)
    return idx.reshape(*lead, int(k))
