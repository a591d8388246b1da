"""SGLang's torch-side helpers (no kernel): sgl-kernel's greedy tree walk
(``verify_tree_greedy``) and the top-k / top-p renormalisations of SGLang's sampling
fallbacks.  The caller-coin walk (contract section 13) is ``specops::coin_walk``."""
from __future__ import annotations

from typing import NamedTuple

import torch


class CoinWalk(NamedTuple):
    token_ids: torch.Tensor       # [B, D + 1] int64: accepted tokens, final token, then -1
    num_accepted: torch.Tensor    # [B] int64
    accepted_nodes: torch.Tensor  # [B, D] int64: sgl slots of the accepted nodes, -1 after
    valid: torch.Tensor           # [B] bool


def greedy_walk(candidates, next_token, next_sibling, retrive_index, target_predict,
                num_spec: int) -> CoinWalk:
    """sgl-kernel's ``verify_tree_greedy`` walk: at node c the target token is
    ``target_predict.flatten()[retrive_index[b, c]]`` (sgl-kernel's flat read); accept the
    first child in next-sibling order whose candidate equals it."""
    B, N = candidates.shape
    dev = candidates.device
    D = max(0, min(num_spec, N) - 1)
    cand = candidates.to(torch.int64)
    # a link outside [0, n) ends its chain here: such a request is malformed and blanked by
    # the caller, but no gather below may index outside the tensors (a device-side assert)
    nt, ns = (torch.where((t >= 0) & (t < N), t.to(torch.int64), -1)
              for t in (next_token, next_sibling))
    ri = retrive_index.to(torch.int64)
    flat = target_predict.reshape(-1).to(torch.int64)
    bi = torch.arange(B, device=dev)

    def target_at(node):
        pos = ri[bi, node]
        ok = (pos >= 0) & (pos < flat.numel())
        return torch.where(ok, flat[pos.clamp(0, max(flat.numel() - 1, 0))],
                           torch.full_like(pos, -1))
    c = torch.zeros(B, dtype=torch.int64, device=dev)
    j = torch.zeros_like(c)
    x = nt[:, 0] if D > 0 else torch.full_like(c, -1)
    want = target_at(c)
    done = x < 0
    acc_nodes = torch.full((B, max(D, 1)), -1, dtype=torch.int64, device=dev)
    tokens = torch.full((B, D + 1), -1, dtype=torch.int64, device=dev)
    for _ in range(N + 1):
        active = ~done & (x >= 0)
        xs = x.clamp(min=0)
        y = cand.gather(1, xs[:, None])[:, 0]
        acc = active & (y == want)
        col = j.clamp(max=max(D, 1) - 1)
        acc_nodes.scatter_(1, col[:, None], torch.where(
            acc, xs, acc_nodes.gather(1, col[:, None])[:, 0])[:, None])
        tokens.scatter_(1, j.clamp(max=D)[:, None], torch.where(
            acc, y, tokens.gather(1, j.clamp(max=D)[:, None])[:, 0])[:, None])
        c = torch.where(acc, xs, c)
        j = j + acc.long()
        want = torch.where(acc, target_at(c), want)
        nxt = torch.where(j < D, nt[bi, c], torch.full_like(c, -1))
        x = torch.where(acc, nxt, torch.where(active, ns.gather(1, xs[:, None])[:, 0], x))
        done = done | (x < 0)
    tokens = tokens.scatter(1, j.clamp(max=D)[:, None], want[:, None])
    return CoinWalk(tokens, j, acc_nodes[:, :D], torch.ones(B, dtype=torch.bool, device=dev))


# ----------------------------------------------------------------------------- renorms
def _per_row(v, B, dev, dtype):
    if isinstance(v, torch.Tensor):
        return v.to(device=dev, dtype=dtype).reshape(-1).expand(B) if v.numel() in (1, B) \
            else _bad_rows(v, B)
    return torch.full((B,), v, device=dev, dtype=dtype)


def _bad_rows(v, B):
    raise ValueError(f"expected a number or a [{B}] tensor, got shape {tuple(v.shape)}")


def top_k_renorm_prob_fallback(probs: torch.Tensor, top_k) -> torch.Tensor:
    """SGLang's torch fallback of ``top_k_renorm_prob``: keep the entries at least as large as
    the k-th largest of their row (ties kept; k <= 0 or k >= V keeps the row), renormalise.
    ``top_k``: int or [B] tensor.  (A host-side helper of SGLang's sampling, not a
    verification step: its float sums are torch's, not the contract's.)"""
    B, V = probs.shape
    k = _per_row(top_k, B, probs.device, torch.int64)
    full = (k <= 0) | (k >= V)
    kk = k.clamp(1, V)
    srt = probs.sort(dim=1, descending=True).values
    thr = srt.gather(1, (kk - 1)[:, None])
    keep = (probs >= thr) | full[:, None]
    out = torch.where(keep, probs, torch.zeros_like(probs))
    return out / out.sum(1, keepdim=True)


def top_p_renorm_prob_fallback(probs: torch.Tensor, top_p) -> torch.Tensor:
    """SGLang's torch fallback of ``top_p_renorm_prob``: keep the smallest set of largest
    entries whose mass reaches ``top_p`` (ties with its smallest member kept), renormalise.
    ``top_p``: float or [B] tensor."""
    B, V = probs.shape
    p = _per_row(top_p, B, probs.device, torch.float64)
    srt = probs.sort(dim=1, descending=True).values
    cum = srt.to(torch.float64).cumsum(1)
    total = cum[:, -1:]
    # the first sorted position whose mass from the top reaches top_p of the row's mass
    idx = (cum < p[:, None] * total).sum(1, keepdim=True).clamp(max=V - 1)
    thr = srt.gather(1, idx)
    out = torch.where(probs >= thr, probs, torch.zeros_like(probs))
    return out / out.sum(1, keepdim=True)
