"""``specops check MODULE:CALLABLE``: the conformance kit's command line.

Exit status 0 when every check passes (an unseeded sampler is reported, not failed), 1 when
any fails (a sampler that raises, exits, hangs past ``--timeout`` or returns garbage fails),
2 on a usage error, with a one-line message: a target that does not import or is not
callable, a sampler whose signature does not take the protocol's arguments (a chain sampler
under ``--kind tree``), a method the kind does not have, unknown designs, a ``--scale``,
``--timeout``, ``--batch-size``, ``--seed`` or ``--repeat`` out of range, a report path that
cannot be written, scipy missing (``pip install "specops[check]"``).

While the named module is imported and the sampler runs, Python's and the C level's stdout go
to stderr, so a sampler's prints cannot corrupt the report (``--json``) on stdout.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import sys
import time

from specops.conformance import DEFAULT_TIMEOUT_S
from specops.conformance.designs import KINDS, design_names, kit_methods


class ProgressBar:
    """A one-line progress bar on a terminal (stderr); silent elsewhere."""

    def __init__(self, stream, width: int = 28):
        self.stream, self.width = stream, width
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, done: int, total: int, label: str) -> None:
        now = time.perf_counter()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        frac = min(1.0, done / total) if total else 1.0
        fill = int(frac * self.width)
        elapsed = now - self.t0
        left = elapsed / frac * (1 - frac) if frac > 0 else 0.0
        self.stream.write(f"\r[{'#' * fill}{'.' * (self.width - fill)}] {frac:4.0%} "
                          f"{label[:22]:22s} {done:>10,}/{total:,} requests  {elapsed:4.0f} s"
                          f"  ~{left:4.0f} s left ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * (self.width + 90) + "\r")
        self.stream.flush()


def resolve(target: str):
    """MODULE:CALLABLE (CALLABLE may be dotted) -> the object; ValueError with the reason."""
    if target.count(":") != 1:
        raise ValueError(f"expected MODULE:CALLABLE, got {target!r}")
    mod_name, attr = target.split(":")
    if not mod_name or not attr:
        raise ValueError(f"expected MODULE:CALLABLE, got {target!r}")
    try:
        try:
            obj = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            # Like `python -m`: modules beside you.  The working directory goes on sys.path
            # only when the name is not found without it, so an in-process call for an
            # installed module leaves sys.path as it was.
            if exc.name != mod_name.split(".")[0] or os.getcwd() in sys.path:
                raise
            sys.path.insert(0, os.getcwd())
            try:
                obj = importlib.import_module(mod_name)
            except BaseException:
                sys.path.remove(os.getcwd())      # not found there either: leave no trace
                raise
    except KeyboardInterrupt:
        raise
    except BaseException as exc:                  # noqa: BLE001 (SystemExit on import too)
        raise ValueError(f"cannot import {mod_name!r}: {type(exc).__name__}: {exc}") from exc
    module = obj
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{mod_name!r} ({_where(module)}) has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{target!r} is not callable ({type(obj).__name__})")
    return obj


def _where(module) -> str:
    """Which file a module came from (a namespace package is a directory without
    __init__.py, the usual surprise)."""
    path = getattr(module, "__file__", None)
    if path:
        return f"imported from {path}"
    paths = list(getattr(module, "__path__", []) or [])
    if paths:
        return f"a namespace package, the directory {paths[0]} (no __init__.py)"
    return "a built-in module"


def _report_path_error(path: str):
    if not path.lower().endswith(".html"):
        return f"--report writes HTML: the file name must end in .html, got {path!r}"
    if os.path.isdir(path):
        return f"--report {path!r} is a directory; give a file name ending in .html"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        return f"--report: the directory {parent!r} does not exist or is not writable"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"--report: {path!r} exists and is not writable"
    return None


class _Stdout:
    """The real stdout, kept while ``sys.stdout`` and file descriptor 1 point at stderr."""

    def __init__(self):
        self.stream, self.fd, self.own = sys.stdout, None, None

    def __enter__(self):
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        try:
            real = sys.stdout.fileno() == 1
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            real = False
        try:
            self.fd = os.dup(1)
            if real:
                self.own = os.fdopen(os.dup(self.fd), "w",
                                     encoding=getattr(sys.stdout, "encoding", None) or "utf-8",
                                     errors="replace")
            sys.stderr.flush()
            os.dup2(2, 1)
        except OSError:
            self.fd = None
        sys.stdout = sys.stderr
        return self

    def write(self, text: str) -> None:
        out = self.own or self.stream
        try:
            out.write(text + "\n")
            out.flush()
        except BrokenPipeError:                   # `specops check ... | head`
            pass

    def __exit__(self, *exc) -> None:
        sys.stdout = self.stream
        if self.fd is not None:
            with contextlib.suppress(OSError):
                sys.stderr.flush()
                os.dup2(self.fd, 1)
            os.close(self.fd)
        if self.own is not None:
            with contextlib.suppress(OSError, ValueError):
                self.own.close()


def _finite(x, at_least: float, strict: bool) -> bool:
    return math.isfinite(x) and (x > at_least if strict else x >= at_least)


def _usage(msg: str) -> int:
    print(f"specops check: error: {msg}", file=sys.stderr)
    return 2


def _check(args) -> int:
    from specops.conformance import stats
    methods = kit_methods(args.kind)
    method = args.method or methods[0]
    if method not in methods:
        return _usage(f"--method {method!r} is not a {args.kind} method "
                      f"(choose from {', '.join(methods)})")
    if args.report and _report_path_error(args.report):
        return _usage(_report_path_error(args.report))
    if args.scale is not None and not _finite(args.scale, 0, True):
        return _usage(f"--scale must be a finite number > 0, got {args.scale}")
    if not _finite(args.timeout, 0, False):
        return _usage(f"--timeout must be a finite number of seconds >= 0 (0: no limit), "
                      f"got {args.timeout}")
    if args.batch_size is not None and args.batch_size < 1:
        return _usage(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.repeat < 1:
        return _usage(f"--repeat must be >= 1, got {args.repeat}")
    if args.seed < 0 or args.seed + args.repeat - 1 > 2 ** 63 - 1:
        return _usage(f"--seed must be in [0, 2**63 - 1] (with --repeat), got {args.seed}")
    designs = None
    if args.designs is not None:
        valid = design_names(args.kind)
        designs = [d.strip() for d in args.designs.split(",") if d.strip()]
        unknown = [d for d in designs if d not in valid]
        if not designs or unknown:
            return _usage((f"unknown designs: {', '.join(unknown)}" if unknown else
                           f"--designs {args.designs!r} names no design")
                          + f" (valid for --kind {args.kind}: {', '.join(valid)})")
    try:
        stats.require_scipy()
    except stats.MissingDependency as exc:
        return _usage(str(exc))
    with _Stdout() as out:
        return _run(args, method, designs, out)


def _run(args, method, designs, out) -> int:
    from specops.conformance.runner import KitUsageError, run_kit
    try:
        sampler = resolve(args.target)
    except ValueError as exc:
        return _usage(str(exc))
    bar = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    single_text = args.repeat == 1 and not args.json

    def announce(text):
        # the preamble once: on stdout where the text report follows it, else on stderr
        if single_text:
            out.write(text)
        else:
            print(text, file=sys.stderr)
    reports = []
    for seed in range(args.seed, args.seed + args.repeat):
        try:
            report = run_kit(args.kind, sampler, method, quick=args.quick, seed=seed,
                             scale=args.scale, batch_size=args.batch_size, progress=bar,
                             designs=designs, announce=announce,
                             timeout=args.timeout or None, watchdog=True)
        except KitUsageError as exc:
            return _usage(str(exc))
        finally:
            if bar:
                bar.close()
        reports.append(report)
        if args.repeat > 1 and not args.json:
            out.write(f"kit seed {seed}: {'pass' if report.passed else 'FAIL'}"
                      + (f" ({', '.join(c.id for c in report.failed)})" if report.failed
                         else "")
                      + f", {report.requests:,} requests, {report.elapsed_s:.1f} s")
        if any(c.name == "sampler.timeout" for c in report.checks):
            break                       # its call still runs: do not call it again
    report = next((r for r in reports if not r.passed), reports[-1])
    passed = sum(r.passed for r in reports)
    if args.json:
        out.write(report.to_json() if args.repeat == 1 else json.dumps(
            [{k: v for k, v in r.to_dict().items() if k != "checks"} for r in reports]))
    elif args.repeat == 1:
        out.write(report.to_text(with_preamble=False))
    else:
        out.write(f"{passed} of {len(reports)} runs passed (kit seeds {args.seed}.."
                  f"{args.seed + len(reports) - 1}"
                  + (f"; stopped after a timeout, {args.repeat - len(reports)} not run"
                     if len(reports) < args.repeat else "") + ")")
    if args.report:
        try:
            with open(args.report, "w") as f:
                f.write(report.to_html())
        except OSError as exc:
            return _usage(f"--report: cannot write {args.report!r}: {exc.strerror or exc}")
        if not args.json:
            out.write(f"report written to {os.path.abspath(args.report)}")
    return 0 if passed == len(reports) else 1


def add_check_parser(sub) -> None:
    chain, tree = ", ".join(design_names("chain")), ", ".join(design_names("tree"))
    p = sub.add_parser(
        "check", help="run the exactness conformance kit on a speculative sampler",
        description="Check a speculative-decoding sampler against specops' exact oracle: "
                    "output, length and next-token laws on enumerable cases, RNG coupling "
                    "probes, boundary probes, reproducibility and batch invariance, "
                    "well-formed output. The sampler follows the chain protocol "
                    "sampler(target_probs [B,K+1,V] float32, draft_probs [B,K,V] float32 or "
                    "None, draft_token_ids [B,K] int64, seeds [B] int64) -> token_ids "
                    "[B,K+1], or the tree protocol sampler(target_probs [B,N,V], draft_probs "
                    "or None, node_token_ids [B,N], parent_ids [B,N], seeds [B], method) -> "
                    "token_ids [B,D+1]. The arguments are CPU torch tensors passed "
                    "positionally; it may return a torch tensor, a numpy array or a list, of "
                    "any integer dtype: per request the accepted drafts, the emitted token, "
                    "then -1. Request b's randomness must come from seeds[b] alone (not from "
                    "a stream shared by the batch). Needs scipy (pip install "
                    "\"specops[check]\"). See specops.conformance. Exit status 0: all checks "
                    "pass; 1: a check failed (the sampler raised, exited, hung or returned "
                    "garbage included); 2: usage error.")
    p.add_argument("target", metavar="MODULE:CALLABLE",
                   help="the sampler, e.g. specops.conformance.adapters.native:chain_cpu")
    p.add_argument("--kind", choices=KINDS, default="chain",
                   help="the protocol the sampler follows (default chain)")
    p.add_argument("--method", help="the verification it implements: chain "
                                    f"{' or '.join(kit_methods('chain'))} (the first is the "
                                    f"default); tree {', '.join(kit_methods('tree'))}")
    p.add_argument("--quick", action="store_true",
                   help="about a minute for a fast sampler (100k requests per design; "
                        "scaled down for slow samplers); default: the full run (1M per "
                        "design), whose budget is printed first")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--report", metavar="FILE.html",
                   help="also write an HTML report (expected vs observed law per check)")
    p.add_argument("--seed", type=int, default=0, help="the kit's seed (default 0)")
    p.add_argument("--scale", type=float,
                   help="multiply every design's number of requests (no automatic scaling)")
    p.add_argument("--batch-size", type=int, help="requests per sampler call "
                                                  "(default: the sampler's "
                                                  "conformance_batch_size, else 8192)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="time limit per sampler call: a call still running then fails the "
                        "run, the report says so and the kit exits (default "
                        f"{DEFAULT_TIMEOUT_S:g}; 0: no limit)")
    p.add_argument("--designs", metavar="A,B,...",
                   help=f"run only these designs (chain: {chain}; tree: {tree})")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="run R times with kit seeds SEED..SEED+R-1 and count the passes "
                        "(the report: the first failing run, else the last)")
    p.set_defaults(func=_check)
