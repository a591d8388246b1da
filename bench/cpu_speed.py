"""Every method's CPU speed in one run: ``python -m bench --suite methods`` (the committed
report, with ``--record``: bench/results/cpu_speed.md).

One process times, back to back, each path against its floor and its peer measured in the
same run (every timer is one of the other suites' own, so their tables and this one agree):

* block verification and token-wise with ``return_accept_rates`` against the memory floor
  and token-wise verification (``random_suite.run_methods``: B=32, K=4, V=128256, fp32
  logits + draft probs, t0.8 and t0.8 + top-p 0.95; medians of alternating repetitions);
* tree rsd, 16 nodes of depth 4, against reading its 16 target and 16 draft rows
  (``bench_tree.time_tree``);
* ``specops.distributed.verify_block`` on 2 gloo ranks against 3x the per-rank floor plus
  the call's collectives alone, and against all-gather + ``specops.verify_block``
  (``bench_distributed``'s rank function, same rows as its timing table);
* the per-call cost at B=1, K=4, V=1000 against transformers' eager
  ``_speculative_sampling`` (``bench.overhead``).

The summary puts each measured ratio beside the project's aim for it; the load average is
printed beside each part, since the machine may be shared (2 cores: above ~2 the timings
inflate).
"""
from __future__ import annotations

import os

import torch

from bench.report import Report

AIMS = {        # the aims, as ratios this run measures
    "block": 1.5,       # x the memory floor
    "rates": 1.25,      # x token-wise
    "tree": 1.5,        # x the tree's read floor
    "dist": 1.0,        # sharded / (3 x per-rank floor + collectives)
    "dist_peer": 3.0,   # all-gather + verify / sharded, at least
    "call": 4.0,        # transformers eager / specops, at least
}


def _load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def block_rows(emit, reps):
    from bench.random_suite import METHODS_HEADER, fmt_methods, run_methods
    out = {}
    emit(f"### Block and rates (2 threads, medians of {reps}; load {_load()})")
    emit()
    emit(METHODS_HEADER)
    for name in ("t0.8", "t0.8+top_p0.95"):
        r = run_methods(32, 4, 128256, name, reps)
        emit(fmt_methods(name, 32, 4, 128256, r))
        out[name] = r
    emit()
    return out


def tree_rows(emit, reps, quick=False):
    from bench.bench_tree import QUICK_V, time_tree
    out = {}
    emit(f"### Tree rsd, 16 nodes, depth 4 (2 threads, medians of {reps}; load {_load()})")
    emit()
    emit("| setting | floor ms | rsd ms | mss ms | rsd x floor | mss x floor |")
    emit("|---|---|---|---|---|---|")
    for label, top_p in (("t0.8", 1.0), ("t0.8+top_p0.95", 0.95)):
        r = time_tree(reps=reps, top_p=top_p, **(dict(V=QUICK_V) if quick else {}))
        f = r["floor"]
        emit(f"| {label} | {f * 1e3:.2f} | {r['tree rsd'] * 1e3:.2f} | "
             f"{r['tree mss'] * 1e3:.2f} | {r['tree rsd'] / f:.2f} | {r['tree mss'] / f:.2f} |")
        out[label] = r
    emit()
    return out


def dist_rows(emit, reps, quick=False):
    from bench.bench_distributed import QUICK_SETTINGS, timing_rows
    emit(f"### Vocabulary shards, 2 gloo ranks, one thread each (medians of {reps}; "
         f"load {_load()})")
    emit()
    rows = timing_rows(reps, QUICK_SETTINGS if quick else None)
    emit("| setting | sharded ms | floor ms | coll. ms | gather + verify ms | "
         "sharded / (3 floor + coll.) | gather / sharded | same tokens |")
    emit("|---|---|---|---|---|---|---|---|")
    out = {}
    for sname, med, same, _acc in rows:
        aim = med["sharded"] / (3 * med["floor"] + med["collectives"])
        peer = med["gathered"] / med["sharded"]
        emit(f"| {sname} | {med['sharded'] * 1e3:.1f} | {med['floor'] * 1e3:.2f} | "
             f"{med['collectives'] * 1e3:.2f} | {med['gathered'] * 1e3:.1f} | {aim:.2f} | "
             f"{peer:.1f} | {same} |")
        out[sname] = (aim, peer, same)
    emit()
    return out


def call_rows(emit, reps, inner):
    from bench import overhead
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = overhead.timeit(overhead.cases("cpu"), reps, inner)
    finally:
        torch.set_num_threads(threads)
    emit(f"### Per call, B=1, K=4, V=1000, one thread ({reps} rounds of {inner} calls; "
         f"load {_load()})")
    emit()
    emit("| call | median us | min us |")
    emit("|---|---|---|")
    for k, (med, mn) in res.items():
        emit(f"| {k} | {med * 1e6:.1f} | {mn * 1e6:.1f} |")
    emit()
    hf = res["transformers _speculative_sampling (eager)"][0]
    return {k: hf / res[f"specops.verify_block, {k} params"][0]
            for k in ("scalar", "[B] tensor")}


def summary(emit, blk, tree, dist, call):
    emit("## Summary, this run")
    emit()
    emit("| row | measured | aim |")
    emit("|---|---|---|")
    for name, r in blk.items():
        emit(f"| block, {name} | {r['block'] / r['floor']:.2f}x the floor | "
             f"<= {AIMS['block']}x |")
    for name, r in blk.items():
        emit(f"| accept rates, {name} | {r['rates'] / r['token']:.2f}x token-wise | "
             f"<= {AIMS['rates']}x |")
    for name, r in tree.items():
        emit(f"| tree rsd, {name} | {r['tree rsd'] / r['floor']:.2f}x its read floor | "
             f"<= {AIMS['tree']}x |")
    for name, (aim, peer, same) in dist.items():
        tokens = "" if same else " (tokens differ from the single-device call)"
        emit(f"| shards, {name} | {aim:.2f} of (3 floor + coll.){tokens} | "
             f"<= {AIMS['dist']} |")
        emit(f"| shards, {name} | {peer:.1f}x faster than all-gather + verify{tokens} | "
             f">= {AIMS['dist_peer']}x |")
    emit(f"| per call, scalar params | {call['scalar']:.2f}x faster than transformers eager | "
         f">= {AIMS['call']}x |")
    emit(f"| per call, [B] tensor params | {call['[B] tensor']:.2f}x faster than transformers "
         "eager | (none) |")
    emit()


def run(args, out, argv):
    """The whole run, written to ``out`` ("" writes no file).  ``args``: ``reps``,
    ``quick`` (one repetition, the tree at a small V, one shard setting, 3 x 20 calls)."""
    reps, quick = args.reps, args.quick
    rep = Report("CPU speed of every method, one run", "python -m bench", argv,
                 machine_extra=f", {torch.get_num_threads()} threads")
    parts = []

    def emit(s=""):             # printed as it goes; saved after the summary
        print(s, flush=True)
        parts.append(s)

    blk = block_rows(emit, reps)
    tree = tree_rows(emit, reps, quick)
    dist = dist_rows(emit, reps, quick)
    call = call_rows(emit, 3 if quick else 31, 20 if quick else 200)
    summary(rep.emit, blk, tree, dist, call)
    rep.emit("## The measurements")
    rep.emit()
    rep.lines += parts
    rep.save(out)
