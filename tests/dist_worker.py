"""A rank of the gloo process groups tests/test_distributed.py starts: it runs every case on
its vocabulary shard with ``specops.distributed.verify_block`` and saves what it got."""
from __future__ import annotations

import datetime
import os
import traceback

import torch
import torch.distributed as dist

VOCAB_ARGS = ("target_logits", "target_probs", "draft_probs", "draft_logits")


def bounds(V: int, world: int):
    """(vocab_start, width) of each group rank: uneven shards, and the vocabulary order of
    the ranks is not their rank order (rank 0 holds the last shard), so a scan in rank order
    would be caught."""
    cuts = sorted({0, V, *[max(1, min(V - 1, (V * (2 * i + 1)) // (2 * world + 1)))
                           for i in range(1, world)]})
    if len(cuts) != world + 1:
        cuts = list(range(world)) + [V]             # tiny V: one column each, the rest last
    spans = [(cuts[i], cuts[i + 1] - cuts[i]) for i in range(world)]
    return spans[-1:] + spans[:-1]


def shard(kw: dict, start: int, width: int) -> dict:
    out = dict(kw)
    for name in VOCAB_ARGS:
        if out.get(name) is not None:
            out[name] = out[name][..., start:start + width].contiguous()
    return out


def run(rank: int, world: int, init_file: str, cases_file: str, out_file: str):
    # a collective that no other rank joins fails after a minute instead of half an hour
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    import specops.distributed as sd
    from specops.distributed._comm import Comm
    cases = torch.load(cases_file, weights_only=False)
    results = {}
    for name, kw, opts in cases:
        opts = dict(opts)
        control = opts.pop("control", None)
        V = next(kw[n] for n in VOCAB_ARGS if kw.get(n) is not None).shape[-1]
        start, width = bounds(V, world)[rank]
        mine = shard(kw, start, width)
        mine.update(opts.pop("rank_args", {}).get(rank, {}))
        start = mine.pop("vocab_start", start)
        saved = Comm.all_reduce
        if control == "local_reads":
            Comm.all_reduce = _local_reads(saved)
        try:
            with sd.record_exchange() as log:
                out = sd.verify_block(**mine, vocab_start=start, **opts)
            results[name] = dict(out=[t.clone() for t in out],
                                 rates=getattr(out, "accept_rates", None), log=log)
        except Exception as ex:                                      # noqa: BLE001
            results[name] = dict(error=f"{type(ex).__name__}: {ex}",
                                 trace=traceback.format_exc())
        finally:
            Comm.all_reduce = saved
    torch.save(results, out_file.format(rank=rank))
    dist.barrier()
    dist.destroy_process_group()


def _local_reads(reduce):
    """Negative control: p(y) and q(y) taken from the first rank's shard for every rank
    instead of from the rank owning y (a plausible bug: a shard that does not hold y sees
    p(y) = q(y) = 0 and rejects).  Every rank still runs the same walk, so the output stays
    well formed and only its law is wrong."""
    def wrong(self, t, op, what):
        if what == "p(y), q(y), beta sums":
            return self.broadcast_first(t, what)
        return reduce(self, t, op, what)
    return wrong


def main(world: int, cases_file: str, workdir: str):
    """Start ``world`` ranks (spawned processes) and wait for them."""
    import torch.multiprocessing as mp
    init_file = os.path.join(workdir, f"init_{world}")
    out_file = os.path.join(workdir, f"out_{world}_{{rank}}.pt")
    mp.start_processes(_entry, args=(world, init_file, cases_file, out_file), nprocs=world,
                       join=True, start_method="spawn")
    return [torch.load(out_file.format(rank=r), weights_only=False) for r in range(world)]


def _entry(rank, world, init_file, cases_file, out_file):
    torch.set_num_threads(1)
    run(rank, world, init_file, cases_file, out_file)
