"""GBV, greedy multi-path block verification (reference section 15).

Each test is a small function over a list of cases:

* the exact output law by enumeration equals the target's on dyadic rows, for a grid of
  (K, L, V), the adversarial families, ties at a positive ratio and top-k-truncated roots;
* an independent implementation in exact rationals (brute force over the K-tuples of
  paths, the conditional law of the maximum, block verification in Fractions) gives the
  same length law, and E[num_accepted] on the frontier note's cases;
* with K = 1 the sampled oracle is section 9 token for token (``verify_rows_ref``);
* negative controls that the enumeration must reject: the published first-inserted tie
  rule, q in place of q~, the published fork's min(1, p/q) with that tie rule;
* the float64 q~ against exact rationals for K up to 64; the quotient order;
* malformed shapes (section 8's output) and the host check.
"""
from __future__ import annotations

import contextlib
import itertools
from fractions import Fraction
from unittest import mock

import numpy as np
import pytest

from specops import reference as R
from specops.reference import gbv as G
from specops.reference import gbv_law as GL
from tests._families import ADVERSARIAL, dyadic, onehot
from tests.test_traversal import chain_case


# ----------------------------------------------------------------------------- rows
def _tie_pair(rng, V, j):
    """Tokens 0 and 1 tie at a random positive ratio (equal p and equal q)."""
    def split(r):
        return np.r_[r[0] / 2, r[0] / 2, r[1:]].astype(np.float32)
    return split(dyadic(rng, V - 1)), split(dyadic(rng, V - 1))


def _topk_root(rng, V, j):
    """A top-k-truncated target at the root only (the rest random)."""
    return (dyadic(rng, V, zeros=V - 2) if j == 0 else dyadic(rng, V)), dyadic(rng, V)


FAMILIES = dict(ADVERSARIAL, tie_pair=_tie_pair, topk_root=_topk_root)


def rows(name, seed, V):
    """(target, draft) of a family, keyed by the prefix (the same model for every
    enumeration that asks)."""
    make = (FAMILIES[name] if FAMILIES[name] is not None
            else lambda rng, V, j: (lambda p: (p, p.copy()))(dyadic(rng, V)))
    cache = {}

    def row(pre, k):
        if pre not in cache:
            cache[pre] = make(np.random.default_rng([seed, V] + [x + 1 for x in pre]), V,
                              len(pre))
        return cache[pre][k]
    return (lambda pre: row(pre, 0)), (lambda pre: row(pre, 1))


def fixed(p, q):
    p, q = np.asarray(p, np.float32), np.asarray(q, np.float32)
    return (lambda pre: p), (lambda pre: q)


# ----------------------------------------------------------------------------- exact law
GRID = [(K, L, V) for K in range(1, 5) for L in range(1, 4) for V in range(2, 5)]
FAMILY_CASES = [(K, L, V, name) for name in FAMILIES for (K, L, V) in
                [(2, 2, 3), (3, 2, 3), (4, 1, 4), (2, 3, 3), (3, 3, 3), (4, 2, 4)]]


@pytest.mark.parametrize("K,L,V", GRID)
def test_law_equals_target_grid(K, L, V):
    """Random dyadic rows, every (K, L, V) of the grid: TV <= 1e-12."""
    t, d = rows("random", 100 * K + 10 * L + V, V)
    res = GL.exact_gbv_law(t, d, K, L, V)
    assert res["tv"] <= 1e-12, res["tv"]
    assert abs(res["law"].sum() - 1) <= 1e-12


@pytest.mark.parametrize("K,L,V,name", FAMILY_CASES)
def test_law_equals_target_families(K, L, V, name):
    """The adversarial families of test_traversal.py, ties at a positive ratio and a
    top-k-truncated root: TV <= 1e-12."""
    t, d = rows(name, K + 7 * L + len(name), V)
    assert GL.exact_gbv_law(t, d, K, L, V)["tv"] <= 1e-12


@pytest.mark.parametrize("K,L,V,name", [(2, 2, 3, "random"), (3, 2, 2, "tie_pair"),
                                        (3, 1, 4, "equal"), (2, 2, 3, "topk_root")])
def test_selection_chain_equals_brute_force(K, L, V, name):
    """The selection law summed as a Markov chain in k equals the enumeration of every
    ordered K-tuple of paths."""
    t, d = rows(name, 3, V)
    a = GL.exact_gbv_law(t, d, K, L, V)
    b = GL.exact_gbv_law(t, d, K, L, V, brute=True)
    np.testing.assert_allclose(a["law"], b["law"], atol=1e-15)
    np.testing.assert_allclose(a["length_law"], b["length_law"], atol=1e-15)


