"""Tree verification in the C++ backend against the reference (section 11), bit for bit.

Every output (token_ids, num_accepted, accepted_nodes, valid) of ``backends.cpu.verify_tree``
must equal ``backends.reference.verify_tree`` (``reference_tree.verify_tree_ref``) exactly:
the random cases of tests/tree_cases.py over many seeds, low-precision logits, Python-scalar
parameters, every ISA level of the native passes, and hand-made edge cases (unusable draft
rows, invalid target rows, malformed trees).  Also the float64 passes over the VecD lanes
(simd/draw_passes.cpp) against numpy at every ISA level: the tree's residual update and
block verification's residual mass.
"""
import pytest
import torch

import specops
from specops.backends import reference as RB
from tests.tree_cases import TREE_KINDS, make_tree_case

pytestmark = [
    pytest.mark.skipif("cpu" not in specops.available_backends(),
                       reason="specops._C (the C++ CPU backend) is not built"),
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SIZES = ((1, 1), (2, 3), (7, 5), (100, 12), (1000, 16))
SEEDS = 10


def cpu():
    from specops.backends import cpu as CB
    return CB


def assert_same(kw):
    """Both backends on the same arguments; every output equal (dtype, shape and values)."""
    want = RB.verify_tree(**kw)
    got = cpu().verify_tree(**kw)
    names = ("token_ids", "num_accepted", "accepted_nodes", "valid")
    for name, w, g in zip(names, want, got):
        assert w.dtype == g.dtype and torch.equal(w, g), (name, w, g)
    return want


@pytest.mark.parametrize("kind", TREE_KINDS)
@pytest.mark.parametrize("V,N", SIZES)
def test_cases(kind, V, N):
    for s in range(SEEDS):
        assert_same(make_tree_case(kind, V, N, B=4, seed=s))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["logits_rsd", "logits_mss", "filters", "greedy",
                                  "unusable_rows", "point_mass"])
def test_low_precision_logits(dtype, kind):
    for V, N in SIZES:
        for s in range(5):
            assert_same(make_tree_case(kind, V, N, B=4, dtype=dtype, seed=s))


@pytest.mark.parametrize("kind", ["logits_rsd", "logits_mss", "probs_rsd", "point_mass"])
def test_python_scalar_params(kind):
    for V, N in SIZES:
        for s in range(5):
            kw = make_tree_case(kind, V, N, B=4, seed=s)
            kw.update(inv_temp=1.25, top_k=0, top_p=1.0, min_p=0.0, seed=5, offset=0)
            assert_same(kw)


def test_every_isa_level():
    _C = specops._C
    before = _C.isa()
    try:
        for level in _C.available_isas():
            _C.set_isa(level)
            for kind in ("logits_rsd", "logits_mss", "filters", "point_mass"):
                for s in range(4):
                    assert_same(make_tree_case(kind, 1000, 16, B=4, seed=s))
    finally:
        _C.set_isa(before)


def test_update_pass_bitwise(isa):
    """The residual update after a rejection (a per-ISA pass over VecD lanes) equals numpy's
    float64 arithmetic: R' = max(trunc((R ia - Qw iq) 2^60), 0), the point mass (Qw None: 1 at
    y) at every lane position and in the ragged tail, R that float64 must round (ties
    included), all-zero blocks (skipped) and the block sums."""
    import numpy as np
    _C = specops._C
    rng = np.random.default_rng(27)
    V = 3 * 1024 + 29
    R = rng.integers(0, 2 ** 50, V, dtype=np.int64)
    R[1024:2048] = 0                                        # a block the pass skips
    big = rng.integers(0, V, 40)
    R[big] = rng.integers(2 ** 55, 2 ** 60, 40, dtype=np.int64)   # float64 rounds these
    R[big[:6]] = 2 ** 54 + 2 * np.arange(1, 12, 2)[:6]      # exact ties (spacing 4)
    Qw = rng.integers(0, 2 ** 52, V, dtype=np.int64)
    ia, iq = 1.0 / float(int(R.sum())), 1.0 / float(int(Qw.sum()))
    for qw, y in [(Qw, -1)] + [(None, y) for y in (0, 7, 15, 1000, V - 1, V - 17, 3100)]:
        qn = qw.astype(np.float64) * iq if qw is not None else (np.arange(V) == y) * 1.0
        d = R.astype(np.float64) * ia - qn
        want = np.maximum(np.trunc(d * 2.0 ** 60), 0).astype(np.int64)
        got, sums, total = _C.tree_update(R, qw, ia, iq, y)
        assert np.array_equal(got, want), (isa, y, np.flatnonzero(got != want)[:5])
        blocks = [int(want[k:k + 1024].sum()) for k in range(0, V, 1024)]
        assert [int(x) for x in sums] == blocks and total == sum(blocks), (isa, y)


