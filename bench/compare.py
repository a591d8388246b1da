"""``python -m bench --compare REF``: this checkout against specops at the git ref REF, in one run.

REF is checked out into a temporary git worktree and its C++ extension is built there, in place,
with its own CMake build folder (the CMake of REF, this Python, nothing installed into the
environment).  Each build is then timed in its own child processes, the two alternating
(ref, new, new, ref, ...) over ``--rounds`` rounds, each child importing specops from its
checkout through PYTHONPATH.  The children call only the public ``specops.verify_block``
(REF may predate every internal module of this checkout) on the same inputs, built from a
fixed seed: B=32, K=4, V=128256, float32 target logits and draft probabilities (the draft is
the target plus N(0, 0.5^2) noise, its tokens sampled from its own probabilities, a greedy
drafter's argmax for greedy), and the per-call row at B=1, K=4, V=1000.  Every row is timed
with the default checks and with ``validate=False``, both in the same process, the rows in
turn and a row's two calls adjacent, each first in every other repetition.

Printed (and written to ``--out``, or with ``--record`` to bench/results/compare_<REF>.md):
each row's median over the rounds of the per-round medians, its range, and the ratio new / ref;
then, per build, the default call against ``validate=False``.  A row a build cannot run (an
argument its ``verify_block`` lacks) is shown as n/a.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")

B, K, V = 32, 4, 128256
SMALL = (1, 4, 1000)          # the per-call row (bench/overhead.py's shape)

# name: (shape, sampling setting, verify_block keywords)
ROWS = {
    "greedy": ((B, K, V), dict(temperature=0.0), {}),
    "t0.8": ((B, K, V), dict(temperature=0.8), {}),
    "t0.8 + top-p 0.95": ((B, K, V), dict(temperature=0.8, top_p=0.95), {}),
    "block t0.8": ((B, K, V), dict(temperature=0.8), dict(method="block")),
    "rates t0.8": ((B, K, V), dict(temperature=0.8), dict(return_accept_rates=True)),
    "per call B=1, V=1000, t0.8": (SMALL, dict(temperature=0.8), {}),
}
CHECKED = ("greedy", "t0.8", "t0.8 + top-p 0.95")    # the default-call-vs-validate=False rows
INNER = 200                   # calls per timing of the per-call row


# ----------------------------------------------------------------------------- the child
def _draft_probs(logits, temperature, top_p):
    """The draft's probabilities under a setting (temperature 0: 1), top-p by a sort."""
    import torch
    q = torch.softmax(logits / (temperature or 1.0), -1)
    if top_p < 1.0:
        s, i = q.sort(-1, descending=True)
        drop = s.cumsum(-1) - s > top_p
        q = q.scatter(-1, i, s.masked_fill(drop, 0.0))
        q = q / q.sum(-1, keepdim=True)
    return q.contiguous()


def _inputs(shape, setting, seed=0):
    import torch
    b, k, v = shape
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(b, k + 1, v, generator=g) * 2.0
    draft_logits = target[:, :k] + 0.5 * torch.randn(b, k, v, generator=g)
    q = _draft_probs(draft_logits, setting.get("temperature", 1.0), setting.get("top_p", 1.0))
    if setting.get("temperature") == 0:
        ids = draft_logits.argmax(-1)
    else:
        ids = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k)
    return target, ids, q


