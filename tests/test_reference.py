"""The reference oracle: Philox vectors, the transform's definition, and the exact law."""
from __future__ import annotations

import numpy as np
import pytest

from specops import reference as R
from tests._families import ADVERSARIAL, dyadic, tree
from tests._kat import kat_vectors

# Random123's published Philox4x32-10 vectors, written out once more here: the data file
# (tests/data/philox_kat.txt, which the C++ test reads too) must agree with them.
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
    assert [(r[:6], r[6:]) for r in kat_vectors()] == KAT_VECTORS


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


# ----------------------------------------------------------------------------- the one walk
def _walk_args(P, Q, ids, nd, greedy=None, seed=None):
    """Canonical probability arguments for B requests over prefix-independent rows."""
    B, K = ids.shape
    V = P.shape[-1]
    ar = np.arange(B)
    target = np.broadcast_to(P, (B, K + 1, V)).reshape(-1, V)
    draft = None if Q is None else np.broadcast_to(Q, (B, K, V)).reshape(-1, V)
    inv = np.ones(B, np.float32) if greedy is None else np.where(greedy, 0, 1).astype(np.float32)
    return (target, True, ar * (K + 1), ids.reshape(-1), ar * K, nd, draft, draft is not None,
            inv, np.zeros(B, np.int64), np.ones(B, np.float32), np.zeros(B, np.float32),
            np.arange(B) + (0 if seed is None else seed), np.full(B, 7), K)


def _rows():
    rng = np.random.default_rng(41)
    P = rng.dirichlet(np.ones(6), size=4).astype(np.float32)
    Q = rng.dirichlet(np.ones(6), size=3).astype(np.float32)
    return rng, P, Q


def test_forced_mode_draws_exactly_what_verify_draws_at_its_rejection_point():
    """verify = accept the prefix, then the forced walk at j* = num_accepted: the token and
    the prefix agree position for position (section 7)."""
    rng, P, Q = _rows()
    B = 400
    ids = rng.integers(0, 6, size=(B, 3))
    nd = rng.integers(0, 4, size=B)
    greedy = rng.random(B) < 0.2
    for q in (Q, None):
        a = _walk_args(P, q, ids, nd, greedy)
        tok, nacc, valid = R.verify_rows_ref(*a)
        ftok, fnacc, fvalid = R.verify_rows_ref(*a, forced_num_accepted=nacc)
        assert (tok == ftok).all() and (nacc == fnacc).all() and (valid == fvalid).all()


def test_forced_mode_reads_no_row_before_j_star_and_rejects_negative_counts():
    rng, P, Q = _rows()
    ids = np.array([[1, 2, 3], [1, 2, 3], [1, 2, 3]])
    a = list(_walk_args(P, Q, ids, np.array([3, 3, 3])))
    target = a[0].copy()
    target[0:2] = np.nan                      # request 0, rows 0 and 1: never read for j* = 2
    a[0] = target
    tok, nacc, valid = R.verify_rows_ref(*a, forced_num_accepted=np.array([2, -1, 9]))
    assert valid.tolist() == [True, False, True]
    assert tok[0, :2].tolist() == [1, 2] and 0 <= tok[0, 2] < 6 and nacc[0] == 2
    assert tok[1].tolist() == [-1] * 4 and nacc[1] == 0
    assert tok[2, :3].tolist() == [1, 2, 3] and nacc[2] == 3      # j* = min(9, kb) = kb: bonus
    # the bonus at j* = kb is the bonus draw of stream tag 1 at position 3
    U = R.sample_uniform64(a[12][2], a[13][2], 3)
    assert tok[2, 3] == R.draw_index(R.integer_weights(P[3]), U)