# ----------------------------------------------------------------------------- rationals
def _fraction_gbv(P, Q, K, L, V):
    """GBV in exact rationals, independently of gbv.py: the order at a prefix is
    (q = 0, p / q, token id); Y = the lexicographic maximum of every ordered K-tuple of paths
    (Python tuple order on the ranks); q~ = the conditional law of Y's next token, by
    counting; block verification of Sun et al. on Y with q~.  -> length law [L + 1]."""
    fr = lambda v: Fraction(float(v))

    def norm(r):
        r = [fr(v) for v in r]
        s = sum(r)
        return [v / s for v in r]

    def rank(pre, t):
        p, q = norm(P(pre)), norm(Q(pre))
        key = lambda u: (q[u] == 0, p[u] / q[u] if q[u] else 0, u)
        return sorted(range(V), key=key).index(t)

    def prob(path):
        w = Fraction(1)
        for j, y in enumerate(path):
            w *= norm(Q(path[:j]))[y]
        return w

    paths = [pt for pt in itertools.product(range(V), repeat=L) if prob(pt)]
    key = {pt: tuple(rank(pt[:j], pt[j]) for j in range(L)) for pt in paths}
    law_y = {}
    for tup in itertools.product(paths, repeat=K):
        w = Fraction(1)
        for pt in tup:
            w *= prob(pt)
        y = max(tup, key=lambda pt: key[pt])
        law_y[y] = law_y.get(y, 0) + w
    pre_law = {}
    for y, w in law_y.items():
        for j in range(L + 1):
            pre_law[y[:j]] = pre_law.get(y[:j], 0) + w
    length = [Fraction(0)] * (L + 1)
    for y, w in law_y.items():
        rho, h = [Fraction(1)], [Fraction(1)]
        for j in range(L):
            p = norm(P(y[:j]))
            qt = [pre_law.get(y[:j] + (t,), 0) / pre_law[y[:j]] for t in range(V)]
            if j >= 1:
                s = sum(max(Fraction(0), rho[j] * p[t] - qt[t]) for t in range(V))
                h.append(s / (s + 1 - rho[j]) if s + 1 - rho[j] else Fraction(1))
            t_ = rho[j] * p[y[j]]
            rho.append(Fraction(1) if (t_ > 0 and t_ >= qt[y[j]])
                       else (t_ / qt[y[j]] if t_ > 0 else Fraction(0)))
        h.append(rho[L])
        for t in range(L + 1):
            pt = h[t]
            for x in h[t + 1:]:
                pt *= 1 - x
            length[t] += w * pt
    return length


RATIONAL_CASES = [(2, 2, 3, "random"), (2, 2, 3, "equal"), (3, 1, 3, "tie_pair"),
                  (2, 2, 3, "topk_root"), (3, 2, 2, "onehot_target")]


@pytest.mark.parametrize("K,L,V,name", RATIONAL_CASES)
def test_length_law_equals_rationals(K, L, V, name):
    """gbv.py's float64 walk (rescaled q~, integer residuals) gives the exact rational length
    law of an independent implementation within 1e-12."""
    t, d = rows(name, 11, V)
    exact = [float(x) for x in _fraction_gbv(t, d, K, L, V)]
    np.testing.assert_allclose(GL.exact_gbv_law(t, d, K, L, V)["length_law"], exact,
                               atol=1e-12)


