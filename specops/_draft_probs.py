"""The value checks of ``draft_probs`` (reference section 8), on the canonical arguments
(``specops._args.Canonical``, read by attribute only).

* ``validate=True``: ``check_draft_probs`` before the walk, every row the walk may read (a
  shard's rows, ``specops.distributed``: their range only).
* the default (``validate=None``, CPU tensors): the walk itself checks what it reads anyway
  (``specops::verify`` with ``check_draft``; reference ``walk.draft_check``): ``q_j(y_j)`` at
  every accepted position and the whole row the token was drawn from.  A backend whose walk
  does not report it gets ``draft_bad_after`` (the same decision, computed from the walk's
  outputs).  ``raise_draft_bad`` turns the walk's answer into the ValueError, after the walk
  and before anything is returned.

A probability row: every entry finite and in [0, 1], and its mass
``sum trunc(q * 2**32)`` within ``DRAFT_MASS_TOLERANCE`` of ``2**32`` (an integer sum: the
same decision on every backend, ISA level and memory layout).
"""
from __future__ import annotations

import math

import torch

from specops.reference.constants import (DRAFT_MASS_TOLERANCE, DRAFT_PROBS_TOLERANCE,  # noqa
                                         P_CHECK_BITS)

_ONE = 1 << P_CHECK_BITS


def used_draft_rows(a):
    """-> (used [B, max_k] bool, pos [B, max_k] int64): the draft rows the walk may read
    (positions before the effective block length of reference section 1: ``j < num_draft``
    and before the first id -1, rows inside [0, T)), and the row index of each position,
    ``draft_row_start + j``."""
    T = a.draft_ids.shape[0]
    j = torch.arange(a.max_k, device=a.num_draft.device)
    pos = a.draft_row_start[:, None] + j[None, :]
    inside = (pos >= 0) & (pos < T)
    ids = a.draft_ids[pos.clamp(0, max(T - 1, 0))]
    live = inside & (j[None, :] < a.num_draft[:, None]) & (ids != -1)
    return live.to(torch.int8).cumprod(1).bool(), pos


def _row_faults(q: torch.Tensor, shard: bool):
    """(bad_range [rows], bad_mass [rows]) of draft rows."""
    bad_range = ~((q >= 0) & (q <= 1)).all(-1)                   # NaN fails
    if shard:
        return bad_range, torch.zeros_like(bad_range)
    mass = (q * float(_ONE)).to(torch.int64).sum(-1)    # exact where the range holds (only
    return bad_range, ~bad_range & ((mass - _ONE).abs() > DRAFT_MASS_TOLERANCE)   # used there)


def check_draft_probs(a, shard: bool = False) -> None:
    """``validate=True``: every draft_probs row the walk may read is a probability row (a
    shard: the range only).  ValueError naming the first bad row read (padding rows need not
    be probability rows)."""
    q = a.draft
    if q is None or q.shape[0] == 0:
        return
    bad_range, bad_mass = _row_faults(q, shard)
    if not bool((bad_range | bad_mass).any()):
        return
    used, pos = used_draft_rows(a)
    hit = used & (bad_range | bad_mass)[pos.clamp(0, q.shape[0] - 1)]
    if bool(hit.any()):
        b, j = (int(v) for v in hit.nonzero()[0])
        _raise(q, int(pos[b, j]), b, j)


def draft_bad_after(a, num_accepted, valid) -> torch.Tensor:
    """[B] int32: reference ``walk.draft_check`` of every request from the walk's outputs
    (the first draft position whose checked values are not probabilities, -1 if none).
    Reads what the walk read: ``q(y)`` of the accepted positions and at most one row per
    request (the one its token was drawn from)."""
    q, B = a.draft, a.batch
    bad = torch.full((B,), -1, dtype=torch.int32)
    if q is None or not a.draft_is_probs or B == 0 or a.max_k == 0 or q.shape[0] == 0:
        return bad
    inv = a.inv_temp if isinstance(a.inv_temp, torch.Tensor) else torch.full((B,), a.inv_temp)
    used, pos = used_draft_rows(a)
    rows = pos.clamp(0, q.shape[0] - 1)
    j = torch.arange(a.max_k)[None, :]
    n = num_accepted.long().cpu()[:, None]
    sampled = (inv.cpu() != 0)[:, None]
    y = a.draft_ids[rows].clamp(0, q.shape[1] - 1)
    q_y = q[rows, y]
    faults = used & (j < n) & sampled & ~((q_y >= 0) & (q_y <= 1))
    kb = used.sum(1, keepdim=True)
    drawn = (used & (j == n) & (n < kb) & valid.cpu()[:, None] & sampled).nonzero()
    if drawn.numel():                           # the rows tokens were drawn from, at most B
        r = rows[drawn[:, 0], drawn[:, 1]]
        bad_range, bad_mass = _row_faults(q[r], False)
        hit = drawn[bad_range | bad_mass]
        faults[hit[:, 0], hit[:, 1]] = True
    first = torch.where(faults, j.expand_as(faults), a.max_k).min(1).values
    return torch.where(first < a.max_k, first, -1).to(torch.int32)


def raise_draft_bad(a, draft_bad) -> None:
    """The ValueError of the default call's check: the first request whose walk found a
    draft_probs value or row that is not a probability (``draft_bad`` >= 0)."""
    if draft_bad.numel() <= 64:                 # one read of a few values, no kernels
        if max(draft_bad.tolist(), default=-1) < 0:
            return
    elif int(draft_bad.max()) < 0:
        return
    b = int((draft_bad >= 0).nonzero()[0, 0])
    j = int(draft_bad[b])
    _raise(a.draft, int(a.draft_row_start[b]) + j, b, j)


def _raise(q, r: int, b: int, j: int):
    where = f"draft_probs row {r} (request {b}, draft position {j})"
    row = q[r]
    lo, hi = float(row.min()), float(row.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{where} holds NaN or inf: draft_probs rows must be the "
                         "probabilities the drafts were drawn from")
    if lo < 0 or hi > 1:
        raise ValueError(f"{where} has entries outside [0, 1] (min {lo:.4g}, max {hi:.4g}): "
                         "did you pass logits? use draft_logits= for the draft model's logits")
    total = float(row.double().sum())
    raise ValueError(f"{where} sums to {total:.6g}, not 1 (within {DRAFT_PROBS_TOLERANCE}): "
                     "draft_probs rows must be the probabilities the drafts were drawn from "
                     "(did you pass logits? use draft_logits=)")