def test_forced_residual_law_is_the_normalised_residual():
    """Over many seeds the forced draw at j* < kb follows max(p - q, 0) normalised, exactly in
    the integer weights: every token's frequency within 5 sigma, and the point-mass variant
    never emits the rejected id."""
    rng, P, Q = _rows()
    B = 6000
    ids = np.tile([4, 0, 0], (B, 1))
    a = _walk_args(P, Q, ids, np.full(B, 3), seed=100)
    tok, nacc, valid = R.verify_rows_ref(*a, forced_num_accepted=np.zeros(B, np.int64))
    assert valid.all() and (nacc == 0).all()
    law = R.implemented_draw_law(R.residual_row(P[0], Q[0], 4), P[0])
    freq = np.bincount(tok[:, 0], minlength=6) / B
    assert (np.abs(freq - law) <= 5 * np.sqrt(law * (1 - law) / B) + 1e-12).all()
    a = _walk_args(P, None, ids, np.full(B, 3), seed=100)
    tok, _, _ = R.verify_rows_ref(*a, forced_num_accepted=np.zeros(B, np.int64))
    assert (tok[:, 0] != 4).all()


def test_rows_outside_the_tensors_make_the_request_invalid():
    """Section 7: row starts past the target or draft tensors are bad data, not a crash."""
    rng, P, Q = _rows()
    ids = np.array([[1, 2, 3], [1, 2, 3]])
    a = list(_walk_args(P, Q, ids, np.array([3, 3])))
    a[2] = np.array([0, 6])                   # request 1's rows 2.. are past the 8-row target
    a[4] = np.array([0, 3])
    tok, nacc, valid = R.verify_rows_ref(*a, forced_num_accepted=np.array([3, 3]))
    assert valid.tolist() == [True, False]
    a[4] = np.array([0, 5])                   # request 1's draft ids run past T = 6
    tok, nacc, valid = R.verify_rows_ref(*a)
    assert nacc[1] <= 1 and valid[1] == (nacc[1] == 0)   # row 1 of its block does not exist
    tok, nacc, valid = R.verify_rows_ref(*a, forced_num_accepted=np.array([3, 1]))
    assert valid.tolist() == [True, False] and nacc[1] == 1


# ----------------------------------------------------------------------------- the package
# Every top-level name of specops/reference.py and specops/reference_tree.py before they
# became the specops/reference/ package: tests, backends and tools reach them as R.X / RT.X.
OLD_REFERENCE_NAMES = """
EXP_COEFFS EXP_CUTOFF EXP_LN2_HI EXP_LN2_LO EXP_LOG2E EXP_ROUND EXP_ZERO_MASS E_SCALE_BITS FLT_MIN
GREEDY_TEMPERATURE MAX_VOCAB PHILOX_M0 PHILOX_M1 PHILOX_ROUNDS PHILOX_W0 PHILOX_W1 P_CHECK_BITS
RowFn TAG_ACCEPT TAG_SAMPLE W_SCALE_BITS _U32 _as_fn _block_length _int_masses _split64
accept_probability accept_rate accept_uniform accepted_length_law against_target argmax_row
block_next_rho block_stop_probability block_weights completion draw_from draw_index
exact_output_law exact_tree_law implemented_draw_law integer_weights inv_temperature
logits_row_valid params_ok pexp philox4x32 probs_row_valid request_ok residual_row
sample_uniform64 sampling_probs_ref stream_words top_p_threshold transform_row verify_rows_ref
verify_tree_ref""".split()
OLD_REFERENCE_TREE_NAMES = """
METHODS SCALE _draft_sibling_laws _ratio children_of coin_accepts coin_probability
draft_weights exact_tree_law remove_token residual_update tree_depths verify_tree_ref""".split()


def test_every_old_name_is_still_there_and_the_oracle_has_no_test_switch():
    import inspect

    from specops import reference_tree as RT
    assert [n for n in OLD_REFERENCE_NAMES if not hasattr(R, n)] == []
    assert [n for n in OLD_REFERENCE_TREE_NAMES if not hasattr(RT, n)] == []
    assert RT.verify_tree_ref is R.verify_tree_ref and RT.exact_tree_law is R.exact_tree_law
    # the negative controls are test-side (tests/_negative.py), not parameters of the oracle
    for fn in (R.verify_rows_ref, R.verify_tree_ref):
        assert [p for p in inspect.signature(fn).parameters if p.startswith("_")] == []
    # the package docstring is the whole contract, sections 1-12
    assert all(f"\n{i}. " in R.__doc__ for i in range(1, 13))
