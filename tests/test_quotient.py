"""The transform's probability p = flush(float32(float64(e) * 2**40 / float64(S'))) (reference
section 2) at every ISA level, on the quotients where a division-free shortcut would go wrong.

The AVX-512 level multiplies by the reciprocal 2**40 / S' and takes the division only for the
vectors where it cannot prove the float32 rounding equal (simd/vec_avx512.h): a quotient
within a few float64 ulps of a float32 rounding midpoint, or just above the float32 subnormal
range.  Random rows almost never land there (about one lane in 2**23), so these tests build
them: for a float32 e and a midpoint m between two float32 values, sd = e * 2**40 / m rounded
to a float64 puts the quotient within a fraction of an ulp of m, and its float64 neighbours
walk across it.  The negative control: on these inputs the plain reciprocal product rounds
differently from the division in many lanes, so the cases have teeth.
"""
import numpy as np
import pytest

_C = pytest.importorskip(
    "specops._C",
    reason="specops._C (the C++ CPU backend) is not built: run `pip install -e .` "
           "(SPECOPS_BUILD_CPP=0 skips it)")

from tests._rows import count_rows  # noqa: E402

F32, F64 = np.float32, np.float64
FLT_MIN = F64(np.finfo(F32).tiny)


def _exact(e: np.ndarray, sd: np.ndarray, cut: float = 0.0) -> np.ndarray:
    """The contract's p, with numpy's correctly rounded float64 division."""
    p = (e.astype(F64) * 2.0 ** 40 / sd).astype(F32)
    return np.where((e >= F32(cut)) & (p >= FLT_MIN), p, F32(0))


def _reciprocal(e: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """The shortcut without its check (what the negative control measures)."""
    p = (e.astype(F64) * (2.0 ** 40 / sd)).astype(F32)
    return np.where(p >= FLT_MIN, p, F32(0))


def _near_midpoint_cases(n: int, seed: int):
    """(e, sd) pairs whose quotient is within a few float64 ulps of a float32 midpoint."""
    rng = np.random.default_rng(seed)
    e = rng.uniform(0.25, 1.0, n).astype(F32)
    # target probabilities over many binades, then the midpoint just above each
    p = (2.0 ** rng.uniform(-40, -1, n)).astype(F32)
    mid = (p.astype(F64) + np.nextafter(p, F32(np.inf)).astype(F64)) / 2   # exact in float64
    sd0 = e.astype(F64) * 2.0 ** 40 / mid
    steps = np.arange(-4, 5)
    sd = sd0[:, None].copy()
    # walk sd by float64 ulps: the quotient moves by ~1 ulp per step across the midpoint
    for k in steps:
        if k == 0:
            continue
        s = sd0.copy()
        direction = np.inf if k > 0 else 0.0
        for _ in range(abs(int(k))):
            s = np.nextafter(s, direction)
        sd = np.concatenate([sd, s[:, None]], axis=1)
    e_all = np.repeat(e[:, None], sd.shape[1], axis=1)
    return e_all.reshape(-1), sd.reshape(-1)


def _run(e: np.ndarray, sd: np.ndarray, cut: float = 0.0) -> np.ndarray:
    """The C++ pass, one call per distinct sd (it takes one S' per row)."""
    out = np.empty_like(e)
    for i in range(e.size):
        out[i] = _C.materialize(e[i:i + 1].repeat(16), cut, float(sd[i]))[0]
    return out


def _run_rows(e: np.ndarray, sd: float, cut: float = 0.0) -> np.ndarray:
    return _C.materialize(e, cut, sd)


def test_near_midpoint_quotients_match_the_division(isa):
    e, sd = _near_midpoint_cases(400, seed=11)
    want = _exact(e, sd)
    # every lane of a vector gets the same (e, sd): the vector path, not only the scalar tail
    got = _run(e, sd)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    count_rows("quotient/near_midpoint_lanes", e.size)


def test_near_midpoint_cases_have_teeth():
    e, sd = _near_midpoint_cases(400, seed=11)
    wrong = int((_reciprocal(e, sd).view(np.uint32) != _exact(e, sd).view(np.uint32)).sum())
    assert wrong >= 50, wrong


def test_mixed_rows_one_risky_lane(isa):
    """A row of ordinary quotients with one near-midpoint lane at every position of a vector:
    the whole vector must fall back, and only the risky lane's value depends on it."""
    e, sd = _near_midpoint_cases(40, seed=12)
    rng = np.random.default_rng(13)
    for i in range(0, e.size, 7):
        for pos in (0, 5, 15):
            row = rng.uniform(0.0, 1.0, 37).astype(F32)
            row[pos] = e[i]
            got = _run_rows(row, float(sd[i]))
            want = _exact(row, np.full(row.size, sd[i]))
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_quotients_around_the_subnormal_range(isa):
    """Quotients from 2**-130 to 2**-122: the flush to 0 below FLT_MIN, and the band
    [2**-127, 2**-125) where the float32 grid is the subnormal one."""
    rng = np.random.default_rng(14)
    e = rng.uniform(2.0 ** -100, 2.0 ** -99, 4000).astype(F32)
    target = 2.0 ** rng.uniform(-130, -122, e.size)
    sd = e.astype(F64) * 2.0 ** 40 / target
    want = _exact(e, sd)
    got = _run(e, sd)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert (want == 0).any() and (want > 0).any()
    # The one midpoint there that the flush does not hide: 2**-126 - 2**-150, between the
    # largest subnormal and FLT_MIN (at or above it p is FLT_MIN, below it p flushes to 0).
    # Its float64 pattern has low 29 bits 0, not 2**28: only the band check catches it.
    mids = [2.0 ** -126 - 2.0 ** -150, 2.0 ** -126, 2.0 ** -126 + 2.0 ** -150]
    es, sds = [], []
    for mid in mids:
        for e1 in rng.uniform(2.0 ** -99, 2.0 ** -98, 200).astype(F32):
            s0 = F64(e1) * 2.0 ** 40 / mid
            for direction in (0.0, np.inf):
                s = s0
                for _ in range(4):
                    es.append(e1)
                    sds.append(s)
                    s = np.nextafter(s, direction)
    es, sds = np.array(es, F32), np.array(sds, F64)
    want = _exact(es, sds)
    assert np.array_equal(_run(es, sds).view(np.uint32), want.view(np.uint32))
    # teeth: here too the plain reciprocal product flushes or keeps the wrong lanes
    assert (_reciprocal(es, sds).view(np.uint32) != want.view(np.uint32)).any()


@pytest.mark.parametrize("V", [1, 7, 1000, pytest.param(49152, marks=pytest.mark.full)])
def test_random_rows_and_cut(V, isa):
    rng = np.random.default_rng(V)
    e = np.exp(rng.normal(-8.0, 6.0, V)).clip(0, 1).astype(F32)
    e[rng.integers(0, V)] = 1.0
    sd = F64(np.floor(e.astype(F64) * 2.0 ** 40).sum())
    for cut in (0.0, 1e-6, 0.3):
        got = _run_rows(e, float(sd), cut)
        assert np.array_equal(got.view(np.uint32), _exact(e, np.full(V, sd), cut).view(np.uint32))
