"""Block verification and the acceptance rates against token-wise verification and the memory
floor (issue 32): the methods table of ``python -m bench`` (``random_suite.run_methods``: B=32,
K=4, V=128256, fp32 logits + fp32 draft probs, medians of alternating repetitions, torch's
thread count), repeated ``--rounds`` times with the machine's load average beside each round,
plus the same timings on one thread as thread CPU time (min over repetitions), which a shared
machine's other processes disturb least, and bench_tree's tree timing (rsd, mss) the same way.

Run: ``python -m bench.bench_methods [--rounds 3] [--out FILE]``.  Run as a script from another
checkout's root (``python /path/to/bench/bench_methods.py``) it times that checkout's specops
with its own harness: the before / after comparison of bench/results/cpu_methods.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if __package__ in (None, ""):            # as a script: the checkout it runs in
    sys.path.insert(0, os.getcwd())

import torch  # noqa: E402

import specops  # noqa: E402
from bench import peers  # noqa: E402
from bench._harness import SETTINGS, draft_side, make_inputs  # noqa: E402
from bench.random_suite import METHODS_HEADER, fmt_methods, run_methods  # noqa: E402

B, K, V = 32, 4, 128256
NAMES = ("t0.8", "t0.8+top_p0.95")


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


def one_thread_tree(reps: int) -> dict:
    """bench_tree's timing inputs (B=32, 16-node tree, V=128256, t0.8): floor, rsd, mss."""
    from bench.bench_tree import TREE16, tree_inputs
    target, q, par, ids = tree_inputs(B, TREE16, V)
    kw = dict(temperature=0.8, seed=torch.arange(B), offset=0, backend="cpu", max_depth=4)
    return thread_times({
        "floor": lambda: peers.floor(target, q),
        "rsd": lambda: specops.verify_tree(target, ids, par, q, method="rsd", **kw),
        "mss": lambda: specops.verify_tree(target, ids, par, q, method="mss", **kw)}, reps)


def one_thread(name: str, reps: int) -> dict:
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
    ap = argparse.ArgumentParser(prog="python -m bench.bench_methods", description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    lines = [f"- specops at `{os.path.dirname(specops.__file__)}`, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads, rounds {args.rounds}, reps {args.reps}", ""]
    lines += ["### torch's threads, medians (the `python -m bench` methods table)", "",
              "| round | load (1/5/15 min) |" + METHODS_HEADER[1:].replace(
                  "\n|", "\n|---|---|", 1)]
    for r in range(args.rounds):
        for name in NAMES:
            ld = load()
            row = fmt_methods(name, B, K, V, run_methods(B, K, V, name, args.reps))
            lines.append(f"| {r} | {ld} {row}")
            print(lines[-1], flush=True)
    lines += ["", "### one thread, thread CPU time, min over reps (ms; x: over the floor)", "",
              "| round | load | setting | floor | token | block | rates | block / token | "
              "rates / token |", "|---|---|---|---|---|---|---|---|---|"]
    for r in range(args.rounds):
        for name in NAMES:
            ld = load()
            b = one_thread(name, args.reps)
            f = b["floor"]
            lines.append(
                f"| {r} | {ld} | {name} | {f * 1e3:.2f} | "
                + " | ".join(f"{b[k] * 1e3:.2f} ({b[k] / f:.2f}x)"
                             for k in ("token", "block", "rates"))
                + f" | {b['block'] / b['token']:.2f} | {b['rates'] / b['token']:.2f} |")
            print(lines[-1], flush=True)
    lines += ["", "### tree (bench_tree's inputs), one thread, thread CPU time, min over reps (ms)",
              "", "| round | load | floor | rsd | mss |", "|---|---|---|---|---|"]
    for r in range(args.rounds):
        ld = load()
        b = one_thread_tree(args.reps)
        f = b["floor"]
        lines.append(f"| {r} | {ld} | {f * 1e3:.2f} | " + " | ".join(
            f"{b[k] * 1e3:.2f} ({b[k] / f:.2f}x)" for k in ("rsd", "mss")) + " |")
        print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
