"""The C++ backend's primitives and the sampling transform against the numpy reference,
bitwise at every ISA level of the passes (switched in-process with ``_C.set_isa``): Philox
words, pexp bits, probabilities (torch.equal), the greedy argmax, top-k / top-p selection
paths and the top-p band prefilter, and the constants."""
from tests._kat import kat_vectors  # noqa: E402
import numpy as np
import pytest
import torch

from tests._cpu import DTYPES, SETTINGS, _C, count, logit_rows, sampling_params

from specops import reference as R  # noqa: E402
from specops.backends import cpu  # noqa: E402
from specops.backends import reference as ref  # noqa: E402

# min_p > 1 masks every token: the reference divides by a zero kept mass (and warns) before
# zeroing the row; that is the documented behaviour being compared, not a test problem.
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")


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
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("V", [1, 2, 7, 1000, pytest.param(32000, marks=pytest.mark.full)])
def test_sampling_probs_bitwise(V, dtype, isa):
    rng = np.random.default_rng(V * 7 + DTYPES.index(dtype))
    names = list(SETTINGS)
    n = 3 * len(names) if V <= 1000 else len(names)
    logits = logit_rows(rng, n, V, dtype)
    params = sampling_params(names, n)
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
    big = logit_rows(rng, 12, 300, torch.float32, specials=False)
    view = big[::2, 10:260]                 # row stride 600, unit column stride
    params = sampling_params(list(SETTINGS), view.shape[0])
    a, va = cpu.sampling_probs(view, *params)
    b, vb = ref.sampling_probs(view, *params)
    assert torch.equal(a, b) and torch.equal(va, vb)
    count("sampling_probs", view.shape[0])


def _rows_agree(rows, t, k, p, m):
    """The C++ and reference probabilities of ``rows`` under one (T, top_k, top_p, min_p),
    bitwise, with the same validity."""
    n = rows.shape[0]
    it = torch.from_numpy(R.inv_temperature(np.full(n, t, np.float32)))
    tk = torch.full((n,), k, dtype=torch.int64)
    tp = torch.full((n,), p, dtype=torch.float32)
    mp = torch.full((n,), m, dtype=torch.float32)
    p_cpu, v_cpu = cpu.sampling_probs(rows, it, tk, tp, mp)
    p_ref, v_ref = ref.sampling_probs(rows, it, tk, tp, mp)
    bad = [i for i in range(n) if not torch.equal(p_cpu[i], p_ref[i])]
    assert not bad, f"(T, k, p, min_p)={(t, k, p, m)}: rows differ {bad}"
    assert torch.equal(v_cpu, v_ref)


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
        _rows_agree(rows, t, k, p, m)
    count("sampling_probs", n * len(combos))


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
        _rows_agree(rows, t, 0, p, 0.0)
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
