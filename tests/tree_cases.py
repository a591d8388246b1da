"""Tree-verification cases in the canonical backend form (``specops.backends``' verify_tree).

Each case is a dict of keyword arguments for ``backend.verify_tree``; trees are random
(parents < n), children drafted from the draft rows so that acceptance is realistic, with
padding nodes, ragged ``num_nodes``, duplicate siblings, unusable rows and malformed requests
mixed in by kind.
"""
from __future__ import annotations

import torch

TREE_KINDS = ("logits_rsd", "logits_mss", "probs_rsd", "point_mass", "greedy", "filters",
              "target_probs", "unusable_rows", "malformed", "duplicates")


def random_parents(g, B: int, N: int, ragged: bool):
    """[B, N] parents (node 0 the root) and num_nodes [B]; some nodes absent when ragged."""
    par = torch.full((B, N), -1, dtype=torch.int64)
    for n in range(1, N):
        par[:, n] = (torch.rand(B, generator=g) * n).long()
    num = torch.full((B,), N, dtype=torch.int64)
    if ragged and N > 1:
        num = torch.randint(1, N + 1, (B,), generator=g)
        hole = torch.rand(B, N, generator=g) < 0.15
        hole[:, 0] = False
        par = torch.where(hole, torch.full_like(par, -1), par)
    return par, num


def depth_of(par):
    """Max depth per request (absent nodes excluded)."""
    B, N = par.shape
    d = torch.full((B, N), -1, dtype=torch.int64)
    d[:, 0] = 0
    for n in range(1, N):
        a = par[:, n]
        ok = a >= 0
        d[:, n] = torch.where(ok & (d.gather(1, a.clamp(min=0)[:, None])[:, 0] >= 0),
                              d.gather(1, a.clamp(min=0)[:, None])[:, 0] + 1,
                              torch.full_like(a, -1))
    return d


def make_tree_case(kind: str, V: int, N: int, B: int = 3, dtype=torch.float32,
                   seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed * 7919 + V * 31 + N)
    par, num = random_parents(g, B, N, ragged=kind in ("logits_mss", "unusable_rows"))
    target = torch.randn(B, N, V, generator=g) * 2.5
    draft = target + torch.randn(B, N, V, generator=g) * 1.5
    q = torch.softmax(draft, -1)
    ids = torch.zeros(B, N, dtype=torch.int64)
    for n in range(1, N):                 # children drafted from their parent's draft row
        a = par[:, n].clamp(min=0)
        rows = q[torch.arange(B), a]
        ids[:, n] = rows.multinomial(1, generator=g)[:, 0]
    if kind == "duplicates" and N > 2:
        ids[:, 2] = ids[:, 1]
        par[:, 2] = par[:, 1]
    max_depth = int(depth_of(par).max()) if N else 0
    params = dict(inv_temp=torch.full((B,), 1 / 0.9), top_k=torch.zeros(B, dtype=torch.int64),
                  top_p=torch.ones(B), min_p=torch.zeros(B))
    kw = dict(target=target.to(dtype).reshape(B * N, V), target_is_probs=False, node_ids=ids,
              parents=par, num_nodes=num, draft=draft.to(dtype).reshape(B * N, V),
              draft_is_probs=False, **params, seed=torch.arange(B) * 13 + seed + 1,
              offset=torch.full((B,), 3, dtype=torch.int64), max_depth=max_depth,
              method="rsd")
    if kind == "logits_mss":
        kw["method"] = "mss"
    elif kind == "probs_rsd":
        kw.update(draft=q.reshape(B * N, V).float(), draft_is_probs=True)
    elif kind == "point_mass":
        kw.update(draft=None)
    elif kind == "greedy":
        kw["inv_temp"] = torch.tensor([0.0, 1.0, 0.0][:B] + [0.0] * max(B - 3, 0))
    elif kind == "filters":
        kw.update(top_k=torch.tensor([0, 3, 5][:B] + [2] * max(B - 3, 0)),
                  top_p=torch.tensor([0.8, 1.0, 0.9][:B] + [0.7] * max(B - 3, 0)),
                  min_p=torch.tensor([0.0, 0.05, 0.1][:B] + [0.0] * max(B - 3, 0)))
    elif kind == "target_probs":
        kw.update(target=torch.softmax(target.float(), -1).reshape(B * N, V),
                  target_is_probs=True, draft=q.reshape(B * N, V).float(), draft_is_probs=True,
                  inv_temp=torch.ones(B), method="mss")
    elif kind == "unusable_rows":
        t = kw["target"].clone().view(B, N, V)
        d = kw["draft"].clone().view(B, N, V)
        t[0, min(1, N - 1), 0] = float("nan")
        d[min(1, B - 1), 0] = float("nan")            # the root's draft: every child rejected
        if V > 1:
            t[B - 1, N - 1, V - 1] = float("inf")
        kw.update(target=t.reshape(B * N, V), draft=d.reshape(B * N, V))
    elif kind == "malformed":
        par = par.clone()
        num = num.clone()
        ids = ids.clone()
        if N > 1:
            par[0, 1] = 1                              # parent not below the node
            ids[min(1, B - 1), N - 1] = V              # token out of range
        num[B - 1] = 0
        kw.update(parents=par, num_nodes=num, node_ids=ids)
    return kw