def child(argv):
    """One build's timings (run with PYTHONPATH = that build's checkout): a JSON line
    {row: {"default": s, "validate=False": s} or None}."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    args = ap.parse_args(argv)
    import torch
    import specops
    here = os.path.realpath(os.path.dirname(specops.__file__))
    if os.path.commonpath([here, os.path.realpath(args.root)]) != os.path.realpath(args.root):
        sys.exit(f"specops imported from {here}, not from {args.root}")
    torch.set_num_threads(args.threads)
    fns, inner = {}, {}
    cache = {}
    for name, (shape, setting, extra) in ROWS.items():
        key = (shape, tuple(sorted(setting.items())))
        if key not in cache:
            cache[key] = _inputs(shape, setting)
        target, ids, q = cache[key]
        for mode, validate in (("default", None), ("validate=False", False)):
            kw = dict(setting, seed=0, offset=0, backend="cpu", validate=validate, **extra)
            fn = (lambda t=target, i=ids, d=q, kw=kw: specops.verify_block(t, i, d, **kw))
            try:
                fn()
            except (TypeError, ValueError) as exc:     # an argument this build lacks
                print(f"{name} ({mode}): n/a ({exc})", file=sys.stderr)
                continue
            fns[(name, mode)] = fn
            inner[(name, mode)] = INNER if shape == SMALL else 1
    times = {k: [] for k in fns}
    for k, fn in fns.items():                          # warm-up
        for _ in range(inner[k]):
            fn()
    # Round-robin over the rows, a row's two calls adjacent, in turns first: the first call
    # of a row follows another row's (its inputs colder in the caches), the second its twin.
    keys = list(fns)
    for rep in range(args.reps):
        order = [k for name in ROWS for k in sorted(
            (k for k in keys if k[0] == name), key=lambda k: k[1], reverse=rep % 2 == 1)]
        for k in order:
            fn = fns[k]
            t0 = time.perf_counter()
            for _ in range(inner[k]):
                fn()
            times[k].append((time.perf_counter() - t0) / inner[k])
    out = {name: None for name in ROWS}
    for (name, mode), ts in times.items():
        out[name] = out[name] or {}
        out[name][mode] = statistics.median(ts)
    print("RESULT " + json.dumps(out))


# ----------------------------------------------------------------------------- the parent
def _git(*args, cwd=ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def build_ref(ref: str, where: str) -> str:
    """A worktree of ``ref`` under ``where`` with its specops._C built in place (its own
    CMake, this Python); returns the worktree's path."""
    sha = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    wt = os.path.join(where, f"specops-{sha[:12]}")
    _git("worktree", "add", "--detach", wt, sha)
    import pybind11
    build = os.path.join(wt, "build", "compare-cmake")
    cfg = ["-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
           f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
           f"-DSPECOPS_OUTPUT_DIR={os.path.join(wt, 'specops')}",
           f"-DSPECOPS_OUTPUT_NAME=_C{sysconfig.get_config_var('EXT_SUFFIX')}"]
    if shutil.which("ninja"):
        cfg += ["-G", "Ninja"]
    print(f"building specops._C at {ref} ({sha[:12]}) ...", flush=True)
    t0 = time.time()
    subprocess.run(["cmake", "-S", wt, "-B", build] + cfg, check=True, capture_output=True)
    subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 1)], check=True,
                   capture_output=True)
    print(f"  built in {time.time() - t0:.0f} s", flush=True)
    return wt


def _run_child(root: str, reps: int, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=root)
    with tempfile.TemporaryDirectory() as cwd:        # nothing importable from the cwd
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--root",
                            root, "--reps", str(reps), "--threads", str(threads)], env=env,
                           cwd=cwd,
                           capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"the timing child of {root} failed:\n{r.stderr[-3000:]}")
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"no result from the timing child of {root}:\n{r.stdout[-2000:]}")


def _stat(values):
    """'median [min-max]' of per-round values (ms), or n/a."""
    vs = [v for v in values if v is not None]
    if not vs:
        return "n/a", None
    med = statistics.median(vs)
    return f"{med * 1e3:.2f} [{min(vs) * 1e3:.2f}-{max(vs) * 1e3:.2f}]", med


def _ratio(values):
    vs = [v for v in values if v is not None]
    if not vs:
        return "n/a"
    return f"{statistics.median(vs):.2f}x [{min(vs):.2f}-{max(vs):.2f}]"


