"""The value check of ``draft_probs`` (the argument layer's, ``specops._args.prepare``): every
row the walk may read is a probability row.  Its own module: it reads the canonical
arguments (``specops._args.Canonical``) by attribute only."""
from __future__ import annotations

import importlib
import math

import torch

DRAFT_PROBS_TOLERANCE = 1e-2                # |row sum - 1| allowed in a checked draft_probs row


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


_NATIVE = []  # [probs_summary or None], resolved at the first check


def _native_probs_summary(q):
    """(lo, hi, smallest row sum, largest row sum) of a CPU float32 [rows, V] tensor by the C++
    backend's one-read pass (specops._C.probs_summary, rows on torch's thread count), or None
    where that backend is not built or q is not such a tensor (then torch reductions)."""
    if not _NATIVE:
        try:   # (by name: the argument layer does not import the backends' module)
            _NATIVE.append(importlib.import_module("specops._C").probs_summary)
        except (ImportError, AttributeError):
            _NATIVE.append(None)
    fn = _NATIVE[0]
    if fn is None or not (q.is_cpu and q.dtype is torch.float32 and q.dim() == 2):
        return None
    rows, V = q.shape
    s0, s1 = q.stride()
    if rows and (s1 != 1 or s0 < V):
        return None
    return fn(q.data_ptr(), rows, V, s0, torch.get_num_threads())


def check_draft_probs(a, shard: bool = False) -> None:
    """Every draft_probs row the walk may read is a probability row: finite, every entry in
    [0, 1], summing to 1 within ``DRAFT_PROBS_TOLERANCE`` (a shard: the range only).
    ValueError naming the first bad row; a row with entries outside [0, 1] is most likely
    logits, and the message says so.  One read of the rows (a min, max and sum per row: the C++
    pass where the backend is built, else torch's reductions); the search for the first bad
    row the walk reads runs only when it fails (padding rows need not be probability rows)."""
    q = a.draft
    summary = _native_probs_summary(q)
    total = None
    if summary is not None:                               # the C++ pass: one read, threaded
        lo, hi, slo, shi = summary
        if lo >= 0 and hi <= 1 and (shard or (1 - DRAFT_PROBS_TOLERANCE <= slo
                                              and shi <= 1 + DRAFT_PROBS_TOLERANCE)):
            return
    else:
        lo, hi = (float(v) for v in torch.aminmax(q))     # NaN shows as NaN: fails below
        total = None if shard else q.sum(-1)
        if lo >= 0 and hi <= 1:                           # every row, read or not, is fine
            if shard:
                return
            slo, shi = (float(v) for v in torch.aminmax(total))
            if 1 - DRAFT_PROBS_TOLERANCE <= slo and shi <= 1 + DRAFT_PROBS_TOLERANCE:
                return
    if total is None and not shard:                       # (some row fails: find it)
        total = q.sum(-1)
    used, pos = used_draft_rows(a)                        # some row is not: is it read?
    at = pos.clamp(0, q.shape[0] - 1)
    rlo, rhi = q.amin(-1), q.amax(-1)
    bad_range = ~((rlo >= 0) & (rhi <= 1))
    bad = bad_range if shard else bad_range | ~((total - 1).abs() <= DRAFT_PROBS_TOLERANCE)
    hit = used & bad[at]
    if not bool(hit.any()):
        return
    b, j = (int(v) for v in hit.nonzero()[0])
    r = int(pos[b, j])
    where = f"draft_probs row {r} (request {b}, draft position {j})"
    if not (math.isfinite(float(rlo[r])) and math.isfinite(float(rhi[r]))):
        raise ValueError(f"{where} holds NaN or inf: draft_probs rows must be the "
                         "probabilities the drafts were drawn from")
    if bool(bad_range[r]):
        raise ValueError(f"{where} has entries outside [0, 1] (min {float(rlo[r]):.4g}, max "
                         f"{float(rhi[r]):.4g}): did you pass logits? use draft_logits= for "
                         "the draft model's logits")
    raise ValueError(f"{where} sums to {float(total[r]):.6g}, not 1 (within "
                     f"{DRAFT_PROBS_TOLERANCE}): draft_probs rows must be the probabilities "
                     "the drafts were drawn from (did you pass logits? use draft_logits=)")
