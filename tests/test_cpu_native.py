"""The C++ CPU backend (specops._C / specops.backends.cpu) against the numpy reference.

Everything here is bitwise: Philox words, pexp bits, probabilities (torch.equal) and token ids.
The agreement tests run at every ISA level of the native passes this CPU supports
(``_C.available_isas()``: scalar, and SSE2 / AVX2 on x86), switched in-process with
``_C.set_isa``; ``SPECOPS_CPU_ISA`` (the same switch from the environment) is tested in a
subprocess.
"""
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

_C = pytest.importorskip(
    "specops._C",
    reason="specops._C (the C++ CPU backend) is not built: run `pip install -e .` "
           "(SPECOPS_BUILD_CPP=0 skips it)")

from specops import reference as R  # noqa: E402
from specops.backends import cpu  # noqa: E402
from specops.backends import reference as ref  # noqa: E402
from tests._kat import kat_vectors  # noqa: E402
from tests._rows import count_rows  # noqa: E402

ROWS = {}
ISAS = _C.available_isas()


def count(key, n):
    ROWS[key] = ROWS.get(key, 0) + int(n)
    count_rows("cpu_native/" + key, n)


def seed_of(*parts) -> int:
    """A fixed seed from test parameters (zlib.crc32 of their repr: no per-process hash)."""
    return zlib.crc32(repr(parts).encode())


@pytest.fixture(scope="module", autouse=True)
def _report_rows():
    yield
    print("\n[test_cpu_native] rows compared bitwise: " +
          ", ".join(f"{k}={v}" for k, v in sorted(ROWS.items())))


# min_p > 1 masks every token: the reference divides by a zero kept mass (and warns) before
# zeroing the row; that is the documented behaviour being compared, not a test problem.
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


# ----------------------------------------------------------------------------- Philox
def test_philox_kat():
    lines = kat_vectors()
    assert len(lines) >= 3
    for v in lines:
        assert _C.philox(*v[:6]) == tuple(v[6:]), [hex(x) for x in v]


def test_philox_matches_reference_random():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2 ** 32, size=(6, 2000), dtype=np.uint64)
    want = np.stack(R.philox4x32(*a), axis=1)
    got = np.array([_C.philox(*(int(x) for x in a[:, i])) for i in range(a.shape[1])],
                   dtype=np.uint32)
    assert np.array_equal(got, want)