def report(ref, ref_sha, new_sha, dirty, rounds, reps, threads, runs, argv, load) -> str:
    """The markdown of one compare (runs: {"ref": [round dicts], "new": [...]})."""
    import torch
    lines = [f"# specops {new_sha[:12]}{' + uncommitted changes' if dirty else ''} against "
             f"{ref} ({ref_sha[:12]})", "",
             f"- command: `python -m bench {' '.join(argv)}`",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- machine: {os.cpu_count()} cores, {platform.platform()}, torch "
             f"{torch.__version__}, {threads} threads, backend cpu; load average "
             f"(1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end",
             f"- each build in its own processes, alternating, {rounds} rounds; a value is "
             f"the median over the rounds of each round's median of {reps} calls "
             f"(the per-call row: of {reps} means of {INNER} calls), in ms, "
             "[range over the rounds]",
             f"- B={B}, K={K}, V={V}, float32 target logits + draft probs (the per-call row: "
             f"B, K, V = {SMALL})", "",
             "| row | call | ref ms | new ms | new / ref |", "|---|---|---|---|---|"]

    def per_round(build, name, mode):
        return [(r.get(name) or {}).get(mode) for r in runs[build]]

    for name in ROWS:
        for mode in ("default", "validate=False"):
            ref_s, ref_m = _stat(per_round("ref", name, mode))
            new_s, new_m = _stat(per_round("new", name, mode))
            pairs = [n / r if n and r else None for n, r in
                     zip(per_round("new", name, mode), per_round("ref", name, mode))]
            lines.append(f"| {name} | {mode} | {ref_s} | {new_s} | {_ratio(pairs)} |")
    lines += ["", "The default call against `validate=False` (per round, in the same process):",
              "", "| row | ref default / validate=False | new default / validate=False |",
              "|---|---|---|"]
    for name in ROWS:
        cells = []
        for build in ("ref", "new"):
            d, f = per_round(build, name, "default"), per_round(build, name, "validate=False")
            cells.append(_ratio([a / b if a and b else None for a, b in zip(d, f)]))
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def run(ref: str, rounds: int, reps: int, out, keep_dir, argv, threads=None) -> str:
    threads = threads or os.cpu_count() or 1
    ref_sha = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    new_sha = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    where = keep_dir or tempfile.mkdtemp(prefix="specops-compare-")
    wt = os.path.join(where, f"specops-{ref_sha[:12]}")
    made = not os.path.isdir(wt)         # (a kept worktree of --compare-dir is reused)
    try:
        if made:
            build_ref(ref, where)
        runs = {"ref": [], "new": []}
        load = [os.getloadavg()[0]]
        for k in range(rounds):
            order = ("ref", "new") if k % 2 == 0 else ("new", "ref")
            for build in order:
                runs[build].append(_run_child(wt if build == "ref" else ROOT, reps, threads))
            print(f"round {k + 1}/{rounds} done", flush=True)
        load.append(os.getloadavg()[0])
    finally:
        if made and not keep_dir:
            subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT,
                           capture_output=True)
            shutil.rmtree(where, ignore_errors=True)
    text = report(ref, ref_sha, new_sha, dirty, rounds, reps, threads, runs, argv, load)
    print(text)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
        print(f"wrote {out}")
    return text


def add_arguments(ap) -> None:
    """``--compare REF`` and its options, on ``python -m bench``'s parser."""
    ap.add_argument("--compare", metavar="REF", default=None,
                    help="time this checkout against specops at the git ref REF (built in a "
                         "temporary worktree), the two alternating in separate processes, and "
                         "print each row's ratio (bench/compare.py; --record: "
                         "results/compare_<REF>.md); --reps: calls per round (default 8: "
                         "each call of a row first in half of them)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="--compare: rounds of the two builds alternating (default 3)")
    ap.add_argument("--threads", type=int, default=None,
                    help="--compare: torch.set_num_threads in the timed processes (default: "
                         "every core)")
    ap.add_argument("--compare-dir", default=None,
                    help="--compare: keep REF's built worktree in this folder (reused by the "
                         "next run) instead of a temporary one")


def main(args, argv) -> str:
    """``python -m bench --compare REF`` (args from ``add_arguments``, plus --reps, --out and
    --record)."""
    name = f"compare_{args.compare.replace('/', '_')}.md"
    out = args.out if args.out is not None else os.path.join(
        RESULTS if args.record else (os.environ.get("SPECOPS_BENCH_DIR")
                                     or os.path.expanduser("~/.cache/specops/bench")), name)
    return run(args.compare, args.rounds, args.reps or 8, out, args.compare_dir,
               list(argv if argv is not None else sys.argv[1:]), args.threads)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.pop(0)                 # not bench/: specops comes from PYTHONPATH only
        child(sys.argv[2:])
