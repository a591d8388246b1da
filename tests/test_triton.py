"""Triton backend == numpy reference, token for token (bitwise on probabilities).

Runs on CPU through the Triton interpreter (``TRITON_INTERPRET=1``) and, on a machine with
CUDA and the interpreter off, on the GPU (the CUDA subset bench/gpu_check.sh runs).  Kept
small: V in {1, 7, 37, 8193 (last-tile guard), 1000}, a handful of rows.  Canonical backend
arguments (see ``specops.backends``) are built by ``tests/_triton.py``.

Both Triton pipelines are checked: the one-program-per-request kernel (``fused``) and the
vocabulary-split pipeline (``split``, forced with 16-lane chunks so that every row spans
several chunks, the last one partial).  The fast tier runs the fused path on every check and
the split path on a few; the full tier runs every check on both.
"""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest
import torch

from tests._triton import (  # noqa: E402  (skips this module without Triton)
    C, DEV, DTYPES, R, RB, TB, check_forced, check_verify, check_walk_and_forced, count_rows,
    dev_args, eq_all, gen, greedy_args, logit_rows, make_block, params, pipeline, ref_forced,
    run_rows, run_verify, to_cpu, to_dev, views_args)

import specops  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# NaN / inf rows make numpy warn inside the interpreter; the results are checked exactly
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FULL = pytest.mark.full
# the checks that run on both pipelines: fused in the fast tier, split in the full tier
PIPELINES = ["fused", pytest.param("split", marks=FULL)]


@pytest.fixture(params=PIPELINES)
def path(request):
    with pipeline(request.param) as name:
        yield name


# ----------------------------------------------------------------------------- primitives
def test_constants_match_reference():
    """Every literal of triton_kernels against specops.reference (or the IEEE format)."""
    f32 = np.finfo(np.float32)
    assert C.NEG_INF.value == -np.inf and C.POS_INF.value == np.inf
    assert C.EXP_CUTOFF.value == float(R.EXP_CUTOFF)
    assert C.EXP_LOG2E.value == float(R.EXP_LOG2E)
    assert C.EXP_ROUND.value == float(R.EXP_ROUND)
    assert C.EXP_LN2_HI.value == float(R.EXP_LN2_HI)
    assert C.EXP_LN2_LO.value == float(R.EXP_LN2_LO)
    coeffs = [getattr(C, f"EXP_C{i}").value for i in range(len(R.EXP_COEFFS))]
    assert coeffs == [float(c) for c in R.EXP_COEFFS]
    assert all(np.float32(c) == c for c in coeffs)          # exact float32 values
    assert C.F32_EXP_BIAS.value == f32.maxexp - 1 and C.F32_MANT_BITS.value == f32.nmant
    assert C.FLT_MIN.value == float(R.FLT_MIN)
    assert C.E_SCALE.value == 2.0 ** R.E_SCALE_BITS and C.W_SCALE.value == 2.0 ** R.W_SCALE_BITS
    assert C.P_CHECK_SCALE.value == 2.0 ** R.P_CHECK_BITS
    assert C.P_CHECK_MAX.value == 1 << (R.P_CHECK_BITS + 2)
    assert C.U32_TO_UNIT.value == 2.0 ** -32
    assert (C.TAG_ACCEPT.value, C.TAG_SAMPLE.value) == (R.TAG_ACCEPT, R.TAG_SAMPLE)
    assert C.PHILOX_ROUNDS.value == R.PHILOX_ROUNDS
    # tl.philox (32-bit branch) carries the Philox4x32 constants in its source
    import triton.language.random as tr
    src = inspect.getsource(tr)
    for name, want in (("PHILOX_KEY_A", R.PHILOX_W0), ("PHILOX_KEY_B", R.PHILOX_W1),
                       ("PHILOX_ROUND_A", R.PHILOX_M0), ("PHILOX_ROUND_B", R.PHILOX_M1)):
        assert f"{name}: tl.constexpr = {want:#X}".replace("0X", "0x") in src, name
    # radix select over 32-bit float keys; NO_INDEX exceeds every token index
    assert C.KEY_BITS.value == 32 and C.RADIX.value == 1 << C.RADIX_BITS.value
    assert C.KEY_BITS.value % C.RADIX_BITS.value == 0
    assert C.NO_INDEX.value == np.iinfo(np.int32).max > R.MAX_VOCAB


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
    g = gen(1)
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
    args = to_dev(d, pe, key, back, seed, off, pos, w, u, S, t)
    _prim_kernel[(1,)](*args, BLOCK=n)
    pe, key, back, w, u, t = to_cpu([args[1], args[2], args[3], args[7], args[8], args[10]])
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
    got = TB.sampling_probs(*to_dev(logits, inv, k, tp, mp))
    p, v = to_cpu(got)
    assert p.dtype == torch.float32 and p.is_contiguous()
    assert torch.equal(v, ref[1])
    assert torch.equal(p.view(torch.int32), ref[0].view(torch.int32))   # bitwise
    count_rows("triton probability rows (test_triton)", p.shape[0])
    return ref


