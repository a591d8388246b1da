"""The C++ backend's shard-local passes (``specops._C.shard_*``, csrc/distributed/): what
``specops.distributed`` runs on CPU shards, reached through ``registry.shard_passes()``.
Each wrapper computes exactly what the torch code of ``specops.distributed``'s
``_transform`` / ``_radix`` / ``_walk`` computes for the same rows (tests/test_shard_passes.py
holds them equal at every ISA level), in one native pass per row instead of a chain of eager
operations.  The collectives stay in torch.distributed; CUDA shards keep the torch path.

The buffers are passed by address, every field by name (csrc/bindings/shard.cpp): every
wrapper checks the dtype, device and layout of what it hands over and keeps the tensors alive
for the call."""
from __future__ import annotations

import threading
from typing import NamedTuple, Optional

import torch

from specops.backends import native

try:
    import specops._C as _C
except ImportError:                 # the C++ extension is not built: the torch path only
    _C = None
if _C is not None and native.stale(_C):
    raise ImportError(native.stale(_C))
_HAS = _C is not None

_ENABLED = [True]                   # tests switch the torch path on for a comparison


def usable(device) -> bool:
    """Whether the native passes run for tensors on ``device``."""
    return _HAS and _ENABLED[0] and torch.device(device).type == "cpu"


_BUFFERS = threading.local()


def buffer(n: int, width: int) -> torch.Tensor:
    """An [n, width] float32 CPU buffer for the transformed rows, reused between the calls
    of a thread (grown on demand, never shrunk, as the C++ backend's workspace): a fresh
    buffer of the rows' size costs its page faults (about 10 ms for 40 MB) on every call.
    The buffer lives as long as the thread: ``release_buffers`` frees this thread's."""
    need = n * width
    held = getattr(_BUFFERS, "rows", None)
    if held is None or held.numel() < need:
        held = _BUFFERS.rows = torch.empty(need, dtype=torch.float32)
    return held[:need].view(n, width)


def release_buffers() -> None:
    """Frees the calling thread's reused buffer."""
    _BUFFERS.rows = None


def _threads() -> int:
    return max(1, torch.get_num_threads())


def _rows(t: torch.Tensor) -> torch.Tensor:
    if t.dtype != torch.float32 or t.device.type != "cpu" or t.dim() != 2 or \
            (t.shape[0] > 1 and t.stride(1) != 1) or (t.shape[1] > 1 and t.stride(1) != 1):
        raise ValueError("native shard pass: rows must be a [n, V] float32 CPU tensor with "
                         "unit column stride")
    return t


def _vec(t: torch.Tensor, dtype, n: int) -> torch.Tensor:
    t = t.to(device="cpu", dtype=dtype).contiguous()
    if t.numel() != n:
        raise ValueError(f"native shard pass: a vector of {t.numel()} entries for {n} rows")
    return t


def readable(t: torch.Tensor) -> bool:
    """Whether the C++ passes read ``t`` [N, V] in place (float32 CPU rows, unit column
    stride, at least one row)."""
    return t.dtype == torch.float32 and t.device.type == "cpu" and t.dim() == 2 and \
        t.shape[0] > 0 and (t.shape[1] < 2 or t.stride(1) == 1)


def stats(rows: torch.Tensor, inv_t: torch.Tensor, vocab_start: int,
          src: Optional[torch.Tensor] = None, src_rows=None) -> torch.Tensor:
    """``_transform._row_stats`` of logits rows: the logits are ``rows`` themselves, or the
    rows ``src_rows`` [n] of ``src`` (``readable``); ``rows`` becomes x = l inv_t."""
    rows = _rows(rows)
    n, V = rows.shape
    it = _vec(inv_t, torch.float32, n)
    out = torch.empty((n, 5), dtype=torch.int64)
    sr = None
    if src is not None:
        src = _rows(src)
        sr = _vec(src_rows, torch.int64, n)
        if src.shape[1] != V or (n and (int(sr.min()) < 0 or int(sr.max()) >= src.shape[0])):
            raise ValueError("native shard pass: source rows outside the source tensor")
    _C.shard_stats(src=0 if src is None else src.data_ptr(),
                   src_row=0 if sr is None else sr.data_ptr(),
                   src_stride=0 if src is None else src.stride(0), rows=rows.data_ptr(), n=n,
                   V=V, stride=rows.stride(0), inv_t=it.data_ptr(),
                   vocab_start=int(vocab_start), stats=out.data_ptr(), threads=_threads())
    return out


def masses(rows, m, thr, hot, min_p) -> torch.Tensor:
    """In place e = hot ? (x >= thr ? pexp(x - m) : 0) : 0 over x rows; [n, 2] int64 masses
    (all of E, E where e >= min_p)."""
    rows = _rows(rows)
    n, V = rows.shape
    vs = [_vec(m, torch.float32, n), _vec(thr, torch.float32, n), _vec(hot, torch.bool, n),
          _vec(min_p, torch.float32, n)]
    out = torch.empty((n, 2), dtype=torch.int64)
    _C.shard_masses(rows=rows.data_ptr(), n=n, V=V, stride=rows.stride(0),
                    m=vs[0].data_ptr(), thr=vs[1].data_ptr(), hot=vs[2].data_ptr(),
                    min_p=vs[3].data_ptr(), mass=out.data_ptr(), threads=_threads())
    return out


