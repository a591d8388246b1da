"""Shared by the Triton tests: the interpreter switch, canonical backend arguments
(``make_block``: see ``specops.backends``), the bitwise comparisons with the reference, and
the choice of pipeline (one program per request, or the vocabulary-split pipeline).

Importing this module skips the importing test module when Triton or the backend is absent,
or when neither CUDA nor the interpreter can run the kernels.
"""
from __future__ import annotations

import contextlib
import os

import torch

# Without CUDA the kernels can only run in Triton's interpreter, which must be switched on
# before triton is first imported.  With CUDA (and TRITON_INTERPRET unset or 0) the compiled
# kernels are tested on the GPU: that is the CUDA subset bench/gpu_check.sh runs.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

triton = pytest.importorskip("triton")

from specops import reference as R  # noqa: E402
from specops.backends import reference as RB  # noqa: E402

try:
    from specops.backends import triton as TB  # noqa: E402
except ImportError as exc:  # pragma: no cover
    pytest.skip(f"specops Triton backend unavailable: {exc}", allow_module_level=True)

from importlib import import_module  # noqa: E402

from tests._rows import count_rows  # noqa: E402

KC = TB._K  # the kernels package (specops.triton_kernels)
C = import_module(KC.__name__ + "._common")
_V = import_module(KC.__name__ + ".verify")
INTERPRET = KC.INTERPRETED      # decided when the kernels were decorated
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("Triton tests need CUDA or TRITON_INTERPRET=1 (set before triton is imported)",
                allow_module_level=True)

DEV = torch.device("cpu" if INTERPRET else "cuda")
# NaN / inf rows make numpy warn inside the interpreter; the results are checked exactly
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# ----------------------------------------------------------------------------- helpers
def gen(seed):
    return torch.Generator().manual_seed(seed)


def logit_rows(g, n, V, spread=3.0, ties=True):
    x = torch.randn((n, V), generator=g) * spread
    if ties:   # coarse rounding: exact ties at top-k / top-p thresholds and argmax
        x = torch.where(torch.rand((n, V), generator=g) < 0.4, (x * 2).round() / 2, x)
    if V > 4:
        x = torch.where(torch.rand((n, V), generator=g) < 0.05, torch.full_like(x, -np.inf), x)
    return x


def params(n, temp=1.0, top_k=0, top_p=1.0, min_p=0.0):
    def full(v, dt):
        if isinstance(v, (list, tuple)):
            return torch.tensor(list(v), dtype=dt)
        return torch.full((n,), v, dtype=dt)
    t = full(temp, torch.float32)
    inv = torch.from_numpy(R.inv_temperature(t.numpy()))
    return inv, full(top_k, torch.int64), full(top_p, torch.float32), full(min_p, torch.float32)


def to_dev(*ts):
    return [None if t is None else (t.to(DEV) if isinstance(t, torch.Tensor) else t) for t in ts]


def to_cpu(x):
    return [t.cpu() for t in x] if isinstance(x, (tuple, list)) else x.cpu()


def eq_all(a, b):
    for x, y in zip(to_cpu([t for t in a if t is not None]),
                    to_cpu([t for t in b if t is not None])):
        assert x.dtype == y.dtype and x.shape == y.shape, (x, y)
        assert torch.equal(x, y), (x, y)


def probs_rows(g, n, V, temp=1.0, top_p=1.0):
    inv, k, tp, mp = params(n, temp, 0, top_p)
    p, ok = R.sampling_probs_ref(logit_rows(g, n, V).numpy(), inv.numpy(), k.numpy(), tp.numpy(),
                                 mp.numpy())
    return torch.from_numpy(p)


def make_block(seed, B, K, V, *, kind="full", dtype=torch.float32, nd=None, temp=0.8,
               top_k=0, top_p=1.0, min_p=0.0, flat=False, pad=()):
    """Canonical verify arguments. kind: full (draft probs), point, draft_logits, probs
    (target probabilities + draft probs), probs_point.  nd: per-request draft counts (ragged);
    flat: vLLM layout (rows compacted); pad: (b, j) positions set to -1."""
    g = gen(seed)
    nd = torch.full((B,), K, dtype=torch.int64) if nd is None else torch.tensor(nd)
    if flat:
        trs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(nd + 1, 0)[:-1]])
        drs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(nd, 0)[:-1]])
        N, T = int((nd + 1).sum()), int(nd.sum())
    else:
        trs = torch.arange(B, dtype=torch.int64) * (K + 1)
        drs = torch.arange(B, dtype=torch.int64) * K
        N, T = B * (K + 1), B * K
    tl_ = logit_rows(g, N, V)
    dl = torch.cat([tl_[int(trs[b]):int(trs[b]) + int(nd[b])] for b in range(B)] +
                   [torch.zeros((0, V))]) if not flat else None
    if flat:
        dl = torch.cat([tl_[int(trs[b]):int(trs[b]) + int(nd[b])] for b in range(B)]
                       + [torch.zeros((0, V))])
    else:
        dl = torch.zeros((T, V))
        for b in range(B):
            dl[int(drs[b]):int(drs[b]) + int(nd[b])] = tl_[int(trs[b]):int(trs[b]) + int(nd[b])]
    dl = dl + 0.8 * torch.randn(dl.shape, generator=g)
    inv, k, tp, mp = params(B, temp, top_k, top_p, min_p)
    q = torch.softmax(dl, -1) if T else torch.zeros((0, V))
    ids = (torch.multinomial(q.double(), 1, generator=g).reshape(-1) if T
           else torch.zeros(0, dtype=torch.int64))
    # make some drafts the target's argmax (so greedy requests accept sometimes)
    for b in range(B):
        for j in range(int(nd[b])):
            if torch.rand((), generator=g) < 0.4:
                ids[int(drs[b]) + j] = int(tl_[int(trs[b]) + j].argmax())
    for (b, j) in pad:
        ids[int(drs[b]) + j] = -1
    seed_t = torch.randint(-(2 ** 62), 2 ** 62, (B,), generator=g)
    off_t = torch.randint(0, 2 ** 40, (B,), generator=g)
    target, t_probs, draft, d_probs = tl_.to(dtype), False, q, True
    if kind == "point":
        draft = None
    elif kind == "draft_logits":
        draft, d_probs = dl.to(dtype), False
    elif kind in ("probs", "probs_point"):
        row_tp = np.ones(N, np.float32)
        for b in range(B):
            row_tp[int(trs[b]):int(trs[b]) + int(nd[b]) + 1] = tp[b]
        p, _ = R.sampling_probs_ref(tl_.numpy(), np.full(N, 0.8, np.float32),
                                    np.zeros(N, np.int64), row_tp, np.zeros(N, np.float32))
        target, t_probs = torch.from_numpy(p), True
        draft = None if kind == "probs_point" else q
    return dict(target=target, target_is_probs=t_probs, target_row_start=trs, draft_ids=ids,
                draft_row_start=drs, num_draft=nd, draft=draft, draft_is_probs=d_probs,
                inv_temp=inv, top_k=k, top_p=tp, min_p=mp, seed=seed_t, offset=off_t,
                max_k=K)


