"""The real-logits cache of ``python -m bench --suite real`` (bench/real_logits.py):
``python -m bench.studies.real_logits`` builds it (~2-3 minutes on 2 cores) and prints what it
holds; ``--sweep`` measures alpha = mean sum min(p, q) at T=0.8 for every draft depth L
(no cache written; the table in bench/real_logits.py's docstring).  Prints; writes no report.
"""
from __future__ import annotations

import os
import time

import torch

from bench import _cli
from bench.real_logits import (DRAFT_LAYERS, K, PROMPTS, ModelMissing, alpha, build,
                               cache_path, load_blocks, model_path)


def main(argv=None):
    ap = _cli.parser("python -m bench.studies.real_logits", __doc__, report=False)
    ap.add_argument("--sweep", action="store_true",
                    help="measure alpha for every draft depth L (no cache written)")
    args = ap.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        path = model_path()
    except ModelMissing as e:
        raise SystemExit(str(e))
    if args.sweep:
        t0 = time.time()
        alphas = build(path, layers=tuple(range(1, 30)))[2]     # 30 layers: 1..29 are drafts
        for L, a in alphas.items():
            print(f"L = {L:2d}: alpha = {a:.3f}" + ("  <- DRAFT_LAYERS" if L == DRAFT_LAYERS
                                                   else ""))
        print(f"({time.time() - t0:.0f} s)")
        return
    t0 = time.time()
    blocks = load_blocks()
    t, d, meta = blocks["target"], blocks["draft_logits"], blocks["meta"]
    mb = os.path.getsize(cache_path(path)) / 1e6
    print(f"ready in {time.time() - t0:.1f} s: {cache_path(path)} ({mb:.0f} MB; the build "
          f"took {meta['build_s']} s)")
    print(f"target {tuple(t.shape)} {t.dtype}, draft_logits {tuple(d.shape)} {d.dtype}")
    print(f"draft = first {meta['draft_layers']} of {meta['layers']} layers: alpha at "
          f"T={meta['temperature']} = {meta['alpha']:.3f} (recomputed: "
          f"{alpha(t[:, :K], d):.3f})")
    far = (t < t.amax(-1, keepdim=True) - 22).float().mean()
    agree = (t[:, :K].argmax(-1) == d.argmax(-1)).float().mean()
    print(f"sanity: fraction of the vocabulary > 22 nats below its row's max: {far:.2f}; "
          f"target argmax == draft argmax at {agree:.2f} of the draft positions")
    print(f"prompt 0: {PROMPTS[0]!r}\ncontinuation: {meta['example']!r}")


if __name__ == "__main__":
    main()
