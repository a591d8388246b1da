"""Triton backend == numpy reference, token for token (bitwise on probabilities).

Runs on CPU through the Triton interpreter (``TRITON_INTERPRET=1``, set here before triton is
imported) and, on a machine with CUDA and the interpreter off, on the GPU.  Kept small and
fast: V in {1, 7, 8193 (last-tile guard), 1000}, a handful of rows.  Canonical backend
arguments (see ``specops.backends``) are built directly by the helpers below.
"""
from __future__ import annotations

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
import triton.language as tl  # noqa: E402

from specops import reference as R  # noqa: E402
from specops.backends import reference as RB  # noqa: E402

try:
    from specops.backends import triton as TB  # noqa: E402
except ImportError as exc:  # pragma: no cover
    pytest.skip(f"specops Triton backend unavailable: {exc}", allow_module_level=True)

from importlib import import_module  # noqa: E402

KC = TB._K  # the kernels package (specops.triton_kernels)
C = import_module(KC.__name__ + "._common")
_V = import_module(KC.__name__ + ".verify")
# interpreted or compiled is decided when the kernels were decorated: ask them
INTERPRET = type(_V._verify_kernel).__name__ == "InterpretedFunction"
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("Triton tests need CUDA or TRITON_INTERPRET=1 (set before triton is imported)",
                allow_module_level=True)

DEV = torch.device("cpu" if INTERPRET else "cuda")
# NaN / inf rows make numpy warn inside the interpreter; the results are checked exactly
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# ----------------------------------------------------------------------------- helpers
def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _logits(g, n, V, spread=3.0, ties=True):
    x = torch.randn((n, V), generator=g) * spread
    if ties:   # coarse rounding: exact ties at top-k / top-p thresholds and argmax
        x = torch.where(torch.rand((n, V), generator=g) < 0.4, (x * 2).round() / 2, x)
    if V > 4:
        x = torch.where(torch.rand((n, V), generator=g) < 0.05, torch.full_like(x, -np.inf), x)
    return x


def _params(n, temp=1.0, top_k=0, top_p=1.0, min_p=0.0):
    def full(v, dt):
        if isinstance(v, (list, tuple)):
            return torch.tensor(list(v), dtype=dt)
        return torch.full((n,), v, dtype=dt)
    t = full(temp, torch.float32)
    inv = torch.from_numpy(R.inv_temperature(t.numpy()))
    return inv, full(top_k, torch.int64), full(top_p, torch.float32), full(min_p, torch.float32)


def _to(*ts):
    return [None if t is None else (t.to(DEV) if isinstance(t, torch.Tensor) else t) for t in ts]


def _cpu(x):
    return [t.cpu() for t in x] if isinstance(x, (tuple, list)) else x.cpu()


def _eq_all(a, b):
    for x, y in zip(_cpu(a), _cpu(b)):
        assert x.dtype == y.dtype and x.shape == y.shape, (x, y)
        assert torch.equal(x, y), (x, y)


def _probs_rows(g, n, V, temp=1.0, top_p=1.0):
    inv, k, tp, mp = _params(n, temp, 0, top_p)
    p, ok = R.sampling_probs_ref(_logits(g, n, V).numpy(), inv.numpy(), k.numpy(), tp.numpy(),
                                 mp.numpy())
    return torch.from_numpy(p)


def make_block(seed, B, K, V, *, kind="full", dtype=torch.float32, nd=None, temp=0.8,
               top_k=0, top_p=1.0, min_p=0.0, flat=False, pad=()):
    """Canonical verify arguments. kind: full (draft probs), point, draft_logits, probs
    (target probabilities + draft probs), probs_point.  nd: per-request draft counts (ragged);
    flat: vLLM layout (rows compacted); pad: (b, j) positions set to -1."""
    g = _gen(seed)
    nd = torch.full((B,), K, dtype=torch.int64) if nd is None else torch.tensor(nd)
    if flat:
        trs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(nd + 1, 0)[:-1]])
        drs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(nd, 0)[:-1]])
        N, T = int((nd + 1).sum()), int(nd.sum())
    else:
        trs = torch.arange(B, dtype=torch.int64) * (K + 1)
        drs = torch.arange(B, dtype=torch.int64) * K
        N, T = B * (K + 1), B * K
    tl_ = _logits(g, N, V)
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
    inv, k, tp, mp = _params(B, temp, top_k, top_p, min_p)
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
    _eq_all(got, ref)
    return ref