def run_verify(mod, a):
    a = dict(a)
    if mod is TB:
        a = {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in a.items()}
    return mod.verify(**a)


def check_verify(a):
    ref = run_verify(RB, a)
    got = run_verify(TB, a)
    eq_all(got, ref)
    count_rows("triton verify requests (test_triton)", ref[0].shape[0])
    return ref


# ----------------------------------------------------------------------------- forced mode


def ref_forced(a, forced):
    """The reference's forced mode (specops.reference, section 7)."""
    return RB.verify(**a, forced_num_accepted=forced)


def check_forced(a, forced):
    """Triton's forced mode == the reference's; forcing verify's own num_accepted gives
    verify's output back."""
    forced = torch.as_tensor(forced, dtype=torch.int64)
    ref = ref_forced(a, forced)
    got = TB.verify(**dev_args(a), forced_num_accepted=forced.to(DEV))
    eq_all(got, ref)
    count_rows("triton forced-mode requests (test_triton)", ref[0].shape[0])
    return ref


def check_walk_and_forced(a, extra_forced=()):
    """verify == reference; forced mode at verify's num_accepted == verify; forced mode at
    0, max_k, each extra vector == reference."""
    ref = check_verify(a)
    eq_all(TB.verify(**dev_args(a), forced_num_accepted=ref[1].to(DEV)), ref)
    B, K = len(a["num_draft"]), a["max_k"]
    for forced in [torch.zeros(B, dtype=torch.int64), torch.full((B,), K)] + list(extra_forced):
        check_forced(a, forced)
    return ref


def dev_args(a):
    return {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in a.items()}


def views_args(seed, B, K, V, has_q, greedy, nd=None, pad=()):
    """Canonical verify arguments of the accept / residual-sample views: target and draft
    probabilities, inv_temp 0 for greedy requests and 1 otherwise, no filters."""
    a = make_block(seed, B, K, V, kind="probs" if has_q else "probs_point", nd=nd, pad=pad)
    a["inv_temp"] = torch.tensor([0.0 if g else 1.0 for g in greedy], dtype=torch.float32)
    a["top_k"] = torch.zeros(B, dtype=torch.int64)
    a["top_p"] = torch.ones(B, dtype=torch.float32)
    a["min_p"] = torch.zeros(B, dtype=torch.float32)
    return a


def greedy_args(B, K, V, seed=40):
    """Greedy requests whose drafts are the target's argmax (accepted while rows exist)."""
    a = make_block(seed, B, K, V, kind="point", temp=0.0)
    t = a["target"]
    ids = a["draft_ids"].clone()
    for b in range(B):
        for j in range(K):
            ids[int(a["draft_row_start"][b]) + j] = int(t[int(a["target_row_start"][b]) + j]
                                                      .argmax())
    a["draft_ids"] = ids
    return a


def run_rows(a, forced=None):
    """Triton's output, checked equal to the reference's (which bounds rows: section 7)."""
    kw = {} if forced is None else {"forced_num_accepted": torch.as_tensor(forced)}
    got = [x.cpu() for x in TB.verify(**dev_args(dict(a, **kw)))]
    eq_all(got, RB.verify(**a, **kw))
    return got


# ----------------------------------------------------------------------------- pipelines
# The vocabulary-split pipeline is forced with small chunks so that several chunks (the last
# one partial) make up every row: every combination of chunk partials, the radix rounds'
# histogram atomics and the draw's owner chunk are exercised.
SPLIT_CHUNK = 16


@contextlib.contextmanager
def pipeline(name, chunk=SPLIT_CHUNK):
    """Force the fused (one program per request) or the split pipeline for the block."""
    saved = {k: os.environ.get(k) for k in ("SPECOPS_TRITON_PIPELINE", "SPECOPS_TRITON_CHUNK")}
    os.environ["SPECOPS_TRITON_PIPELINE"] = name
    if name == "split":
        os.environ["SPECOPS_TRITON_CHUNK"] = str(chunk)
    try:
        yield name
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
