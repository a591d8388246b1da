"""Tree verification (reference section 11): the Triton backend == the reference backend on
every output (token_ids, num_accepted, accepted_nodes, valid), exactly.

Runs on CPU through Triton's interpreter (``TRITON_INTERPRET=1``) and, with CUDA and the
interpreter off, on the GPU.  Kept small: V in {1, 7, 100}, N in {1, 5, 8}; a few cases force
16-lane vocabulary tiles so that every row pass crosses tiles.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

pytest.importorskip("triton")

from specops.backends import reference as RB  # noqa: E402

try:
    from specops.backends import triton as TB  # noqa: E402
except ImportError as exc:  # pragma: no cover
    pytest.skip(f"specops Triton backend unavailable: {exc}", allow_module_level=True)

from tests.tree_cases import TREE_KINDS, make_tree_case  # noqa: E402

INTERPRET = TB._K.INTERPRETED
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("Triton tests need CUDA or TRITON_INTERPRET=1 (set before triton is imported)",
                allow_module_level=True)
DEV = torch.device("cpu" if INTERPRET else "cuda")
# NaN / inf rows make numpy warn inside the interpreter; the results are checked exactly
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
NAMES = ("token_ids", "num_accepted", "accepted_nodes", "valid")


def _dev(kw):
    return {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def check(kw):
    """Both backends on the same arguments; every output equal (dtype, shape, values)."""
    want = RB.verify_tree(**kw)
    got = TB.verify_tree(**_dev(kw))
    for name, w, g in zip(NAMES, want, got):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.shape)
        assert torch.equal(g, w), f"{name}: triton {g.tolist()} != reference {w.tolist()}"
    return want


def _small_tiles(monkeypatch):
    monkeypatch.setenv("SPECOPS_TRITON_BLOCK_V", "16")


# ----------------------------------------------------------------------------- the sweep
# fast tier: every kind at (V=7, N=5); the other sizes in the full tier
@pytest.mark.parametrize("kind", TREE_KINDS)
@pytest.mark.parametrize("V,N", [(7, 5)] + [pytest.param(*vn, marks=pytest.mark.full) for vn in
                                            ((1, 5), (7, 1), (7, 8), (100, 5), (100, 8))])
def test_tree_cases(kind, V, N):
    for seed in (0, 1):
        check(make_tree_case(kind, V, N, B=3, seed=seed))


@pytest.mark.full
@pytest.mark.parametrize("kind", ["logits_rsd", "logits_mss", "probs_rsd", "point_mass",
                                  "filters", "target_probs", "duplicates"])
def test_tiles(kind, monkeypatch):
    """V = 100 in 16-lane tiles: the weight passes, the residual update and the search of
    the draw all cross tiles."""
    _small_tiles(monkeypatch)
    for seed in ((2,) if kind == "filters" else (2, 3)):     # filters: 8 radix rounds a row
        check(make_tree_case(kind, 100, 8, B=3, seed=seed))


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float16,
                                                                  marks=pytest.mark.full)])
def test_half_logits(dtype):
    for kind in ("logits_rsd", "logits_mss", "filters", "greedy"):
        check(make_tree_case(kind, 7, 5, B=3, dtype=dtype, seed=4))


# ----------------------------------------------------------------------------- arguments
def test_python_scalar_params():
    kw = make_tree_case("logits_rsd", 7, 5, B=3, seed=5)
    kw.update(inv_temp=1.25, top_k=0, top_p=1.0, min_p=0.0, seed=5, offset=0)
    check(kw)
    kw.update(method="mss", top_k=3, top_p=0.9, min_p=0.05, offset=7)
    check(kw)


def test_expanded_and_strided_arguments():
    """Per-request tensors with stride 0 and non-contiguous node ids / parents."""
    kw = make_tree_case("logits_mss", 7, 5, B=3, seed=6)
    kw["inv_temp"] = torch.tensor(0.8).expand(3)
    kw["seed"] = torch.tensor(11).expand(3)
    kw["node_ids"] = kw["node_ids"].t().contiguous().t()
    kw["parents"] = kw["parents"].t().contiguous().t()
    assert not kw["parents"].is_contiguous()
    check(kw)


def test_empty_batch():
    kw = make_tree_case("logits_rsd", 7, 5, B=3, seed=0)
    for k in ("node_ids", "parents"):
        kw[k] = kw[k][:0]
    for k in ("num_nodes", "inv_temp", "top_k", "top_p", "min_p", "seed", "offset"):
        kw[k] = kw[k][:0]
    kw["target"], kw["draft"] = kw["target"][:0], kw["draft"][:0]
    check(kw)


# ----------------------------------------------------------------------------- bad rows
def test_nan_and_negative_draft_probs():
    for seed in (7, 8):
        kw = make_tree_case("probs_rsd", 7, 8, B=3, seed=seed)
        d = kw["draft"].clone().view(3, 8, 7)
        d[0, :, 2] = float("nan")                 # request 0: every draft row unusable
        d[1, 0, 3] = -0.25                        # request 1: the root's row unusable
        d[2, 1:, 0] = -1e-30                      # request 2: rows below the root unusable
        kw["draft"] = d.reshape(24, 7)
        for method in ("rsd", "mss"):
            kw["method"] = method
            check(kw)


def test_bad_target_rows():
    """An all -inf logits row, NaN / +inf logits, invalid probability rows."""
    kw = make_tree_case("logits_rsd", 7, 5, B=3, seed=9)
    t = kw["target"].clone().view(3, 5, 7)
    t[0, 0] = float("-inf")                       # the root: invalid at depth 0
    t[1, 1:] = float("-inf")                      # every non-root row
    t[2, 2, 4] = float("inf")
    kw["target"] = t.reshape(15, 7)
    check(kw)
    kw["inv_temp"] = torch.zeros(3)               # greedy rows are checked too
    check(kw)
    kw = make_tree_case("target_probs", 7, 5, B=3, seed=9)
    t = kw["target"].clone().view(3, 5, 7)
    t[0, 0, 1] = float("nan")
    t[1, 1:, 2] = 1.5
    t[2] = 0.0
    kw["target"] = t.reshape(15, 7)
    check(kw)
    kw["inv_temp"] = torch.tensor([0.0, 0.0, 1.0])
    check(kw)


def test_malformed_trees():
    """max_depth below the tree's depth, tokens out of range, bad parents / num_nodes,
    malformed parameters: each hits its own request only."""
    kw = make_tree_case("logits_rsd", 7, 8, B=3, seed=10)
    kw["parents"] = torch.tensor([[-1, 0, 1, 2, 3, 4, 5, 6]] * 3)      # a chain of depth 7
    for d in (0, 1, 3, 6, 7):
        check(dict(kw, max_depth=d))
    par = kw["parents"].clone()
    par[0, 0] = 0                                  # root with a parent
    par[1, 3] = 3                                  # parent not below the node
    par[2, 4] = -2
    check(dict(kw, parents=par, max_depth=7))
    ids = kw["node_ids"].clone()
    ids[0, 7] = -1
    ids[1, 2] = 7
    ids[2, 5] = 7                                  # node 5 is absent below: not checked
    par = kw["parents"].clone()
    par[2, 4] = -1
    check(dict(kw, node_ids=ids, parents=par, max_depth=7))
    check(dict(kw, num_nodes=torch.tensor([0, 9, 3]), max_depth=7))
    check(dict(kw, inv_temp=torch.tensor([float("nan"), -1.0, 1.0]),
               top_p=torch.tensor([1.0, 1.0, 0.0]), max_depth=7))
    check(dict(kw, top_k=torch.tensor([-1, 0, 0]), min_p=torch.tensor([0.0, 2.0, 0.0]),
               max_depth=7))


# ----------------------------------------------------------------------------- the walk
def _chain_like(g, B, N, V, fanout_p=0.5):
    """Bushy trees: node n's parent is n - 1 or an earlier sibling's parent."""
    par = torch.full((B, N), -1, dtype=torch.int64)
    for n in range(1, N):
        same = torch.rand(B, generator=g) < fanout_p
        par[:, n] = torch.where(same & (n > 1), par[:, n - 1], torch.full((B,), n - 1))
    return par


@pytest.mark.parametrize("method,qmode", [("rsd", "probs"), ("mss", "logits")] + [
    pytest.param(m, q, marks=pytest.mark.full) for m, q in (("rsd", "logits"), ("rsd", "point"),
                                                            ("mss", "probs"), ("mss", "point"))])
def test_deep_walks(method, qmode):
    """Draft rows close to the target: long accepted paths, siblings tried after
    rejections, duplicate and exhausted drafts (sharp draft rows)."""
    g = torch.Generator().manual_seed(11)
    B, N, V = 4, 8, 7
    for rnd in range(2):
        par = _chain_like(g, B, N, V)
        logits = torch.randn(B, N, V, generator=g) * 2
        dl = logits + torch.randn(B, N, V, generator=g) * (0.3 if rnd == 0 else 3.0)
        q = torch.softmax(dl, -1)
        ids = torch.randint(0, V, (B, N), generator=g)
        ids[:, 1:] = torch.where(torch.rand(B, N - 1, generator=g) < 0.5,
                                 ids[:, 1:], ids[:, :-1])       # repeated tokens
        if qmode == "probs":
            q = q.clone()
            q[B - 1] = torch.nn.functional.one_hot(q[B - 1].argmax(-1), V).float()
            draft = q.reshape(B * N, V)
        elif qmode == "logits":
            draft = dl.reshape(B * N, V)
        else:
            draft = None
        kw = dict(target=logits.reshape(B * N, V), target_is_probs=False, node_ids=ids,
                  parents=par, num_nodes=torch.full((B,), N), draft=draft,
                  draft_is_probs=qmode == "probs", inv_temp=torch.ones(B),
                  top_k=torch.zeros(B, dtype=torch.int64), top_p=torch.ones(B),
                  min_p=torch.zeros(B), seed=torch.arange(B) + 100 * rnd,
                  offset=torch.tensor([0, 1, 2**33, -5]), max_depth=N - 1, method=method)
        check(kw)


def test_dyadic_rows():
    """Dyadic target and draft probabilities: exact ratios, coins at the boundary."""
    B, N, V = 3, 6, 4
    p = torch.tensor([0.5, 0.25, 0.125, 0.125])
    q = torch.tensor([0.25, 0.25, 0.25, 0.25])
    par = torch.tensor([[-1, 0, 0, 0, 1, 1]] * B)
    ids = torch.tensor([[0, 1, 1, 3, 0, 2], [0, 3, 2, 1, 0, 0], [0, 0, 0, 0, 1, 1]])
    for method in ("rsd", "mss"):
        for seed in range(3):
            check(dict(target=p.expand(B * N, V).contiguous(), target_is_probs=True,
                       node_ids=ids, parents=par, num_nodes=torch.full((B,), N),
                       draft=q.expand(B * N, V).contiguous(), draft_is_probs=True,
                       inv_temp=torch.ones(B), top_k=torch.zeros(B, dtype=torch.int64),
                       top_p=torch.ones(B), min_p=torch.zeros(B),
                       seed=torch.arange(B) + 10 * seed, offset=torch.zeros(B, dtype=torch.int64),
                       max_depth=2, method=method))


def test_no_host_reads():
    """The launcher reads no tensor value on the host (output shapes from max_depth)."""
    from tests._sync import no_host_reads
    kw = _dev(make_tree_case("logits_rsd", 7, 5, B=3, seed=12))
    with no_host_reads() as seen:
        TB.verify_tree(**kw)
    assert not seen, seen
