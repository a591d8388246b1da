"""The ``specops`` command line.

``specops audit [knobs] [--backend B] [--json] [--plot FILE.png] [--no-grid]`` runs the
rejection-sampling lab's deterministic checks and the exactness self-check of every available
backend; exit status 0 when every check passes, 1 when any fails, 2 on a usage error.

Subcommands are argparse subparsers: a new one adds an ``add_<name>_parser(subparsers)``
function that sets ``func`` (taking the parsed args, returning the exit status) and is listed
in ``SUBCOMMANDS``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional


def _plot_path_error(path: str) -> Optional[str]:
    """Why `path` cannot take the PNG (checked before the audit runs), or None."""
    if not path:
        return "--plot needs a file name ending in .png"
    if os.path.isdir(path):
        return f"--plot {path!r} is a directory; give a file name ending in .png"
    if not path.lower().endswith(".png"):
        return f"--plot writes a PNG image: the file name must end in .png, got {path!r}"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"--plot: the directory {parent!r} does not exist"
    if not os.access(parent, os.W_OK):
        return f"--plot: the directory {parent!r} is not writable"
    return None


def _audit(args) -> int:
    from specops import audit, lab
    try:
        knobs = lab.sanitize_knobs(certainty=args.certainty, match=args.match,
                                   gamma=args.gamma, cost=args.cost, length=args.length,
                                   seed=args.seed)
    except lab.KnobError as exc:
        print(f"specops audit: error: {exc}", file=sys.stderr)
        return 2
    backends = lab.available_backends()
    if args.backend != "auto" and args.backend not in backends:
        print(f"specops audit: error: backend {args.backend!r} is not available here "
              f"(available: {', '.join(backends)})"
              + ("; on CPU tensors triton needs TRITON_INTERPRET=1 set before it is imported"
                 if args.backend == "triton" else ""), file=sys.stderr)
        return 2
    if args.plot is not None:
        problem = _plot_path_error(args.plot)
        if problem:
            print(f"specops audit: error: {problem}", file=sys.stderr)
            return 2
        try:
            import matplotlib  # noqa: F401  (fail before the audit runs, not after)
        except ImportError:
            print("specops audit: error: --plot needs matplotlib, which is not installed "
                  "(pip install matplotlib)", file=sys.stderr)
            return 2
    report = audit.run_audit(knobs, backend=args.backend, grid=not args.no_grid)
    plot_path = os.path.abspath(args.plot) if args.plot else None
    if plot_path:
        try:
            audit.plot_report(report, plot_path)
        except (RuntimeError, OSError) as exc:
            print(f"specops audit: error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print(audit.format_report(report))
        if plot_path:
            print(f"plot written to {plot_path}")
    return 0 if report["summary"]["all_passed"] else 1


def add_audit_parser(sub) -> None:
    from specops import lab
    d = lab.DEFAULT_KNOBS
    p = sub.add_parser(
        "audit", help="run the rejection-sampling lab's checks and the exactness self-check",
        description="Teach and prove exact speculative sampling: a toy 8-token Markov model, "
                    "its one-token anatomy, a seeded trace through specops.verify_block, "
                    "a grid of 1296 settings, and every available backend checked token "
                    "for token against the reference oracle. Exit status 1 if any check "
                    "fails.")
    p.add_argument("--certainty", default=d.certainty, metavar="C",
                   help=f"how peaked the target's rows are, in [0, 1] (default {d.certainty})")
    p.add_argument("--match", default=d.match, metavar="M",
                   help=f"how close the draft is to the target, in [0, 1] (default {d.match})")
    p.add_argument("--gamma", default=d.gamma, metavar="G",
                   help=f"draft tokens per step, 1..16 (default {d.gamma})")
    p.add_argument("--cost", default=d.cost, metavar="C",
                   help=f"draft call cost relative to a target call, in [0, 100] "
                        f"(default {d.cost})")
    p.add_argument("--length", default=d.length, metavar="N",
                   help=f"tokens the trace emits, 1..100000 (default {d.length})")
    p.add_argument("--seed", default=d.seed, metavar="S",
                   help=f"model and trace seed, 0..2**63-1 (default {d.seed})")
    p.add_argument("--backend", default="auto", choices=("auto", "reference", "cpu", "triton"),
                   help="backend for the trace and the grid (default: the best available)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (checks, grid, views) instead of tables")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw the one-token view and the speedup curve (matplotlib)")
    p.add_argument("--no-grid", action="store_true",
                   help="skip the 1296-setting grid (faster; its checks are left out)")
    p.set_defaults(func=_audit)


SUBCOMMANDS = [add_audit_parser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specops", description="specops: exact speculative-decoding verification")
    try:
        from specops import __version__
        parser.add_argument("--version", action="version", version=f"specops {__version__}")
    except ImportError:         # pragma: no cover
        pass
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":      # pragma: no cover
    sys.exit(main())
