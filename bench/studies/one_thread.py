"""Block verification, the acceptance rates and trees against token-wise verification and
the memory floor, on one thread: ``python -m bench.studies.one_thread`` (``--record`` writes
bench/results/cpu_one_thread.md).

Three tables, each repeated ``--rounds`` times with the machine's load average beside each
round: the methods table of ``python -m bench`` (``random_suite.run_methods``: B=32, K=4,
V=128256, fp32 logits + fp32 draft probs, medians of alternating repetitions, torch's thread
count); the same calls on one thread as thread CPU time (min over ``--reps``), which a shared
machine's other processes disturb least; and the tree suite's inputs (rsd, mss) the same way.
``--quick``: one round of two repetitions at V=4096.
"""
from __future__ import annotations

import os
import time

import torch

import specops
from bench import _cli, peers
from bench._harness import SETTINGS, draft_side, make_inputs
from bench.random_suite import METHODS_HEADER, fmt_methods, run_methods
from bench.report import Report

PROG = "python -m bench.studies.one_thread"
B, K, V = 32, 4, 128256
QUICK_V = 4096
NAMES = ("t0.8", "t0.8+top_p0.95")
HOW = ("B=32, K=4, V={V}, fp32 target logits + fp32 draft probs (draft = target + noise, drafts "
       "sampled from q; the tree: the tree suite's 16-node tree, t0.8).  First table: medians "
       "of alternating repetitions on torch's threads; the other two: thread CPU time on one "
       "thread, the minimum over the repetitions (what other processes on a shared machine "
       "disturb least).  The load average (1/5/15 min) is beside each round.")


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def thread_times(fns: dict, reps: int) -> dict:
    """Thread CPU time (min over reps, alternating) of each call on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = {k: float("inf") for k in fns}
        for _ in range(reps):
            for k, f in fns.items():
                t = time.thread_time()
                f()
                best[k] = min(best[k], time.thread_time() - t)
    finally:
        torch.set_num_threads(threads)
    return best


def one_thread_tree(reps: int, V: int = V) -> dict:
    """bench_tree's timing inputs (B=32, 16-node tree, V=128256, t0.8): floor, rsd, mss."""
    from bench.bench_tree import TREE16, tree_inputs
    target, q, par, ids = tree_inputs(B, TREE16, V)
    kw = dict(temperature=0.8, seed=torch.arange(B), offset=0, backend="cpu", max_depth=4)
    return thread_times({
        "floor": lambda: peers.floor(target, q),
        "rsd": lambda: specops.verify_tree(target, ids, par, q, method="rsd", **kw),
        "mss": lambda: specops.verify_tree(target, ids, par, q, method="mss", **kw)}, reps)


def one_thread(name: str, reps: int, V: int = V) -> dict:
    """Thread CPU time (min over reps) of floor / token / block / rates on one thread."""
    setting = SETTINGS[name]
    g = torch.Generator().manual_seed(1)
    target, draft_logits = make_inputs(B, K, V)
    q, ids = draft_side(draft_logits, setting, g)
    kw = dict(seed=torch.arange(B), offset=torch.zeros(B, dtype=torch.int64), **setting)
    fns = {"floor": lambda: peers.floor(target, q),
           "token": lambda: specops.verify_block(target, ids, q, backend="cpu", **kw),
           "block": lambda: specops.verify_block(target, ids, q, method="block", backend="cpu",
                                                 **kw),
           "rates": lambda: specops.verify_block(target, ids, q, return_accept_rates=True,
                                                 backend="cpu", **kw)}
    return thread_times(fns, reps)


def main(argv=None):
    ap = _cli.parser(PROG, __doc__, reps=7, quick="one round of two repetitions at V=4096")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    v = QUICK_V if args.quick else V
    rounds = 1 if args.quick else args.rounds
    reps = args.reps or (2 if args.quick else 7)
    torch.set_num_threads(os.cpu_count() or 1)
    rep = Report("Block, rates and trees on one thread (thread CPU time)", PROG, argv,
                 f", {torch.get_num_threads()} threads, rounds {rounds}, reps {reps}")
    emit = rep.emit
    emit(HOW.format(V=v))
    emit()
    emit("### torch's threads, medians (the `python -m bench` methods table)")
    emit()
    emit("| round | load (1/5/15 min) |" + METHODS_HEADER[1:].replace("\n|", "\n|---|---|", 1))
    for r in range(rounds):
        for name in NAMES:
            ld = load()
            emit(f"| {r} | {ld} " + fmt_methods(name, B, K, v, run_methods(B, K, v, name, reps)))
    emit()
    emit("### one thread, thread CPU time, min over reps (ms; x: over the floor)")
    emit()
    emit("| round | load | setting | floor | token | block | rates | block / token | "
         "rates / token |")
    emit("|---|---|---|---|---|---|---|---|---|")
    for r in range(rounds):
        for name in NAMES:
            ld = load()
            b = one_thread(name, reps, v)
            f = b["floor"]
            emit(f"| {r} | {ld} | {name} | {f * 1e3:.2f} | "
                 + " | ".join(f"{b[k] * 1e3:.2f} ({b[k] / f:.2f}x)"
                              for k in ("token", "block", "rates"))
                 + f" | {b['block'] / b['token']:.2f} | {b['rates'] / b['token']:.2f} |")
    emit()
    emit("### tree (the tree suite's inputs), one thread, thread CPU time, min over reps (ms)")
    emit()
    emit("| round | load | floor | rsd | mss |")
    emit("|---|---|---|---|---|")
    for r in range(rounds):
        ld = load()
        b = one_thread_tree(reps, v)
        f = b["floor"]
        emit(f"| {r} | {ld} | {f * 1e3:.2f} | " + " | ".join(
            f"{b[k] * 1e3:.2f} ({b[k] / f:.2f}x)" for k in ("rsd", "mss")) + " |")
    rep.save(_cli.out_path(args, "cpu_one_thread.md"))


if __name__ == "__main__":
    main()
