"""Vocabulary-parallel verification benchmark: ``python -m bench --suite distributed``
(results/distributed.md).

1. Bytes one rank sends per step with ``specops.distributed.verify_block`` against the
   all-gather of the logits engines do today, at B=32, K=4, V=128256 and 2 / 4 / 8 ranks.
   The sizes are those of the collectives of a real call (``record_exchange``), made in a
   process group of that size on torch's "fake" backend (one process; the collectives move
   nothing, their sizes are a real group's); ring algorithms: an all-reduce of n bytes sends
   2 (w-1)/w n per rank, an all-gather of n bytes per rank (w-1) n.
2. Time on 2 CPU processes (gloo, one thread each): the sharded call beside all-gathering
   the shards and calling ``specops.verify_block`` (C++ backend) on the whole rows, and the
   floor of each rank reading its own shard once, measured in the same run.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

import specops
import specops.distributed as sd
from bench._harness import draft_side, make_inputs
from bench.report import Report

B, K, V = 32, 4, 128256
SETTINGS = {
    "greedy": dict(temperature=0.0),
    "t0.8": dict(temperature=0.8),
    "t0.8 + top_p 0.95": dict(temperature=0.8, top_p=0.95),
    "t0.8 + top_k 50": dict(temperature=0.8, top_k=50),
    "t0.8 + top_k 50 + top_p 0.95 + min_p 0.05": dict(temperature=0.8, top_k=50, top_p=0.95,
                                                      min_p=0.05),
}
QUICK_SETTINGS = ("t0.8",)       # --quick: the timed tables for this setting only
VARIANTS = {            # (draft side, extra verify_block arguments)
    "draft probs": ("probs", {}),
    "point mass": ("none", {}),
    "draft logits": ("logits", {}),
    "draft probs, block + rates": ("probs", dict(method="block", return_accept_rates=True)),
}


def inputs(setting):
    g = torch.Generator().manual_seed(1)
    target, draft_logits = make_inputs(B, K, V)
    q, ids = draft_side(draft_logits, setting, g)
    return target, draft_logits, q, ids


def shard_args(target, draft_logits, q, ids, kind, lo, hi):
    kw = dict(target_logits=target[..., lo:hi].contiguous(), draft_token_ids=ids,
              seed=torch.arange(B), offset=0)
    if kind == "probs":
        kw["draft_probs"] = q[..., lo:hi].contiguous()
    elif kind == "logits":
        kw["draft_logits"] = draft_logits[..., lo:hi].contiguous()
    return kw


def exchange_table(emit):
    from torch.testing._internal.distributed.fake_pg import FakeStore
    emit("## Bytes exchanged per step (one rank sends; ring algorithms)")
    emit()
    emit(f"B={B}, K={K}, V={V}.  `all-gather` moves every rank's shard of the target logits "
         "(bf16 / fp32) and, where the engine has them, of the draft rows (fp32); `specops` "
         "is the sum over the call's recorded collectives, whose count is the number of "
         "latency hops.  The layout check (validate on, or no `vocab_size`) adds one "
         "all-gather of 64 bytes per rank.")
    emit()
    emit("| ranks | setting | draft | collectives | specops bytes | all-gather bf16 target "
         "| all-gather fp32 target + draft | ratio (fp32) |")
    emit("|---|---|---|---|---|---|---|---|")
    target, draft_logits, q, ids = inputs(SETTINGS["t0.8"])
    for world in (2, 4, 8):
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
        width = V // world
        for sname, setting in SETTINGS.items():
            for vname, (kind, extra) in VARIANTS.items():
                if sname != "t0.8" and vname != "draft probs":
                    continue
                kw = shard_args(target, draft_logits, q, ids, kind, 0, width)
                with sd.record_exchange() as log:
                    sd.verify_block(**kw, vocab_start=0, vocab_size=V, validate=False,
                                    **setting, **extra)
                ours = sd.exchanged_bytes(log, world)
                t_bf16 = (world - 1) * B * (K + 1) * width * 2
                t_f32 = (world - 1) * B * (K + 1) * width * 4
                d_f32 = (world - 1) * B * K * width * 4 if kind != "none" else 0
                emit(f"| {world} | {sname} | {vname} | {len(log)} | {ours / 1e3:.1f} kB | "
                     f"{t_bf16 / 1e6:.1f} MB | {(t_f32 + d_f32) / 1e6:.1f} MB | "
                     f"{(t_f32 + d_f32) / ours:.0f}x |")
        dist.destroy_process_group()
    emit()


def _rank_main(rank, out_file, reps, names):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_file}.init", rank=rank,
                            world_size=2)
    lo, hi = (0, V // 2) if rank == 0 else (V // 2, V)
    rows = []
    for sname in names:
        setting = SETTINGS[sname]
        target, draft_logits, q, ids = inputs(setting)
        kw = shard_args(target, draft_logits, q, ids, "probs", lo, hi)
        whole = dict(target_logits=target, draft_token_ids=ids, draft_probs=q,
                     seed=torch.arange(B), offset=0, **setting)

        def sharded():
            return sd.verify_block(**kw, vocab_start=lo, vocab_size=V, **setting)

        def gathered():
            parts_t = [torch.empty_like(kw["target_logits"]) for _ in range(2)]
            parts_q = [torch.empty_like(kw["draft_probs"]) for _ in range(2)]
            dist.all_gather(parts_t, kw["target_logits"])
            dist.all_gather(parts_q, kw["draft_probs"])
            return specops.verify_block(torch.cat(parts_t, -1), ids, torch.cat(parts_q, -1),
                                        seed=torch.arange(B), offset=0, backend="cpu",
                                        **setting)

        def floor():
            return kw["target_logits"].sum() + kw["draft_probs"].sum()

        with sd.record_exchange() as log:
            a = sharded()
        b = specops.verify_block(**whole, backend="cpu")
        same = all(torch.equal(x, y) for x, y in zip(a, b))
        payloads = [(e.kind, torch.zeros(e.shape, dtype=e.dtype)) for e in log]

        def collectives():
            """The call's recorded collectives alone, same kinds and payloads."""
            for kind, t in payloads:
                if kind == "all_gather":
                    dist.all_gather([torch.empty_like(t) for _ in range(2)], t)
                elif kind == "broadcast":
                    dist.broadcast(t, src=0)
                else:
                    dist.all_reduce(t, op=dist.ReduceOp.MAX if kind.endswith("max")
                                    else dist.ReduceOp.SUM)

        times = {"sharded": [], "gathered": [], "floor": [], "collectives": []}
        for _ in range(reps + 1):
            for name, fn in (("sharded", sharded), ("gathered", gathered), ("floor", floor),
                             ("collectives", collectives)):
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        rows.append((sname, med, same, float(a.num_accepted.float().mean())))
    if rank == 0:
        torch.save(rows, out_file)
    dist.barrier()
    dist.destroy_process_group()


