"""Tokens without integer mass (reference section 2): the bound EXP_ZERO_MASS and the C++
path that skips their exp.

* The bound, exhaustively: every float32 d in [-86, EXP_ZERO_MASS) has
  trunc(pexp(d) * 2**40) == 0 (reference pexp and the C++ pexp, bit for bit), and the check
  has teeth: just above the bound some d has E > 0, so a bound 0.05 higher would be wrong.
* The encoding: the C++ exp pass with ``tail`` leaves d in the vectors it skipped; the mass
  S is the same, every other entry is e, and pexp of every skipped entry is its e.
* The consumers: sampling_probs and verify on rows whose tails are long and clustered (so
  whole vectors are skipped) equal the reference bitwise at every ISA level, including the
  cases where a skipped token's own probability is read: min-p below 2**-40 keeps tail
  tokens, a draft id in the tail (accept test), and residual draws whose whole mass lies in
  the tail (the drawn token is a tail token).
"""
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
from tests._rows import count_rows  # noqa: E402


F32 = np.float32
BOUND = R.EXP_ZERO_MASS


def _floats_between(lo: float, hi: float) -> np.ndarray:
    """Every float32 d with lo <= d < float32(hi) (lo < hi < 0), most negative last."""
    a = np.array([hi], F32).view(np.uint32)[0]   # for negatives the bits grow with |d|
    b = np.array([lo], F32).view(np.uint32)[0]
    return np.arange(a + 1, b + 1, dtype=np.uint32).view(F32)


def _mass(e: np.ndarray) -> np.ndarray:
    return (e.astype(np.float64) * 2.0 ** R.E_SCALE_BITS).astype(np.int64)


def test_bound_has_no_mass_for_every_float32_below_it():
    assert BOUND == F32(_C.constants()["EXP_ZERO_MASS"])
    d = _floats_between(float(R.EXP_CUTOFF), float(BOUND))
    assert d[0] == np.nextafter(BOUND, F32(-100)) and d[-1] == R.EXP_CUTOFF
    assert d.size > 13_000_000
    worst = 0
    for chunk in np.array_split(d, 16):
        e = R.pexp(chunk)
        assert np.array_equal(_C.pexp(chunk).view(np.uint32), e.view(np.uint32))
        worst = max(worst, int(_mass(e).max()))
    assert worst == 0
    below = np.array([np.nextafter(R.EXP_CUTOFF, F32(-100)), -86.5, -100.0, -1e30, -np.inf], F32)
    assert not R.pexp(below).any()
    count_rows("zero_mass/float32_values_checked", d.size + below.size)


def test_bound_is_nearly_tight():
    """The same check just above the bound finds mass: it would catch a bound set too high
    (the tight value lies within 0.05 of EXP_ZERO_MASS; -40 ln 2 = -27.7259)."""
    d = _floats_between(float(BOUND), -27.70)
    e = R.pexp(d)
    has_mass = _mass(e) > 0
    assert has_mass.any()
    highest_massless = d[~has_mass].max() if (~has_mass).any() else None
    assert highest_massless is None or highest_massless > -27.7259 - 1e-3


# ----------------------------------------------------------------------------- encoding
def _tail_rows(rng, n, V):
    """Logit rows whose low tail (more than 28 nats below the max at T = 1) is long and
    clustered in runs, as real vocabularies are (~30-55% of SmolLM2's tokens are that far
    below the max), with a few tail tokens scattered in the head's vectors too, and in half
    of the rows long runs just above the bound (E of 1 to 10 each: so many that a bound set
    too high changes S by more than a float32 rounding of p)."""
    rows = np.empty((n, V), F32)
    for i in range(n):
        x = rng.standard_normal(V).astype(F32) * F32(2.0)
        frac = rng.choice([0.0, 0.3, 0.6, 0.95])
        band = rng.choice([0.0, 0.5])
        pos = 0
        while pos < V:                           # head runs, tail runs and band runs
            run = int(rng.integers(1, 200))
            u = rng.random(min(run, V - pos))
            if rng.random() < frac:
                x[pos:pos + run] = F32(8.0 - 28.0) - F32(60.0) * u
            elif rng.random() < band:            # just above the bound: E = 1 .. 10
                x[pos:pos + run] = F32(8.0 - 25.5) - F32(2.2) * u
            pos += run
        few = rng.random(V) < 0.02
        x[few] = F32(8.0 - 28.5) - F32(20.0) * rng.random(int(few.sum()))
        if rng.random() < 0.2:                   # some -inf and tokens past the cut-off
            x[rng.random(V) < 0.05] = -np.inf
            x[rng.random(V) < 0.05] = F32(-200.0)
        x[int(rng.integers(V))] = F32(8.0)       # the max (the head is N(0, 4): below it)
        rows[i] = x
    return rows