# ----------------------------------------------------------------------------- pexp
def test_pexp_bitwise(isa):
    rng = np.random.default_rng(2)
    f32 = np.float32
    specials = np.array([-np.inf, np.nan, -0.0, 0.0, -86.0, -85.99999, -86.00001,
                         np.nextafter(f32(-86), f32(0)), np.nextafter(f32(-86), f32(-100)),
                         -87.0, -88.72, -100.0, -1e30, -np.finfo(f32).tiny, -1e-45, -1.4e-45,
                         -2.9e-45, -1e-40, -1e-38, -1e-30, -1e-10, -1e-7, -6e-8,
                         np.nextafter(f32(0), f32(-1)), -0.34657359, -0.34657360, -0.5,
                         -0.6931472, -1.0, -10.0, -50.0, -85.0], dtype=f32)
    grid = np.linspace(-90, 0, 1_000_001, dtype=np.float64).astype(f32)
    # random float32 bit patterns of negative numbers in [-90, -0]
    bits = rng.integers(0x80000000, 0xC2B40001, size=1_000_000, dtype=np.uint64)
    randf = bits.astype(np.uint32).view(f32)
    x = np.concatenate([specials, grid, randf, -grid[::7] * 1e-30])
    got, want = _C.pexp(x), R.pexp(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    count("pexp_values", x.size)


# ----------------------------------------------------------------------------- transform
SETTINGS = {  # name: (temperature, top_k, top_p, min_p)
    "greedy": (0.0, 0, 1.0, 0.0),
    "temp0.8": (0.8, 0, 1.0, 0.0),
    "top_k50": (1.0, 50, 1.0, 0.0),
    "top_p0.95": (0.8, 0, 0.95, 0.0),
    "min_p0.05": (0.7, 0, 1.0, 0.05),
    "combined": (0.9, 40, 0.9, 0.02),
    "top_k1": (1.3, 1, 1.0, 0.0),
    "top_k_ge_V": (1.0, 1 << 23, 1.0, 0.0),
    "tiny_top_p": (1.0, 0, 1e-3, 0.0),
    "hot": (3.0, 0, 0.5, 0.0),
    "top_p_zero": (1.0, 0, 0.0, 0.0),     # below the public API's range: keeps the argmax group
    "min_p_gt1": (1.0, 0, 1.0, 1.5),      # masks everything: an all-zero row, draws give -1
}


EXOTIC = ("top_p_zero", "min_p_gt1")


def _logit_rows(rng, n, V, dtype, specials=True):
    """n rows of logits with ties, -inf entries and (optionally) invalid rows."""
    x = torch.from_numpy(rng.standard_normal((n, V)).astype(np.float32) * 3)
    kinds = rng.integers(0, 8, size=n)
    for i in range(n):
        k = kinds[i]
        if k == 1:            # heavy ties
            x[i] = torch.round(x[i])
        elif k == 2 and V > 1:  # some -inf entries
            x[i, torch.from_numpy(rng.random(V) < 0.3)] = -float("inf")
            x[i, int(rng.integers(V))] = 1.0
        elif k == 3:          # a flat row (all equal)
            x[i] = 0.5
        elif k == 4:          # large magnitudes (e underflows for most tokens)
            x[i] = x[i] * 30
        elif specials and k == 5:
            x[i, int(rng.integers(V))] = float("nan")
        elif specials and k == 6:
            x[i] = -float("inf")
        elif specials and k == 7:
            x[i, int(rng.integers(V))] = float("inf")
    return x.to(dtype)


def _params(names, n):
    t = np.array([SETTINGS[names[i % len(names)]][0] for i in range(n)], dtype=np.float32)
    return (torch.from_numpy(R.inv_temperature(t)),
            torch.tensor([SETTINGS[names[i % len(names)]][1] for i in range(n)],
                         dtype=torch.int64),
            torch.tensor([SETTINGS[names[i % len(names)]][2] for i in range(n)],
                         dtype=torch.float32),
            torch.tensor([SETTINGS[names[i % len(names)]][3] for i in range(n)],
                         dtype=torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("V", [1, 2, 7, 1000, pytest.param(32000, marks=pytest.mark.full)])
def test_sampling_probs_bitwise(V, dtype, isa):
    rng = np.random.default_rng(V * 7 + DTYPES.index(dtype))
    names = list(SETTINGS)
    n = 3 * len(names) if V <= 1000 else len(names)
    logits = _logit_rows(rng, n, V, dtype)
    params = _params(names, n)
    p_cpu, v_cpu = cpu.sampling_probs(logits, *params)
    p_ref, v_ref = ref.sampling_probs(logits, *params)
    assert p_cpu.dtype == torch.float32 and p_cpu.shape == (n, V)
    bad = [i for i in range(n) if not torch.equal(p_cpu[i], p_ref[i])]
    assert not bad, f"rows differ: {bad[:10]} settings {[names[i % len(names)] for i in bad[:10]]}"
    assert torch.equal(v_cpu, v_ref)
    count("sampling_probs", n)


@pytest.mark.parametrize("V", [1, 7, 33, 100, 1000])
def test_greedy_argmax_every_position_and_ties(V, isa):
    """Greedy rows: the lowest-index argmax wherever it lies (every position of a row, so every
    lane of a vector and the scalar tail), with ties after it, -0.0 against +0.0, -inf rows."""
    rng = np.random.default_rng(V + 101)
    rows = []
    for pos in range(V):
        r = rng.normal(0.0, 1.0, V).astype(np.float32)
        r[pos] = 9.0
        if pos + 1 < V:
            r[rng.integers(pos + 1, V)] = 9.0      # a later tie: the earlier one wins
        rows.append(r)
    z = np.full(V, -np.inf, np.float32)
    z[V // 2:] = 0.0
    z[V // 2] = -0.0                                # -0.0 == +0.0: its index is the argmax
    rows += [z, np.full(V, -np.inf, np.float32)]
    logits = torch.from_numpy(np.stack(rows))
    n = logits.shape[0]
    params = (torch.zeros(n), torch.zeros(n, dtype=torch.int64), torch.ones(n), torch.zeros(n))
    p_cpu, v_cpu = cpu.sampling_probs(logits, *params)
    p_ref, v_ref = ref.sampling_probs(logits, *params)
    assert torch.equal(p_cpu, p_ref) and torch.equal(v_cpu, v_ref)
    assert v_cpu[:-1].all() and not v_cpu[-1]
    assert torch.equal(p_cpu[:V].argmax(-1), torch.arange(V))
    count("sampling_probs", n)


def test_sampling_probs_strided_rows(isa):
    rng = np.random.default_rng(5)
    big = _logit_rows(rng, 12, 300, torch.float32, specials=False)
    view = big[::2, 10:260]                 # row stride 600, unit column stride
    params = _params(list(SETTINGS), view.shape[0])
    a, va = cpu.sampling_probs(view, *params)
    b, vb = ref.sampling_probs(view, *params)
    assert torch.equal(a, b) and torch.equal(va, vb)
    count("sampling_probs", view.shape[0])


# ----------------------------------------------------------------------------- verify
def _canonical(B, K, V, nd, layout, rng):
    """Row starts for the padded ([B, K+1] / [B, K]) or the packed (vLLM) layout."""
    if layout == "padded":
        trs = torch.arange(B, dtype=torch.int64) * (K + 1)
        drs = torch.arange(B, dtype=torch.int64) * K
        N, T = B * (K + 1), B * K
    else:
        kb = torch.clamp(nd, min=0)
        trs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(kb + 1, 0)[:-1]])
        drs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(kb, 0)[:-1]])
        N, T = int((kb + 1).sum()), int(kb.sum())
    return trs, drs, N, T


def _random_batch(rng, B, K, V, dtype, draft_kind, target_kind, greedy_mode, layout,
                  specials=True):
    nd = torch.from_numpy(rng.integers(0, K + 1, size=B)).to(torch.int64)
    if rng.random() < 0.5:
        nd[0] = K
    trs, drs, N, T = _canonical(B, K, V, nd, layout, rng)
    names = [n for n in SETTINGS if n != "greedy" and (specials or n not in EXOTIC)]
    if greedy_mode == "all":
        names = ["greedy"]
    elif greedy_mode == "mixed":
        names = names + ["greedy", "greedy"]
    pick = rng.permutation(B) % len(names)
    params = _params([names[i] for i in pick], B)
    base = torch.from_numpy(rng.standard_normal((1, V)).astype(np.float32) * 2.5)
    tl = base + 0.7 * torch.from_numpy(rng.standard_normal((N, V)).astype(np.float32))
    dl = base + 0.7 * torch.from_numpy(rng.standard_normal((max(T, 0), V)).astype(np.float32))
    if specials:
        for M in (tl, dl):
            for i in range(M.shape[0]):
                r = rng.random()
                if r < 0.03:
                    M[i, int(rng.integers(V))] = float("nan")
                elif r < 0.05:
                    M[i] = -float("inf")
                elif r < 0.07:
                    M[i, int(rng.integers(V))] = float("inf")
                elif r < 0.10 and V > 2:
                    M[i, torch.from_numpy(rng.random(V) < 0.5)] = -float("inf")
                    M[i, 0] = 0.0
    # draft ids: mostly sampled from the draft's own distribution (so many get accepted)
    qp, _ = ref.sampling_probs(dl, torch.ones(T), torch.zeros(T, dtype=torch.int64),
                               torch.ones(T), torch.zeros(T))
    ids = torch.zeros(T, dtype=torch.int64)
    for t in range(T):
        row = qp[t].double().numpy()
        ids[t] = int(rng.choice(V, p=row / row.sum())) if row.sum() > 0 else int(rng.integers(V))
        if specials and rng.random() < 0.04:
            ids[t] = -1 if rng.random() < 0.7 else V + int(rng.integers(3))
    if target_kind == "probs":
        it = torch.from_numpy(R.inv_temperature(np.full(N, 0.9, dtype=np.float32)))
        target, _ = ref.sampling_probs(tl, it, torch.zeros(N, dtype=torch.int64),
                                       torch.full((N,), 0.97), torch.zeros(N))
        if specials:
            for i in range(N):
                r = rng.random()
                if r < 0.03:
                    target[i, int(rng.integers(V))] = float("nan")
                elif r < 0.05:
                    target[i, int(rng.integers(V))] = -0.25
                elif r < 0.07:
                    target[i] = 0.0
                elif r < 0.09:
                    target[i] = 1.0 if V <= 4 else 0.9
        target_is_probs = True
    else:
        target, target_is_probs = tl.to(dtype), False
    draft, draft_is_probs = None, False
    if draft_kind == "probs":
        itd = torch.from_numpy(R.inv_temperature(np.full(T, 1.0, dtype=np.float32)))
        draft, _ = ref.sampling_probs(dl, itd, torch.zeros(T, dtype=torch.int64),
                                      torch.ones(T), torch.zeros(T))
        if specials and T:
            draft[int(rng.integers(T)), int(rng.integers(V))] = float("nan")
        draft_is_probs = True
    elif draft_kind == "logits":
        draft = dl.to(dtype)
    seed = torch.from_numpy(rng.integers(-2 ** 63, 2 ** 63 - 1, size=B, dtype=np.int64))
    offset = torch.from_numpy(rng.integers(-2 ** 40, 2 ** 40, size=B, dtype=np.int64))
    return (target, target_is_probs, trs, ids, drs, nd, draft, draft_is_probs, *params,
            seed, offset, K)


# The reference's answers, memoised across ISA levels: a test that rebuilds the same inputs
# from the same seed at every level passes ``key`` and the oracle runs once per input.
_REF_OUT: dict = {}


def _check_verify(args, key=None):
    a = cpu.verify(*args)
    b = _REF_OUT.get(key) if key is not None else None
    if b is None:
        b = ref.verify(*args)
        if key is not None:
            _REF_OUT[key] = b
    for x, y, name in zip(a, b, ("token_ids", "num_accepted", "valid")):
        assert x.dtype == y.dtype, name
        if not torch.equal(x, y):
            bad = (x != y).reshape(x.shape[0], -1).any(1).nonzero().flatten().tolist()
            raise AssertionError(f"{name} differs for requests {bad[:8]}: cpu={x[bad[:4]]} "
                                 f"ref={y[bad[:4]]}")
    tok, nacc, valid = a
    V = args[0].shape[1]
    assert int(tok.min()) >= -1 and int(tok.max()) < V
    count("verify_requests", tok.shape[0])
    count("verify_target_rows_read", int((nacc + 1).sum()))
    return a


VERIFY_CASES = [
    # (V, B, K, dtype, draft_kind, target_kind, greedy_mode, layout)
    (7, 24, 4, torch.float32, "probs", "logits", "none", "padded"),
    (7, 24, 4, torch.float32, "none", "logits", "mixed", "packed"),
    (2, 24, 3, torch.float16, "logits", "logits", "mixed", "padded"),
    (1, 8, 2, torch.float32, "probs", "logits", "mixed", "padded"),
    (50, 24, 5, torch.bfloat16, "logits", "logits", "mixed", "packed"),
    (50, 24, 5, torch.float16, "probs", "logits", "none", "padded"),
    (50, 24, 5, torch.float32, "none", "probs", "mixed", "packed"),
    (50, 24, 5, torch.float32, "probs", "probs", "none", "padded"),
    (50, 24, 5, torch.float32, "logits", "probs", "mixed", "padded"),
    (1000, 16, 4, torch.float32, "logits", "logits", "mixed", "padded"),
    (1000, 16, 4, torch.bfloat16, "none", "logits", "none", "packed"),
    (1000, 16, 4, torch.float32, "probs", "probs", "mixed", "padded"),
    (1000, 12, 3, torch.float32, "none", "logits", "all", "padded"),
    (1000, 12, 3, torch.float16, "logits", "logits", "all", "packed"),
    (32000, 4, 3, torch.float32, "logits", "logits", "mixed", "padded"),
    (32000, 4, 3, torch.bfloat16, "probs", "logits", "none", "packed"),
]


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.full] if c[0] > 1000 else [])
                                  for c in VERIFY_CASES], ids=lambda c: "-".join(
    str(x).split(".")[-1] for x in c))
