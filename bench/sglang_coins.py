"""Cost of the SGLang drop-in's caller-coin walk on the CPU: ``python -m bench.sglang_coins``
(``--record`` writes ``bench/results/sglang_coins.md``).

Medians over alternating repetitions in one run, as ratios to the memory floor (one read of
``target_probs``: ``target.sum()``), for the caller-coin mode (section 13: the C++ kernel,
and the vectorised int64 torch ops every device can run) and the Philox mode (``verify_tree``'s walk on the C++ backend), on EAGLE-like
shapes (a top-4 tree of n nodes, fp32 probabilities).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from specops.integrations import sglang as S

SHAPES = [(8, 16, 32000), (32, 16, 32000), (8, 64, 32000)]


def kary(n: int, k: int = 4):
    nt, ns = [-1] * n, [-1] * n
    queue, free = [0], 1
    while queue and free < n:
        p = queue.pop(0)
        kids = list(range(free, min(n, free + k)))
        free += len(kids)
        if kids:
            nt[p] = kids[0]
            for a, b in zip(kids, kids[1:]):
                ns[a] = b
            queue += kids
    return nt, ns


def inputs(B, n, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    nt, ns = kary(n)
    target = torch.softmax(torch.randn(B, n, V, generator=g) * 3, -1)
    cand = target.argmax(-1)          # children agree with the target: long walks
    ri = torch.arange(B * n).reshape(B, n)
    return (cand, ri, torch.tensor([nt] * B), torch.tensor([ns] * B),
            torch.rand(B, n, generator=g), torch.rand(B, generator=g), target)


def timed(fn, reps=15):
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def run() -> str:
    lines = ["| bs, n, V | floor (ms) | caller coins, C++ / floor | caller coins, torch ops "
             "/ floor | philox (C++) / floor |", "|---|---|---|---|---|"]
    for B, n, V in SHAPES:
        cand, ri, nt, ns, u, uf, target = inputs(B, n, V)

        def outs():
            return (torch.full((B * n,), -1, dtype=torch.int32),
                    torch.full((B, 6), -1, dtype=torch.int32), torch.zeros(B, dtype=torch.int32))

        def coins():
            S.tree_speculative_sampling_target_only(*outs(), cand, ri, nt, ns, u, uf, target,
                                                    backend="cpu", validate=False)

        def torch_ops():
            S.tree_speculative_sampling_target_only(*outs(), cand, ri, nt, ns, u, uf, target,
                                                    backend="torch", validate=False)

        def philox():
            S.tree_speculative_sampling_target_only(*outs(), cand, ri, nt, ns, u, uf, target,
                                                    randomness="philox", backend="cpu",
                                                    validate=False)
        for f in (coins, torch_ops, philox):
            f()                                   # warm-up
        t = {"floor": [], "coins": [], "torch": [], "philox": []}
        for _ in range(5):                        # alternate
            t["floor"] += timed(lambda: target.sum(), 5)
            t["coins"] += timed(coins, 5)
            t["torch"] += timed(torch_ops, 5)
            t["philox"] += timed(philox, 5)
        m = {k: statistics.median(v) for k, v in t.items()}
        lines.append(f"| {B}, {n}, {V} | {m['floor'] * 1e3:.2f} | {m['coins'] / m['floor']:.1f} "
                     f"| {m['torch'] / m['floor']:.1f} | {m['philox'] / m['floor']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.sglang_coins", description=__doc__)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    body = run()
    text = ("# SGLang drop-in: caller-coin walk vs Philox walk (CPU)\n\n"
            f"Command: `OMP_NUM_THREADS={torch.get_num_threads()} python -m bench.sglang_coins "
            "--record` (medians of 25 alternating runs; ratios to one read of target_probs; "
            "a top-4 tree, children = the target's argmax, validate=False).\n\n" + body + "\n")
    print(text)
    if args.record:
        with open(os.path.join(os.path.dirname(__file__), "results", "sglang_coins.md"),
                  "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