@pytest.mark.parametrize("dtype", ["fp32", pytest.param("bf16", marks=FULL),
                                   pytest.param("fp16", marks=FULL)])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_sampling_probs_bitwise(dtype, setting):
    V, n = 1000, 3
    g = gen(100 * list(DTYPES).index(dtype) + list(SETTINGS).index(setting))
    logits = logit_rows(g, n, V).to(DTYPES[dtype])
    check_probs(logits, *params(n, **SETTINGS[setting]))


@pytest.mark.parametrize("V", [1, 2, 7])
def test_sampling_probs_tiny_vocab(V):
    g = gen(V)
    n = 6
    logits = logit_rows(g, n, V)
    check_probs(logits, *params(n, temp=[0.0, 1.0, 0.5, 0.9, 2.0, 1.0],
                                 top_k=[0, 0, 1, 3, 2, 0], top_p=[1, 1, 0.5, 0.3, 1, 0.99],
                                 min_p=[0, 0, 0, 0.3, 0.5, 0]))


def test_sampling_probs_mixed_rows_and_ties():
    V, n = 1000, 8
    g = gen(5)
    logits = torch.randint(-4, 5, (n, V), generator=g).float()   # massive ties
    logits[3] = 0.0                                                # one value everywhere
    check_probs(logits, *params(n, temp=[0.0, 1.0, 0.8, 0.8, 1.1, 0.5, 1.0, 3.0],
                                 top_k=[0, 10, 0, 7, 100, 1, 999, 1000],
                                 top_p=[1, 1, 0.3, 0.5, 0.9, 1.0, 0.999, 0.01],
                                 min_p=[0, 0, 0, 0, 0.2, 0, 0.5, 0.9]))


def test_sampling_probs_invalid_rows():
    V = 7
    logits = torch.randn(8, V, generator=gen(8))
    logits[0, 3] = np.nan
    logits[1, 0] = np.inf
    logits[2] = -np.inf
    logits[3, 2] = 3e38                                 # finite, overflows at T = 0.1
    logits[4, 5] = np.nan                               # greedy NaN
    logits[5] = -np.inf                                 # greedy all -inf
    logits[6, :3] = -np.inf                             # valid with -inf entries
    logits[7, 1] = -3e38                                # -inf after scaling: still valid
    ref = check_probs(logits, *params(8, temp=[1.0, 1.0, 1.0, 0.1, 0.0, 0.0, 0.7, 0.1],
                                       top_k=[0, 0, 0, 0, 0, 0, 2, 3],
                                       top_p=[1, 1, 1, 1, 1, 1, 0.9, 0.5]))
    assert ref[1].tolist() == [False] * 6 + [True, True]


