"""Cost of the SGLang drop-in's caller-coin walk on the CPU:
``python -m bench.studies.sglang_coins`` (``--record`` writes ``bench/results/sglang_coins.md``;
``--reps N``: N alternating rounds of 5 calls each, default 5; ``--quick``: the first shape,
one round).

Medians over alternating repetitions in one run, as ratios to the memory floor (one read of
``target_probs``: ``target.sum()``), for the caller-coin mode (section 13: ``specops::coin_walk``
on the C++ backend) and the Philox mode (``verify_tree``'s walk on the C++ backend), on
EAGLE-like shapes (a top-4 tree of n nodes, fp32 probabilities).
"""
from __future__ import annotations

import statistics
import time

import torch

from bench import _cli
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


def run(rounds: int = 5, shapes=SHAPES) -> str:
    lines = ["| bs, n, V | floor (ms) | caller coins, C++ / floor | philox (C++) / floor |",
             "|---|---|---|---|"]
    for B, n, V in shapes:
        cand, ri, nt, ns, u, uf, target = inputs(B, n, V)

        def outs():
            return (torch.full((B * n,), -1, dtype=torch.int32),
                    torch.full((B, 6), -1, dtype=torch.int32), torch.zeros(B, dtype=torch.int32))

        def coins():
            S.tree_speculative_sampling_target_only(*outs(), cand, ri, nt, ns, u, uf, target,
                                                    backend="cpu", validate=False)

        def philox():
            S.tree_speculative_sampling_target_only(*outs(), cand, ri, nt, ns, u, uf, target,
                                                    randomness="philox", backend="cpu",
                                                    validate=False)
        for f in (coins, philox):
            f()                                   # warm-up
        t = {"floor": [], "coins": [], "philox": []}
        for _ in range(rounds):                   # alternate
            t["floor"] += timed(lambda: target.sum(), 5)
            t["coins"] += timed(coins, 5)
            t["philox"] += timed(philox, 5)
        m = {k: statistics.median(v) for k, v in t.items()}
        lines.append(f"| {B}, {n}, {V} | {m['floor'] * 1e3:.2f} | {m['coins'] / m['floor']:.1f} "
                     f"| {m['philox'] / m['floor']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    prog = "python -m bench.studies.sglang_coins"
    args = _cli.parser(prog, __doc__, reps=5, quick="the first shape, one round").parse_args(argv)
    rounds = args.reps or (1 if args.quick else 5)
    body = run(rounds, SHAPES[:1] if args.quick else SHAPES)
    cmd = _cli.command(prog, argv)
    text = ("# SGLang drop-in: caller-coin walk vs Philox walk (CPU)\n\n"
            f"Command: `OMP_NUM_THREADS={torch.get_num_threads()} {cmd}` (medians of "
            f"{5 * rounds} alternating runs; ratios to one read of target_probs; a top-4 tree, "
            "children = the target's argmax, validate=False).\n\n" + body + "\n")
    print(text)
    _cli.write(text.rstrip("\n").split("\n"), _cli.out_path(args, "sglang_coins.md"))


if __name__ == "__main__":
    main()