# ----------------------------------------------------------------------------- primitives
def test_constants_match_reference():
    assert C.EXP_LOG2E.value == float(R.EXP_LOG2E)
    assert C.EXP_ROUND.value == float(R.EXP_ROUND)
    assert C.EXP_LN2_HI.value == float(R.EXP_LN2_HI)
    assert C.EXP_LN2_LO.value == float(R.EXP_LN2_LO)
    coeffs = [C.EXP_C0.value, C.EXP_C1.value, C.EXP_C2.value, C.EXP_C3.value, C.EXP_C4.value,
              0.5, 1.0, 1.0]
    assert coeffs == [float(c) for c in R.EXP_COEFFS]
    assert C.FLT_MIN.value == float(R.FLT_MIN)
    assert C.E_SCALE.value == 2.0 ** R.E_SCALE_BITS and C.W_SCALE.value == 2.0 ** R.W_SCALE_BITS


@triton.jit
def _prim_kernel(d_ptr, pe_ptr, key_ptr, back_ptr, seed_ptr, off_ptr, pos_ptr, w_ptr, u_ptr,
                 s_ptr, t_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    d = tl.load(d_ptr + i)
    tl.store(pe_ptr + i, C.pexp(tl.minimum(d, 0.0)))
    k = C.f32_ukey(d)
    tl.store(key_ptr + i, k)
    tl.store(back_ptr + i, C.ukey_f32(k))
    seed = tl.load(seed_ptr + i)
    off = tl.load(off_ptr + i)
    pos = tl.load(pos_ptr + i)
    w0, w1 = C.stream_words(seed, off, pos, 1)
    tl.store(w_ptr + 2 * i, w0.to(tl.int64))
    tl.store(w_ptr + 2 * i + 1, w1.to(tl.int64))
    tl.store(u_ptr + i, C.accept_uniform(seed, off, pos))
    t = C.mulhi_u64(w0, w1, tl.load(s_ptr + i))
    tl.store(t_ptr + i, t)


def test_primitives_pexp_keys_philox_mulhi():
    n = 1024
    g = _gen(1)
    d = torch.cat([-torch.rand(n - 24, generator=g) * 100,
                   torch.tensor([0.0, -0.0, -86.0, -86.00001, -85.99999, -1e-30, -np.inf,
                                 np.inf, 1.0, 3.5, -3.5, 1e30, -1e30, 2.0 ** -149,
                                 -(2.0 ** -149), 0.693, -0.6931472, -0.34657359, 0.34657359,
                                 -87.3, -100.0, -1e-7, -50.5, 7.0])]).float()
    seed = torch.randint(-(2 ** 63), 2 ** 63 - 1, (n,), generator=g)
    off = torch.randint(-(2 ** 63), 2 ** 63 - 1, (n,), generator=g)
    off[:8] = torch.tensor([0, 1, 2 ** 32 - 1, 2 ** 32, -1, 2 ** 62, 5, 7])
    pos = torch.randint(0, 64, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    S = torch.randint(0, 2 ** 63 - 1, (n,), generator=g)
    S[:4] = torch.tensor([0, 1, 2 ** 63 - 1, 2 ** 60])
    pe, key, back, u = (torch.empty(n, dtype=dt) for dt in
                        (torch.float32, torch.int64, torch.float32, torch.float64))
    w = torch.empty(2 * n, dtype=torch.int64)
    t = torch.empty(n, dtype=torch.int64)
    args = _to(d, pe, key, back, seed, off, pos, w, u, S, t)
    _prim_kernel[(1,)](*args, BLOCK=n)
    pe, key, back, w, u, t = _cpu([args[1], args[2], args[3], args[7], args[8], args[10]])
    dn = d.numpy()
    ref_pe = R.pexp(np.minimum(dn, np.float32(0)))
    assert np.array_equal(pe.numpy().view(np.int32), ref_pe.view(np.int32))
    order = np.argsort(key.numpy(), kind="stable")
    srt = dn[order]
    assert (srt[:-1] <= srt[1:]).all()
    assert np.array_equal(back.numpy().view(np.int32), dn.view(np.int32))
    w0, w1 = R.stream_words(seed.numpy(), off.numpy(), pos.numpy().astype(np.int64), 1)[:2]
    assert np.array_equal(w.numpy()[0::2], w0.astype(np.int64))
    assert np.array_equal(w.numpy()[1::2], w1.astype(np.int64))
    uref = R.accept_uniform(seed.numpy(), off.numpy(), pos.numpy().astype(np.int64))
    w0a = R.stream_words(seed.numpy(), off.numpy(), pos.numpy().astype(np.int64), 0)[0]
    assert np.array_equal(u.numpy(), uref) and np.array_equal(uref, w0a * 2.0 ** -32)
    U = [int(a) | (int(b) << 32) for a, b in zip(w0, w1)]
    assert [int(x) for x in t] == [(Ui * int(s)) >> 64 for Ui, s in zip(U, S.tolist())]


# ----------------------------------------------------------------------------- sampling_probs
SETTINGS = {
    "greedy": dict(temp=0.0),
    "temp": dict(temp=0.8),
    "top_k": dict(temp=1.0, top_k=5),
    "top_p": dict(temp=0.8, top_p=0.9),
    "min_p": dict(temp=1.3, min_p=0.05),
    "all": dict(temp=0.7, top_k=50, top_p=0.8, min_p=0.02),
}


def check_probs(logits, inv, k, tp, mp):
    ref = RB.sampling_probs(logits, inv, k, tp, mp)
    got = TB.sampling_probs(*_to(logits, inv, k, tp, mp))
    p, v = _cpu(got)
    assert p.dtype == torch.float32 and p.is_contiguous()
    assert torch.equal(v, ref[1])
    assert torch.equal(p.view(torch.int32), ref[0].view(torch.int32))   # bitwise
    return ref


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_sampling_probs_bitwise(dtype, setting):
    V, n = 1000, 3
    g = _gen(hash((dtype, setting)) % 1000)
    logits = _logits(g, n, V).to(DTYPES[dtype])
    check_probs(logits, *_params(n, **SETTINGS[setting]))


@pytest.mark.parametrize("V", [1, 2, 7])
def test_sampling_probs_tiny_vocab(V):
    g = _gen(V)
    n = 6
    logits = _logits(g, n, V)
    check_probs(logits, *_params(n, temp=[0.0, 1.0, 0.5, 0.9, 2.0, 1.0],
                                 top_k=[0, 0, 1, 3, 2, 0], top_p=[1, 1, 0.5, 0.3, 1, 0.99],
                                 min_p=[0, 0, 0, 0.3, 0.5, 0]))


def test_sampling_probs_mixed_rows_and_ties():
    V, n = 1000, 8
    g = _gen(5)
    logits = torch.randint(-4, 5, (n, V), generator=g).float()   # massive ties
    logits[3] = 0.0                                                # one value everywhere
    check_probs(logits, *_params(n, temp=[0.0, 1.0, 0.8, 0.8, 1.1, 0.5, 1.0, 3.0],
                                 top_k=[0, 10, 0, 7, 100, 1, 999, 1000],
                                 top_p=[1, 1, 0.3, 0.5, 0.9, 1.0, 0.999, 0.01],
                                 min_p=[0, 0, 0, 0, 0.2, 0, 0.5, 0.9]))


def test_sampling_probs_invalid_rows():
    V = 7
    logits = torch.randn(8, V)
    logits[0, 3] = np.nan
    logits[1, 0] = np.inf
    logits[2] = -np.inf
    logits[3, 2] = 3e38                                 # finite, overflows at T = 0.1
    logits[4, 5] = np.nan                               # greedy NaN
    logits[5] = -np.inf                                 # greedy all -inf
    logits[6, :3] = -np.inf                             # valid with -inf entries
    logits[7, 1] = -3e38                                # -inf after scaling: still valid
    ref = check_probs(logits, *_params(8, temp=[1.0, 1.0, 1.0, 0.1, 0.0, 0.0, 0.7, 0.1],
                                       top_k=[0, 0, 0, 0, 0, 0, 2, 3],
                                       top_p=[1, 1, 1, 1, 1, 1, 0.9, 0.5]))
    assert ref[1].tolist() == [False] * 6 + [True, True]


def test_sampling_probs_large_vocab_last_tile():
    V = 8193                       # last tile holds one real lane
    g = _gen(7)
    logits = _logits(g, 4, V)
    logits[0, -1] = 40.0           # the winner sits in the last tile
    logits[2] = -np.inf
    logits[2, -1] = 0.0            # the only finite entry is the last lane
    check_probs(logits, *_params(4, temp=[0.0, 0.9, 1.0, 0.8], top_k=[0, 20, 0, 0],
                                 top_p=[1.0, 0.9, 0.5, 1.0], min_p=[0, 0, 0, 0.1]))


# ----------------------------------------------------------------------------- verify
VERIFY_CASES = {
    "full": dict(kind="full", temp=1.0),
    "point": dict(kind="point", temp=0.8),
    "draft_logits": dict(kind="draft_logits", temp=0.8, top_p=0.9),
    "greedy": dict(kind="full", temp=0.0),
    "mixed": dict(kind="full", temp=[0.0, 1.0, 0.7, 0.0, 1.5], top_k=[0, 5, 0, 3, 50],
                  top_p=[1.0, 0.9, 0.8, 1.0, 1.0], min_p=[0, 0, 0.05, 0, 0.01]),
    "mixed_point": dict(kind="point", temp=[0.0, 1.0, 0.7, 0.0, 1.5], top_k=[0, 5, 0, 3, 50],
                        top_p=[1.0, 0.9, 0.8, 1.0, 1.0], min_p=[0, 0, 0.05, 0, 0.01]),
    "mixed_draft_logits": dict(kind="draft_logits", temp=[0.0, 1.0, 0.7, 0.0, 1.5],
                               top_k=[0, 5, 0, 3, 50], top_p=[1.0, 0.9, 0.8, 1.0, 1.0]),
    "probs": dict(kind="probs", temp=[1.0, 0.0, 1.0, 1.0, 0.0]),
    "probs_point": dict(kind="probs_point", temp=[1.0, 0.0, 1.0, 1.0, 0.5]),
    "ragged": dict(kind="full", temp=1.0, nd=[0, 3, 1, 4, 2], pad=[(3, 2)]),
    "ragged_flat": dict(kind="point", temp=0.9, nd=[2, 0, 4, 1, 3], flat=True),
    "ragged_flat_probs": dict(kind="probs", temp=1.0, nd=[2, 0, 4, 1, 3], flat=True),
}


@pytest.mark.parametrize("case", list(VERIFY_CASES))
@pytest.mark.parametrize("V", [7, 1000])
def test_verify_matches_reference(case, V):
    spec = dict(VERIFY_CASES[case])
    B = 5
    for seed in range(2):
        a = make_block(100 * seed + V, B, 4, V, **spec)
        check_verify(a)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_verify_low_precision_logits(dtype):
    a = make_block(3, 4, 3, 1000, kind="draft_logits", dtype=DTYPES[dtype],
                   temp=[0.0, 0.8, 1.0, 1.2], top_k=[0, 0, 20, 0], top_p=[1, 0.9, 1, 1],
                   min_p=[0, 0, 0, 0.05])
    check_verify(a)


def test_verify_vocab_one():
    for kind in ("full", "point", "draft_logits", "probs"):
        a = make_block(1, 3, 2, 1, kind=kind, temp=[0.0, 1.0, 0.5], nd=[2, 0, 1])
        ref = check_verify(a)
        assert ((ref[0] == 0) | (ref[0] == -1)).all()


def test_verify_padding_and_zero_drafts():
    a = make_block(9, 4, 4, 7, kind="full", temp=[1.0, 0.0, 0.8, 1.0], nd=[0, 4, 4, 2],
                   pad=[(1, 0), (2, 2)])
    ref = check_verify(a)
    assert ref[1][0] == 0 and ref[1][1] == 0 and ref[1][2] <= 2


def test_verify_max_k_zero_bonus_only():
    for kind in ("full", "point", "draft_logits", "probs"):
        for flat in (False, True):
            ref = check_verify(make_block(6, 3, 0, 7, kind=kind, temp=[0.0, 1.0, 0.7], flat=flat))
            assert ref[0].shape == (3, 1) and (ref[1] == 0).all()


def test_verify_out_of_range_ids_end_block():
    a = make_block(10, 3, 3, 7, kind="point", temp=1.0)
    a["draft_ids"] = a["draft_ids"].clone()
    a["draft_ids"][1] = 7            # >= V: end of block for request 0 at j = 1
    a["draft_ids"][3] = -5           # < -1: end of block for request 1 at j = 0
    check_verify(a)


def test_verify_invalid_rows():
    V = 7
    for kind in ("full", "point", "draft_logits"):
        a = make_block(11, 5, 3, V, kind=kind, temp=[1.0, 0.0, 1.0, 0.8, 1.0])
        t = a["target"].clone()
        t[0 * 4 + 0, 2] = np.nan            # request 0: first row NaN
        t[1 * 4 + 1] = -np.inf              # request 1 (greedy): row 1 all -inf
        t[2 * 4 + 3, 1] = np.inf            # request 2: bonus row +inf
        a["target"] = t
        if kind == "draft_logits":
            d = a["draft"].clone()
            d[3 * 3 + 0, 0] = np.nan        # request 3: draft row invalid -> q = NaN, reject
            d[4 * 3 + 1] = -np.inf
            a["draft"] = d
        ref = check_verify(a)
        assert not bool(ref[2][0])


def test_verify_and_residual_malformed_draft_probs():
    """Negative, huge, -inf and NaN draft probabilities: r = p - max(q, 0) keeps 0 <= r <= p."""
    V, B, K = 50, 6, 3
    a = make_block(17, B, K, V, kind="full", temp=1.0)
    q = a["draft"].clone()
    q[0:3] = -1e30
    q[3:6, ::2] = -np.inf
    q[6:9] = np.nan
    q[9:12] = 1e30
    q[12:15, 3] = -0.5
    a["draft"] = q
    ref = check_verify(a)
    assert ((ref[0] >= -1) & (ref[0] < V)).all() and ref[2].all()
    o = _op_args(17, B, K, V, True)
    o["draft_probs"] = q
    for nacc in (torch.zeros(B, dtype=torch.int32), torch.ones(B, dtype=torch.int32)):
        r = dict(o, num_accepted=nacc)
        assert torch.equal(TB.residual_sample(**_dev(r)).cpu(), RB.residual_sample(**r))
    assert torch.equal(TB.accept(**_dev(o)).cpu(), RB.accept(**o))


def test_verify_probs_invalid_rows():
    a = make_block(12, 4, 3, 7, kind="probs", temp=[1.0, 0.0, 1.0, 1.0])
    t = a["target"].clone()
    t[0 * 4 + 0, :] = np.nan                      # request 0: p_y NaN -> reject, then invalid
    t[1 * 4 + 2, 0] = 1.5                         # greedy: out-of-range entry
    t[2 * 4 + 3, :] = 0.0                         # bonus row has no mass
    t[3 * 4 + 1, :] = 0.9                         # mass > 4
    a["target"] = t
    check_verify(a)


def test_verify_many_seeds_small_vocab():
    # many independent requests: every acceptance / residual branch is exercised
    a = make_block(13, 24, 3, 7, kind="full", temp=1.0)
    check_verify(a)
    a = make_block(14, 24, 3, 7, kind="point", temp=1.3, top_p=0.9)
    check_verify(a)


def test_verify_batch_invariance():
    a = make_block(15, 5, 3, 1000, **VERIFY_CASES["mixed"])
    full = run_verify(TB, a)
    for b in range(5):
        one = dict(a)
        for k in ("inv_temp", "top_k", "top_p", "min_p", "seed", "offset", "num_draft"):
            one[k] = a[k][b:b + 1]
        one["target_row_start"] = a["target_row_start"][b:b + 1]
        one["draft_row_start"] = a["draft_row_start"][b:b + 1]
        alone = run_verify(TB, one)
        for x, y in zip(_cpu(alone), _cpu(full)):
            assert torch.equal(x[0], y[b])
        # and the request placed alone in its own tensors
        K = a["max_k"]
        solo = dict(one)
        solo["target"] = a["target"][b * (K + 1):(b + 1) * (K + 1)].clone()
        solo["draft"] = a["draft"][b * K:(b + 1) * K].clone()
        solo["draft_ids"] = a["draft_ids"][b * K:(b + 1) * K].clone()
        solo["target_row_start"] = torch.zeros(1, dtype=torch.int64)
        solo["draft_row_start"] = torch.zeros(1, dtype=torch.int64)
        for x, y in zip(_cpu(run_verify(TB, solo)), _cpu(full)):
            assert torch.equal(x[0], y[b])


def test_verify_last_tile_lanes_never_win():
    V = 8193
    B, K = 3, 1
    a = make_block(16, B, K, V, kind="point", temp=[0.0, 1.0, 1.0])
    t = torch.full((B * (K + 1), V), -np.inf)
    t[:, V - 1] = 0.0                  # all mass on the last lane (alone in the last tile)
    t[:, 5] = -2.0
    a["target"] = t
    a["draft_ids"] = torch.tensor([5, 5, V - 1])
    ref = check_verify(a)
    assert ((ref[0] >= -1) & (ref[0] < V)).all()


# ----------------------------------------------------------------------------- accept / residual
def _op_args(seed, B, K, V, has_q=True, greedy=None, nd=None, pad=()):
    a = make_block(seed, B, K, V, kind="probs" if has_q else "probs_point", nd=nd, pad=pad)
    g = torch.zeros(B, dtype=torch.bool) if greedy is None else torch.tensor(greedy)
    return dict(target_probs=a["target"], target_row_start=a["target_row_start"],
                draft_ids=a["draft_ids"], draft_row_start=a["draft_row_start"],
                num_draft=a["num_draft"], draft_probs=a["draft"], greedy=g, seed=a["seed"],
                offset=a["offset"], max_k=K)


def _dev(a):
    return {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in a.items()}


@pytest.mark.parametrize("has_q", [True, False])
@pytest.mark.parametrize("V", [1, 7, 1000])
def test_accept_and_residual_match_reference(has_q, V):
    B, K = 8, 3
    a = _op_args(20 + V, B, K, V, has_q, greedy=[False, True] * 4, nd=[3, 0, 2, 3, 1, 3, 3, 2],
                 pad=[(5, 1)])
    if V > 1:
        t = a["target_probs"].clone()
        t[6 * 4 + 0] = np.nan          # request 6: NaN row (rejects; residual row invalid)
        t[7 * 4 + 0] = 0.0             # request 7 (greedy): massless row
        a["target_probs"] = t
    nref = RB.accept(**a)
    ngot = TB.accept(**_dev(a))
    assert torch.equal(ngot.cpu(), nref)
    for nacc in (nref, torch.zeros_like(nref), torch.full_like(nref, K)):
        r = dict(a, num_accepted=nacc)
        assert torch.equal(TB.residual_sample(**_dev(r)).cpu(), RB.residual_sample(**r))


def test_residual_sample_last_tile_and_fallback():
    V, B = 8193, 3
    p = torch.zeros((B * 2, V))
    p[:, V - 1] = 0.75
    p[:, 0] = 0.25
    q = torch.zeros((B, V))
    q[0] = p[0]                 # residual of mass 0: falls back to p
    q[1, 0] = 1.0               # residual = the last lane only
    q[2, V - 1] = 1.0
    a = dict(target_probs=p, target_row_start=torch.arange(B) * 2,
             draft_ids=torch.tensor([V - 1, 0, V - 1]), draft_row_start=torch.arange(B),
             num_draft=torch.ones(B, dtype=torch.int64), draft_probs=q,
             greedy=torch.tensor([False, False, False]),
             seed=torch.tensor([1, -2, 3]), offset=torch.tensor([0, 5, 2 ** 33]), max_k=1)
    for nacc in (torch.zeros(B, dtype=torch.int32), torch.ones(B, dtype=torch.int32)):
        r = dict(a, num_accepted=nacc)
        ref = RB.residual_sample(**r)
        got = TB.residual_sample(**_dev(r)).cpu()
        assert torch.equal(got, ref) and ((got >= 0) & (got < V)).all()


def test_import_without_triton_raises_helpful_import_error():
    import subprocess
    import sys
    code = ("import sys; sys.modules['triton'] = None\n"
            "try:\n    import specops.backends.triton\n"
            "except ImportError as e:\n    print('IMPORTERROR', e)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=root, timeout=120)
    assert "IMPORTERROR" in out.stdout and "pip install triton" in out.stdout, out
