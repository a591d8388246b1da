"""Per-call overhead: B=1, K=4, V=1000 on the CPU, temperature 0.8, draft probabilities.

Engines call the verifier every decoding step, so at small shapes the argument handling and
dispatch are the cost.  Measured in one run on the same inputs, alternating repetitions:

* ``specops.verify_block`` with Python scalars (temperature, seed, offset): the engine call
  (and the same with ``validate=False``: what the default call's checks cost);
* the same with [B] tensors for temperature / seed / offset;
* transformers' eager ``_speculative_sampling`` (batch 1, its only shape) on the same target
  and draft, given logits already divided by the temperature (the division is not timed);
* the backend function alone (``specops.backends.<backend>.verify`` on the arguments the
  public call checked once: its marshalling and the kernel, no argument checks or dispatch);
* the argument layer alone (``specops._args.prepare`` of the scalar-params call);
* the floor: reading the target logits and draft probabilities once (a torch sum of each).

Run: ``python -m bench --suite overhead`` (``--record`` writes bench/results/overhead.md;
``--reps``: rounds, default 31, of 200 calls each; ``--quick``: 5 rounds of 20).
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import time

import torch

import specops
from bench import _cli
from specops import _args

B, K, V, T = 1, 4, 1000, 0.8


def inputs():
    g = torch.Generator().manual_seed(0)
    target = torch.randn(B, K + 1, V, generator=g)
    draft_logits = target[:, :K] + 0.5 * torch.randn(B, K, V, generator=g)
    q = torch.softmax(draft_logits / T, -1)
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    return target, draft_logits, q, ids


def cases(backend):
    target, draft_logits, q, ids = inputs()
    temp_t, seed_t, off_t = torch.full((B,), T), torch.zeros(B, dtype=torch.int64), \
        torch.zeros(B, dtype=torch.int64)
    fns = {
        "specops.verify_block, scalar params": lambda: specops.verify_block(
            target, ids, q, temperature=T, seed=0, offset=0, backend=backend),
        "specops.verify_block, scalar params, validate=False": lambda: specops.verify_block(
            target, ids, q, temperature=T, seed=0, offset=0, validate=False, backend=backend),
        "specops.verify_block, [B] tensor params": lambda: specops.verify_block(
            target, ids, q, temperature=temp_t, seed=seed_t, offset=off_t, backend=backend),
        "floor (sum of target + draft probs)": lambda: (target.sum(), q.sum()),
        # the checks and canonical form of the scalar-params call, without the backend
        "argument layer alone (specops._args.prepare), scalar params": lambda: _args.prepare(
            target_logits=target, draft_token_ids=ids, draft_probs=q, temperature=T, seed=0,
            offset=0),
    }
    if backend != "auto":
        import importlib

        from specops.reference import inv_temperature
        be = importlib.import_module(f"specops.backends.{backend}")
        zero = torch.zeros(B, dtype=torch.int64)
        # the canonical arguments (specops/backends/__init__.py) of this call, scalars as
        # Python numbers, as verify_block passes them
        a = (target.reshape(-1, V), False, zero, ids.reshape(-1), zero, torch.full((B,), K),
             q.reshape(-1, V), True, float(inv_temperature(T)), 0, 1.0, 0.0, 0, 0, K)
        fns[f"backend function (specops.backends.{backend}.verify)"] = lambda: be.verify(*a)
    try:
        from transformers.generation.utils import _speculative_sampling
    except ImportError:
        _speculative_sampling = None
    if _speculative_sampling is not None:
        cand = torch.cat([torch.zeros(1, 1, dtype=torch.long), ids.long()], 1)
        st, sd = target / T, draft_logits / T
        fns["transformers _speculative_sampling (eager)"] = lambda: _speculative_sampling(
            cand, sd, K, st)
    return fns


def timeit(fns, reps, inner):
    """Median and min over `reps` alternating rounds of the mean of `inner` calls."""
    for f in fns.values():
        for _ in range(inner):
            f()
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                f()
            times[k].append((time.perf_counter() - t0) / inner)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


ROUNDS, INNER = 31, 200


def run(args, out, argv):
    """The per-call table, written to ``out`` ("" writes no file).  ``args``: ``reps``
    (rounds), ``quick``, ``backend``."""
    rounds, inner = (args.reps or ROUNDS), INNER
    if args.quick:
        rounds, inner = args.reps or 5, 20
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = timeit(cases(args.backend), rounds, inner)
    finally:
        torch.set_num_threads(threads)
    lines = ["# Per-call overhead (B=1, K=4, V=1000, CPU, temperature 0.8, draft probs)", "",
             f"- command: `{_cli.command('python -m bench', argv)}`",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- machine: {os.cpu_count()} cores, {platform.platform()}, torch "
             f"{torch.__version__}, 1 thread; backend `{args.backend}`",
             f"- {rounds} alternating rounds of {inner} calls each; per-call median "
             "and min over rounds", "",
             "| call | median us | min us |", "|---|---|---|"]
    for k, (med, mn) in res.items():
        lines.append(f"| {k} | {med * 1e6:.1f} | {mn * 1e6:.1f} |")
    hf = res.get("transformers _speculative_sampling (eager)")
    if hf:
        lines.append("")
        for k in ("specops.verify_block, scalar params",
                  "specops.verify_block, [B] tensor params"):
            lines.append(f"- transformers / {k}: **{hf[0] / res[k][0]:.2f}x** (median), "
                         f"{hf[1] / res[k][1]:.2f}x (min)")
    print("\n".join(lines) + "\n")
    _cli.write(lines, out)
