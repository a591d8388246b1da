"""Transient memory of ``specops.distributed.verify_block`` (a world of one, the whole
vocabulary on one rank): the peak resident set size during the call above the resident set
size before it, beside the inputs' size, at V=128256, B=64, K=8.

Run: ``python -m bench.studies.dist_memory`` (``--record`` writes
bench/results/dist_memory.md; ``--quick``: the first configuration only).  Linux: the peak is
/proc/self/status VmHWM, reset before each call through /proc/self/clear_refs.  Each
configuration runs in a fresh process so that one cannot inherit another's peak, and the
table is the first call's: the rows' buffer ``specops.backends.cpu_shard`` keeps per thread
is allocated by it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench import _cli

B, K, V = 64, 8, 128256
PROG = "python -m bench.studies.dist_memory"
CONFIGS = {
    "block, point-mass drafts, fp32 logits": dict(method="block", draft=None),
    "token, draft probs, top-p 0.95, rates": dict(method="token", draft="probs", top_p=0.95,
                                                  return_accept_rates=True),
    "block, draft logits, bf16, rates": dict(method="block", draft="logits", dtype="bf16",
                                             return_accept_rates=True),
}


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def one(name: str) -> dict:
    import torch
    import specops.distributed as sd
    torch.set_num_threads(1)
    cfg = dict(CONFIGS[name])
    dtype = torch.bfloat16 if cfg.pop("dtype", "fp32") == "bf16" else torch.float32
    draft = cfg.pop("draft")
    g = torch.Generator().manual_seed(0)
    t = torch.randn(B, K + 1, V, generator=g).to(dtype)
    kw = dict(target_logits=t, draft_token_ids=torch.randint(0, V, (B, K), generator=g),
              temperature=0.8, seed=torch.arange(B), offset=0, **cfg)
    inputs = t.numel() * t.element_size()
    if draft is not None:
        d = torch.randn(B, K, V, generator=g).to(dtype)
        kw["draft_probs" if draft == "probs" else "draft_logits"] = \
            torch.softmax(d.float(), -1) if draft == "probs" else d
        inputs += kw.get("draft_probs", d).numel() * kw.get("draft_probs", d).element_size()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                                   # VmHWM := VmRSS
    before = _status("VmRSS")
    start = time.perf_counter()
    sd.verify_block(**kw, vocab_start=0)
    seconds = time.perf_counter() - start
    return dict(inputs_mb=inputs / 2 ** 20, transient_mb=(_status("VmHWM") - before) / 2 ** 20,
                seconds=seconds)


def main(argv=None) -> int:
    ap = _cli.parser(PROG, __doc__, quick="the first configuration only")
    ap.add_argument("--one", help=argparse.SUPPRESS)       # internal: one configuration
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one)))
        return 0
    rows = []
    for name in list(CONFIGS)[:1 if args.quick else None]:
        out = subprocess.run([sys.executable, "-m", "bench.studies.dist_memory", "--one", name],
                             check=True, capture_output=True, text=True, cwd=_cli.ROOT,
                             env=_cli.subprocess_env()).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append((name, r))
        print(f"{name}: inputs {r['inputs_mb']:.0f} MiB, transient {r['transient_mb']:.0f} MiB "
              f"({r['transient_mb'] / r['inputs_mb']:.2f}x), {r['seconds']:.1f} s", flush=True)
    lines = ["# Transient memory of specops.distributed.verify_block", "",
             f"`{_cli.command(PROG, argv)}`: a world of one, B={B}, K={K}, V={V}, one thread; "
             "peak RSS during the call above the RSS before it (the first call in a fresh "
             f"process).  Host: {os.cpu_count()} CPUs.", "",
             "| configuration | inputs (MiB) | transient (MiB) | transient / inputs "
             "| time (s) |", "|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['inputs_mb']:.0f} | {r['transient_mb']:.0f} | "
                     f"{r['transient_mb'] / r['inputs_mb']:.2f} | {r['seconds']:.1f} |")
    _cli.write(lines, _cli.out_path(args, "dist_memory.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