def test_block_mass_pass_bitwise(isa):
    """Block verification's float64 residual mass (a per-ISA pass over VecD lanes, section 9)
    equals numpy's float64 arithmetic: trunc(d 2^60) with d = rho p - max(q, 0) where
    rho p > q, per kDrawBlock block; q with negatives and NaN, q absent, a ragged tail."""
    import numpy as np
    _C = specops._C
    rng = np.random.default_rng(["scalar", "sse2", "avx2", "avx512"].index(isa))
    V = 2 * 1024 + 37
    p = rng.dirichlet(np.full(V, 0.05)).astype(np.float32)
    p[rng.integers(0, V, 100)] = 0.0
    q = rng.dirichlet(np.full(V, 0.05)).astype(np.float32)
    q[rng.integers(0, V, 50)] = -0.25
    q[rng.integers(0, V, 5)] = np.nan
    for qq in (q, None):
        for rho in (1.0, 0.7390851332151607, 2.0 ** -20):
            a = rho * p.astype(np.float64)
            b = np.zeros(V) if qq is None else qq.astype(np.float64)
            with np.errstate(invalid="ignore"):
                d = np.where(a > b, a - np.where(b > 0, b, 0.0), 0.0)
            w = np.trunc(d * 2.0 ** 60).astype(np.int64)
            want = [int(w[k:k + 1024].sum()) for k in range(0, V, 1024)]
            sums, total = _C.block_mass(p, qq, rho)
            assert [int(x) for x in sums] == want and total == sum(want), (isa, rho)


def test_outcomes_are_exercised():
    """The random cases reach deep acceptances, rejections and invalid requests."""
    nacc, valid = [], []
    for kind in TREE_KINDS:
        for s in range(SEEDS):
            out = assert_same(make_tree_case(kind, 100, 12, B=4, seed=s))
            nacc.append(out[1])
            valid.append(out[3])
    nacc, valid = torch.cat(nacc), torch.cat(valid)
    assert (nacc == 0).any() and (nacc >= 2).any()
    assert valid.any() and (~valid).any()


# ----------------------------------------------------------------------------- edge cases
def probs_case(V=9, N=6, B=3, method="rsd", seed=0):
    """Target and draft probabilities, a chain of two under the root plus siblings."""
    kw = make_tree_case("probs_rsd", V, N, B=B, seed=seed)
    kw["method"] = method
    return kw


@pytest.mark.parametrize("method", ["rsd", "mss"])
@pytest.mark.parametrize("poison", ["nan", "negative", "above_one", "zero_row", "big_mass"])
def test_unusable_draft_prob_rows(method, poison):
    for s in range(10):
        kw = probs_case(method=method, seed=s)
        d = kw["draft"].clone()
        V = d.shape[1]
        row = s % d.shape[0]
        if poison == "nan":
            d[row, s % V] = float("nan")
        elif poison == "negative":
            d[row, s % V] = -0.25
        elif poison == "above_one":
            d[row, s % V] = 1.5
        elif poison == "zero_row":
            d[row] = 0.0
        else:
            d[row] = 0.9  # mass 0.9 V > 4: fails the probability-row check
        kw["draft"] = d
        assert_same(kw)


