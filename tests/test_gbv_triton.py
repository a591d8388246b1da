"""GBV (reference section 15) on the Triton backend: ``specops.backends.triton.verify_tree(...,
method="gbv")`` == ``specops.reference.verify_gbv_ref`` on every output, bit for bit.

(Temporary file: to be folded into the per-op case table.)  Runs on CPU through Triton's
interpreter.  One call = 2 Triton launches (+ a torch sort, gather, cumsum and scatter with
draft rows); interpreter time grows with the requests and tiles (0.5-13 s a call here).
Fast tier: 4 calls, 8 launches (every kind mixed in one 27-request batch with draft
probabilities in 16-lane tiles, target probabilities with ties and zeros, point-mass drafts,
the sync-free check).  Full tier: 15 calls, 30 launches (the mixed batch with draft logits,
V = 1000, 48-request tie batches, random batches, bfloat16, K = 1 against block).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_tree_triton import DEV, NAMES, TB  # noqa: F401  (the Triton set-up, skips)
from tests._sync import no_host_reads
from specops import reference as R
from specops.backends.reference import _np

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
LAUNCHES_PER_CALL = 2


# ----------------------------------------------------------------------------- cases
def chain_parents(K, L, N):
    """Parents [N] of a root with K chains of L nodes (chain k at depth d: 1 + k L + d - 1),
    padding nodes -1."""
    par = [-1] * N
    for k in range(K):
        for d in range(L):
            n = 1 + k * L + d
            par[n] = 0 if d == 0 else n - 1
    return par


def gbv_case(reqs, V, seed=0, target="logits", draft="probs", N=None, max_depth=None,
             dtype=torch.float32):
    """Canonical ``verify_tree`` arguments of a batch.  ``reqs``: one dict per request with
    ``K, L`` (chains) or ``parents`` (a list; ``num_nodes`` optional), and optional ``temp``
    (0: greedy), ``top_k``, ``top_p``, ``min_p``, ``ties`` (draft rows = target
    probabilities: every ratio ties; target probabilities only), ``bad_target`` /
    ``bad_draft`` (node lists: that row made invalid / unusable), ``zeros`` (draft
    probabilities: that fraction of entries set to 0), ``share`` (probability that a chain
    copies chain 0's token at a depth: long common prefixes)."""
    g = torch.Generator().manual_seed(seed)
    pars = [r["parents"] if "parents" in r else chain_parents(r["K"], r["L"], 1 + r["K"] * r["L"])
            for r in reqs]
    N = N or max(len(p) for p in pars)
    B = len(reqs)
    par = torch.full((B, N), -1, dtype=torch.int64)
    num = torch.zeros(B, dtype=torch.int64)
    for b, (r, p) in enumerate(zip(reqs, pars)):
        par[b, :len(p)] = torch.tensor(p)
        num[b] = r.get("num_nodes", len(p))
    logits = torch.randn(B, N, V, generator=g) * 2.0
    logits = torch.where(torch.rand(B, N, V, generator=g) < .3, (logits * 2).round() / 2, logits)
    dlog = logits + torch.randn(B, N, V, generator=g) * 0.7
    q = torch.softmax(dlog, -1)
    p = torch.softmax(logits, -1)
    ids = torch.zeros(B, N, dtype=torch.int64)
    for b, r in enumerate(reqs):
        for n in range(1, N):
            a = int(par[b, n])
            if a < 0:
                ids[b, n] = int(torch.randint(V, (1,), generator=g))
                continue
            src = p if torch.rand((), generator=g) < 0.3 else q  # sometimes the target's pick
            ids[b, n] = int(src[b, a].multinomial(1, generator=g))
        if "K" in r and r.get("share", 0.5) > 0:             # common prefixes with chain 0
            K, L = r["K"], r["L"]
            for k in range(1, K):
                for d in range(L):
                    if torch.rand((), generator=g) < r.get("share", 0.5):
                        ids[b, 1 + k * L + d] = ids[b, 1 + d]
                    else:
                        break
        if r.get("temp", 1) == 0:                            # greedy: drafts often the argmax
            for n in range(1, N):
                a = int(par[b, n])
                if a >= 0 and torch.rand((), generator=g) < 0.7:
                    ids[b, n] = int(logits[b, a].argmax())
    temps = torch.tensor([float(r.get("temp", 0.9)) for r in reqs], dtype=torch.float32)
    inv = torch.from_numpy(R.inv_temperature(temps.numpy()))
    tk = torch.tensor([int(r.get("top_k", 0)) for r in reqs], dtype=torch.int64)
    tp = torch.tensor([float(r.get("top_p", 1.0)) for r in reqs], dtype=torch.float32)
    mp = torch.tensor([float(r.get("min_p", 0.0)) for r in reqs], dtype=torch.float32)
    tgt = logits.clone()
    if target == "probs":
        tgt = p.clone()
        inv = torch.where(inv == 0, inv, torch.ones_like(inv))
    dr = None if draft is None else (q.clone() if draft == "probs" else dlog.clone())
    for b, r in enumerate(reqs):
        if r.get("ties") and dr is not None:       # q = p: every ratio ties
            assert (target == "probs") == (draft == "probs")
            dr[b] = tgt[b]
        if r.get("zeros") and dr is not None and draft == "probs":   # q = 0 tokens
            dr[b] = torch.where(torch.rand(N, V, generator=g) < r["zeros"], 0.0, dr[b])
            dr[b, :, 0] += 1e-3                               # never a row of zeros
        for n in r.get("bad_target", ()):
            tgt[b, n, V // 2] = float("nan") if target == "logits" else 1.5
        for n in r.get("bad_draft", ()):
            if draft == "probs":
                dr[b, n] = dr[b, n] * 8                      # mass 8: fails section 3
            else:
                dr[b, n, 0] = float("inf")
    depth = max((r.get("L", 0) for r in reqs), default=0)
    depth = max([depth] + [len(r["parents"]) - 1 for r in reqs if "parents" in r])
    kw = dict(target=tgt.to(dtype).reshape(B * N, V), target_is_probs=target == "probs",
              node_ids=ids, parents=par, num_nodes=num,
              draft=None if dr is None else (dr if draft == "probs" else dr.to(dtype))
              .reshape(B * N, V),
              draft_is_probs=draft == "probs", inv_temp=inv, top_k=tk, top_p=tp, min_p=mp,
              seed=torch.randint(-(2 ** 62), 2 ** 62, (B,), generator=g),
              offset=torch.randint(0, 2 ** 40, (B,), generator=g),
              max_depth=depth if max_depth is None else max_depth)
    return kw


def reference(kw):
    """``verify_gbv_ref`` on the canonical arguments (numpy, as the reference backend)."""
    B, N = kw["node_ids"].shape
    V = kw["target"].shape[-1]
    out = R.verify_gbv_ref(
        _np(kw["target"]).reshape(B, N, V), kw["target_is_probs"], _np(kw["node_ids"]),
        _np(kw["parents"]), _np(kw["num_nodes"]),
        None if kw["draft"] is None else _np(kw["draft"]).reshape(B, N, V),
        kw["draft_is_probs"], *(_np(kw[k]) for k in ("inv_temp", "top_k", "top_p", "min_p",
                                                     "seed", "offset")),
        int(kw["max_depth"]))
    return [torch.from_numpy(t) for t in out]


def triton(kw):
    return TB.verify_tree(**{k: (v.to(DEV) if isinstance(v, torch.Tensor) else v)
                             for k, v in kw.items()}, method="gbv")


def check(kw):
    want = reference(kw)
    got = triton(kw)
    for name, w, g in zip(NAMES, want, got):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.shape)
        assert torch.equal(g, w), f"{name}: triton {g.tolist()} != reference {w.tolist()}"
    return want


# ----------------------------------------------------------------------------- batches
def mixed_requests():
    """One batch of every sampled-request kind with draft rows: K = 1..4, L = 1..3, K = 0,
    greedy, filters, invalid target rows (root, mid-path, last), unusable draft rows,
    malformed shapes, ragged num_nodes."""
    return [
        dict(K=1, L=3), dict(K=2, L=1), dict(K=2, L=2), dict(K=3, L=3, share=.8),
        dict(K=4, L=2, share=.9), dict(K=4, L=1), dict(K=0, L=0),
        dict(K=3, L=2, temp=0), dict(K=1, L=2, temp=0),
        dict(K=2, L=3, top_k=3), dict(K=3, L=2, top_p=0.8), dict(K=2, L=2, min_p=0.1),
        dict(K=3, L=2, top_k=4, top_p=0.9, min_p=0.05),
        dict(K=2, L=3, bad_target=[0]), dict(K=2, L=3, bad_target=[2]),
        dict(K=3, L=2, bad_target=[6]), dict(K=2, L=3, bad_target=[1, 4]),
        dict(K=2, L=3, bad_draft=[1, 4]), dict(K=3, L=2, bad_draft=[0]),
        dict(K=2, L=2, bad_draft=[3]),
        dict(parents=[-1, 0, 1, 1]),                              # a branch below the root
        dict(parents=[-1, 0, 1, 0]),                              # unequal chain lengths
        dict(parents=chain_parents(3, 2, 7), num_nodes=6),        # ragged by num_nodes
        dict(parents=chain_parents(3, 2, 7), num_nodes=5),        # two whole chains: valid
        dict(parents=[-1, 0, 1, -1, 3, 0, 5]),                    # an absent chain: K = 2
        dict(parents=[0, 0, 1]),                                  # section 11: bad root
        dict(K=2, L=2, temp=float("nan")),                        # section 8: bad params
    ]


@pytest.mark.parametrize("draft", ["probs", pytest.param("logits", marks=pytest.mark.full)])
def test_mixed_batch(draft, monkeypatch):
    """Every kind in one launch pair, 16-lane tiles (every pass crosses tiles)."""
    monkeypatch.setenv("SPECOPS_TRITON_BLOCK_V", "16")
    want = check(gbv_case(mixed_requests(), 20, seed=1, draft=draft))
    assert 0 < want[1].float().mean() and want[3].any() and not want[3].all()


def tie_requests():
    return [dict(K=3, L=2, ties=True, share=.7), dict(K=2, L=3, ties=True),
            dict(K=4, L=1, ties=True), dict(K=2, L=2, zeros=.4), dict(K=3, L=2, zeros=.6),
            dict(K=1, L=3), dict(K=3, L=2, bad_target=[3]), dict(K=2, L=2, temp=0),
            dict(K=2, L=2, bad_draft=[0])]


def test_target_probs_and_ties():
    """Target probabilities, draft rows equal to them (every ratio ties: id order), V = 5."""
    check(gbv_case(tie_requests() * 2, 5, seed=2, target="probs"))


def point_requests():
    return [dict(K=1, L=3), dict(K=1, L=1), dict(K=0, L=0), dict(K=1, L=2, temp=0),
            dict(K=1, L=3, bad_target=[2]), dict(K=2, L=1),      # K = 2: malformed
            dict(K=1, L=2, top_k=2, top_p=.9)]


def test_point_mass():
    """Point-mass drafts: K <= 1 (block verification), K >= 2 malformed."""
    want = check(gbv_case(point_requests(), 9, seed=3, draft=None))
    assert not want[3][5] and (want[0][5] == -1).all()


def test_sync_free():
    """No host read of a tensor value on the device path (CUDA-graph capturable)."""
    kw = gbv_case([dict(K=2, L=2), dict(K=3, L=1, temp=0)], 8, seed=4)
    dev = {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    with no_host_reads() as seen:
        TB.verify_tree(**dev, method="gbv")
    assert not seen, seen


# ----------------------------------------------------------------------------- full tier
@pytest.mark.full
@pytest.mark.parametrize("target,draft", [("logits", "probs"), ("logits", "logits"),
                                          ("probs", "probs"), ("logits", None)])
def test_large_vocab(target, draft, monkeypatch):
    """V = 1000 in 256-lane tiles (4 tiles a row, the last one partial)."""
    monkeypatch.setenv("SPECOPS_TRITON_BLOCK_V", "256")
    reqs = point_requests() if draft is None else [
        dict(K=1, L=2), dict(K=2, L=2), dict(K=3, L=1), dict(K=4, L=2, share=.9),
        dict(K=2, L=2, top_k=50, top_p=.9), dict(K=2, L=2, bad_draft=[1]),
        dict(K=3, L=2, temp=0)]
    check(gbv_case(reqs, 1000, seed=5, target=target, draft=draft))


@pytest.mark.full
@pytest.mark.parametrize("target,draft", [("logits", "logits"), ("probs", "probs")])
def test_many_ties(target, draft):
    """q = p on every row (every ratio ties: id order) and draft probabilities with zeros,
    48 requests: enough coins that a wrong tie order or (a, b) step changes some token."""
    reqs = [dict(K=int(k), L=int(l), ties=True, share=.6) for k in (2, 3, 4) for l in (1, 2, 3)]
    if draft == "probs":
        reqs += [dict(K=3, L=2, zeros=.5), dict(K=2, L=3, zeros=.3)] * 3
    reqs = (reqs * 4)[:48]
    check(gbv_case(reqs, 6, seed=8, target=target, draft=draft))


@pytest.mark.full
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("draft", ["probs", "logits"])
def test_random_batches(seed, draft):
    """Random (K, L) per request, V in 5..40, ragged padding (N larger than needed)."""
    rng = np.random.default_rng(seed)
    reqs = [dict(K=int(rng.integers(0, 5)), L=int(rng.integers(1, 4)),
                 share=float(rng.random()), temp=float(rng.choice([0.0, 0.7, 1.0, 1.5])))
            for _ in range(12)]
    V = int(rng.integers(5, 41))
    check(gbv_case(reqs, V, seed=10 + seed, draft=draft, N=14, max_depth=4))


@pytest.mark.full
def test_bf16_logits():
    check(gbv_case(mixed_requests()[:12], 12, seed=6, dtype=torch.bfloat16, draft="logits"))


@pytest.mark.full
def test_one_path_is_block():
    """K = 1 chains: the Triton GBV emits section 9's tokens (the reference block walk)."""
    reqs = [dict(K=1, L=3) for _ in range(6)] + [dict(K=1, L=3, bad_target=[2]),
                                                  dict(K=1, L=3, bad_draft=[1])]
    kw = gbv_case(reqs, 11, seed=7, draft="logits")
    got = triton(kw)
    B, N = kw["node_ids"].shape
    V = kw["target"].shape[-1]
    t = kw["target"].reshape(B, N, V)
    d = kw["draft"].reshape(B, N, V)
    chain = (t.reshape(B * N, V).numpy(), False, np.arange(B) * N, kw["node_ids"][:, 1:]
             .reshape(-1).numpy(), np.arange(B) * (N - 1), np.full(B, N - 1),
             d[:, :N - 1].reshape(-1, V).numpy(), False,
             *(kw[k].numpy() for k in ("inv_temp", "top_k", "top_p", "min_p", "seed",
                                       "offset")), N - 1)
    btok, bnacc, bvalid = R.verify_rows_ref(*chain, method="block")
    assert np.array_equal(got[0].cpu().numpy(), btok)
    assert np.array_equal(got[1].cpu().numpy(), bnacc)
    assert np.array_equal(got[3].cpu().numpy(), bvalid)