def hist(rows, weighted: bool, shift: int, prefix, out: torch.Tensor) -> None:
    """Adds one radix round's [n, 256] histogram into ``out`` (int64, contiguous)."""
    rows = _rows(rows)
    n, V = rows.shape
    if out.dtype != torch.int64 or not out.is_contiguous() or tuple(out.shape) != (n, 256):
        raise ValueError("native shard pass: hist must be a contiguous [n, 256] int64 tensor")
    pre = _vec(prefix, torch.int64, n)
    _C.shard_hist(rows=rows.data_ptr(), n=n, V=V, stride=rows.stride(0), weighted=weighted,
                  shift=shift, prefix=pre.data_ptr(), hist=out.data_ptr(), threads=_threads())


def materialize(rows, hot, cut, div) -> None:
    """In place over the hot rows: p = e >= cut ? flush(float32(e 2^40 / div)) : 0."""
    rows = _rows(rows)
    n, V = rows.shape
    vs = [_vec(hot, torch.bool, n), _vec(cut, torch.float32, n), _vec(div, torch.float64, n)]
    _C.shard_materialize(rows=rows.data_ptr(), n=n, V=V, stride=rows.stride(0),
                         hot=vs[0].data_ptr(), cut=vs[1].data_ptr(), div=vs[2].data_ptr(),
                         threads=_threads())


BONUS, RESIDUAL, BLOCK, MIN = 0, 1, 2, 3


class Refs(NamedTuple):
    """Rows of n requests (see shard_passes.h RowRefs): p row ``p_row`` of ``p``; q row
    ``q_row`` of ``q`` (q None: the point mass at local column ``y``, -1 off this shard);
    ``kind`` [n] (BONUS, RESIDUAL, BLOCK, MIN); ``rho`` [n] float64 (BLOCK)."""
    p: torch.Tensor
    p_row: torch.Tensor
    q: Optional[torch.Tensor]
    q_row: Optional[torch.Tensor]
    y: torch.Tensor
    kind: torch.Tensor
    rho: torch.Tensor

    def args(self):
        n = self.p_row.numel()
        p = _rows(self.p)
        q = None if self.q is None else _rows(self.q)
        vs = [_vec(self.p_row, torch.int64, n),
              _vec(self.q_row if self.q_row is not None else torch.full((n,), -1), torch.int64,
                   n),
              _vec(self.y, torch.int64, n), _vec(self.kind, torch.int8, n),
              _vec(self.rho, torch.float64, n)]
        for v, hi in ((vs[0], p.shape[0]), (vs[1], 0 if q is None else q.shape[0])):
            if n and int(v.max()) >= hi:
                raise ValueError("native shard pass: a row index outside its tensor")
        if n and int(vs[0].min()) < 0:
            raise ValueError("native shard pass: a negative p row")
        keep = (p, q, *vs)
        kw = dict(p=p.data_ptr(), p_row=vs[0].data_ptr(), p_stride=p.stride(0),
                  q=0 if q is None else q.data_ptr(), q_row=vs[1].data_ptr(),
                  q_stride=0 if q is None else q.stride(0), y=vs[2].data_ptr(),
                  kind=vs[3].data_ptr(), rho=vs[4].data_ptr(), n=n, V=p.shape[1])
        return kw, keep


def row_sums(refs: Refs, want_p: bool) -> torch.Tensor:
    """[n, 2] int64: each row's weight sum under its kind and (want_p) its trunc(p 2^60)
    sum."""
    kw, keep = refs.args()
    out = torch.empty((kw["n"], 2), dtype=torch.int64)
    _C.shard_row_sums(**kw, want_p=want_p, out=out.data_ptr(), threads=_threads())
    del keep
    return out


def draw_search(refs: Refs, t: torch.Tensor) -> torch.Tensor:
    """[n] int64: searchsorted(cumsum(weights), t, right=True) where t >= 0, else 0."""
    kw, keep = refs.args()
    tt = _vec(t, torch.int64, kw["n"])
    idx = torch.zeros(kw["n"], dtype=torch.int64)
    _C.shard_draw_search(**kw, t=tt.data_ptr(), idx=idx.data_ptr(), threads=_threads())
    del keep
    return idx


def stream(seed: torch.Tensor, offset: torch.Tensor, positions: int, tag: int):
    """``_contract.stream`` (the Philox words (w0, w1) [B, positions] at (j, tag)) in one
    native loop (core/philox.h, the CPU backend's Philox): the torch int64 version costs
    about 1-2 ms per call in eager operations.  CPU tensors only."""
    n = seed.shape[0]
    sd, of = _vec(seed, torch.int64, n), _vec(offset, torch.int64, n)
    w0 = torch.empty((n, positions), dtype=torch.int64)
    w1 = torch.empty((n, positions), dtype=torch.int64)
    _C.shard_stream(seed=sd.data_ptr(), offset=of.data_ptr(), n=n, positions=positions,
                    tag=int(tag), w0=w0.data_ptr(), w1=w1.data_ptr())
    return w0, w1