@pytest.mark.parametrize("V", [1, 7, 8, 9, 64, 1000, pytest.param(49152, marks=pytest.mark.full)])
def test_exp_pass_encoding(V, isa):
    rng = np.random.default_rng(V)
    skipped_total = 0
    for x in _tail_rows(rng, 6, V):
        m = F32(x.max())
        for thr in (F32(-np.inf), F32(np.sort(x)[-min(V, 50)])):
            full, s_full = _C.exp_pass(x, m, thr, False)
            got, s_tail = _C.exp_pass(x, m, thr, True)
            want = np.where(x >= thr, R.pexp(x - m), F32(0.0)).astype(F32)
            assert np.array_equal(full.view(np.uint32), want.view(np.uint32))
            assert s_full == s_tail == int(_mass(want).sum())
            neg = got < 0
            assert np.array_equal(got[~neg].view(np.uint32), want[~neg].view(np.uint32))
            assert np.array_equal((x - m)[neg].view(np.uint32), got[neg].view(np.uint32))
            assert (got[neg] < BOUND).all() and (x[neg] >= thr).all()
            assert not _mass(want[neg]).any()
            assert np.array_equal(R.pexp(got[neg]).view(np.uint32), want[neg].view(np.uint32))
            skipped_total += int(neg.sum())
    if V >= 1000:                                # groups of 8 AVX2 vectors: 64 tokens
        assert skipped_total > 0, "no vector was skipped: the rows do not exercise the skip"


# ----------------------------------------------------------------------------- consumers
SETTINGS = [  # (temperature, top_k, top_p, min_p)
    (1.0, 0, 1.0, 0.0), (0.8, 0, 1.0, 0.0), (0.8, 0, 0.95, 0.0), (0.8, 50, 1.0, 0.0),
    (0.8, 0, 1.0, 0.05), (1.0, 0, 1.0, 2.0 ** -44), (1.0, 0, 1.0, 1e-15), (1.0, 0, 0.999999, 0.0),
    (2.0, 2000, 0.9, 0.0), (1.0, 0, 0.5, 1e-16),
]


