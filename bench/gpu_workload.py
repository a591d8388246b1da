"""The workload of ``python -m bench.gpu_model``: the settings, the inputs (every draft
accepted, so every target row is read), one counted verify call, and the job runner that
spreads (pipeline, setting) measurements over worker processes.
"""
from __future__ import annotations

import contextlib
import inspect
import os

import torch

from bench.gpu_counts import count_launches
from bench.gpu_fit import LAUNCH

V_REAL, K, BATCHES = 128256, 4, (1, 8, 32, 64)
GPU_TILE = LAUNCH.GPU_BLOCK_V   # the GPU's vocabulary tile
RUN_TILE = 4096          # the tile measured with: 2-3x faster, the same bytes (see inputs)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "gpu_model.md")
FULL_POINTS = [(1, 8192), (2, 8192), (3, 8192), (1, 16384), (2, 16384), (1, 24576)]
QUICK_POINTS = FULL_POINTS[:2] + FULL_POINTS[3:]        # 5 points: the fit's 5 terms

SAMPLING = {"T=1": {}, "top_p=0.9": {"top_p": 0.9}, "top_k=50": {"top_k": 50}}
ALL_SETTINGS = [(dt, q, samp) for samp in SAMPLING for dt in ("fp32", "bf16")
                for q in (True, False)]
# a filter costs minutes in the interpreter: top-p with fp32 point-mass drafts (vLLM's usual
# case) by default; --all adds top-k (the same 8 radix rounds) and the other dtype / drafts
SETTINGS = ALL_SETTINGS[:4] + [("fp32", False, "top_p=0.9")]


def inputs(B, V, dtype, with_q, k=K):
    """Every draft accepted (the target boosts each draft token by 20, a draft with probs is
    flatter than the target), so every target row is read, and the bonus token at V/2 - 1.
    With V a multiple of 8192 that token ends a 4096-element chunk and tile: the fused
    draw's second pass reads exactly V/2 (as for a uniformly placed token), the split find
    its chunk in full, for any tile up to 4096, so RUN_TILE counts the GPU tile's bytes."""
    g = torch.Generator().manual_seed(1234)
    t = torch.randn(B, k + 1, V, generator=g)
    ids = torch.randint(0, V, (B, k), generator=g)
    t[:, :k].scatter_add_(2, ids[..., None], torch.full((B, k, 1), 20.0))
    t[:, k, V // 2 - 1] += 20.0
    q = torch.softmax(t[:, :k] / 2, -1) if with_q else None
    return t.to(torch.bfloat16 if dtype == "bf16" else torch.float32), ids, q


def gpu_chunk():
    """The split pipeline's vocabulary chunk on the GPU (the interpreter's default differs)."""
    return int(LAUNCH.GPU_CHUNK)


@contextlib.contextmanager
def _env(**values):
    """Set environment variables (None: unset) for the block, then restore them: the test
    suite shares the process."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def measure(B, V, setting, pipeline=None, tile=RUN_TILE, k=K):
    """One verify call (after a tiny warm-up call that fills specops' parameter cache) ->
    its launch records.  Checks the walk went as planned.  pipeline None: the variable
    SPECOPS_TRITON_PIPELINE is unset (the launcher's default).  k: drafts per request."""
    import specops
    dtype, with_q, samp = setting
    kw = dict(temperature=1.0, seed=0, backend="triton", **SAMPLING[samp])
    if pipeline == "block":           # block verification: its own kernel, every row read
        kw["method"], pipeline = "block", None
    if "validate" in inspect.signature(specops.verify_block).parameters:
        kw["validate"] = False    # no host reads of values: the default for CUDA tensors
    # the launcher reads these variables per call; the GPU's chunk, not the interpreter's
    with _env(SPECOPS_TRITON_BLOCK_V=str(tile), SPECOPS_TRITON_CHUNK=str(gpu_chunk()),
              SPECOPS_TRITON_PIPELINE=pipeline):
        t, ids, q = inputs(B, 32, dtype, with_q, k)
        specops.verify_block(target_logits=t, draft_token_ids=ids, draft_probs=q, **kw)
        t, ids, q = inputs(B, V, dtype, with_q, k)
        with count_launches(rows=(t, q)) as recs:
            out = specops.verify_block(target_logits=t, draft_token_ids=ids, draft_probs=q,
                                       **kw)
    assert out.num_accepted.eq(k).all() and out.token_ids[:, k].eq(V // 2 - 1).all(), out
    return recs


def floor_bytes(B, V, dtype, with_q):
    return B * (K + 1) * V * (2 if dtype == "bf16" else 4) + (B * K * V * 4 if with_q else 0)



def _run_jobs(fn, jobs, quick, workers=None):
    """fn(*job) for every job: in this process (quick, or one worker) or in spawned worker
    processes (fn must pickle by module name); a quick run raises on the first failure."""
    import concurrent.futures as cf
    import multiprocessing as mp
    workers = workers or (1 if quick else min(len(jobs), os.cpu_count() or 1))
    if workers == 1:
        done = [fn(*j) for j in jobs]
    else:
        with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            done = list(pool.map(fn, *zip(*jobs)))
    if quick and any(isinstance(r, str) for r in done):
        raise RuntimeError(done)
    return done



def _name(s):
    dtype, with_q, samp = s
    return f"{dtype} {'q' if with_q else 'no-q'} {samp}"



def _runs_of(names):
    """'a, b x8, c' for a list with consecutive repeats."""
    out = []
    for n in names:
        if out and out[-1][0] == n:
            out[-1][1] += 1
        else:
            out.append([n, 1])
    return ", ".join(n + (f" x{c}" if c > 1 else "") for n, c in out) or "-"
