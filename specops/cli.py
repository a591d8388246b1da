"""The ``specops`` command line.

``specops audit [knobs] [--backend B] [--json] [--plot FILE.png] [--no-grid]`` runs the
rejection-sampling lab's deterministic checks and the exactness self-check of every available
backend; exit status 0 when every check passes, 1 when any fails, 2 on a usage error.
``specops lab [knobs] [--port N] [--open | --no-open]`` serves the same lab as a page on
127.0.0.1; ``specops info [--json]`` prints the build and why each backend is or is not
available.

Subcommands are argparse subparsers: a new one adds an ``add_<name>_parser(subparsers)``
function that sets ``func`` (taking the parsed args, returning the exit status) and is listed
in ``SUBCOMMANDS``.  Nothing here imports torch before a command runs: ``specops --version``
and ``--help`` stay fast (the modules that need torch are imported inside the commands).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
from typing import List, Optional


def _drop_stdout() -> None:
    """The reader went away (``specops audit | head``): send the rest of the output, and
    Python's final flush, to /dev/null instead of a BrokenPipeError traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _write(text: str) -> None:
    """Print `text`; a closed pipe is not an error (the exit status stays the command's)."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()


def _error(prog: str, message: str) -> int:
    print(f"specops {prog}: error: {message}", file=sys.stderr)
    return 2


def _knob_parser(sub, name: str, summary: str, description: str):
    """A subcommand taking the lab's six knobs, with the ranges and defaults of
    ``specops.lab``."""
    from specops import lab
    p = sub.add_parser(name, help=summary, description=description)
    d = lab.DEFAULT_KNOBS
    for knob, (kind, lo, hi, what) in lab.KNOB_RANGES.items():
        if knob == "seed":
            rng = "0..2**63-1"
        else:
            rng = f"{lo}..{hi}" if kind == "int" else f"in [{lo:g}, {hi:g}]"
        p.add_argument(f"--{knob}", default=getattr(d, knob), metavar=knob[0].upper(),
                       help=f"{what}, {rng} (default {getattr(d, knob)})")
    return p


def _knobs(args, prog: str):
    """The sanitised knobs, or None after printing the knob's error (usage error)."""
    from specops import lab
    try:
        return lab.sanitize_knobs(**{n: getattr(args, n) for n in lab.KNOB_RANGES})
    except lab.KnobError as exc:
        _error(prog, str(exc))
        return None


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
    knobs = _knobs(args, "audit")
    if knobs is None:
        return 2
    from specops import audit, lab
    backends = lab.available_backends()
    if args.backend != "auto" and args.backend not in backends:
        return _error("audit", f"backend {args.backend!r} is not available here "
                      f"(available: {', '.join(backends)})"
                      + ("; on CPU tensors triton needs TRITON_INTERPRET=1 set before it is "
                         "imported" if args.backend == "triton" else ""))
    if args.plot is not None:
        problem = _plot_path_error(args.plot)
        if problem:
            return _error("audit", problem)
        try:
            import matplotlib  # noqa: F401  (fail before the audit runs, not after)
        except ImportError:
            return _error("audit", "--plot needs matplotlib, which is not installed "
                          "(pip install matplotlib)")
    report = audit.run_audit(knobs, backend=args.backend, grid=not args.no_grid)
    status = 0 if report["summary"]["all_passed"] else 1
    plot_path = os.path.abspath(args.plot) if args.plot else None
    if plot_path:
        try:
            audit.plot_report(report, plot_path)
        except (RuntimeError, OSError) as exc:
            return _error("audit", str(exc))
    if args.json:
        _write(json.dumps(report, allow_nan=False))
    else:
        _write(audit.format_report(report))
        if plot_path:
            _write(f"plot written to {plot_path}")
    return status


def add_audit_parser(sub) -> None:
    p = _knob_parser(
        sub, "audit", "run the rejection-sampling lab's checks and the exactness self-check",
        "Teach and prove exact speculative sampling: a toy 8-token Markov model, "
                    "its one-token anatomy, a seeded trace through specops.verify_block, "
                    "a grid of 1296 settings, and every available backend checked token "
                    "for token against the reference oracle. Exit status 1 if any check "
                    "fails.")
    p.add_argument("--backend", default="auto", choices=("auto", "reference", "cpu", "triton"),
                   help="backend for the trace and the grid (default: the best available)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (checks, grid, views) instead of tables")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw the one-token view and the speedup curve (matplotlib)")
    p.add_argument("--no-grid", action="store_true",
                   help="skip the 1296-setting grid (faster; its checks are left out)")
    p.set_defaults(func=_audit)


def _lab(args) -> int:
    knobs = _knobs(args, "lab")
    if knobs is None:
        return 2
    if not 0 <= args.port <= 65535:
        return _error("lab", f"--port must be in 0..65535 (0: a free port); got {args.port}")
    from specops import lab_server
    return lab_server.serve(knobs, port=args.port, open_browser=args.open, out=_write)


def add_lab_parser(sub) -> None:
    p = _knob_parser(
        sub, "lab", "serve the rejection-sampling lab as a page on 127.0.0.1",
        "Serve the rejection-sampling lab in a browser: sliders for the knobs, "
                    "the one-token chart, the audit's checks, the trace and the speed "
                    "accounting, computed by the same functions as `specops audit --json` "
                    "(without the grid, on one backend). Listens on 127.0.0.1 only; Ctrl-C "
                    "stops it. The knob flags set the page's starting values.")
    p.add_argument("--port", type=int, default=0,
                   help="port on 127.0.0.1 (default 0: a free port, printed)")
    p.add_argument("--open", action=argparse.BooleanOptionalAction, default=True,
                   help="open the page in a browser (default: yes, where one can open)")
    p.set_defaults(func=_lab)


def _info(args) -> int:
    from specops import audit_env, lab
    status = audit_env.backend_status(lab.available_backends())
    build = audit_env.build_info()
    if args.json:
        _write(json.dumps({"build": build, "backends": status}))
    else:
        _write("\n".join(audit_env.build_lines(build) + ["backends:"]
                         + ["  " + x for x in audit_env.status_lines(status)]))
    return 0


def add_info_parser(sub) -> None:
    p = sub.add_parser(
        "info", help="print the build (version, C++ ISA levels, threads, Triton, torch) and "
                     "why each backend is or is not available",
        description="The build of this installation and each backend's availability, with "
                    "the reason when it cannot run (the C++ extension missing or failing to "
                    "load, a bad SPECOPS_CPU_ISA, Triton missing or not runnable here).")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_info)


SUBCOMMANDS = [add_audit_parser, add_lab_parser, add_info_parser,
               __import__("specops.conformance.cli", fromlist=["_"]).add_check_parser]


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
