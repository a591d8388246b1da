"""The command line every benchmark shares: ``python -m bench --suite NAME`` (the suites) and
``python -m bench.studies.NAME`` (the studies) take the same options, with the same meaning:

* ``--record``: write the report to the committed file, ``bench/results/<name>.md``;
* ``--out PATH``: write it to PATH instead (``--out ""``: write no file); without either,
  it goes to ``~/.cache/specops/bench/<name>.md`` (``SPECOPS_BENCH_DIR``);
* ``--reps N``: repetitions per timing (where something is timed);
* ``--quick``: the smallest run that still prints every table of the report (where there is
  one): a smoke test, not a measurement.

Every path is found from this package, not from the working directory, and every report
starts with the command that regenerates it (``command``).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

PACKAGE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(PACKAGE)                  # the checkout: what ``bench`` imports from
RESULTS = os.path.join(PACKAGE, "results")


def cache_dir() -> str:
    """Where reports go without ``--record`` or ``--out``."""
    return os.environ.get("SPECOPS_BENCH_DIR") or os.path.expanduser("~/.cache/specops/bench")


def add_common(ap: argparse.ArgumentParser, *, report: bool = True,
               reps: Optional[int] = None, quick: Optional[str] = None) -> None:
    """The shared options: ``--record`` and ``--out`` when a report file is written,
    ``--reps`` when something is timed (``reps``: its default), ``--quick`` (``quick``: what
    it runs)."""
    if report:
        ap.add_argument("--record", action="store_true",
                        help="write the committed report in bench/results/")
        ap.add_argument("--out", default=None,
                        help='the report\'s path ("" writes none; default: '
                             '~/.cache/specops/bench/, SPECOPS_BENCH_DIR)')
    if reps is not None:
        ap.add_argument("--reps", type=int, default=None,
                        help=f"repetitions per timing (default {reps})")
    if quick is not None:
        ap.add_argument("--quick", action="store_true", help=quick)


def parser(prog: str, doc: str, **common) -> argparse.ArgumentParser:
    """A study's parser: its docstring as the description, then ``add_common(**common)``."""
    ap = argparse.ArgumentParser(prog=prog, description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, **common)
    return ap


def out_path(args, name: str) -> str:
    """The report's path for ``args`` (``--out``, else ``--record``'s or the cache's
    ``name``); "" means no file."""
    if args.out is not None:
        return args.out
    return os.path.join(RESULTS if args.record else cache_dir(), name)


def command(prog: str, argv: Optional[Sequence[str]] = None) -> str:
    """The command line of this run, as a report prints it: ``prog`` and its arguments
    (``sys.argv[1:]`` when ``argv`` is None), after ``SPECOPS_CPU_ISA=...`` when that is set
    (it picks the C++ code the run timed)."""
    args = list(sys.argv[1:] if argv is None else argv)
    isa = os.environ.get("SPECOPS_CPU_ISA")
    return " ".join(([f"SPECOPS_CPU_ISA={isa}"] if isa else []) + [prog] + args)


def write(lines, path: str) -> None:
    """The report's lines to ``path`` (nothing when ``path`` is empty), then its name."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}")


def subprocess_env(**extra) -> dict:
    """The environment for a child ``python -m bench...``: this checkout first on
    PYTHONPATH, whatever the working directory."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