def test_verify_bitwise(case, isa):
    V, B, K, dtype, draft_kind, target_kind, greedy_mode, layout = case
    rng = np.random.default_rng(seed_of(*map(str, case)))
    reps = 6 if V <= 1000 else 2
    for rep in range(reps):
        _check_verify(_random_batch(rng, B, K, V, dtype, draft_kind, target_kind, greedy_mode,
                                    layout), key=("verify_bitwise", str(case), rep))


def test_verify_random_mix(isa):
    """Many small random batches over every combination of layout, dtype, draft kind,
    target kind and greedy mix."""
    rng = np.random.default_rng(99)
    for _ in range(120):
        V = int(rng.choice([1, 2, 3, 17, 256]))
        K = int(rng.integers(0, 6))
        _check_verify(_random_batch(
            rng, int(rng.integers(1, 12)), K, V, DTYPES[int(rng.integers(3))],
            str(rng.choice(["none", "probs", "logits"])), str(rng.choice(["logits", "probs"])),
            str(rng.choice(["none", "mixed", "all"])), str(rng.choice(["padded", "packed"]))))


def test_verify_point_mass_acceptance_is_exercised(isa):
    """Drafts equal to the argmax of a peaked target: most positions accept, some reject."""
    rng = np.random.default_rng(11)
    B, K, V = 32, 6, 100
    args = list(_random_batch(rng, B, K, V, torch.float32, "none", "logits", "mixed",
                              "padded", specials=False))
    target = args[0].view(B, K + 1, V)
    target.mul_(4.0)
    ids = target[:, :K].argmax(-1)
    flip = torch.from_numpy(rng.random((B, K)) < 0.1)
    ids[flip] = torch.from_numpy(rng.integers(0, V, size=int(flip.sum())))
    args[3] = ids.reshape(-1).to(torch.int64)
    tok, nacc, valid = _check_verify(tuple(args))
    assert int(nacc.sum()) > B  # acceptance really happened
    assert bool(valid.all())


