"""The sampling transform (reference section 2) and the row checks (section 3) on a
vocabulary shard, with the row statistics reduced across ranks (section 12).

Plain torch operations on the shard's device, each one correctly rounded on its own (eager
torch never fuses a multiply into an add), so ``pexp`` and the masses equal the reference's
bit for bit.  Rows arrive as blocks (the target's rows, the draft-logits rows) whose
statistics share each collective.  The element-wise torch work runs a few rows at a time, so
that each chain of operations stays in cache (about 6x faster than whole tensors on a CPU).
On the CPU the logits rows take the C++ passes instead (``_native``: the same numbers, one
native pass per row and step; tests/test_shard_passes.py holds them equal).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional

import torch

from specops import reference as _ref
from specops._contract import malformed_params
from specops.backends import registry
from specops.distributed._radix import key_float, pack_max, radix_select, signed_key, \
    unpack_max

_native = registry.shard_passes()      # the C++ passes on CPU shards (or unusable)

_F32 = {name: float(getattr(_ref, name)) for name in
        ("EXP_CUTOFF", "EXP_LOG2E", "EXP_ROUND", "EXP_LN2_HI", "EXP_LN2_LO")}
_COEFFS = [float(c) for c in _ref.EXP_COEFFS]
_FLT_MIN = float(_ref.FLT_MIN)
E_SCALE = float(2 ** _ref.E_SCALE_BITS)
CHUNK_ELEMENTS = 1 << 18            # per chunk on the CPU: 1 MiB of float32
GPU_CHUNK_ELEMENTS = 1 << 24        # per chunk on a GPU: 64 MiB of float32


class ShardRows(NamedTuple):
    """p [R, V_local] float32: this shard's columns of each row's probabilities (a
    probability row's own values where it is not greedy); valid [R] bool; argmax [R] int64:
    the global lowest-index argmax of the row (logits, or probabilities).  ``pending``
    (``lazy`` transforms only, else None): the rows whose p is not written yet, which hold
    e instead (``Pending``: ``finish`` writes them, ``p_at`` reads p from e)."""
    p: torch.Tensor
    valid: torch.Tensor
    argmax: torch.Tensor
    pending: Optional["Pending"] = None
    peeked: Optional[torch.Tensor] = None


class Pending:
    """The renormalisation of the hot rows left for later (C++ passes only): most rows of a
    call are read at one column (p(y)) or not at all, so writing p for every row (a read and
    a write of the rows' size) is work nobody reads.  ``left`` [R] bool: rows still holding
    e; ``cut`` [R] float32, ``div`` [R] float64: their renormalisation (the same numbers
    ``materialize`` takes, so a row finished late equals one finished at once)."""

    def __init__(self, p: torch.Tensor, left: torch.Tensor, cut: torch.Tensor,
                 div: torch.Tensor):
        self.p, self.left, self.cut, self.div = p, left, cut, div

    def finish(self, rows: torch.Tensor) -> None:
        """Writes p into the rows ``rows`` (any shape of row indices into ``p``) still
        holding e; one native call over the buffer (rows not asked for are skipped)."""
        want = torch.zeros_like(self.left)
        want[rows.reshape(-1)] = True
        want &= self.left
        if bool(want.any()):
            _native.materialize(self.p, want, self.cut, self.div)
            self.left &= ~want

    def p_at(self, rows: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
        """p from ``vals`` read at rows ``rows`` (same shape): where the row still holds e,
        the renormalisation of that one entry (the torch path's formula, which the C++ pass
        equals bit for bit: tests/test_shard_passes.py)."""
        left = self.left[rows]
        e = vals
        p = (e.double() * E_SCALE / self.div[rows]).float()
        p = torch.where((e >= self.cut[rows]) & (p >= _FLT_MIN), p, 0.0)
        return torch.where(left, p, vals)


class RowSource(NamedTuple):
    """The rows of one block, in (request, position) order: ``tensor`` itself (``index``
    None) or ``tensor[index]`` (``index`` [R] int64 inside the tensor, or any index into a
    tensor of no rows: zeros), read a few rows at a time."""
    tensor: torch.Tensor
    index: Optional[torch.Tensor]
    is_probs: bool

    @property
    def n(self) -> int:
        return self.tensor.shape[0] if self.index is None else self.index.shape[0]

    def take(self, lo: int, hi: int) -> torch.Tensor:
        if self.index is None:
            return self.tensor[lo:hi]
        if self.tensor.shape[0] == 0:
            return self.tensor.new_zeros((hi - lo, self.tensor.shape[1]))
        return self.tensor[self.index[lo:hi]]


def chunk_rows(width: int, device) -> int:
    """How many rows of ``width`` elements make one chunk on ``device``: on the CPU about
    1 MiB of float32 (each chain of element-wise operations stays in cache, about 6x faster
    than whole tensors), on a GPU 64 MiB (big enough to fill it); either way the transient
    memory of a call is bounded by a few chunks, whatever B and K."""
    budget = CHUNK_ELEMENTS if torch.device(device).type == "cpu" else GPU_CHUNK_ELEMENTS
    return max(1, budget // max(width, 1))


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


def _spans(blocks: List[RowSource], Vl: int, device, whole_logits: bool = False):
    """(r0, r1, is_probs): consecutive ranges of a few rows, never across two blocks
    (``whole_logits``: a block of logits in one range, for the C++ passes, which run it a row
    at a time: one call per block instead of one per few rows)."""
    r0 = 0
    for src in blocks:
        step = max(src.n, 1) if whole_logits and not src.is_probs else chunk_rows(Vl, device)
        for lo in range(0, src.n, step):
            yield r0 + lo, r0 + min(src.n, lo + step), src.is_probs
        r0 += src.n


def _block_of(blocks: List[RowSource], r: int) -> int:
    """The index of the block holding row r."""
    for i, src in enumerate(blocks):
        if r < src.n:
            return i
        r -= src.n
    raise IndexError(r)


def _row_stats(rows, is_probs, inv_t, greedy, gidx):
    """[c, 5] int64 of round 1: packed (max, argmax), packed max x, bad, not all -inf (logits,
    x)."""
    one = torch.ones(rows.shape[0], dtype=torch.int64, device=rows.device)
    if is_probs:
        p = rows.float()
        inside = (p >= 0) & (p <= 1)
        pz = torch.where(inside, p, -1.0)
        am = pz.argmax(1)
        return torch.stack([pack_max(pz.gather(1, am[:, None]).squeeze(1), gidx[am]), one,
                            (~inside).any(1).long(), one, one], 1)
    lg = rows.float()
    x = lg * inv_t[:, None]
    # amax propagates NaN and shows +inf and all -inf; a row with NaN is invalid, so its
    # argmax and maxima (whatever they are) are never used.
    lmax, xmax = lg.amax(1), x.amax(1)
    am = lg.argmax(1)
    bad = torch.isnan(lmax) | (lmax == float("inf"))
    bad |= (torch.isnan(xmax) | (xmax == float("inf"))) & ~greedy
    return torch.stack([pack_max(lg.gather(1, am[:, None]).squeeze(1), gidx[am]),
                        pack_max(xmax, torch.zeros_like(am)), bad.long(),
                        (lmax != float("-inf")).long(), (xmax != float("-inf")).long()], 1)


def transform(comm, blocks: List[RowSource], inv_t, top_k, top_p, min_p,
              vocab_start: int, V: int, has_topk: bool, has_topp: bool,
              sampled: bool = True, lazy: Optional[torch.Tensor] = None,
              peek=None) -> ShardRows:
    """Rows of every block with per-row parameters [R] (the blocks' rows in order) ->
    ``ShardRows``.  ``has_topk`` / ``has_topp``: whether any row may filter (False leaves
    the radix rounds out); ``sampled``: whether any row may be non-greedy (False leaves the
    exp pass out).  The rows are copied (as float32, exact) into the output buffer a few at
    a time and transformed there: the output is the only buffer of the rows' size (on the
    CPU the C++ passes read float32 logits in place and write x into the buffer, which is
    reused between calls: ``_native.buffer``).

    ``sampled`` False (every row greedy on every rank): p is not written at all (the walk
    reads only valid and argmax then) and, with logits rows only, the masses (all zero) are
    not exchanged.  ``lazy`` [R] bool (C++ passes only): rows whose renormalisation may be
    left pending (``ShardRows.pending``).  ``peek`` (rows [n], columns [n], own [n], extra
    [n] int64 tensors): the float32 bits of the buffer at (row, column) after the exp pass
    where own (0 elsewhere), and the extra columns, summed over the ranks in the masses'
    exchange: ``ShardRows.peeked`` [R, 1 + len(extra)] (zero on rows not named)."""
    dev = inv_t.device
    R = inv_t.shape[0]
    Vl = blocks[0].tensor.shape[-1]
    gidx = torch.arange(Vl, device=dev, dtype=torch.int64) + vocab_start
    greedy = inv_t == 0
    native = _native.usable(dev)
    spans = list(_spans(blocks, Vl, dev, native))
    # On the CPU the logits rows go through the C++ passes (_native), which read float32
    # logits where they are (no copy) and leave x = l inv_t in the buffer: x_of then reads
    # it as it is.  The buffer is the thread's reused one there (_native.buffer).
    p_out = _native.buffer(R, Vl) if native else \
        torch.empty((R, Vl), dtype=torch.float32, device=dev)
    is_logits = torch.zeros(R, dtype=torch.bool, device=dev)
    direct = [native and not src.is_probs and _native.readable(src.tensor) for src in blocks]
    r0 = 0
    for src, in_place in zip(blocks, direct):
        for lo, hi, _ in ([] if in_place else _spans([src], Vl, dev)):
            p_out[r0 + lo:r0 + hi] = src.take(lo, hi)
        is_logits[r0:r0 + src.n] = not src.is_probs
        r0 += src.n

    # Round 1 (max): validity flags, max x, lowest-index argmax.
    stats = torch.empty((R, 5), dtype=torch.int64, device=dev)
    b0 = 0
    for src, in_place in zip(blocks, direct):
        if in_place:                 # one call for the block: the C++ runs it row by row
            b1 = b0 + src.n
            rows = torch.arange(src.n) if src.index is None else src.index
            stats[b0:b1] = _native.stats(p_out[b0:b1], inv_t[b0:b1], vocab_start,
                                         src.tensor, rows)
        b0 += src.n
    for r0, r1, is_probs in spans:
        if native and not is_probs:
            if not direct[_block_of(blocks, r0)]:
                stats[r0:r1] = _native.stats(p_out[r0:r1], inv_t[r0:r1], vocab_start)
            continue
        stats[r0:r1] = _row_stats(p_out[r0:r1], is_probs, inv_t[r0:r1], greedy[r0:r1], gidx)
    stats = comm.all_reduce(stats, "max", "row max / argmax / validity")
    _, argmax = unpack_max(stats[:, 0])
    m, _ = unpack_max(stats[:, 1])
    valid = (stats[:, 2] == 0) & (stats[:, 3] == 1) & (greedy | (stats[:, 4] == 1)) \
        & ~malformed_params(inv_t, top_k, top_p, min_p, False)
    hot = is_logits & valid & ~greedy
    logit_spans = [(r0, r1) for r0, r1, is_probs in spans if not is_probs and sampled]

    def x_of(r0, r1):                # NaN only in invalid rows, whose results are unused
        return p_out[r0:r1] if native else p_out[r0:r1] * inv_t[r0:r1, None]

    def hist_of(weighted):           # the native radix rounds: one pass per row and round
        def rows_hist(shift, prefix, out):
            for r0, r1 in logit_spans:
                _native.hist(p_out[r0:r1], weighted, shift, prefix[r0:r1], out[r0:r1])
        return rows_hist if native else None

    # top-k (four sum-rounds): thr = the k-th largest x.
    k_on = hot & (top_k > 0) & (top_k < V)
    thr = torch.full((R,), float("-inf"), device=dev)
    if has_topk and logit_spans:
        key, _ = radix_select(
            comm, R, lambda: ((r0, signed_key(x_of(r0, r1)), None)
                              for r0, r1 in logit_spans),
            lambda c: c >= top_k[:, None], "top-k histogram", dev, hist_of(False))
        thr = torch.where(k_on, key_float(key), thr)

    # Masses (one sum-round): e over the logits in the output buffer, S and the min-p mass.
    mass = torch.zeros((R, 2), dtype=torch.int64, device=dev)
    for r0, r1, is_probs in spans:
        if is_probs:
            p = p_out[r0:r1]
            inside = (p >= 0) & (p <= 1)
            mass[r0:r1, 0] = torch.where(inside, p.double() * float(2 ** _ref.P_CHECK_BITS),
                                         0.0).to(torch.int64).sum(1)
            continue
        if not sampled:                  # every row greedy: p is not read (docstring)
            continue
        if native:
            mass[r0:r1] = _native.masses(p_out[r0:r1], m[r0:r1], thr[r0:r1], hot[r0:r1],
                                         min_p[r0:r1])
            continue
        x = x_of(r0, r1)
        keep = (x >= thr[r0:r1, None]) & hot[r0:r1, None]
        e = torch.where(keep, pexp(x - m[r0:r1, None]), 0.0)
        p_out[r0:r1] = e
        E = (e * E_SCALE).to(torch.int64)
        mass[r0:r1, 0] = E.sum(1)
        mass[r0:r1, 1] = torch.where(e >= min_p[r0:r1, None], E, 0).sum(1)
    peeked = None
    if peek is not None:
        ri, col, own, extra = peek
        cols = torch.zeros((R, 1 + len(extra)), dtype=torch.int64, device=dev)
        v = p_out[ri, col].view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        cols[ri.reshape(-1), 0] = torch.where(own, v, 0).reshape(-1)
        for i, x in enumerate(extra):
            cols[ri.reshape(-1), 1 + i] = x.reshape(-1)
        mass = comm.all_reduce(torch.cat([mass, cols], 1), "sum", "masses, p(y), q(y)")
        mass, peeked = mass[:, :2], mass[:, 2:]
    elif sampled or any(src.is_probs for src in blocks):
        mass = comm.all_reduce(mass, "sum", "masses")
    total = mass[:, 0]
    valid &= is_logits | ((total > 0) & (total <= (1 << (_ref.P_CHECK_BITS + 2))))

    # top-p (four sum-rounds): tau and the mass of e >= tau; then the renormaliser.
    S_keep = torch.where(min_p > 0, mass[:, 1], mass[:, 0])
    p_on = hot & (top_p < 1)
    tau = torch.zeros(R, device=dev)
    if has_topp and logit_spans:
        goal = top_p.double() * mass[:, 0].double()
        key, S_tau = radix_select(
            comm, R, lambda: ((r0, p_out[r0:r1].view(torch.int32),
                               (p_out[r0:r1] * E_SCALE).to(torch.int64))
                              for r0, r1 in logit_spans),
            lambda c: c.double() >= goal[:, None], "top-p histogram", dev, hist_of(True))
        tau = torch.where(p_on, key_float(key), tau)
        S_keep = torch.where(p_on & ~(min_p > tau), S_tau, S_keep)
    cut = torch.maximum(tau, min_p)
    div = S_keep.clamp(min=1).double()
    if not sampled:
        return ShardRows(p_out, valid, argmax)
    pending = None
    if native and lazy is not None and logit_spans:
        pending = Pending(p_out, hot & lazy, cut, div)
        hot = hot & ~lazy
    for r0, r1 in logit_spans:
        if native:
            _native.materialize(p_out[r0:r1], hot[r0:r1], cut[r0:r1], div[r0:r1])
            continue
        e = p_out[r0:r1]
        p = (e.double() * E_SCALE / div[r0:r1, None]).float()
        p_out[r0:r1] = torch.where((e >= cut[r0:r1, None]) & (p >= _FLT_MIN), p, 0.0)
    # Greedy rows (logits or probabilities): one-hot at the global argmax.
    if native:                       # only the greedy rows are written
        g_rows = (greedy & valid).nonzero().squeeze(1)
        p_out[g_rows] = 0.0
        local = argmax[g_rows] - vocab_start
        own = (local >= 0) & (local < Vl)
        p_out[g_rows[own], local[own]] = 1.0
        return ShardRows(p_out, valid, argmax, pending, peeked)
    for r0, r1, _ in spans:
        onehot = gidx[None, :] == argmax[r0:r1, None]
        p_out[r0:r1] = torch.where((greedy & valid)[r0:r1, None], onehot.float(), p_out[r0:r1])
    return ShardRows(p_out, valid, argmax)