def test_sampling_probs_large_vocab_last_tile():
    V = 8193                       # last tile holds one real lane
    g = gen(7)
    logits = logit_rows(g, 4, V)
    logits[0, -1] = 40.0           # the winner sits in the last tile
    logits[2] = -np.inf
    logits[2, -1] = 0.0            # the only finite entry is the last lane
    check_probs(logits, *params(4, temp=[0.0, 0.9, 1.0, 0.8], top_k=[0, 20, 0, 0],
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


@pytest.mark.parametrize("case,V", [(c, 7) for c in VERIFY_CASES] + [
    (c, 1000) if c == "mixed" else pytest.param(c, 1000, marks=FULL) for c in VERIFY_CASES])
def test_verify_matches_reference(case, V):
    spec = dict(VERIFY_CASES[case])
    B = 5
    for seed in range(2):
        a = make_block(100 * seed + V, B, 4, V, **spec)
        check_verify(a)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_verify_low_precision_logits(dtype, path):
    a = make_block(3, 4, 3, 1000, kind="draft_logits", dtype=DTYPES[dtype],
                   temp=[0.0, 0.8, 1.0, 1.2], top_k=[0, 0, 20, 0], top_p=[1, 0.9, 1, 1],
                   min_p=[0, 0, 0, 0.05])
    with pipeline(path, chunk=256):                 # split: V = 1000 in 4 chunks
        check_verify(a)


def test_verify_vocab_one(path):
    for kind in ("full", "point", "draft_logits", "probs"):
        a = make_block(1, 3, 2, 1, kind=kind, temp=[0.0, 1.0, 0.5], nd=[2, 0, 1])
        ref = check_verify(a)
        assert ((ref[0] == 0) | (ref[0] == -1)).all()


def test_verify_padding_and_zero_drafts(path):
    a = make_block(9, 4, 4, 7, kind="full", temp=[1.0, 0.0, 0.8, 1.0], nd=[0, 4, 4, 2],
                   pad=[(1, 0), (2, 2)])
    ref = check_verify(a)
    assert ref[1][0] == 0 and ref[1][1] == 0 and ref[1][2] <= 2


def test_verify_max_k_zero_bonus_only(path):
    for kind in ("full", "point", "draft_logits", "probs"):
        for flat in (False, True):
            ref = check_verify(make_block(6, 3, 0, 7, kind=kind, temp=[0.0, 1.0, 0.7], flat=flat))
            assert ref[0].shape == (3, 1) and (ref[1] == 0).all()


def test_verify_out_of_range_ids_end_block(path):
    a = make_block(10, 3, 3, 7, kind="point", temp=1.0)
    a["draft_ids"] = a["draft_ids"].clone()
    a["draft_ids"][1] = 7            # >= V: end of block for request 0 at j = 1
    a["draft_ids"][3] = -5           # < -1: end of block for request 1 at j = 0
    check_verify(a)


def test_verify_invalid_rows(path):
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


def test_verify_and_forced_malformed_draft_probs():
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
    ref = check_walk_and_forced(a, [torch.ones(B, dtype=torch.int64)])
    assert ((ref[0] >= -1) & (ref[0] < V)).all() and ref[2].all()
    # the same on target probabilities (the accept / residual-sample views)
    a = make_block(17, B, K, V, kind="probs", temp=1.0)
    a["draft"] = q
    check_walk_and_forced(a, [torch.ones(B, dtype=torch.int64)])


def test_verify_probs_invalid_rows():
    a = make_block(12, 4, 3, 7, kind="probs", temp=[1.0, 0.0, 1.0, 1.0])
    t = a["target"].clone()
    t[0 * 4 + 0, :] = np.nan                      # request 0: p_y NaN -> reject, then invalid
    t[1 * 4 + 2, 0] = 1.5                         # greedy: out-of-range entry
    t[2 * 4 + 3, :] = 0.0                         # bonus row has no mass
    t[3 * 4 + 1, :] = 0.9                         # mass > 4
    a["target"] = t
    check_verify(a)


@FULL
def test_verify_many_seeds_small_vocab():
    # many independent requests: every acceptance / residual branch is exercised
    a = make_block(13, 24, 3, 7, kind="full", temp=1.0)
    check_verify(a)
    a = make_block(14, 24, 3, 7, kind="point", temp=1.3, top_p=0.9)
    check_verify(a)


@FULL
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
        for x, y in zip(to_cpu(alone), to_cpu(full)):
            assert torch.equal(x[0], y[b])
        # and the request placed alone in its own tensors
        K = a["max_k"]
        solo = dict(one)
        solo["target"] = a["target"][b * (K + 1):(b + 1) * (K + 1)].clone()
        solo["draft"] = a["draft"][b * K:(b + 1) * K].clone()
        solo["draft_ids"] = a["draft_ids"][b * K:(b + 1) * K].clone()
        solo["target_row_start"] = torch.zeros(1, dtype=torch.int64)
        solo["draft_row_start"] = torch.zeros(1, dtype=torch.int64)
        for x, y in zip(to_cpu(run_verify(TB, solo)), to_cpu(full)):
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


# ----------------------------------------------------------------------------- split pipeline
# A few split cases run in the fast tier: full draft probabilities under every filter, and
# target probabilities in the flattened layout; each row spans three chunks, the last partial.
SPLIT_FAST = ("mixed", "ragged_flat_probs")


def test_split_last_chunk_carries_the_mass():
    """V = 37 in chunks of 16: the last chunk (5 lanes) holds the rows' maxima and most of
    their mass, so a combine of the chunk statistics that loses a chunk (or the last one's
    partial lanes) changes the maxima, the masses and the tokens of every request."""
    a = make_block(138, 5, 2, 37, kind="full", temp=[1.0, 0.0, 0.8, 1.0, 0.0])
    a["target"] = a["target"].clone()
    a["target"][:, 32:] += 6.0
    with pipeline("split"):
        check_verify(a)


@pytest.mark.parametrize("case", [c if c in SPLIT_FAST else pytest.param(c, marks=FULL)
                                  for c in VERIFY_CASES])
def test_split_matches_reference(case):
    with pipeline("split"):
        check_verify(make_block(137, 5, 2, 37, **VERIFY_CASES[case]))   # V = 37: 3 chunks


def test_split_really_runs():
    """Negative control: the override reaches the launcher (a bad value is refused)."""
    with pipeline("nonsense"):
        with pytest.raises(ValueError, match="SPECOPS_TRITON_PIPELINE"):
            check_verify(make_block(3, 2, 2, 37, kind="full", temp=1.0))


# ----------------------------------------------------------------------------- probability views
@pytest.mark.parametrize("has_q", [True, False])
@pytest.mark.parametrize("V", [1, 7, pytest.param(1000, marks=FULL)])
def test_probability_views_match_reference(has_q, V):
    """The accept view (verify's num_accepted) and the residual-sample view (forced mode)
    on probabilities, greedy and sampled requests, ragged blocks, NaN and massless rows."""
    B, K = 8, 3
    a = views_args(20 + V, B, K, V, has_q, greedy=[False, True] * 4,
                    nd=[3, 0, 2, 3, 1, 3, 3, 2], pad=[(5, 1)])
    if V > 1:
        t = a["target"].clone()
        t[6 * 4 + 0] = np.nan          # request 6: NaN row (rejects; the sampled row invalid)
        t[7 * 4 + 0] = 0.0             # request 7 (greedy): massless row
        a["target"] = t
    ref = check_walk_and_forced(a, [torch.tensor([-1, 1, 5, 2, -3, 1, 0, 2])])
    if hasattr(R, "accept_ref"):       # the old single-purpose oracle, while it exists
        old = R.accept_ref(a["target"].numpy(), a["target_row_start"].numpy(),
                           a["draft_ids"].numpy(), a["draft_row_start"].numpy(),
                           a["num_draft"].numpy(), None if a["draft"] is None
                           else a["draft"].numpy(), (a["inv_temp"] == 0).numpy(),
                           a["seed"].numpy(), a["offset"].numpy(), K)
        assert np.array_equal(ref[1].numpy(), old)


def test_forced_mode_last_tile_and_fallback(path):
    """V = 8193 (split: in chunks of 2048): the winner and the residual's only mass sit in the
    last tile / chunk, which holds one lane."""
    V, B = 8193, 3
    p = torch.zeros((B * 2, V))
    p[:, V - 1] = 0.75
    p[:, 0] = 0.25
    q = torch.zeros((B, V))
    q[0] = p[0]                 # residual of mass 0: falls back to p
    q[1, 0] = 1.0               # residual = the last lane only
    q[2, V - 1] = 1.0
    a = dict(target=p, target_is_probs=True, target_row_start=torch.arange(B) * 2,
             draft_ids=torch.tensor([V - 1, 0, V - 1]), draft_row_start=torch.arange(B),
             num_draft=torch.ones(B, dtype=torch.int64), draft=q, draft_is_probs=True,
             inv_temp=torch.ones(B), top_k=torch.zeros(B, dtype=torch.int64),
             top_p=torch.ones(B), min_p=torch.zeros(B), seed=torch.tensor([1, -2, 3]),
             offset=torch.tensor([0, 5, 2 ** 33]), max_k=1)
    for forced in (torch.zeros(B, dtype=torch.int64), torch.ones(B, dtype=torch.int64)):
        with pipeline(path, chunk=2048):
            tok, nacc, valid = check_forced(a, forced)
        got = tok[torch.arange(B), nacc.long()]
        assert valid.all() and ((got >= 0) & (got < V)).all()


@pytest.mark.parametrize("kind", ["full", pytest.param("point", marks=FULL),
                                  pytest.param("draft_logits", marks=FULL), "probs",
                                  pytest.param("probs_point", marks=FULL)])
def test_forced_mode_every_kind(kind, path):
    """Forced mode on logits and probabilities, greedy and sampled, ragged and padded
    blocks, forced values below, at and above each block length, negative ones."""
    a = make_block(30, 6, 3, 7, kind=kind, temp=[1.0, 0.0, 0.8, 1.0, 0.0, 1.3],
                   top_p=[1.0, 1.0, 0.9, 1.0, 1.0, 1.0], nd=[3, 0, 2, 3, 1, 3], pad=[(3, 1)])
    check_walk_and_forced(a, [torch.tensor([1, 2, -1, 3, 7, 2]),
                              torch.tensor([2, -5, 1, 0, 1, 3], dtype=torch.int32)])


def test_per_request_scalars_expanded(path):
    """[B] parameters given as expanded scalars (stride 0) == the same values materialised."""
    a = make_block(31, 4, 2, 7, kind="full", temp=0.9, top_k=3)
    ref = check_verify(a)
    e = dict(a)
    for k in ("inv_temp", "top_k", "top_p", "min_p", "seed", "offset"):
        e[k] = a[k][:1].expand(4) if k not in ("seed", "offset") else a[k]
    e["num_draft"] = a["num_draft"][:1].expand(4)
    eq_all(run_verify(TB, e), ref)
    eq_all(TB.verify(**dev_args(e), forced_num_accepted=torch.ones((), dtype=torch.int64)
                      .expand(4).to(DEV)), ref_forced(a, torch.ones(4, dtype=torch.int64)))


# ----------------------------------------------------------------------------- bounds
def test_target_rows_outside_the_tensor_invalidate_the_request(path):
    B, K, V = 4, 3, 7
    a = greedy_args(B, K, V)
    N = a["target"].shape[0]
    ref = check_verify(a)
    assert (ref[1] == K).all()                    # every draft accepted while rows exist
    ids = a["draft_ids"].reshape(B, K).clone()
    ids[2, :2] = a["target"][N - 2:].argmax(-1)    # request 2 reads rows N-2, N-1, N
    bad = dict(a, target_row_start=torch.tensor([N, -1, N - 2, 3 * (K + 1)]),
               draft_ids=ids.reshape(-1))
    tok, nacc, valid = run_rows(bad)
    assert tok[0].tolist() == [-1] * 4 and tok[1].tolist() == [-1] * 4
    assert tok[2].tolist() == ids[2, :2].tolist() + [-1, -1]       # accepted, then row N
    assert nacc.tolist()[:3] == [0, 0, 2] and valid.tolist() == [False, False, False, True]
    assert torch.equal(tok[3], ref[0][3]) and nacc[3] == ref[1][3]    # neighbours unaffected
    # sampled requests on logits and on probabilities: nothing is read, the request is invalid
    for kind in ("full", "probs"):
        s = make_block(41, B, K, V, kind=kind, temp=1.0)
        s["target_row_start"] = torch.tensor([N, -(2 ** 40), 0, 2 ** 40])
        tok, nacc, valid = run_rows(s)
        ref = check_verify(dict(s, target_row_start=torch.tensor([0, 0, 0, 0])))
        assert not valid[[0, 1, 3]].any() and (nacc[[0, 1, 3]] == 0).all()
        assert (tok[[0, 1, 3]] == -1).all()
        assert torch.equal(tok[2], ref[0][2]) and valid[2] == ref[2][2]
    # forced mode: the sampled row j* = 1 is row N -> invalid, its accepted prefix kept
    f = dict(a, target_row_start=torch.tensor([0, N - 1, N - 1, 0]))
    tok, nacc, valid = run_rows(f, [1, 1, 0, -1])
    assert valid.tolist() == [True, False, True, False] and nacc.tolist() == [1, 1, 0, 0]
    assert tok[1].tolist() == [int(ids[1, 0]), -1, -1, -1] and tok[3].tolist() == [-1] * 4


def test_draft_rows_outside_the_tensor_invalidate_the_request(path):
    B, K, V = 4, 3, 7
    a = greedy_args(B, K, V)
    T = a["draft_ids"].numel()
    # request 0: draft ids T-1 .. T+1: the block is cut after one draft by the tensor's end
    # request 1: negative start; request 2: no drafts (nothing read); request 3: normal
    bad = dict(a, draft_row_start=torch.tensor([T - 1, -2, -2, 3]),
               num_draft=torch.tensor([3, 2, 0, 3]))
    tok, nacc, valid = run_rows(bad)
    y = int(a["draft_ids"][T - 1])
    t1 = a["target"][int(a["target_row_start"][0]) + 0]
    if y == int(t1.argmax()):                    # accepted, then row T does not exist
        assert nacc[0] == 1 and not valid[0] and tok[0].tolist() == [y, -1, -1, -1]
    else:
        assert nacc[0] == 0 and valid[0]
    assert nacc[1] == 0 and not valid[1] and tok[1].tolist() == [-1] * 4
    assert nacc[2] == 0 and valid[2] and tok[2, 0] >= 0
    # a draft tensor shorter than the ids: its end cuts the block the same way
    s = make_block(42, B, K, V, kind="full", temp=1.0)
    ref = check_verify(s)
    short = dict(s, draft=s["draft"][:K * (B - 1) + 1])
    tok, nacc, valid = run_rows(short)
    assert torch.equal(tok[:B - 1], ref[0][:B - 1]) and torch.equal(nacc[:B - 1], ref[1][:B - 1])
    assert nacc[B - 1] <= 1 and (valid[B - 1] == bool(nacc[B - 1] == 0))
    # forced mode past the cut: j* = kb = 1 is the missing row -> invalid
    tok, nacc, valid = run_rows(short, [0, 0, 0, 3])
    assert nacc[B - 1] == 1 and not valid[B - 1]


# ----------------------------------------------------------------------------- subnormals
TINY = {"fp32": 9.18e-41, "bf16": 9.18e-41, "fp16": 6e-8}     # subnormal in each format


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_subnormal_logits_upcast_exactly(dtype):
    """Defect B: the interpreter converted bfloat16 subnormals wrongly (9.18e-41 -> 0), so
    top-k kept every token; the kernels widen bfloat16 from its bits."""
    x = torch.tensor([[TINY[dtype], 0, 0, 0, TINY[dtype]]]).to(DTYPES[dtype])
    args = dict(temperature=1.0, top_k=2)
    want = specops.sampling_probs(x, backend="reference", **args)
    got = specops.sampling_probs(x, backend="triton", **args)
    assert torch.equal(got[0].view(torch.int32), want[0].view(torch.int32))
    assert want[0].tolist() == [[0.5, 0.0, 0.0, 0.0, 0.5]]
    kw = dict(target_logits=x[None].expand(3, 2, 5).contiguous(),
              draft_token_ids=torch.tensor([[1], [0], [4]]), seed=torch.tensor([1, 2, 3]), **args)
    want = specops.verify_block(**kw, backend="reference")
    got = specops.verify_block(**kw, backend="triton")
    for w, g in zip(want, got):
        assert torch.equal(w, g)


@triton.jit
def _upcast_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, C.load_f32(x_ptr + i, i >= 0, 0.0))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_upcast_every_bit_pattern(dtype):
    bits = torch.arange(-(2 ** 15), 2 ** 15, dtype=torch.int32).to(torch.int16)
    x = bits.view(DTYPES[dtype])
    out = torch.empty(x.shape, dtype=torch.float32)
    x, out = to_dev(x, out)
    _upcast_kernel[(16,)](x, out, BLOCK=4096)
    want = x.cpu().float()
    same = (want.view(torch.int32) == out.cpu().view(torch.int32)) | (want.isnan()
                                                                     & out.cpu().isnan())
    assert bool(same.all())


@FULL
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
