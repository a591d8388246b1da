"""The tree's arguments: ``prepare_tree`` -> ``TreeCanonical``, the fields of
``specops::verify_tree`` (reference section 11's shape checks where values may be read)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from specops import reference as _ref
from specops._contract import TREE_METHODS, check_method
from specops._args.common import (ID_DTYPES, LOGIT_DTYPES, Range, check_tensor,
                                  check_validate, may_read, per_request, pick_target, rows,
                                  sampling_params, scalar, seeds, tracing, with_tensors)


class TreeCanonical(NamedTuple):
    """The checked arguments of ``specops::verify_tree`` (op argument order)."""
    target: torch.Tensor        # [B * N, V]
    target_is_probs: bool
    node_ids: torch.Tensor      # [B, N] int64
    parents: torch.Tensor       # [B, N] int64
    num_nodes: torch.Tensor     # [B] int64
    draft: Optional[torch.Tensor]
    draft_is_probs: bool
    inv_temp: object
    top_k: object
    top_p: object
    min_p: object
    seed: object
    offset: object
    max_depth: int
    method: str

    @property
    def batch(self) -> int:
        return self.node_ids.shape[0]

    def op_args(self) -> tuple:
        """The positional arguments of ``specops::verify_tree`` (before ``backend``)."""
        return tuple(self)

    def to_op_tensors(self) -> "TreeCanonical":
        return with_tensors(self, self.batch, self.target.device)


def tree_depth(parent_ids: torch.Tensor, num_nodes: torch.Tensor) -> torch.Tensor:
    """[B, N] depth of every node (root 0), -1 for absent nodes (parent -1, an absent
    parent, or beyond num_nodes) and for nodes whose parent is not below them.  Computed on
    the tensors' device, one vectorised step per node."""
    B, N = parent_ids.shape
    par = parent_ids.long()
    depth = torch.full((B, N), -1, dtype=torch.int64, device=par.device)
    depth[:, 0] = 0
    for n in range(1, N):
        a = par[:, n]
        ok = (a >= 0) & (a < n) & (n < num_nodes)
        up = depth.gather(1, a.clamp(0, N - 1)[:, None])[:, 0]
        depth[:, n] = torch.where(ok & (up >= 0), up + 1, torch.full_like(up, -1))
    return depth


def _check_tree(node_ids, parents, num_nodes, V: int, max_depth, depth):
    """Host checks of the tree's values (reference section 11's malformed trees)."""
    B, N = parents.shape
    if bool(((num_nodes < 1) | (num_nodes > N)).any()):
        raise ValueError(f"num_nodes must be in [1, N={N}], got {num_nodes.tolist()}")
    if bool((parents[:, 0] != -1).any()):
        raise ValueError("parent_ids[:, 0] must be -1 (node 0 is the root)")
    n = torch.arange(N, device=parents.device)
    live = n[None, 1:] < num_nodes[:, None]
    par = parents[:, 1:].long()
    if bool((live & ((par < -1) | (par >= n[None, 1:]))).any()):
        raise ValueError("parent_ids[b, n] must be -1 (an absent node) or in [0, n) for "
                         "1 <= n < num_nodes[b]")
    present = depth[:, 1:] >= 0
    tok = node_ids[:, 1:].long()
    if bool((present & ((tok < 0) | (tok >= V))).any()):
        raise ValueError(f"node_token_ids must be in [0, V={V}) for every present node")
    if bool((depth > max_depth).any()):
        raise ValueError(f"max_depth={max_depth} is smaller than the tree's depth "
                         f"({int(depth.max())})")


def prepare_tree(*, target_logits=None, node_token_ids=None, parent_ids=None,
                 draft_probs=None, target_probs=None, draft_logits=None, method="rsd",
                 temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, num_nodes=None,
                 max_depth=None, seed=None, offset=None, generator=None,
                 validate=None) -> TreeCanonical:
    """Check everything ``validate`` allows and return the arguments of
    ``specops::verify_tree`` (scalar parameters as Python numbers: ``to_op_tensors``)."""
    check_validate(validate)
    check_method(method, TREE_METHODS)
    target, tname, is_probs = pick_target(target_logits, target_probs, draft_probs,
                                                draft_logits, (3,))
    device = target.device
    B, N, V = target.shape
    if N < 1 or not 1 <= V <= _ref.MAX_VOCAB:
        raise ValueError(f"{tname} must have shape [B, N, V] with N >= 1 and 1 <= V <= "
                         f"{_ref.MAX_VOCAB}, got {tuple(target.shape)}")
    for name, t in (("node_token_ids", node_token_ids), ("parent_ids", parent_ids)):
        if t is None:
            raise ValueError(f"{name} is required")
        check_tensor(name, t, ID_DTYPES, (2,), device)
        if tuple(t.shape) != (B, N):
            raise ValueError(f"{name} must have shape [B, N] = [{B}, {N}] to match {tname} "
                             f"{tuple(target.shape)}, got {tuple(t.shape)}")
    draft = draft_probs if draft_probs is not None else draft_logits
    dname = "draft_probs" if draft_probs is not None else "draft_logits"
    if draft is not None:
        check_tensor(dname, draft, (torch.float32,) if draft_probs is not None
                           else LOGIT_DTYPES, (3,), device)
        if tuple(draft.shape) != (B, N, V):
            raise ValueError(f"{dname} must have shape [B, N, V] = [{B}, {N}, {V}], got "
                             f"{tuple(draft.shape)}")
    num = per_request("num_nodes", N if num_nodes is None else num_nodes, B,
                            torch.int64, device, Range(1, N, False, False,
                                                             f"in [1, N={N}]"),
                            validate=validate)
    reads = may_read(validate, parent_ids) and may_read(validate, node_token_ids)
    depth = tree_depth(parent_ids, num) if (reads or max_depth is None) else None
    if max_depth is None:
        if tracing() or validate is False:
            raise ValueError("verify_tree needs max_depth with validate=False, under "
                             "torch.compile or CUDA-graph capture (the output width must not "
                             "depend on tensor values)")
        max_depth = int(depth.max()) if B > 0 else 0
    else:
        max_depth = scalar("max_depth", max_depth, torch.int64,
                                 Range(0, N - 1, False, False, f"in [0, N-1={N - 1}]"))
    if reads and B > 0:
        _check_tree(node_token_ids, parent_ids, num, V, max_depth, depth)
        if method == "gbv":                     # section 15's shape: a root with K chains
            _ref.check_gbv_trees(node_token_ids.cpu().numpy(), parent_ids.cpu().numpy(),
                                 num.cpu().numpy(), V, int(max_depth), draft is None)
    params = sampling_params(temperature, top_k, top_p, min_p, B, device, is_probs,
                                   validate)
    seed_t, offset_t = seeds(seed, offset, generator, B, device, params.all_greedy,
                                   validate)
    drows = None if draft is None else rows(draft.reshape(B * N, V))
    return TreeCanonical(
        rows(target.reshape(B * N, V)), is_probs, node_token_ids.long(),
        parent_ids.long(), num, drows, draft_probs is not None, params.inv_temp,
        params.top_k, params.top_p, params.min_p, seed_t, offset_t, int(max_depth), method)