def test_verify_strided_target_and_batch_invariance(isa):
    rng = np.random.default_rng(12)
    B, K, V = 6, 3, 200
    args = list(_random_batch(rng, B, K, V, torch.float32, "logits", "logits", "none",
                              "padded", specials=False))
    big = torch.zeros(args[0].shape[0], V + 37)
    big[:, 5:5 + V] = args[0]
    args[0] = big[:, 5:5 + V]              # row stride V + 37
    full = _check_verify(tuple(args))
    # request 2 alone (its own seed/offset, same rows) gives the same output row
    one = list(args)
    for i in (2, 4, 5, 8, 9, 10, 11, 12, 13):  # per-request [B] arrays
        one[i] = args[i][2:3]
    tok, nacc, valid = cpu.verify(*one)
    assert torch.equal(tok[0], full[0][2]) and int(nacc[0]) == int(full[1][2])


# ----------------------------------------------------------------------------- forced mode
def _reference_forced(args, forced):
    """The reference's forced mode (specops.reference, section 7)."""
    return ref.verify(*args, forced_num_accepted=forced)


FORCED_CASES = [
    # (V, draft_kind, target_kind, greedy_mode, layout)
    (7, "probs", "probs", "mixed", "packed"),
    (7, "none", "probs", "mixed", "padded"),
    (300, "probs", "probs", "none", "packed"),
    (300, "none", "logits", "mixed", "padded"),
    (300, "logits", "logits", "mixed", "packed"),
    (32000, "probs", "probs", "mixed", "padded"),
    (32000, "logits", "logits", "none", "padded"),
]


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.full] if c[0] > 1000 else [])
                                  for c in FORCED_CASES], ids=lambda c: "-".join(map(str, c)))
