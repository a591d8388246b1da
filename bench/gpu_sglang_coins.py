"""GPU check of the SGLang drop-in's caller-coin walk (reference section 13):
``python bench/gpu_sglang_coins.py [--device cuda] [--V 128256] [--cases 8]``.

For random EAGLE-like trees (top-k up to 4, shuffled sibling orders, repeated tokens,
boundary coins) and every threshold mode, the drop-in's outputs on the device with the
compiled Triton kernel (``backend="triton"``) must equal, bit for bit, those the numpy
reference implies on CPU copies (the C++ kernel is checked too on the CPU when it is built);
then one timing at B=32, n=16 beside a device copy of the target (the memory floor).  Exits 1
on any disagreement.  ``--device cpu`` runs the same
check on the CPU (Triton under its interpreter: keep V small), which is how it is tested
without a GPU.
"""
from __future__ import annotations

import argparse
import random
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

import specops  # noqa: E402
from specops.integrations import sglang as S  # noqa: E402
from tests.integrations.test_sglang_coins import THRESHOLDS, expected  # noqa: E402
from tests.integrations.test_sglang import outputs, random_sgl_tree  # noqa: E402


def case(rng, gen, V, B=4):
    N = rng.randint(2, 16)
    rows = [random_sgl_tree(rng, N) for _ in range(B)]
    nt = torch.tensor([r[0] for r in rows])
    ns = torch.tensor([r[1] for r in rows])
    cand = torch.randint(0, min(V, 8), (B, N), generator=gen)     # repeats are likely
    ri = torch.arange(B * N).reshape(B, N)
    target = torch.softmax(torch.randn(B, N, V, generator=gen) * 3, -1)
    target[..., :8] += 0.05                                       # the candidates matter
    target = target / target.sum(-1, keepdim=True)
    u, uf = torch.rand(B, N, generator=gen), torch.rand(B, generator=gen)
    u.view(-1)[::5] = 0.0
    return cand, ri, nt, ns, u, uf, target, rng.randint(1, N)


def check(dev, V, n_cases) -> int:
    backends = ["triton"] + (["cpu"] if "cpu" in specops.available_backends()
                             and dev.type == "cpu" else [])
    rng, gen, bad = random.Random(1), torch.Generator().manual_seed(1), 0
    for ts, ta in THRESHOLDS:
        for _ in range(n_cases):
            cand, ri, nt, ns, u, uf, target, S_ = case(rng, gen, V)
            B, N = cand.shape
            pre = outputs(B, N, S_)
            want, want_valid = expected(cand, ri, nt, ns, u, uf, target, S_, ts, ta, pre)
            for backend in backends:
                got = tuple(t.clone().to(dev) for t in pre)
                args = [t.to(dev) for t in (cand, ri, nt, ns, u, uf, target)]
                valid = S.tree_speculative_sampling_target_only(
                    *got, *args[:6], args[6], None, ts, ta, backend=backend, validate=False)
                same = all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
                if not (same and torch.equal(valid.cpu(), want_valid)):
                    bad += 1
                    print(f"MISMATCH backend={backend} thresholds=({ts}, {ta})", flush=True)
    print(f"{len(THRESHOLDS) * n_cases} cases x {backends} at V={V} on {dev}: "
          f"{'all bitwise equal to the reference' if not bad else f'{bad} mismatches'}")
    return bad


def timing(dev, V):
    B, n = 32, 16
    gen = torch.Generator().manual_seed(2)
    nt, ns = [-1] * n, [-1] * n
    for p in range(n):
        kids = [c for c in range(1 + 4 * p, min(n, 5 + 4 * p))]
        if kids:
            nt[p] = kids[0]
            for a, b in zip(kids, kids[1:]):
                ns[a] = b
    target = torch.softmax(torch.randn(B, n, V, generator=gen) * 3, -1).to(dev)
    args = (target.argmax(-1), torch.arange(B * n, device=dev).reshape(B, n),
            torch.tensor([nt] * B, device=dev), torch.tensor([ns] * B, device=dev),
            torch.rand(B, n, device=dev), torch.rand(B, device=dev), target)

    def run(f, reps=20):
        f()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            f()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / reps * 1e3
    floor = run(lambda: target.clone())
    for backend in ("triton",):
        ms = run(lambda: S.tree_speculative_sampling_target_only(
            *(t.to(dev) for t in outputs(B, n, 6)), *args, validate=False, backend=backend))
        print(f"B={B} n={n} V={V}: {backend} {ms:.3f} ms = {ms / floor:.1f}x the copy floor "
              f"({floor:.3f} ms)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--V", type=int, default=128256)
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--no-timing", action="store_true")
    a = ap.parse_args()
    dev = torch.device(a.device)
    bad = check(dev, a.V, a.cases)
    if not a.no_timing:
        timing(dev, a.V)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