@pytest.mark.parametrize("method", ["rsd", "mss"])
def test_draft_equal_to_target(method):
    """q == p: every residual update empties R, so the draws fall back to p."""
    for s in range(10):
        kw = probs_case(method=method, seed=s)
        t = torch.softmax(torch.randn(kw["target"].shape, generator=torch.Generator()
                                      .manual_seed(s)), -1)
        kw.update(target=t, target_is_probs=True, draft=t.clone(), draft_is_probs=True,
                  inv_temp=torch.ones(t.shape[0] // kw["node_ids"].shape[1]))
        assert_same(kw)


def test_dyadic_rows_and_duplicates():
    """Exact (dyadic) probabilities and repeated sibling tokens: rsd skips the repeats, mss
    runs the full rule on each; with and without a draft row."""
    N, B = 5, 2
    p = torch.tensor([0.5, 0.25, 0.125, 0.125]).repeat(B * N, 1)
    q = torch.tensor([0.25, 0.25, 0.25, 0.25]).repeat(B * N, 1)
    parents = torch.tensor([[-1, 0, 0, 0, 0]] * B)
    ids = torch.tensor([[0, 1, 1, 1, 2], [0, 3, 3, 0, 0]])
    for method in ("rsd", "mss"):
        for s in range(40):
            for draft in (q, None):
                assert_same(dict(target=p, target_is_probs=True, node_ids=ids, parents=parents,
                                 num_nodes=torch.full((B,), N), draft=draft,
                                 draft_is_probs=True, inv_temp=torch.ones(B),
                                 top_k=torch.zeros(B, dtype=torch.int64), top_p=torch.ones(B),
                                 min_p=torch.zeros(B), seed=torch.tensor([s, s + 100]),
                                 offset=torch.zeros(B, dtype=torch.int64), max_depth=1,
                                 method=method))


def test_all_neg_inf_target_rows():
    for s in range(5):
        kw = make_tree_case("logits_rsd", 50, 8, B=4, seed=s)
        t = kw["target"].clone()
        t[0] = float("-inf")          # request 0's root: invalid at depth 0
        t[8 + 1:8 + 8] = float("-inf")  # request 1: every non-root row invalid
        kw["target"] = t
        d = kw["draft"].clone()
        d[2 * 8] = float("-inf")      # request 2's root draft: unusable (logits)
        kw["draft"] = d
        out = assert_same(kw)
        assert not out[3][0] and out[1][0] == 0


def test_max_depth_below_tree_depth_is_malformed():
    for s in range(5):
        kw = make_tree_case("logits_rsd", 30, 8, B=4, seed=s)
        kw["parents"] = torch.tensor([[-1, 0, 1, 2, 3, 4, 5, 6]] * 4)  # a chain of depth 7
        for d in (0, 1, 6, 7, 9):
            kw["max_depth"] = d
            out = assert_same(kw)
            if d < 7:
                assert not out[3].any() and (out[0] == -1).all()


def test_num_nodes_out_of_range_and_bad_parents():
    kw = make_tree_case("logits_mss", 20, 6, B=4, seed=3)
    kw["num_nodes"] = torch.tensor([0, -5, 7, 6])
    out = assert_same(kw)
    assert not out[3][:3].any()
    par = kw["parents"].clone()
    par[0, 0] = 0            # root with a parent
    par[1, 3] = -2           # parent below -1
    par[2, 4] = 4            # parent not below the node
    par[3, 5] = 10 ** 12     # far out of range
    kw.update(parents=par, num_nodes=torch.tensor([6, 6, 6, 6]))
    out = assert_same(kw)
    assert not out[3].any()
    ids = kw["node_ids"].clone()
    ids[:, 1] = torch.tensor([-1, 20, 10 ** 15, 0])  # tokens outside [0, V) (the last is fine)
    kw.update(parents=make_tree_case("logits_mss", 20, 6, B=4, seed=3)["parents"],
              node_ids=ids)
    assert_same(kw)


def test_absent_nodes_are_not_checked():
    """A node under an absent parent is absent: its out-of-range token is never read."""
    kw = make_tree_case("logits_rsd", 20, 6, B=2, seed=1)
    kw["parents"] = torch.tensor([[-1, 0, -1, 2, 1, 0]] * 2)
    ids = kw["node_ids"].clone()
    ids[:, 2] = 999
    ids[:, 3] = -7
    kw["node_ids"] = ids
    out = assert_same(kw)
    assert out[3].all()


def test_layouts_and_int32_ids():
    kw = make_tree_case("logits_rsd", 100, 12, B=4, seed=2)
    want = RB.verify_tree(**kw)
    kw2 = dict(kw, node_ids=kw["node_ids"].int(), parents=kw["parents"].int(),
               num_nodes=kw["num_nodes"].int())
    got = cpu().verify_tree(**kw2)
    assert all(torch.equal(w, g) for w, g in zip(want, got))
    # non-contiguous node_ids / parents and targets with a row stride
    kw3 = dict(kw, node_ids=kw["node_ids"].t().contiguous().t(),
               parents=kw["parents"].t().contiguous().t(),
               target=torch.cat([kw["target"], kw["target"]], 1)[:, :100])
    got = cpu().verify_tree(**kw3)
    assert all(torch.equal(w, g) for w, g in zip(want, got))
    # stride-0 per-request columns (expanded scalars)
    assert_same(dict(kw, seed=torch.tensor(7).expand(4), offset=torch.tensor(2).expand(4),
                     inv_temp=torch.tensor(0.8).expand(4)))


def test_shape_errors():
    kw = make_tree_case("logits_rsd", 10, 4, B=2, seed=0)
    with pytest.raises(ValueError):
        cpu().verify_tree(**dict(kw, target=kw["target"][:-1]))
    with pytest.raises(ValueError):
        cpu().verify_tree(**dict(kw, draft=kw["draft"][:, :-1]))
    from specops.ops import library           # a method is checked by the op, not the backend
    with pytest.raises(ValueError, match="method"):
        library.verify_tree(**dict(kw, method="block"), backend="cpu")


def test_negative_max_depth():
    kw = make_tree_case("logits_rsd", 10, 1, B=2, seed=0)
    kw["max_depth"] = -3
    assert_same(kw)


@pytest.mark.full
def test_large_vocabulary():
    V, N, B = 128256, 16, 2
    for kind in ("logits_rsd", "point_mass"):
        assert_same(make_tree_case(kind, V, N, B=B, seed=1))
