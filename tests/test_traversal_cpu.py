"""Traversal verification (section 14) in the C++ backend against the reference, bit for bit,
and through the public ``specops.verify_tree``.

Every output (token_ids, num_accepted, accepted_nodes, valid) of ``backends.cpu.verify_tree``
with a traversal method must equal ``backends.reference.verify_tree`` exactly: the shared
random cases of tests/tree_cases.py (every kind: logits, probabilities, point-mass, greedy,
filters, unusable rows, malformed trees, duplicate siblings) over several seeds and sizes,
low-precision logits, every ISA level; on chains the C++ walk also equals the C++ block
verification (``verify_block(method="block")``), token for token.
"""
import numpy as np
import pytest
import torch

import specops
from specops.backends import reference as RB
from tests.test_traversal import chain_case
from tests.tree_cases import TREE_KINDS, make_tree_case

pytestmark = [
    pytest.mark.skipif("cpu" not in specops.available_backends(),
                       reason="specops._C (the C++ CPU backend) is not built"),
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

METHODS = ("traversal", "traversal_iid")
SIZES = ((1, 1), (2, 3), (7, 5), (100, 12), (1000, 16))


def cpu():
    from specops.backends import cpu as CB
    return CB


def assert_same(kw):
    """Both backends on the same arguments; every output equal (dtype, shape and values)."""
    want = RB.verify_tree(**kw)
    got = cpu().verify_tree(**kw)
    for name, w, g in zip(("token_ids", "num_accepted", "accepted_nodes", "valid"), want, got):
        assert w.dtype == g.dtype and torch.equal(w, g), (name, w, g)
    return want


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", TREE_KINDS)
@pytest.mark.parametrize("V,N", SIZES)
def test_cases(kind, V, N, method):
    """Catches any arithmetic, order, coin-counter or guard difference of the C++ walk."""
    for s in range(4):
        kw = make_tree_case(kind, V, N, B=4, seed=s)
        kw["method"] = method
        assert_same(kw)


def test_cases_exercise_the_walk():
    """The shared cases are not degenerate for traversal: requests accept 0, 1 and deeper
    paths, and internal nodes are accepted after deletions (the residual draw)."""
    seen = set()
    for s in range(6):
        kw = make_tree_case("logits_rsd", 100, 12, B=4, seed=s)
        kw["method"] = "traversal"
        seen.update(assert_same(kw)[1].tolist())
    assert {0, 1, 2} <= seen, seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["logits_rsd", "logits_mss", "filters", "unusable_rows",
                                  "point_mass"])
def test_low_precision_logits(dtype, kind):
    for V, N in SIZES[2:]:
        for method in METHODS:
            kw = make_tree_case(kind, V, N, B=4, dtype=dtype, seed=V)
            kw["method"] = method
            assert_same(kw)


def test_every_isa_level():
    """The transform's vectorised passes differ per ISA level; the walk's tokens must not."""
    from specops import _C
    before = _C.isa()
    try:
        for level in _C.available_isas():
            _C.set_isa(level)
            for kind in ("logits_rsd", "logits_mss", "filters", "point_mass"):
                for method in METHODS:
                    kw = make_tree_case(kind, 1000, 12, B=4, seed=3)
                    kw["method"] = method
                    assert_same(kw)
    finally:
        _C.set_isa(before)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["logits", "probs", "point_mass", "filters"])
def test_chain_equals_cpu_block(kind, method):
    """On chains the public verify_tree(method=traversal) emits the public
    verify_block(method="block")'s tokens on the C++ backend: section 14 on a chain is
    section 9, in the native code too."""
    tree, chain = chain_case(kind, B=64)
    (target, tip, ids, par, num, draft, dip, it, tk, tp, mp, seed, off, g) = tree
    B, _, V = target.shape
    t = torch.from_numpy
    common = dict(temperature=t(np.where(it > 0, 1 / it, 0).astype(np.float32)),
                  top_k=t(tk), top_p=t(tp), min_p=t(mp), seed=t(seed), offset=t(off),
                  backend="cpu")
    tkey = "target_probs" if tip else "target_logits"
    dkey = "draft_probs" if dip else "draft_logits"
    out = specops.verify_tree(**{tkey: t(target)}, node_token_ids=t(ids), parent_ids=t(par),
                              **({} if draft is None else {dkey: t(draft)}), method=method,
                              **common)
    blk = specops.verify_block(**{tkey: t(target)}, draft_token_ids=t(ids[:, 1:]),
                               **({} if draft is None else {dkey: t(draft[:, :g])}),
                               method="block", **common)
    assert torch.equal(out.token_ids, blk.token_ids)
    assert torch.equal(out.num_accepted, blk.num_accepted)
    assert bool(out.valid.all())


@pytest.mark.full
@pytest.mark.parametrize("method", METHODS)
def test_cpu_statistics(method):
    """The C++ walk's own 20,000 runs through the public call pass the calibrated chi-square
    tests of tests/test_traversal.py (whose negative controls fail at 3,000 runs)."""
    from tests.test_traversal import STAT_TREE, draft_trees, traversal_pvalues, tree_rows
    n = 20000
    ids = draft_trees(n, "rsd" if method == "traversal" else "mss", 11)
    target, draft = tree_rows(ids)
    out = specops.verify_tree(target_probs=target.contiguous(), node_token_ids=ids,
                              parent_ids=torch.tensor(STAT_TREE).expand(n, 5),
                              draft_probs=draft.contiguous(), method=method,
                              seed=torch.arange(n) + 5000, offset=0, backend="cpu")
    assert bool(out.valid.all())
    pv = traversal_pvalues(out.token_ids.numpy(), out.num_accepted.numpy(), method, seed=1)
    assert min(pv.values()) >= 1e-6, pv