def test_verify_forced_mode_bitwise(case, isa):
    """verify(..., forced_num_accepted=a): the walk's forced mode (the residual_sample view)
    against the reference, with a = the plain walk's own num_accepted (the composed ops),
    random values past the block, and negative values (invalid requests); int32 and int64
    and an expanded (stride 0) column all read the same."""
    V, draft_kind, target_kind, greedy_mode, layout = case
    rng = np.random.default_rng(seed_of(*case))
    B, K = (24, 4) if V < 32000 else (4, 3)
    for _ in range(2 if V < 32000 else 1):
        args = _random_batch(rng, B, K, V, torch.float32, draft_kind, target_kind, greedy_mode,
                             layout)
        plain = cpu.verify(*args)
        random_a = torch.from_numpy(rng.integers(-2, K + 3, size=B))
        for a in (plain[1], random_a, random_a.to(torch.int32)):
            got = cpu.verify(*args, forced_num_accepted=a)
            want = _reference_forced(args, a)
            for x, y, name in zip(got, want, ("token_ids", "num_accepted", "valid")):
                assert x.dtype == y.dtype and torch.equal(x, y), (name, x, y)
        # forcing the plain walk's own num_accepted reproduces the plain walk
        again = cpu.verify(*args, forced_num_accepted=plain[1])
        assert torch.equal(again[0], plain[0]) and torch.equal(again[1], plain[1])
        one = cpu.verify(*args, forced_num_accepted=torch.tensor([1]).expand(B))
        assert torch.equal(one[0], cpu.verify(*args, forced_num_accepted=torch.ones(B,
                                                  dtype=torch.int64))[0])
        count("forced_requests", 4 * B)


def test_per_request_columns_read_with_their_strides(isa):
    """Per-request [B] columns with stride 0 (``.expand(B)``), stride 2 and int32 dtype are
    read in place and give what contiguous int64 / float32 columns give."""
    rng = np.random.default_rng(31)
    B, K, V = 6, 3, 40
    args = list(_random_batch(rng, B, K, V, torch.float32, "logits", "logits", "none",
                              "padded", specials=False))
    for i, v in ((8, 0.9), (9, 5), (10, 0.8), (11, 0.0), (14 - 1, 7)):  # scalars, expanded
        args[i] = torch.tensor([v], dtype=args[i].dtype).expand(B)
    want = _check_verify(tuple(args))
    strided = list(args)
    for i in (2, 4, 5, 12):
        strided[i] = torch.stack([args[i], args[i] + 99], 1).reshape(-1)[::2]  # stride 2
        assert strided[i].stride(0) == 2
    strided[5] = strided[5].to(torch.int32)
    strided[2] = args[2].to(torch.int32)
    got = cpu.verify(*strided)
    for x, y in zip(got, want):
        assert torch.equal(x, y)