UNIFORM4 = np.full(4, 1 / 4, np.float32)
# (name, target, draft, K, L, V, {method: E[num_accepted]}): a Fraction is exact (1e-12), a
# float a value to 4 decimals
MEAN_CASES = [
    # the frontier note's "draft = target", K = 2, L = 2: GBV 1.488 vs block 2.000 on its
    # rows (V = 3; on random p = q rows GBV is in [1.43, 1.62], 30 seeds); on uniform rows
    # (V = 4) 47/32 with K = 2 and 4985/4096 with K = 3; block and traversal accept all
    ("p_eq_q_uniform", *fixed(UNIFORM4, UNIFORM4), 2, 2, 4,
     {"gbv": Fraction(47, 32), "block": Fraction(2), "traversal_iid": Fraction(2)}),
    ("p_eq_q_uniform_K3", *fixed(UNIFORM4, UNIFORM4), 3, 2, 4,
     {"gbv": Fraction(4985, 4096), "block": Fraction(2), "traversal_iid": Fraction(2)}),
    ("p_eq_q_random", *rows("equal", 1, 3), 2, 2, 3, {"gbv": 1.5159, "block": Fraction(2)}),
    # p and q apart: GBV above traversal_iid above block (the note: GBV 1.43-1.72 vs block
    # 1.16-1.55 on its random rows)
    ("random_2", *rows("random", 2, 3), 2, 2, 3,
     {"gbv": 1.5053, "block": 1.1949, "traversal_iid": 1.3114}),
    ("random_3", *rows("random", 3, 3), 2, 2, 3,
     {"gbv": 1.5521, "block": 1.2247, "traversal_iid": 1.4031}),
    # p > q on two root tokens (prefix-independent rows)
    ("p_gt_q_two_tokens", *fixed([.5, .5, 0], [.25, .25, .5]), 2, 2, 3,
     {"gbv": Fraction(37, 32), "block": Fraction(3, 4), "traversal_iid": Fraction(9, 8)}),
    # a top-k-truncated target p = (1, 0, 0) (the note: 0.936 / 0.557 with other deeper rows)
    ("topk_onehot", *fixed(onehot(3, 0), [.5, .25, .25]), 2, 2, 3,
     {"gbv": Fraction(19, 16), "block": Fraction(3, 4), "traversal_iid": Fraction(9, 8)}),
]


@pytest.mark.parametrize("case", MEAN_CASES, ids=lambda c: c[0])
def test_expected_accepted(case):
    """E[num_accepted] of GBV, block and traversal_iid (K chains of L) by enumeration; the
    GBV value equals the rational implementation's mean."""
    name, t, d, K, L, V, expect = case
    for method, want in expect.items():
        got = GL.expected_accepted(t, d, K, L, V, method)
        tol = 1e-12 if isinstance(want, Fraction) else 5e-5
        assert abs(got - float(want)) <= tol, (method, got, want)
    exact = _fraction_gbv(t, d, K, L, V)
    assert abs(GL.expected_accepted(t, d, K, L, V) -
               float(sum(n * x for n, x in enumerate(exact)))) <= 1e-12


# ----------------------------------------------------------------------------- controls
def _ratio_tie(p, q, a, b) -> bool:
    """Tokens a and b have the same p / q (both q = 0 counts as a tie)."""
    za, zb = not q[a] > 0, not q[b] > 0
    if za or zb:
        return za and zb
    return float(np.float64(p[a]) * q[b]) == float(np.float64(p[b]) * q[a])


def _published_ranks_above(p, q, t, s):
    """The published code's walk: the candidate wins only on a strictly larger ratio, so a
    tie keeps the first-inserted path (while the CDF still breaks ties by token id)."""
    if p is None or q is None:
        return False
    return G.rank_below(p, q, s, t) and not _ratio_tie(p, q, s, t)


def _capped(p, q, t) -> bool:
    return not q[t] > 0 or p[t] >= q[t]


def _min1_below(p, q, a, b):
    """The fork's ranking by min(1, p/q) (every token with p >= q ties at 1), id ties."""
    if a == b:
        return False
    if p is not None and q is not None:
        ca, cb = _capped(p, q, a), _capped(p, q, b)
        if ca != cb:
            return cb
        if not ca and not _ratio_tie(p, q, a, b):
            return float(np.float64(p[a]) * q[b]) < float(np.float64(p[b]) * q[a])
    return a < b


def _min1_code_ties(p, q, t, s):
    """The fork's walk: min(1, p/q) strictly larger, ties keep the first-inserted path."""
    if p is None or q is None:
        return False
    tie = (_capped(p, q, t) and _capped(p, q, s)) or (
        not _capped(p, q, t) and not _capped(p, q, s) and _ratio_tie(p, q, s, t))
    return _min1_below(p, q, s, t) and not tie


