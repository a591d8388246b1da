"""One ``verify_block`` call per setting on the real-logits blocks, for instruction counts.

    python -m bench.studies.cpu_profile --setting t0.8 --reps 30  # verify_block alone, best of 30
    bash bench/harness/callgrind.sh t0.8                          # instruction counts per pass

Instruction counts do not depend on what else the machine runs (bench/results/cpu_passes.md
records them); wall time does.  The inputs are those of ``python -m bench --suite real``
(B=32, K=4, V=49152, fp32 logits and fp32 draft probabilities, drafts sampled from q).
Prints one line; writes no report.
"""
from __future__ import annotations

import time

import torch

import specops
from bench import _cli
from bench import _harness as cpu_suite
from bench import real, real_logits


def dump(path, target, q, ids, s, calls):
    """The harness's input file (bench/harness/verify_harness.cpp): header, parameters, rows."""
    import numpy as np
    from specops import reference as R
    B, K1, V = target.shape
    with open(path, "wb") as f:
        f.write(np.array([B, K1 - 1, V, 1, calls], np.int64).tobytes())
        f.write(R.inv_temperature(np.float32(s.get("temperature", 1.0))).astype(np.float32)
                .tobytes())
        f.write(np.array([s.get("top_k", 0)], np.int64).tobytes())
        f.write(np.array([s.get("top_p", 1.0), s.get("min_p", 0.0)], np.float32).tobytes())
        f.write(target.float().contiguous().numpy().tobytes())
        f.write(q.float().contiguous().numpy().tobytes())
        f.write(ids.to(torch.int64).contiguous().numpy().tobytes())


def main(argv=None):
    ap = _cli.parser("python -m bench.studies.cpu_profile", __doc__, report=False, reps=1)
    ap.add_argument("--setting", default="t0.8", choices=list(real.SETTINGS))
    ap.add_argument("--batch", type=int, default=real.HEADLINE_B)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dump", default=None, help="write the inputs for bench/harness (no call)")
    args = ap.parse_args(argv)
    calls = args.reps or 1
    if args.threads:
        torch.set_num_threads(args.threads)
    blocks = real_logits.load_blocks()
    target = blocks["target"][:args.batch].contiguous()
    draft = blocks["draft_logits"][:args.batch].contiguous()
    s = real.SETTINGS[args.setting]
    q, ids = cpu_suite.draft_side(draft, s, torch.Generator().manual_seed(1))
    B = target.shape[0]
    if args.dump:
        dump(args.dump, target, q, ids, s, calls)
        return
    kw = dict(seed=torch.arange(B), offset=torch.zeros(B, dtype=torch.int64), backend="cpu", **s)
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        out = specops.verify_block(target, ids, q, **kw)
        best = min(best, time.perf_counter() - t0)
    tok = out.token_ids.long()
    digest = int((tok * torch.arange(tok.numel()).view_as(tok)).sum())
    print(f"{args.setting}: B={B}, threads {torch.get_num_threads()}, accepted "
          f"{out.num_accepted.float().mean():.2f}, tokens digest {digest}, best of "
          f"{calls} calls {best * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