# ----------------------------------------------------------------------------- fuzz safety
def test_fuzz_garbage_indices_never_crash(isa):
    rng = np.random.default_rng(13)
    big = [2 ** 62, -2 ** 62, 2 ** 63 - 1, -2 ** 63, 10 ** 9, -10 ** 9, -1, 0]
    for it_ in range(60):
        V = int(rng.choice([1, 3, 64]))
        N, T, B = int(rng.integers(0, 6)), int(rng.integers(0, 6)), int(rng.integers(1, 6))
        target = torch.randn(max(N, 0), V)
        if it_ % 3 == 0:
            target = torch.rand(N, V)
        draft_kind = ["none", "probs", "logits"][it_ % 3]
        draft = None if draft_kind == "none" else torch.rand(T, V)

        def garbage(n, lo, hi):
            v = rng.integers(lo, hi, size=n).astype(np.int64)
            m = rng.random(n) < 0.4
            v[m] = rng.choice(big, size=int(m.sum()))
            return torch.from_numpy(v)

        trs, drs = garbage(B, -3, N + 3), garbage(B, -3, T + 3)
        nd = garbage(B, -3, 10)
        ids = garbage(T, -3, V + 3)
        max_k = int(rng.integers(0, 8))
        it = torch.from_numpy(rng.choice([0.0, 1.0, 1.7], size=B).astype(np.float32))
        tk = garbage(B, -2, V + 2)
        tp = torch.from_numpy(rng.choice([1.0, 0.5, 0.0, -1.0, np.nan], size=B)
                              .astype(np.float32))
        mp = torch.from_numpy(rng.choice([0.0, 0.5, 2.0, np.nan], size=B).astype(np.float32))
        seed, offset = garbage(B, -5, 5), garbage(B, -5, 5)
        for is_probs in (False, True):
            tok, nacc, valid = cpu.verify(target, is_probs, trs, ids, drs, nd, draft,
                                          draft_kind == "probs", it, tk, tp, mp, seed, offset,
                                          max_k)
            assert tok.shape == (B, max_k + 1)
            assert int(tok.min()) >= -1 and int(tok.max()) < V
            assert int(nacc.min()) >= 0 and int(nacc.max()) <= max_k
            forced = garbage(B, -3, 10)
            tok, nacc, valid = cpu.verify(target.abs(), is_probs, trs, ids, drs, nd, draft,
                                          draft_kind == "probs", it, tk, tp, mp, seed, offset,
                                          max_k, forced_num_accepted=forced)
            assert int(tok.min()) >= -1 and int(tok.max()) < V
            assert int(nacc.min()) >= 0 and int(nacc.max()) <= max_k
        Nr = target.shape[0]
        rows = lambda t: t.repeat(Nr // B + 1)[:Nr]  # noqa: E731
        p, v = cpu.sampling_probs(target, rows(it), rows(tk), rows(tp), rows(mp))
        assert p.shape == target.shape
        assert not bool(torch.isnan(p).any()) and bool(((p >= 0) & (p <= 1)).all())
    count("fuzz_calls", 60)


def test_empty_batch_and_zero_k(isa):
    V = 10
    target = torch.randn(3, V)
    e = torch.zeros(0, dtype=torch.int64)
    tok, nacc, valid = cpu.verify(target, False, e, e, e, e, None, False,
                                  torch.zeros(0), e, torch.zeros(0), torch.zeros(0), e, e, 0)
    assert tok.shape == (0, 1) and nacc.shape == (0,) and valid.shape == (0,)
    one = torch.zeros(1, dtype=torch.int64)
    args = (target, False, one, e, one, one, None, False, torch.ones(1), one, torch.ones(1),
            torch.zeros(1), one, one, 0)
    _check_verify(args)


def test_negative_draft_probs_bitwise(isa):
    """Draft 'probabilities' with negative entries (outside the public API): the residual
    r = p - max(q, 0) stays in [0, p], so the draw is the usual exact one, plain and forced."""
    rng = np.random.default_rng(14)
    for V in (5, 3000):
        B, K = 16, 3
        args = list(_random_batch(rng, B, K, V, torch.float32, "probs", "logits", "none",
                                  "padded", specials=False))
        draft = args[6].clone()
        for t in range(draft.shape[0]):
            draft[t, int(rng.integers(V))] = -3.0 if rng.random() < 0.5 else -0.5
        args[6] = draft
        _check_verify(tuple(args))
        forced = torch.from_numpy(rng.integers(0, K + 1, size=B))
        got = cpu.verify(*args, forced_num_accepted=forced)
        want = _reference_forced(tuple(args), forced)
        for x, y in zip(got, want):
            assert torch.equal(x, y)
        count("forced_requests", B)


# ----------------------------------------------------------------------------- select paths
def _select_rows(rng, V):
    """Rows that steer the native threshold selection into each of its paths."""
    g = rng.standard_normal((8, V)).astype(np.float32)
    rows = [
        g[0] * 3,                         # typical spread
        g[1] * 0.05,                      # nearly flat: thousands of tokens per top-p bucket
        np.round(g[2] * 4) / 4,           # heavy ties at every threshold
        np.full(V, 0.25, np.float32),     # all equal (top-k stream select cannot shrink)
        g[4] * 40,                        # e underflows for most tokens
        np.where(rng.random(V) < 0.5, -np.inf, g[5]).astype(np.float32),  # half -inf
        np.sort(g[6]),                    # ascending: the streaming buffer compacts often
        np.round(g[7]) * 0.0,             # all zeros (-0 and +0 mixed below)
    ]
    rows[7][: V // 2] = -0.0
    return torch.from_numpy(np.stack(rows))


@pytest.mark.parametrize("V", [4103, pytest.param(50000, marks=pytest.mark.full)])
def test_threshold_selection_paths_bitwise(V, isa):
    """top-k (streaming select, its histogram fallback for ties and for k > 4096) and top-p
    (two-level radix select on the bit patterns, with the kept mass taken from the
    histogram) against the reference, bit for bit."""
    rng = np.random.default_rng(V)
    rows = _select_rows(rng, V)
    n = rows.shape[0]
    combos = [(1.0, 50, 1.0, 0.0), (0.7, 300, 1.0, 0.0), (1.0, 4096, 1.0, 0.0),
              (1.0, 5000, 1.0, 0.0), (1.0, V - 1, 1.0, 0.0), (0.8, 0, 0.95, 0.0),
              (1.0, 0, 0.5, 0.0), (1.0, 0, 0.999, 0.0), (1.3, 0, 0.9, 0.01),
              (0.9, 40, 0.9, 0.0), (1.0, 0, 0.3, 0.2)]
    for t, k, p, m in combos:
        it = torch.from_numpy(R.inv_temperature(np.full(n, t, np.float32)))
        tk = torch.full((n,), k, dtype=torch.int64)
        tp = torch.full((n,), p, dtype=torch.float32)
        mp = torch.full((n,), m, dtype=torch.float32)
        p_cpu, v_cpu = cpu.sampling_probs(rows, it, tk, tp, mp)
        p_ref, v_ref = ref.sampling_probs(rows, it, tk, tp, mp)
        bad = [i for i in range(n) if not torch.equal(p_cpu[i], p_ref[i])]
        assert not bad, f"(T, k, p, min_p)={(t, k, p, m)}: rows differ {bad}"
        assert torch.equal(v_cpu, v_ref)
    count("sampling_probs", n * len(combos))


_ISA_SCRIPT = r"""
import torch, specops
from specops import _C
try:
    print("isa", _C.isa())
except ValueError as exc:
    print("isa ValueError", exc)
logits = torch.randn(2, 3, 11)
ids = torch.zeros(2, 2, dtype=torch.int64)
for backend in ("cpu", "auto", "reference"):
    try:
        specops.verify_block(logits, ids, None, seed=1, backend=backend)
        print(backend, "ok")
    except ValueError as exc:
        print(backend, type(exc).__name__, exc)
print("available", ",".join(specops.available_backends()))
from specops import cli
try:
    cli.main(["--version"])
except SystemExit as exc:
    print("cli_version_exit", exc.code)
"""


def _run_with_isa(value):
    env = {**os.environ, "SPECOPS_CPU_ISA": value}
    r = subprocess.run([sys.executable, "-c", _ISA_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return dict(ln.split(" ", 1) for ln in r.stdout.splitlines() if " " in ln)


@pytest.mark.full                       # a fresh interpreter per level
def test_isa_env_var_is_honoured():
    """SPECOPS_CPU_ISA=scalar (not the default on x86) is the active level in a new process."""
    out = _run_with_isa("scalar")
    assert {k: out[k] for k in ("isa", "cpu", "auto", "reference")} == {
        "isa": "scalar", "cpu": "ok", "auto": "ok", "reference": "ok"}
    assert "cpu" in out["available"].split(",")


@pytest.mark.full                       # a fresh interpreter
def test_isa_env_var_unknown_value_fails_only_where_the_cpu_backend_is_used():
    """An unknown level (issue 27, defect 8): `import specops` works; backend="cpu" raises a
    ValueError naming SPECOPS_CPU_ISA (CpuIsaError, also a BackendUnavailable), as _C does;
    backend="auto" runs the reference with a warning that names the variable (issue 28 item
    4; tests/test_api.py checks the warning); backend="reference", available_backends()
    (without "cpu") and the CLI work."""
    out = _run_with_isa("avx9000")
    # (the script catches ValueError and prints the type's name)
    for key, kind in (("isa", "ValueError"), ("cpu", "CpuIsaError")):
        assert out[key].startswith(kind) and "SPECOPS_CPU_ISA='avx9000'" in out[key], out
    assert out["auto"] == "ok" and out["reference"] == "ok", out
    avail = out["available"].split(",")
    assert "cpu" not in avail and "reference" in avail, out
    assert out["cli_version_exit"] == "0", out


def _cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.skipif(not _cpu_flags(), reason="no /proc/cpuinfo flags to compare with")
def test_build_has_every_level_this_cpu_runs():
    """A level the CPU has (x86 flags as Linux reports them) is in the build and available:
    a compiler check or CPU probe that silently dropped one would fail here."""
    flags = _cpu_flags()
    want = {"sse2": {"sse2"}, "avx2": {"avx2", "popcnt"}, "avx512": {"avx512f", "avx512dq"}}
    for level, needs in want.items():
        if needs <= flags:
            assert level in ISAS, (level, ISAS)


def test_set_isa():
    before = _C.isa()
    assert before == ISAS[-1]  # the default is the best level this CPU runs
    with pytest.raises(ValueError, match="scalar, sse2, avx2, avx512"):
        _C.set_isa("neon")
    for level in ISAS:
        _C.set_isa(level)
        assert _C.isa() == level
    _C.set_isa(before)


def test_constants_match_reference():
    """Every constant the C++ was compiled with equals specops.reference's (floats bitwise)."""
    c = _C.constants()

    def bits(x):
        return np.float32(x).view(np.uint32)

    for name in ("PHILOX_M0", "PHILOX_M1", "PHILOX_W0", "PHILOX_W1", "PHILOX_ROUNDS",
                 "TAG_ACCEPT", "TAG_SAMPLE", "E_SCALE_BITS", "W_SCALE_BITS", "P_CHECK_BITS",
                 "MAX_VOCAB"):
        assert c[name] == getattr(R, name), name
    for name in ("EXP_CUTOFF", "EXP_ZERO_MASS", "EXP_LOG2E", "EXP_ROUND", "EXP_LN2_HI", "EXP_LN2_LO", "FLT_MIN"):
        assert np.float32(c[name]) == c[name], name           # a float32 value, exactly
        assert bits(c[name]) == bits(getattr(R, name)), name
    assert len(c["EXP_COEFFS"]) == len(R.EXP_COEFFS)
    for a, b in zip(c["EXP_COEFFS"], R.EXP_COEFFS):
        assert bits(a) == bits(b)


def _band_rows(rng, V):
    """Rows aimed at the top-p band pre-filter (V >= 4096): flat, lognormal of several
    spreads, peaked (mass below tau in a few tokens a strided sample misses), a few big
    tokens planted just below / above the nucleus edge, ties at the threshold, -inf entries."""
    g = rng.standard_normal((14, V)).astype(np.float32)
    rows = [g[0] * 2.0, g[1] * 0.5, g[2] * 5.0, g[3] * 12.0, np.zeros(V, np.float32),
            np.round(g[4] * 2.0), np.round(g[5] * 8.0) * 0.25]
    r = g[6] * 2.0                          # -inf entries
    r[rng.random(V) < 0.4] = -np.inf
    rows.append(r)
    r = np.full(V, -20.0, np.float32)       # a handful of large tokens on a flat floor
    r[rng.choice(V, 7, replace=False)] = rng.standard_normal(7).astype(np.float32)
    rows.append(r)
    r = g[7] * 1.0                          # spikes off the stride-32 sample positions
    r[np.arange(1, V, 32)[:5]] = 9.0
    rows.append(r)
    r = g[8] * 2.0                          # one dominant token and a flat tail
    r[int(rng.integers(V))] = 25.0
    rows.append(r)
    r = np.where(g[9] > 0.5, 3.0, np.round(g[10]))  # big tie groups at several levels
    rows.append(r.astype(np.float32))
    r = g[11] * 3.0                         # a block of equal values inside the nucleus
    r[: V // 3] = 2.0
    rows.append(r)
    r = np.full(V, -np.inf, np.float32)     # two finite tokens
    r[[3, V - 2]] = [0.0, -1.0]
    rows.append(r)
    return torch.from_numpy(np.stack(rows).astype(np.float32))


@pytest.mark.parametrize("V", [4095, 4096, 4103, pytest.param(33000, marks=pytest.mark.full),
                               pytest.param(128256, marks=pytest.mark.full)])
def test_top_p_band_prefilter_bitwise(V, isa):
    """top-p on long rows runs its exact select on a band of candidates placed by a strided
    sample (with a bound-based and a whole-row fallback); every path must give the
    reference's bits, including top_p next to 0 and to 1."""
    rng = np.random.default_rng(V + 17)
    rows = _band_rows(rng, V)
    n = rows.shape[0]
    ps = [0.95, 0.5, 0.9, 0.99, 0.999, 0.9999999, 1e-6, 0.3]
    temps = [0.8, 1.0, 1.7, 0.25]
    for j, p in enumerate(ps):
        t = temps[j % len(temps)]
        it = torch.from_numpy(R.inv_temperature(np.full(n, t, np.float32)))
        tk = torch.zeros(n, dtype=torch.int64)
        tp = torch.full((n,), p, dtype=torch.float32)
        mp = torch.zeros(n, dtype=torch.float32)
        p_cpu, v_cpu = cpu.sampling_probs(rows, it, tk, tp, mp)
        p_ref, v_ref = ref.sampling_probs(rows, it, tk, tp, mp)
        bad = [i for i in range(n) if not torch.equal(p_cpu[i], p_ref[i])]
        assert not bad, f"(T, p)={(t, p)}: rows differ {bad}"
        assert torch.equal(v_cpu, v_ref)
    count("sampling_probs", n * len(ps))


@pytest.mark.parametrize("V", [1, 2, 3, 5, 7])
def test_top_p_tiny_rows_bitwise(V, isa):
    rng = np.random.default_rng(V)
    rows = torch.from_numpy(np.stack([
        rng.standard_normal(V).astype(np.float32) * 3, np.zeros(V, np.float32),
        np.where(rng.random(V) < 0.5, -np.inf, 1.0).astype(np.float32)]))
    rows[2, 0] = 0.5
    n = rows.shape[0]
    for p in (0.95, 0.5, 0.9999999, 1e-6):
        it = torch.from_numpy(R.inv_temperature(np.full(n, 0.8, np.float32)))
        args = (it, torch.zeros(n, dtype=torch.int64), torch.full((n,), p), torch.zeros(n))
        p_cpu, v_cpu = cpu.sampling_probs(rows, *args)
        p_ref, v_ref = ref.sampling_probs(rows, *args)
        assert torch.equal(p_cpu, p_ref) and torch.equal(v_cpu, v_ref)
