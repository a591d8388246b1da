"""sgl-kernel's first-child / next-sibling trees on the torch side (reference section 13):
``convert_tree`` renumbers them into ``verify_tree``'s parent layout, ``malformed_sgl_requests``
is the guard every backend of ``specops::coin_walk`` applies (links out of contract, or a
present node's candidate outside [0, V)).  Vectorised torch on the links' device, no host
synchronisation."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from specops.reference.coins import COIN_BITS


class SglTree(NamedTuple):
    """sgl-kernel's first-child / next-sibling tree in ``verify_tree``'s layout.

    order [B, N] int64: ``order[b, m]`` = the sgl slot of new node m (new node 0 is the
    root; present nodes first, in binary-tree depth order; absent ones after, in slot order).
    parent_ids [B, N] int64: parent of new node m in new indices (-1 for the root and for
    absent nodes).  present [B, N] bool: in new order.  depth [B, N] int64: tree depth of new
    node m (-1: absent).  malformed [B] bool: the request's links are out of contract."""
    order: torch.Tensor
    parent_ids: torch.Tensor
    present: torch.Tensor
    depth: torch.Tensor
    malformed: torch.Tensor


def convert_tree(retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                 max_depth: Optional[int] = None) -> SglTree:
    """Convert sgl-kernel's links to parent ids in a node order ``verify_tree`` walks the
    way sgl-kernel does (see the module docstring).  On the links' device, ``O(log N)``
    vectorised steps, no host synchronisation.  ``max_depth`` (default N - 1): nodes deeper
    are absent.  A request is malformed if a link is outside [-1, N), a node is the target
    of two links, or a link points at the root (node 0)."""
    if retrive_next_token.dim() != 2 or retrive_next_token.shape != retrive_next_sibling.shape:
        raise ValueError("retrive_next_token and retrive_next_sibling must both be [bs, n], got "
                         f"{tuple(retrive_next_token.shape)} and "
                         f"{tuple(retrive_next_sibling.shape)}")
    B, N = retrive_next_token.shape
    if max_depth is None:
        max_depth = N - 1
    dev = retrive_next_token.device
    nt = retrive_next_token.to(device=dev, dtype=torch.int64)
    ns = retrive_next_sibling.to(device=dev, dtype=torch.int64)
    ar = torch.arange(N, device=dev, dtype=torch.int64)
    bad = ((nt < -1) | (nt >= N) | (ns < -1) | (ns >= N)).any(1)

    # every link (first-child links, then next-sibling links) as source -> target; links that
    # are -1 or out of range go to the dummy slot N
    tgt = torch.cat([nt, ns], 1)
    tgt = torch.where((tgt >= 0) & (tgt < N), tgt, torch.full_like(tgt, N))
    src = torch.cat([ar, ar]).expand(B, 2 * N)
    is_child = torch.cat([torch.ones(N, dtype=torch.int64, device=dev),
                          torch.zeros(N, dtype=torch.int64, device=dev)]).expand(B, 2 * N)
    indeg = torch.zeros(B, N + 1, dtype=torch.int64, device=dev).scatter_add_(
        1, tgt, torch.ones_like(tgt))
    bad = bad | (indeg[:, :N] > 1).any(1) | (indeg[:, 0] > 0)
    # binary-tree parent (the node whose first-child or next-sibling link points here) and
    # whether that link is a first-child link; slot N is the dead sink
    bp = torch.full((B, N + 1), -1, dtype=torch.int64, device=dev).scatter_reduce_(
        1, tgt, src, "amax", include_self=True)
    first = torch.zeros(B, N + 1, dtype=torch.int64, device=dev).scatter_reduce_(
        1, tgt, is_child, "amax", include_self=True)
    bp[:, 0] = -1
    bp[:, N] = -1
    first[:, N] = 0
    linked = bp >= 0
    sink = torch.full_like(bp, N)
    anc = torch.where(linked, bp, sink)
    anc[:, 0] = 0                                    # the root is its own ancestor
    bdepth = linked.long()                           # binary-tree depth (child + sibling links)
    depth = first * linked.long()                    # tree depth (child links only)
    # the first sibling of every node's sibling chain (a node whose link is a child link, or
    # that has no link, is its own head)
    slots = torch.arange(N + 1, device=dev, dtype=torch.int64).expand(B, N + 1)
    head = torch.where((first > 0) | ~linked, slots, bp)
    for _ in range(max(1, (N - 1).bit_length())):
        bdepth = bdepth + bdepth.gather(1, anc)
        depth = depth + depth.gather(1, anc)
        anc = anc.gather(1, anc)
        head = head.gather(1, head)
    reach = anc[:, :N] == 0
    present = reach & (depth[:, :N] <= max_depth)
    present[:, 0] = True
    parent_old = bp.gather(1, head)[:, :N]           # tree parent, in sgl slots
    key = torch.where(present, bdepth[:, :N], torch.full_like(ar, N).expand(B, N))
    order = torch.sort(key, dim=1, stable=True).indices
    new_of_old = torch.empty_like(order).scatter_(1, order, ar.expand(B, N).contiguous())
    par = torch.where(present, new_of_old.gather(1, parent_old.clamp(0, N - 1)),
                      torch.full_like(key, -1))
    par[:, 0] = -1
    dep = torch.where(present, depth[:, :N], torch.full_like(key, -1))
    return SglTree(order, par.gather(1, order), present.gather(1, order), dep.gather(1, order),
                   bad)


def present_out_of_range(tree: SglTree, candidates: torch.Tensor, V: int) -> torch.Tensor:
    """[B, N] bool (new order): a present non-root node whose candidate is outside [0, V)."""
    cand = candidates.long().gather(1, tree.order)
    bad = tree.present & ((cand < 0) | (cand >= V))
    bad[:, 0] = False
    return bad


def malformed_sgl_requests(next_token, next_sibling, candidates, max_depth: int,
                           V: int) -> torch.Tensor:
    """[B] bool: the requests ``specops::coin_walk`` treats as malformed (nothing emitted):
    links out of contract (``convert_tree``) or a present node's candidate outside [0, V)."""
    tree = convert_tree(next_token, next_sibling, max_depth)
    return tree.malformed | present_out_of_range(tree, candidates, V).any(1)


def coin_grid(u: torch.Tensor) -> torch.Tensor:
    """m(u) of section 13, int64 (NaN and u <= 0: 0; u >= 1: 2**24 - 1)."""
    x = u.to(torch.float32).to(torch.float64) * float(1 << COIN_BITS)   # a float32 uniform
    x = torch.where(x > 0, x, torch.zeros_like(x))          # NaN fails x > 0
    x = torch.clamp(torch.floor(x), max=float((1 << COIN_BITS) - 1))
    return x.to(torch.int64)
