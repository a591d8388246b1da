"""Traversal verification (section 14): the Triton backend == the reference backend on every
output (token_ids, num_accepted, accepted_nodes, valid), exactly.

Runs on CPU through Triton's interpreter (``TRITON_INTERPRET=1``, about 1 s per launch) and,
with CUDA and the interpreter off, on the GPU.  Kept small: the fast tier launches five
batched cases (one per kind that exercises a different branch of the kernel: logits, draft
probabilities, point-mass, unusable rows), with 16-lane vocabulary tiles so every row pass
crosses tiles; every kind (filters, greedy, malformed trees, duplicates included) x both
methods at two sizes and the chain = block check run in the full tier.
"""
from __future__ import annotations

import pytest
import torch

# The Triton set-up (interpreter on a CPU-only machine, the skips, the device) is tree
# verification's: one copy, in tests/test_tree_triton.py.
from tests.test_tree_triton import DEV, INTERPRET, NAMES, RB, TB  # noqa: F401
from tests.tree_cases import TREE_KINDS, make_tree_case  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def check(kw):
    """Both backends on the same arguments; every output equal (dtype, shape, values)."""
    want = RB.verify_tree(**kw)
    got = TB.verify_tree(**{k: (v.to(DEV) if isinstance(v, torch.Tensor) else v)
                            for k, v in kw.items()})
    for name, w, g in zip(NAMES, want, got):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.shape)
        assert torch.equal(g, w), f"{name}: triton {g.tolist()} != reference {w.tolist()}"
    return want


FAST = [("logits_rsd", "traversal"), ("probs_rsd", "traversal_iid"), ("point_mass", "traversal"),
        ("unusable_rows", "traversal_iid")]


@pytest.mark.parametrize("kind,method", FAST)
def test_fast_cases(kind, method, monkeypatch):
    """Catches a different coin counter, rounding, stack bookkeeping or guard in the kernel;
    B = 4 requests per launch, 16-lane tiles (every pass crosses tiles)."""
    monkeypatch.setenv("SPECOPS_TRITON_BLOCK_V", "16")
    kw = make_tree_case(kind, 20, 7, B=4, seed=2)
    kw["method"] = method
    check(kw)


@pytest.mark.full
@pytest.mark.parametrize("method", ["traversal", "traversal_iid"])
@pytest.mark.parametrize("kind", TREE_KINDS)
@pytest.mark.parametrize("V,N", [(7, 6), (100, 9)])
def test_every_kind(kind, method, V, N):
    kw = make_tree_case(kind, V, N, B=4, seed=V)
    kw["method"] = method
    check(kw)


@pytest.mark.full
@pytest.mark.parametrize("kind", ["logits", "probs", "point_mass"])
def test_chain_equals_block(kind):
    """On chains the kernel emits block verification's tokens (the reference's block walk)."""
    import numpy as np
    from specops import reference as R
    from tests.test_traversal import chain_case
    tree, chain = chain_case(kind, B=16, V=20)
    t = torch.from_numpy
    (target, tip, ids, par, num, draft, dip, it, tk, tp, mp, seed, off, g) = tree
    B, N, V = target.shape
    out = TB.verify_tree(t(target).reshape(B * N, V).to(DEV), tip, t(ids).to(DEV),
                         t(par).to(DEV), t(num).to(DEV),
                         None if draft is None else t(draft).reshape(B * N, V).to(DEV), dip,
                         *(t(np.asarray(a)).to(DEV) for a in (it, tk, tp, mp, seed, off)), g,
                         "traversal")
    btok, bnacc, _ = R.verify_rows_ref(*chain, method="block")
    assert np.array_equal(out[0].cpu().numpy(), btok)
    assert np.array_equal(out[1].cpu().numpy(), bnacc)
