"""The reference oracle: Philox vectors, the transform's definition, and the exact law."""
from __future__ import annotations

import os

import numpy as np
import pytest

from specops import reference as R

KAT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "philox_kat.txt")
# Random123's published Philox4x32-10 vectors (also in shared/philox_kat.txt), kept here so
# the test does not depend on the checkout's neighbours.
KAT_VECTORS = [
    ([0, 0, 0, 0, 0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 6, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


def test_philox_known_answers():
    for inp, want in KAT_VECTORS:
        assert [int(w) for w in R.philox4x32(*inp)] == want


def test_philox_kat_file_matches_embedded_vectors():
    if not os.path.exists(KAT):
        pytest.skip("shared/philox_kat.txt not beside the checkout")
    rows = [[int(x, 16) for x in line.split()] for line in open(KAT)
            if line.strip() and not line.startswith("#")]
    assert [(r[:6], r[6:]) for r in rows] == KAT_VECTORS


def test_philox_vectorised_equals_scalar():
    c0 = np.arange(50)
    words = R.philox4x32(c0, 1, 7, 9, 123, 456)
    for i in (0, 17, 49):
        assert [int(w[i]) for w in words] == [int(w) for w in R.philox4x32(i, 1, 7, 9, 123, 456)]


def test_stream_layout_uses_seed_halves_and_offset_halves():
    seed, off = -5, (3 << 32) | 11          # negative seed: two's complement pattern
    w = R.stream_words(seed, off, 2, R.TAG_SAMPLE)
    k = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
    want = R.philox4x32(2, 1, 11, 3, int(k & np.uint64(0xFFFFFFFF)), int(k >> np.uint64(32)))
    assert [int(a) for a in w] == [int(b) for b in want]
    u = R.sample_uniform64(seed, off, 2)
    assert int(u) == int(w[0]) | (int(w[1]) << 32)


def test_pexp_accuracy_and_edges():
    d = np.linspace(-86, 0, 200001, dtype=np.float32)
    rel = np.abs(R.pexp(d).astype(np.float64) / np.exp(d.astype(np.float64)) - 1)
    assert rel.max() < 2.5e-7
    assert R.pexp(np.float32(0)) == 1.0
    edge = np.array([-np.inf, -1e30, -86.0001, np.nan], dtype=np.float32)
    assert (R.pexp(edge) == 0).all()
    assert (R.pexp(d) >= R.FLT_MIN).all()       # never subnormal


def test_integer_draw_is_inverse_cdf():
    W = np.array([0, 3, 0, 5, 2], dtype=np.int64)     # S = 10
    for t_want, tok in [(0, 1), (2, 1), (3, 3), (7, 3), (8, 4), (9, 4)]:
        U = (t_want << 64) // 10 + 1                   # floor(U * 10 / 2**64) == t_want
        assert (U * 10) >> 64 == t_want
        assert R.draw_index(W, U) == tok
    assert R.draw_index(np.zeros(3, dtype=np.int64), 5) == -1


def _transform(x, **kw):
    return R.transform_row(np.asarray(x, dtype=np.float32), R.inv_temperature(kw.pop("T", 1.0)),
                           **kw)


def test_transform_top_k_keeps_ties():
    p, ok = _transform([1.0, 3.0, 2.0, 2.0, 0.5], top_k=2)
    assert ok and list(p > 0) == [False, True, True, True, False]


def test_transform_top_p_is_smallest_set_reaching_mass():
    x = np.log(np.array([0.5, 0.25, 0.125, 0.125], dtype=np.float32))
    for top_p, want in [(0.5, 1), (0.6, 2), (0.75, 2), (0.8, 4), (0.9, 4)]:
        p, ok = _transform(x, top_p=top_p)
        assert ok and int((p > 0).sum()) == want, top_p     # 0.125 tie kept together


def test_transform_min_p_and_greedy():
    x = np.log(np.array([0.5, 0.3, 0.04, 0.16], dtype=np.float32))
    p, _ = _transform(x, min_p=0.1)
    assert list(p > 0) == [True, True, False, True]
    p, ok = _transform([1.0, 5.0, 5.0, -np.inf], T=0.0)
    assert ok and list(p) == [0, 1, 0, 0]                  # lowest index on ties


def test_transform_normalised_and_masked_exactly_zero():
    rng = np.random.default_rng(0)
    x = rng.normal(size=5000).astype(np.float32) * 4
    p, ok = _transform(x, T=0.7, top_k=100, top_p=0.9, min_p=0.01)
    assert ok and abs(float(p.astype(np.float64).sum()) - 1) < 1e-5
    assert (p > 0).sum() <= 100


@pytest.mark.parametrize("row", [[np.nan, 1.0], [-np.inf, -np.inf], [np.inf, 0.0], []])
def test_transform_invalid_rows(row):
    for T in (0.0, 1.0):
        p, ok = _transform(row, T=T)
        assert not ok and not p.any()


def test_probability_row_validity():
    assert R.probs_row_valid([0.5, 0.5])
    assert not R.probs_row_valid([0.0, 0.0])
    assert not R.probs_row_valid([np.nan, 1.0])
    assert not R.probs_row_valid([-0.1, 1.1])
    assert not R.probs_row_valid(np.ones(8, dtype=np.float32))      # mass 8 > 4


# ----------------------------------------------------------------------------- exact law
def dyadic(rng, V, zeros=0, bits=20):
    """A float32 probability vector summing to exactly 1 (multiples of 2**-bits)."""
    w = rng.random(V) + 0.05
    if zeros:
        w[rng.choice(V, zeros, replace=False)] = 0
    c = np.floor(w / w.sum() * 2 ** bits).astype(np.int64)
    c[np.argmax(c)] += 2 ** bits - c.sum()
    return (c / 2 ** bits).astype(np.float32)


def onehot(V, i):
    p = np.zeros(V, dtype=np.float32)
    p[i] = 1
    return p


def tree(rng, V, K, make):
    """Prefix-dependent conditionals: a different row for every accepted prefix."""
    cache = {}

    def f(prefix):
        if prefix not in cache:
            cache[prefix] = make(rng, V, len(prefix))
        return cache[prefix]
    return f


ADVERSARIAL = {
    "random": lambda rng, V, j: (dyadic(rng, V), dyadic(rng, V)),
    "disjoint": lambda rng, V, j: (np.r_[dyadic(rng, V // 2), np.zeros(V - V // 2)]
                                   .astype(np.float32),
                                   np.r_[np.zeros(V // 2), dyadic(rng, V - V // 2)]
                                   .astype(np.float32)),
    "equal": None,
    "q_zero_where_p_positive": lambda rng, V, j: (dyadic(rng, V), dyadic(rng, V, zeros=2)),
    "onehot_target": lambda rng, V, j: (onehot(V, int(rng.integers(V))), dyadic(rng, V)),
    "topk_truncated": lambda rng, V, j: (dyadic(rng, V, zeros=V - 2), dyadic(rng, V)),
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
@pytest.mark.parametrize("V,K", [(3, 1), (4, 2), (3, 3), (5, 2)])
def test_exact_law_equals_target(name, V, K):
    rng = np.random.default_rng(V * 10 + K)
    if name == "equal":
        make = lambda rng, V, j: (lambda p: (p, p.copy()))(dyadic(rng, V))
    else:
        make = ADVERSARIAL[name]
    rows = tree(rng, V, K, make)
    res = R.exact_output_law(lambda pre: rows(pre)[0], lambda pre: rows(pre)[1], K, V)
    assert res["tv"] <= 1e-12
    assert abs(res["law"].sum() - 1) <= 1e-12
    assert abs(res["length_law"].sum() - 1) <= 1e-12


@pytest.mark.parametrize("V,K", [(4, 2), (3, 3)])
def test_exact_law_point_mass_drafter(V, K):
    rng = np.random.default_rng(7)
    rows = tree(rng, V, K, lambda rng, V, j: dyadic(rng, V))
    drafter = lambda pre: (len(pre) * 2 + sum(pre)) % V          # a deterministic drafter
    res = R.exact_output_law(rows, drafter, K, V)
    assert res["tv"] <= 1e-12


def test_wrong_fallback_is_biased():
    rng = np.random.default_rng(3)
    p = np.stack([dyadic(rng, 4) for _ in range(3)])
    q = np.stack([dyadic(rng, 4) for _ in range(2)])
    good = R.exact_output_law(p, q, 2, 4)
    bad = R.exact_output_law(p, q, 2, 4, fallback="p")
    assert good["tv"] <= 1e-12
    assert bad["tv"] > 1e-3


def test_accepted_length_law_matches_enumeration():
    rng = np.random.default_rng(5)
    p = np.stack([dyadic(rng, 5) for _ in range(4)])
    q = np.stack([dyadic(rng, 5) for _ in range(3)])
    res = R.exact_output_law(p, q, 3, 5)
    np.testing.assert_allclose(res["length_law"], R.accepted_length_law(p, q), atol=1e-14)