def _params(n):
    t = np.array([SETTINGS[i % len(SETTINGS)][0] for i in range(n)], F32)
    cols = list(zip(*[SETTINGS[i % len(SETTINGS)] for i in range(n)]))
    return (torch.from_numpy(R.inv_temperature(t)), torch.tensor(cols[1], dtype=torch.int64),
            torch.tensor(cols[2], dtype=torch.float32), torch.tensor(cols[3], dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("V", [7, 1000, 4103, pytest.param(49152, marks=pytest.mark.full)])
def test_sampling_probs_on_tail_rows(V, dtype, isa):
    rng = np.random.default_rng(V + 1)
    n = 2 * len(SETTINGS)
    logits = torch.from_numpy(_tail_rows(rng, n, V)).to(dtype)
    params = _params(n)
    p_cpu, v_cpu = cpu.sampling_probs(logits, *params)
    p_ref, v_ref = ref.sampling_probs(logits, *params)
    assert torch.equal(v_cpu, v_ref)
    bad = [i for i in range(n) if not torch.equal(p_cpu[i], p_ref[i])]
    assert not bad, f"rows differ: {bad} settings {[SETTINGS[i % len(SETTINGS)] for i in bad]}"
    # tiny min-p keeps tail tokens: their probabilities are positive and must be exact
    lowmin = [i for i in range(n) if 0 < SETTINGS[i % len(SETTINGS)][3] < 2.0 ** -40]
    assert V < 1000 or any(bool(((p_ref[i] > 0) & (p_ref[i] < 2.0 ** -40)).any())
                           for i in lowmin)
    count_rows("zero_mass/sampling_probs", n)


def _verify_args(rng, V, B, K, tail_draws):
    """A padded batch on tail rows.  tail_draws: the draft covers the head of each target row
    (q >= p there), so the residual's whole mass lies in the tail and a rejection draws a tail
    token; the draft ids are tail tokens half of the time (p(y) is read from a skipped
    entry)."""
    N, T = B * (K + 1), B * K
    tl = torch.from_numpy(_tail_rows(rng, N, V))
    inv_t, top_k, top_p, min_p = _params(B)
    inv_t = torch.where(inv_t > 0, inv_t, torch.ones(B))
    rows_p, _ = ref.sampling_probs(tl, inv_t.repeat_interleave(K + 1),
                                   top_k.repeat_interleave(K + 1), top_p.repeat_interleave(K + 1),
                                   min_p.repeat_interleave(K + 1))
    draft = torch.zeros(T, V)
    ids = torch.zeros(T, dtype=torch.int64)
    for b in range(B):
        for j in range(K):
            p = rows_p[b * (K + 1) + j].double()
            head = p >= 2.0 ** -30
            tail = (p > 0) & ~head
            q = torch.zeros(V, dtype=torch.float64)
            if tail_draws:
                q[head] = p[head] / p[head].sum()
            else:
                q = p * torch.from_numpy(rng.random(V) + 0.5)
                q = q / q.sum()
            if tail.any() and rng.random() < 0.5:      # a tail token as the draft id
                y = int(tail.nonzero()[int(rng.integers(int(tail.sum())))])
                q[y] = p[y] * rng.choice([0.5, 2.0])
            else:
                y = int(rng.choice(V, p=(q.double() / q.double().sum()).numpy()))
            draft[b * K + j] = q.float()
            ids[b * K + j] = y
    trs = torch.arange(B, dtype=torch.int64) * (K + 1)
    drs = torch.arange(B, dtype=torch.int64) * K
    nd = torch.full((B,), K, dtype=torch.int64)
    seed = torch.from_numpy(rng.integers(-2 ** 62, 2 ** 62, size=B))
    offset = torch.from_numpy(rng.integers(0, 2 ** 40, size=B))
    return (tl, False, trs, ids, drs, nd, draft, True, inv_t, top_k, top_p, min_p, seed,
            offset, K)


@pytest.mark.parametrize("V", [1000, pytest.param(49152, marks=pytest.mark.full)])
@pytest.mark.parametrize("tail_draws", [True, False])
def test_verify_on_tail_rows(V, tail_draws, isa):
    rng = np.random.default_rng(V * 3 + tail_draws)
    B, K = (20, 3) if V <= 1000 else (6, 2)
    args = _verify_args(rng, V, B, K, tail_draws)
    drew_tail = 0
    for forced in (None, torch.from_numpy(rng.integers(0, K + 1, size=B))):
        kw = {} if forced is None else {"forced_num_accepted": forced}
        got = cpu.verify(*args, **kw)
        want = ref.verify(*args, **kw)
        for x, y, name in zip(got, want, ("token_ids", "num_accepted", "valid")):
            assert torch.equal(x, y), (name, x, y)
        tok, nacc, _ = got[:3]
        for b in range(B):
            j = int(nacc[b])
            if j < K:                                  # a rejection draw at j
                t = int(tok[b, j])
                x = args[0][b * (K + 1) + j]
                if t >= 0 and float(x[t] - x.max()) * float(args[8][b]) < BOUND:
                    drew_tail += 1
        count_rows("zero_mass/verify_requests", B)
    if tail_draws:
        assert drew_tail > 0, "no rejection drew a tail token"
