"""The collectives of the sharded verifier, and a record of what they exchanged.

Every exchange goes through ``Comm`` so that ``record_exchange()`` can list each collective's
kind and payload (the benchmark's bytes come from a real call's record, not from a formula).
A world of one (no process group initialised, ``group=None``) runs the same code with the
collectives as identities.
"""
from __future__ import annotations

import contextlib
from typing import List, NamedTuple

import torch
import torch.distributed as dist


class Exchange(NamedTuple):
    """One collective: ``kind`` ("all_reduce_max", "all_reduce_sum", "all_gather" or
    "broadcast"), ``what`` (the statistic), ``shape`` and ``dtype`` of one rank's payload,
    ``nbytes`` of that payload."""
    kind: str
    what: str
    shape: tuple
    dtype: torch.dtype
    nbytes: int


_RECORDS: List[List[Exchange]] = []


@contextlib.contextmanager
def record_exchange():
    """Collect the ``Exchange`` list of every sharded call made inside the block."""
    log: List[Exchange] = []
    _RECORDS.append(log)
    try:
        yield log
    finally:
        _RECORDS.remove(log)


class Comm:
    """A process group (or a world of one) seen by one rank."""

    def __init__(self, group=None):
        self.group = group
        self.single = group is None and not (dist.is_available() and dist.is_initialized())
        if self.single:
            self.world, self.rank = 1, 0
        else:
            self.world = dist.get_world_size(group)
            self.rank = dist.get_rank(group)
            if self.rank < 0:
                raise ValueError("this process is not a member of the given process group")

    def _log(self, kind: str, what: str, t: torch.Tensor):
        for log in _RECORDS:
            log.append(Exchange(kind, what, tuple(t.shape), t.dtype,
                                t.numel() * t.element_size()))

    def all_reduce(self, t: torch.Tensor, op: str, what: str) -> torch.Tensor:
        """In-place max or sum over the ranks; returns ``t``."""
        self._log(f"all_reduce_{op}", what, t)
        if not self.single and self.world > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM,
                            group=self.group)
        return t

    def all_gather(self, t: torch.Tensor, what: str) -> torch.Tensor:
        """[world, *t.shape]: every rank's ``t``, in group-rank order."""
        self._log("all_gather", what, t)
        t = t.contiguous()
        if self.single or self.world == 1:
            return t[None]
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t, group=self.group)
        return torch.stack(parts)

    def broadcast_first(self, t: torch.Tensor, what: str) -> torch.Tensor:
        """The group's first rank's ``t`` on every rank (in place)."""
        self._log("broadcast", what, t)
        if not self.single and self.world > 1:
            src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
            dist.broadcast(t, src=src, group=self.group)
        return t


def exchanged_bytes(log: List[Exchange], world: int, ring: bool = True) -> int:
    """Bytes one rank sends for the recorded collectives: with ``ring`` the ring algorithms'
    2 (w-1)/w n for an all-reduce of n bytes, (w-1) n for an all-gather of n bytes per rank
    and (w-1)/w n for a broadcast (scatter + all-gather); otherwise the payloads' sum."""
    if not ring:
        return sum(e.nbytes for e in log)
    total = 0.0
    for e in log:
        if e.kind.startswith("all_reduce"):
            total += 2 * (world - 1) / world * e.nbytes
        elif e.kind == "all_gather":
            total += (world - 1) * e.nbytes
        else:
            total += (world - 1) / world * e.nbytes
    return int(round(total))
