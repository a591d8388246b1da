"""CUDA-graph capture of ``specops.verify_block`` (run by bench/gpu_check.sh on a GPU).

The engine's way of calling: the flattened layout, ``validate=False`` and
``max_num_draft_tokens``, per-request tensors for every parameter.  The call is captured in a
CUDA graph once, then replayed on new inputs copied into the captured tensors; each replay
must equal an eager call on the same inputs, token for token, for both Triton paths (fused,
vocabulary-split) and with malformed requests in the batch.  ``--smoke`` runs the same code
on the CPU under Triton's interpreter without the graph (a check of this script only).

Exit status 1 on any mismatch.  Prints one line per case.
"""
from __future__ import annotations

import argparse
import os
import sys

SMOKE = "--smoke" in sys.argv
os.environ["TRITON_INTERPRET"] = "1" if SMOKE else "0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import specops  # noqa: E402

DEV = torch.device("cpu" if SMOKE else "cuda")


def make_inputs(g, B, K, V, bad=False):
    """Flattened-layout inputs with ragged blocks (the static shapes are fixed by B, K, V:
    every block has K drafts in the tensors; num_draft varies through cu_num_draft_tokens
    only up to K so the row counts stay fixed)."""
    nd = torch.full((B,), K)
    t = torch.randn((B * (K + 1), V), generator=g) * 3
    q = torch.softmax(torch.randn((B * K, V), generator=g), -1)
    ids = torch.randint(0, V, (B * K,), generator=g)
    temp = torch.rand((B,), generator=g) + 0.3
    temp[0] = 0.0
    top_p = torch.where(torch.rand((B,), generator=g) < 0.5, 0.9, 1.0)
    top_k = torch.where(torch.rand((B,), generator=g) < 0.5, 50, 0)
    seed = torch.randint(0, 2 ** 62, (B,), generator=g)
    if bad:                      # malformed requests: guarded on the device, not raised
        temp[1] = -1.0
        ids[2 * K] = V + 5
    return dict(target_logits=t, draft_token_ids=ids, draft_probs=q,
                cu_num_draft_tokens=torch.cumsum(nd, 0), temperature=temp, top_k=top_k,
                top_p=top_p, seed=seed, offset=torch.zeros((B,), dtype=torch.int64))


def run_case(path, B, K, V, replays=3):
    os.environ["SPECOPS_TRITON_PIPELINE"] = path
    g = torch.Generator().manual_seed(B * 1000 + V)
    static = {k: v.to(DEV) for k, v in make_inputs(g, B, K, V).items()}

    def call():
        return specops.verify_block(**static, max_num_draft_tokens=K, validate=False,
                                    backend="triton")

    ok = True
    if SMOKE:
        graph, out = None, None
    else:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):                       # compile and warm up outside the graph
                call()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = call()
    for r in range(replays):
        new = make_inputs(g, B, K, V, bad=(r % 2 == 1))
        for k, v in new.items():
            static[k].copy_(v.to(DEV))
        if graph is not None:
            graph.replay()
            torch.cuda.synchronize()
            got = [t.clone() for t in out]
        else:
            got = list(call())
        want = specops.verify_block(**{k: v.to(DEV) for k, v in new.items()},
                                    max_num_draft_tokens=K, validate=False, backend="triton")
        same = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(got, want))
        if r % 2 == 1:
            same &= not bool(got[2][1].cpu()) and not bool(got[2][2].cpu())
        ok &= same
        print(f"{path:6s} B={B:3d} K={K} V={V:6d} replay {r}: "
              f"{'equal to eager' if same else 'MISMATCH'}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    shapes = [(4, 3, 1000)] if args.smoke else [(1, 4, 128256), (32, 4, 128256), (8, 4, 32000)]
    ok = True
    for path in ("fused", "split"):
        for B, K, V in shapes:
            ok &= run_case(path, B, K, V, replays=2 if args.smoke else 3)
    print("capture: all replays equal eager" if ok else "capture: MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