def timing_rows(reps, names=None):
    """Rank 0's rows of the 2-process timing: (setting, medians, same tokens, accepted), for
    the settings ``names`` (default every one)."""
    import torch.multiprocessing as mp
    names = list(SETTINGS if names is None else names)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.pt")
        mp.start_processes(_rank_main, args=(out, reps, names), nprocs=2, join=True,
                           start_method="spawn")
        return torch.load(out, weights_only=False)


def timing_table(emit, reps, names=None):
    load_before = os.getloadavg()
    rows = timing_rows(reps, names)
    load_after = os.getloadavg()
    emit("## Time on 2 CPU processes (gloo, one thread each)")
    emit()
    emit("Load average (1, 5, 15 min) before the timed run: "
         f"{', '.join(f'{v:.2f}' for v in load_before)}; after: "
         f"{', '.join(f'{v:.2f}' for v in load_after)} (the machine is shared: above ~2 on 2 "
         "cores the ranks wait for CPU time, which inflates every column).")
    emit()
    emit(f"B={B}, K={K}, V={V} split 64128 + 64128, fp32 target logits and draft probs.  "
         "`sharded`: `specops.distributed.verify_block` on each rank's shard; `gather + "
         "verify`: all-gather both shards over gloo, then `specops.verify_block` (C++) on "
         "the whole rows; `floor`: each rank summing its own shard (the memory floor of "
         "reading it once); `coll.`: the sharded call's recorded collectives alone (same "
         "kinds and payloads, zeros), its latency hops over gloo; `aim` = sharded / (3 floor "
         "+ coll.), the aim being <= 1.  Medians of rank 0 over alternating "
         "repetitions; `same tokens`: "
         "the sharded call equals the single-device call.")
    emit()
    emit("| setting | sharded ms | gather + verify ms | floor ms | coll. ms | sharded x floor "
         "| aim | gather / sharded | same tokens | accepted |")
    emit("|---|---|---|---|---|---|---|---|---|---|")
    for sname, med, same, acc in rows:
        aim = med['sharded'] / (3 * med['floor'] + med['collectives'])
        emit(f"| {sname} | {med['sharded'] * 1e3:.1f} | {med['gathered'] * 1e3:.1f} | "
             f"{med['floor'] * 1e3:.2f} | {med['collectives'] * 1e3:.2f} | "
             f"{med['sharded'] / med['floor']:.1f} | {aim:.2f} | "
             f"{med['gathered'] / med['sharded']:.1f} | {same} | {acc:.2f} |")
    emit()


