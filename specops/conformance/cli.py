"""``specops check MODULE:CALLABLE``: the conformance kit's command line.

Exit status 0 when every check passes (an unseeded sampler is reported, not failed), 1 when
any fails, 2 on a usage error (a target that does not import or is not callable, a method the
kind does not have, a report path that cannot be written).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time

from specops.conformance.designs import kit_methods


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
    except Exception as exc:                      # noqa: BLE001 (any import failure)
        raise ValueError(f"cannot import {mod_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{target!r} is not callable ({type(obj).__name__})")
    return obj


def _report_path_error(path: str):
    if not path.lower().endswith(".html"):
        return f"--report writes HTML: the file name must end in .html, got {path!r}"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        return f"--report: the directory {parent!r} does not exist or is not writable"
    return None


def _check(args) -> int:
    from specops.conformance.runner import run_kit

    def usage(msg):
        print(f"specops check: error: {msg}", file=sys.stderr)
        return 2
    methods = kit_methods(args.kind)
    method = args.method or methods[0]
    if method not in methods:
        return usage(f"--method {method!r} is not a {args.kind} method "
                     f"(choose from {', '.join(methods)})")
    if args.report and _report_path_error(args.report):
        return usage(_report_path_error(args.report))
    if args.scale is not None and not args.scale > 0:
        return usage(f"--scale must be positive, got {args.scale}")
    if args.batch_size is not None and args.batch_size < 1:
        return usage(f"--batch-size must be >= 1, got {args.batch_size}")
    try:
        sampler = resolve(args.target)
    except ValueError as exc:
        return usage(str(exc))
    designs = [d for d in args.designs.split(",") if d] if args.designs else None
    bar = ProgressBar(sys.stderr) if sys.stderr.isatty() else None

    def announce(msg):
        print(f"specops check: {msg}", file=sys.stderr)
    if args.repeat < 1:
        return usage(f"--repeat must be >= 1, got {args.repeat}")
    reports = []
    for seed in range(args.seed, args.seed + args.repeat):
        try:
            report = run_kit(args.kind, sampler, method, quick=args.quick, seed=seed,
                             scale=args.scale, batch_size=args.batch_size, progress=bar,
                             designs=designs, announce=announce)
        except (TypeError, ValueError) as exc:
            if bar:
                bar.close()
            return usage(str(exc))
        if bar:
            bar.close()
        reports.append(report)
        if args.repeat > 1 and not args.json:
            print(f"kit seed {seed}: {'pass' if report.passed else 'FAIL'}"
                  + (f" ({', '.join(c.id for c in report.failed)})" if report.failed else "")
                  + f", {report.requests:,} requests, {report.elapsed_s:.1f} s", flush=True)
    report = next((r for r in reports if not r.passed), reports[-1])
    passed = sum(r.passed for r in reports)
    if args.json:
        print(report.to_json() if args.repeat == 1 else json.dumps(
            [{k: v for k, v in r.to_dict().items() if k != "checks"} for r in reports]))
    elif args.repeat == 1:
        print(report.to_text())
    else:
        print(f"{passed} of {args.repeat} runs passed (kit seeds {args.seed}.."
              f"{args.seed + args.repeat - 1})")
    if args.report:
        with open(args.report, "w") as f:
            f.write(report.to_html())
        if not args.json:
            print(f"report written to {os.path.abspath(args.report)}")
    return 0 if passed == len(reports) else 1


def add_check_parser(sub) -> None:
    p = sub.add_parser(
        "check", help="run the exactness conformance kit on a speculative sampler",
        description="Check a speculative-decoding sampler against specops' exact oracle: "
                    "output, length and next-token laws on enumerable cases, RNG coupling "
                    "probes, boundary probes, reproducibility and batch invariance, "
                    "well-formed output. The sampler follows the chain protocol "
                    "sampler(target_probs [B,K+1,V], draft_probs [B,K,V] or None, "
                    "draft_token_ids [B,K], seeds [B]) -> token_ids [B,K+1], or the tree "
                    "protocol sampler(target_probs [B,N,V], draft_probs or None, "
                    "node_token_ids [B,N], parent_ids [B,N], seeds [B], method) -> "
                    "token_ids [B,D+1] (see specops.conformance). Exit status 0: all checks "
                    "pass; 1: a check failed; 2: usage error.")
    p.add_argument("target", metavar="MODULE:CALLABLE",
                   help="the sampler, e.g. specops.conformance.adapters.native:chain_cpu")
    p.add_argument("--kind", choices=("chain", "tree"), default="chain",
                   help="the protocol the sampler follows (default chain)")
    p.add_argument("--method", help="the verification it implements: chain token (default) "
                                    "or block; tree rsd (default), mss or target_only")
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
    p.add_argument("--designs", metavar="A,B,...", help="run only these designs")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="run R times with kit seeds SEED..SEED+R-1 and count the passes "
                        "(the report: the first failing run, else the last)")
    p.set_defaults(func=_check)