CONTROLS = {
    "published_ties": {"ranks_above": _published_ranks_above},
    "q_not_qtilde": {"skew_row": lambda q, F, Fm, a, b, K:
                     np.asarray(q, np.float32).astype(np.float64)},
    "fork_min1_code_ties": {"rank_below": _min1_below, "ranks_above": _min1_code_ties},
}
# (control, family, K, L, V, seed) each of which must be off by more than 0.01 in TV
CONTROL_CASES = [
    ("published_ties", "equal", 2, 2, 3, 1), ("published_ties", "tie_pair", 2, 1, 3, 2),
    ("published_ties", "equal", 3, 1, 4, 3),
    ("q_not_qtilde", "random", 2, 2, 3, 1), ("q_not_qtilde", "equal", 2, 1, 3, 2),
    ("q_not_qtilde", "random", 4, 1, 4, 3),
    ("fork_min1_code_ties", "random", 2, 2, 3, 1), ("fork_min1_code_ties", "random", 2, 2, 3, 2),
    ("fork_min1_code_ties", "equal", 2, 2, 3, 3),
]


def _substituted(variant):
    subs = CONTROLS.get(variant, {})
    return mock.patch.multiple(G, **subs) if subs else contextlib.nullcontext()


@pytest.mark.parametrize("variant,name,K,L,V,seed", CONTROL_CASES)
def test_enumeration_rejects_the_controls(variant, name, K, L, V, seed):
    """Each negative control is off by more than 0.01 in TV: the law test can fail."""
    t, d = rows(name, seed, V)
    assert GL.exact_gbv_law(t, d, K, L, V)["tv"] <= 1e-12
    with _substituted(variant):
        tv = GL.exact_gbv_law(t, d, K, L, V)["tv"]
    assert tv > 0.01, (variant, tv)


@pytest.mark.parametrize("name,K,L,V", [("random", 2, 2, 3), ("equal", 2, 2, 3),
                                        ("tie_pair", 3, 1, 3)])
def test_any_consistent_order_is_exact(name, K, L, V):
    """min(1, p/q) with id ties in both the selection and the CDF is exact (only the
    published walk's inconsistent tie rule is not); ties at ratio 0 are harmless."""
    t, d = rows(name, 5, V)
    with mock.patch.object(G, "rank_below", _min1_below):
        assert GL.exact_gbv_law(t, d, K, L, V)["tv"] <= 1e-12
    t, d = rows("topk_truncated", 5, V)
    with _substituted("published_ties"):
        assert GL.exact_gbv_law(t, d, K, L, V)["tv"] <= 1e-12


# ----------------------------------------------------------------------------- arithmetic
def _skew_rows(kind, rng, V, L):
    out = []
    for _ in range(L):
        p, q = dyadic(rng, V, bits=24), dyadic(rng, V, bits=24)
        if kind == "equal":
            q = p.copy()
        elif kind == "tiny":
            q = np.full(V, 2.0 ** -24, np.float32)
            q[0] = np.float32(1 - (V - 1) * 2.0 ** -24)
        out.append((p, q))
    return out


@pytest.mark.parametrize("K", [1, 2, 3, 4, 8, 16, 32, 64])
def test_skew_row_float_error(K):
    """The rescaled sum-of-products q~ against the exact rational formula on unscaled
    (A, x): relative error <= 2 K float64 ulps (2**-53) along 6-token paths, including the
    q = p rows of many ties and a draft with 2**-24 entries; K = 1 is exact."""
    worst = 0.0
    for seed, kind in itertools.product(range(2), ("random", "equal", "tiny")):
        rng = np.random.default_rng(seed)
        rws = _skew_rows(kind, rng, 8, 6)
        path = [int(rng.choice(np.flatnonzero(q > 0))) for _, q in rws]
        worst = max(worst, GL.skew_error(rws, path, K))
    assert worst <= 2 * K * 2.0 ** -53, worst / 2.0 ** -53
    if K == 1:
        assert worst == 0


def test_skew_row_underflow_is_harmless():
    """At the root (a = 0) a lowest-ranked token's q~ ~ q F**(K-1) underflows for large K:
    the row still sums to 1 within 1e-15 and the exact value is below 2**-1074 there."""
    p = np.array([0, .25, .25, .5], np.float32)
    q = np.array([2 ** -20, .25, .25, .5 - 2 ** -20], np.float32)
    for K in (8, 64, 128):
        F, Fm, qn = G.rank_masses(p, q)
        qt = G.skew_row(q, F, Fm, 0.0, 1.0, K)
        exact = GL.skew_row_exact(p, q, Fraction(0), Fraction(1), K)
        assert abs(qt.sum() - 1) <= 1e-15
        assert abs(Fraction(float(qt[0])) - exact[0]) <= Fraction(2) ** -1074