def local_table(emit, reps, names=None):
    """One rank's local work without a peer: a world of one on a shard of V/2 columns (the
    ids folded into it), the C++ shard passes beside the torch ones they replace on the CPU
    (specops.backends.cpu_shard), and the floor of reading that shard once."""
    from specops.backends import cpu_shard as _native
    torch.set_num_threads(1)
    half = V // 2
    emit("## One rank's local work (world of one, one thread)")
    emit()
    emit(f"The same shard size ({half} columns) in a world of one (no peer to wait for: the "
         "collectives are identities), ids folded into the shard.  `C++`: the shard passes "
         "of csrc/distributed (the CPU default); `torch`: the eager torch passes (the GPU "
         "path, forced here).  Best of the repetitions.")
    emit()
    emit("| setting | C++ ms | torch ms | floor ms | C++ x floor | torch / C++ |")
    emit("|---|---|---|---|---|---|")
    for sname in (SETTINGS if names is None else names):
        setting = SETTINGS[sname]
        target, draft_logits, q, ids = inputs(setting)
        kw = shard_args(target, draft_logits, q, ids % half, "probs", 0, half)
        best = {}
        for name, on in (("C++", True), ("torch", False), ("floor", None)):
            _native._ENABLED[0] = bool(on)
            ts = []
            for _ in range(reps + 1):
                t0 = time.perf_counter()
                if on is None:
                    kw["target_logits"].sum() + kw["draft_probs"].sum()
                else:
                    sd.verify_block(**kw, vocab_start=0, vocab_size=half, **setting)
                ts.append(time.perf_counter() - t0)
            best[name] = min(ts[1:])
        _native._ENABLED[0] = True
        emit(f"| {sname} | {best['C++'] * 1e3:.1f} | {best['torch'] * 1e3:.1f} | "
             f"{best['floor'] * 1e3:.2f} | {best['C++'] / best['floor']:.1f} | "
             f"{best['torch'] / best['C++']:.1f} |")
    emit()


def run(args, out, argv):
    """The three tables, written to ``out`` ("" writes no file).  ``args``: ``reps``,
    ``quick`` (the timed tables for QUICK_SETTINGS only)."""
    names = QUICK_SETTINGS if args.quick else None
    rep = Report("specops vocabulary-parallel verification benchmark", "python -m bench", argv)
    threads = torch.get_num_threads()
    try:
        exchange_table(rep.emit)
        timing_table(rep.emit, args.reps, names)
        local_table(rep.emit, args.reps, names)
    finally:
        torch.set_num_threads(threads)
    rep.save(out)
