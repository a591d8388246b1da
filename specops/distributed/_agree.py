"""The first exchange of a sharded call: shard bounds, refusals and a digest of every
argument that must agree, so that ranks which disagree raise together instead of entering
collectives that do not match (a hang or an abort) or returning different tokens.

One all-gather of a few int64 per rank.  Each argument's digest is computed on the device
from its canonical [B] form (a Python number and the same value as a [B] tensor digest
alike), as a position-weighted sum of its bits: equal arguments give equal digests; unequal
ones differ except with probability about 2**-64 per argument.
"""
from __future__ import annotations

import zlib
from typing import List, NamedTuple, Optional, Tuple

import torch

from specops._args import Canonical

_VALIDATE = {None: 2, False: 0, True: 1}


class Agreement(NamedTuple):
    """One rank's shard and what decides the collectives; after ``exchange``, the group's:
    ``max_id`` the largest draft id any rank read (-1: none), ``has_topk`` / ``has_topp`` /
    ``sampled`` whether any rank may need the top-k / top-p rounds / the exp pass."""
    vocab_start: int
    v_local: int
    max_id: int
    has_topk: bool
    has_topp: bool
    sampled: bool

    @staticmethod
    def exchange(comm, mine: Optional["Agreement"], named: List[Tuple[str, torch.Tensor]],
                 refused: bool, device) -> Tuple[int, "Agreement"]:
        """Gather every rank's agreement and digests; raise ValueError on every rank when a
        rank refused its arguments, the digests differ or the shards do not tile [0, V).
        Returns (V, the group's agreement)."""
        head = [0] * 6 if mine is None else [int(v) for v in mine]
        row = torch.tensor([int(refused), *head], dtype=torch.int64, device=device)
        digest = (torch.stack([d for _, d in named]) if named else
                  torch.zeros(len(NAMES), dtype=torch.int64, device=device))
        every = comm.all_gather(torch.cat([row, digest]), "shard layout and argument check")
        every = every.tolist()
        if refused:
            return 0, mine
        bad = [r for r, e in enumerate(every) if e[0]]
        if bad:
            raise ValueError(f"rank(s) {bad} of the process group refused their arguments; "
                             "every rank must pass the same arguments except its shard")
        for i, (name, _) in enumerate(named):
            values = [e[7 + i] for e in every]
            if any(v != values[0] for v in values):
                raise ValueError(f"the ranks passed different {name}: every rank must pass "
                                 "the same arguments except its vocabulary shard")
        end = 0
        for start, width in sorted((e[1], e[2]) for e in every):
            if start != end:
                raise ValueError(f"vocabulary shards must be contiguous and cover [0, V) in "
                                 f"order: got (vocab_start, V_local) = "
                                 f"{[(e[1], e[2]) for e in every]}")
            end = start + width
        group = Agreement(mine.vocab_start, mine.v_local, max(e[3] for e in every),
                          any(e[4] for e in every), any(e[5] for e in every),
                          any(e[6] for e in every))
        return end, group


NAMES = ("method", "return_accept_rates", "validate", "vocab_size", "seed (given or not)",
         "target_logits / target_probs", "draft_probs / draft_logits / neither",
         "the dtype of the target or draft", "the shapes (batch, block, rows or layout)",
         "draft_token_ids", "cu_num_draft_tokens / num_draft_tokens", "temperature", "top_k",
         "top_p", "min_p", "seed", "offset")


def _tensor_digest(t: torch.Tensor) -> torch.Tensor:
    """A 0-d int64 digest of the values (bits) of a 1-D tensor, on its device."""
    v = t.reshape(-1)
    bits = v.float().view(torch.int32).long() if v.dtype.is_floating_point else v.long()
    i = torch.arange(v.shape[0], device=v.device, dtype=torch.int64)
    w = (i * 2654435761 + 97) % 2147483629 + 1                       # < 2**31
    return ((bits & 0xFFFFFFFF) * w + ((bits >> 32) & 0xFFFFFFFF) * (w ^ 0x5BD1E995)).sum()


def _number(x, device) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.int64, device=device)


def digests(a: Canonical, flags: dict) -> List[Tuple[str, torch.Tensor]]:
    """(argument name, 0-d int64 digest) of every argument the ranks must agree on, in
    ``NAMES`` order; ``a`` is in ``to_op_tensors`` form."""
    dev = a.target.device
    draft_kind = 0 if a.draft is None else 1 if a.draft_is_probs else 2
    dtypes = zlib.crc32(f"{a.target.dtype}/{None if a.draft is None else a.draft.dtype}"
                        .encode())
    shapes = (a.batch, a.max_k, a.target.shape[0], a.draft_ids.shape[0],
              -1 if a.draft is None else a.draft.shape[0], int(a.padded))
    values = [
        zlib.crc32(flags["method"].encode()), int(flags["return_accept_rates"]),
        _VALIDATE[flags["validate"]], -1 if flags["vocab_size"] is None else flags["vocab_size"],
        int(flags["seed"] is None), int(a.target_is_probs), draft_kind, dtypes,
        zlib.crc32(repr(shapes).encode())]
    out = [(n, _number(v, dev)) for n, v in zip(NAMES, values)]
    tensors = (a.draft_ids, torch.cat([a.num_draft, a.target_row_start, a.draft_row_start]),
               a.inv_temp, a.top_k, a.top_p, a.min_p,
               a.seed if flags["seed"] is not None else a.seed[:0], a.offset)
    out += [(n, _tensor_digest(t)) for n, t in zip(NAMES[len(values):], tensors)]
    return out