def _random_float32_rows(rng, V):
    """p, q with wide exponents, zeros, subnormals and exact ratio ties."""
    p = (rng.random(V) * 2.0 ** rng.integers(-140, 0, V)).astype(np.float32)
    q = (rng.random(V) * 2.0 ** rng.integers(-140, 0, V)).astype(np.float32)
    p[rng.random(V) < .15] = 0
    q[rng.random(V) < .15] = 0
    i = rng.integers(V, size=V // 4)
    j = rng.integers(V, size=V // 4)
    p[j], q[j] = p[i] * 2, q[i] * 2                       # equal ratios (when no overflow)
    return p, q


def test_quotient_orders_like_cross_products():
    """The implementation freedom of section 15: sorting by (q = 0, float64(p) / float64(q),
    id) gives the cross-product order of ``rank_below`` exactly."""
    rng = np.random.default_rng(0)
    for _ in range(40):
        p, q = _random_float32_rows(rng, 48)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(q > 0, p.astype(np.float64) / q.astype(np.float64), 0.0)
        quotient = np.lexsort((np.arange(48), ratio, q == 0))
        np.testing.assert_array_equal(G.rank_order(p, q), quotient)


# ----------------------------------------------------------------------------- the oracle
@pytest.mark.parametrize("kind", ["logits", "probs", "point_mass", "filters", "cuts"])
def test_one_path_is_block_token_for_token(kind):
    """K = 1: the oracle emits section 9's tokens, counts and validity bit for bit (q~ = q,
    the same rho / h / D arithmetic, the same Philox words), also at cuts (invalid target
    rows, invalid draft-logits rows)."""
    tree, chain = chain_case("logits" if kind == "cuts" else kind, B=120)
    if kind == "cuts":
        rng = np.random.default_rng(4)
        target, draft = tree[0].copy(), tree[5].copy()
        target[rng.random(target.shape[:2]) < .06] = np.nan
        draft[rng.random(draft.shape[:2]) < .06] = np.nan
        tree = (target,) + tree[1:5] + (draft,) + tree[6:]
        B, g1, V = target.shape
        chain = ((target.reshape(-1, V),) + chain[1:6]
                 + (draft[:, :g1 - 1].reshape(-1, V),) + chain[7:])
    tok, nacc, nodes, valid = R.verify_gbv_ref(*tree)
    btok, bnacc, bvalid = R.verify_rows_ref(*chain, method="block")
    np.testing.assert_array_equal(tok, btok)
    np.testing.assert_array_equal(nacc, bnacc)
    np.testing.assert_array_equal(valid, bvalid)
    assert 0 < nacc.mean() < 4
    if kind == "cuts":
        assert 0 < valid.mean() < 1                       # some requests end invalid
    for b in range(len(nacc)):
        np.testing.assert_array_equal(nodes[b, :nacc[b]], np.arange(1, nacc[b] + 1))


def multipath_case(K=3, L=3, V=5, B=60, seed=0, greedy=False):
    """B requests of K chains of L draft tokens sampled from q (node of chain k at depth d:
    1 + k L + d - 1); rows are functions of the prefix, as a model's are, so that two nodes
    with the same prefix carry the same rows."""
    rng = np.random.default_rng(seed)
    N = 1 + K * L
    parents = np.array(GL.multipath_tree(K, L))
    tl = np.zeros((B, N, V), np.float32)
    q = np.zeros((B, N, V), np.float32)
    ids = np.zeros((B, N), np.int64)
    for b in range(B):
        model, prefix = {}, {0: ()}
        for n in range(N):
            if n:
                w = q[b, parents[n]].astype(np.float64)
                ids[b, n] = rng.choice(V, p=w / w.sum())
                prefix[n] = prefix[int(parents[n])] + (int(ids[b, n]),)
            if prefix[n] not in model:
                t = (rng.standard_normal(V) * 2).astype(np.float32)
                d = t + rng.standard_normal(V)
                e = np.exp(d - d.max())
                model[prefix[n]] = t, (e / e.sum()).astype(np.float32)
            tl[b, n], q[b, n] = model[prefix[n]]
    f32 = lambda v: np.full(B, v, np.float32)
    return (tl, False, ids, np.tile(parents, (B, 1)), np.full(B, N), q, True,
            f32(0 if greedy else 1), np.zeros(B, np.int64), f32(1), f32(0),
            np.arange(B) + 3, np.zeros(B, np.int64), L)


def test_multipath_oracle_accepts_a_prefix_of_the_lexicographic_maximum():
    """K = 3: every request is valid and accepts a prefix of the chain that is the
    lexicographic maximum of the K chains under the rank order (computed here by sorting)."""
    args = multipath_case()
    tok, nacc, nodes, valid = R.verify_gbv_ref(*args)
    tl, ids, K, L = args[0], args[2], 3, 3
    assert valid.all() and 0 < nacc.mean() < L
    for b in range(len(nacc)):
        p = lambda n: R.transform_row(tl[b, n], 1.0, 0, 1.0, 0.0)[0]
        qq = args[5][b]
        chains = [[1 + k * L + d for d in range(L)] for k in range(K)]

        def key(c):
            nd = [0] + c
            return tuple(list(G.rank_order(p(nd[d]), qq[nd[d]])).index(ids[b, c[d]])
                         for d in range(L))
        best = max(range(K), key=lambda k: (key(chains[k]), -k))
        n = nacc[b]
        np.testing.assert_array_equal(nodes[b, :n], chains[best][:n])
        np.testing.assert_array_equal(tok[b, :n], ids[b, chains[best][:n]])


def test_greedy_is_the_tree_walk():
    """Greedy requests take section 11's greedy walk: traversal's tokens."""
    args = multipath_case(greedy=True)
    tok, nacc, nodes, valid = R.verify_gbv_ref(*args)
    ttok, tnacc, tnodes, tvalid = R.verify_traversal_ref(*args, method="traversal_iid")
    np.testing.assert_array_equal(tok, ttok)
    np.testing.assert_array_equal(nodes, tnodes)
    assert valid.all()


# ----------------------------------------------------------------------------- shapes
# (name, parents, num_nodes, point-mass drafts, the argument the host names or None)
SHAPES = [
    ("two_chains", [-1, 0, 1, 0, 3], 5, False, None),
    ("absent_nodes", [-1, 0, 1, -1, 3, 0, 5], 7, False, None),      # 3 absent, so is 4
    ("num_nodes_cuts", [-1, 0, 1, 0, 3, 4], 5, False, None),        # node 5 not in the tree
    ("root_only", [-1, 0, 1], 1, False, None),                      # K = 0: the bonus draw
    ("one_path_point_mass", [-1, 0, 1], 3, True, None),
    ("branch_below_root", [-1, 0, 1, 1], 4, False, "parent_ids"),
    ("ragged", [-1, 0, 1, 0], 4, False, "parent_ids"),
    ("ragged_by_num_nodes", [-1, 0, 1, 0, 3], 4, False, "parent_ids"),
    ("two_paths_point_mass", [-1, 0, 0], 3, True, "draft_probs"),
    ("bad_root", [0, 0, 1], 3, False, "parent_ids"),                      # section 11
    ("parent_not_below", [-1, 2, 0], 3, False, "parent_ids"),              # section 11
]


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: c[0])
def test_shapes(case):
    """Well-formed GBV requests verify; every other shape is malformed (section 8: row -1,
    num_accepted 0, accepted_nodes -1, valid False) and the host check raises ValueError
    naming the argument; the neighbour request is untouched."""
    name, parents, n, point_mass, arg = case
    N, V, B = len(parents), 4, 2
    rng = np.random.default_rng(1)
    target = np.stack([np.stack([dyadic(rng, V) for _ in range(N)]) for _ in range(B)])
    draft = None if point_mass else target[:, :, ::-1].copy()
    ids = np.tile(np.arange(N) % V, (B, 1))
    par = np.array([parents, [-1] + [0] * (N - 1) if N > 1 else [-1]])
    par[1, 1:] = -1                                        # request 1: the root alone
    f32 = lambda v: np.full(B, v, np.float32)
    tok, nacc, nodes, valid = R.verify_gbv_ref(
        target, True, ids, par, np.array([n, N]), draft, True, f32(1),
        np.zeros(B, np.int64), f32(1), f32(0), np.array([5, 6]), np.zeros(B, np.int64), 3)
    assert valid[1] and nacc[1] == 0 and tok[1, 0] >= 0
    why = G.gbv_shape_error(par[0], n, ids[0], V, 3, point_mass)
    if arg is None:
        assert valid[0] and why is None
        G.check_gbv_trees(ids, par, np.array([n, N]), V, 3, point_mass)
    else:
        assert not valid[0] and nacc[0] == 0
        assert (tok[0] == -1).all() and (nodes[0] == -1).all()
        assert arg in why
        with pytest.raises(ValueError, match=arg):
            G.check_gbv_trees(ids, par, np.array([n, N]), V, 3, point_mass)
