"""``specops.verify_tree``: exact verification of a draft tree (reference sections 11, 14).

The checks follow ``specops.verify_block``'s rules (``specops._args``): types, shapes, dtypes
and devices always; values as ``validate`` allows (``None``: CPU tensors and Python scalars,
``True``: everything, which synchronises on CUDA, ``False``: nothing).  What is not checked
on the host the backends guard: a malformed request emits -1, ``valid = False``, and nothing
is read out of bounds.
"""
from __future__ import annotations

from typing import Literal, NamedTuple, Optional

import torch

from specops import _args
from specops import reference as _ref
from specops._contract import TREE_METHODS, check_method
from specops.api import Backend, PerRequest, PerRequestInt
from specops.backends import registry
from specops.ops import verify_tree as _op


class TreeVerifyOutput(NamedTuple):
    """token_ids [B, D+1] int32: the accepted path's tokens, then the correction or bonus
    token, then -1.  num_accepted [B] int32.  accepted_nodes [B, D] int32: the node index of
    each accepted token (-1 after), for keeping the right KV-cache entries.  valid [B] bool:
    False where a target row on the path was invalid or the request malformed."""
    token_ids: torch.Tensor
    num_accepted: torch.Tensor
    accepted_nodes: torch.Tensor
    valid: torch.Tensor


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


def verify_tree(target_logits: Optional[torch.Tensor] = None,
                node_token_ids: Optional[torch.Tensor] = None,
                parent_ids: Optional[torch.Tensor] = None,
                draft_probs: Optional[torch.Tensor] = None, *,
                target_probs: Optional[torch.Tensor] = None,
                draft_logits: Optional[torch.Tensor] = None,
                method: Literal["rsd", "mss", "traversal", "traversal_iid"] = "rsd",
                temperature: PerRequest = 1.0,
                top_k: PerRequestInt = 0, top_p: PerRequest = 1.0, min_p: PerRequest = 0.0,
                num_nodes: Optional[PerRequestInt] = None, max_depth: Optional[int] = None,
                seed: Optional[PerRequestInt] = None, offset: Optional[PerRequestInt] = None,
                generator: Optional[torch.Generator] = None, backend: Backend = "auto",
                validate: Optional[bool] = None) -> TreeVerifyOutput:
    """Verify a batch of draft trees exactly (reference section 11).

    Per request b, nodes 0..N-1 (node 0 the root: the last committed token, its id ignored).
    ``parent_ids`` [B, N] int: ``parent_ids[b, 0] = -1``, ``0 <= parent_ids[b, n] < n`` (or
    -1: an absent, padding node).  ``node_token_ids`` [B, N] int.  ``target_logits`` [B, N, V]
    (float32/bfloat16/float16) or ``target_probs`` [B, N, V] float32: row n is the target's
    next-token distribution after the path root..n.  ``draft_probs`` [B, N, V] float32 or
    ``draft_logits`` [B, N, V]: row n is the distribution the children of n were drawn from;
    neither: point-mass drafts (the children are arbitrary proposals).  ``num_nodes`` [B]
    (ragged trees; default N).

    ``method``: "rsd" (siblings drawn without replacement, in node order, e.g. with
    ``specops.sample_without_replacement``) or "mss" (siblings drawn i.i.d.).  Siblings are
    tried in increasing node index.  "traversal" / "traversal_iid": traversal verification
    (reference section 14: leaf to root, sequence-level acceptance; block verification on a
    chain), siblings drawn without replacement / i.i.d. (K i.i.d. draft paths: a root with K
    chains).  ``max_depth``: the output width
    - 1; default the deepest level of the trees, which reads ``parent_ids`` on the host (a synchronisation for CUDA
    tensors): pass it under ``torch.compile``, CUDA-graph capture or ``validate=False``.
    ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``, ``offset``, ``generator``,
    ``backend`` and ``validate`` as in ``specops.verify_block``.

    Returns ``TreeVerifyOutput(token_ids [B, D+1] int32, num_accepted [B] int32,
    accepted_nodes [B, D] int32, valid [B] bool)``.
    """
    a = prepare_tree(target_logits, node_token_ids, parent_ids, draft_probs, target_probs,
                     draft_logits, method, temperature, top_k, top_p, min_p, num_nodes,
                     max_depth, seed, offset, generator, validate)
    name = registry.resolve(backend, a.target.device)
    if _args.eager_direct():
        return TreeVerifyOutput(*_op.run(*a.op_args(), name))
    return TreeVerifyOutput(*_op.verify_tree_op(*a.to_op_tensors().op_args(), name))


def prepare_tree(target_logits=None, node_token_ids=None, parent_ids=None, draft_probs=None,
                 target_probs=None, draft_logits=None, method="rsd", temperature=1.0, top_k=0,
                 top_p=1.0, min_p=0.0, num_nodes=None, max_depth=None, seed=None,
                 offset=None, generator=None, validate=None) -> _args.TreeCanonical:
    """Check everything ``validate`` allows and return the arguments of
    ``specops::verify_tree`` (scalar parameters as Python numbers: ``to_op_tensors``)."""
    _args.check_validate(validate)
    check_method(method, TREE_METHODS)
    target, tname, is_probs = _args.pick_target(target_logits, target_probs, draft_probs,
                                                draft_logits, (3,))
    device = target.device
    B, N, V = target.shape
    if N < 1 or not 1 <= V <= _ref.MAX_VOCAB:
        raise ValueError(f"{tname} must have shape [B, N, V] with N >= 1 and 1 <= V <= "
                         f"{_ref.MAX_VOCAB}, got {tuple(target.shape)}")
    for name, t in (("node_token_ids", node_token_ids), ("parent_ids", parent_ids)):
        if t is None:
            raise ValueError(f"{name} is required")
        _args.check_tensor(name, t, _args.ID_DTYPES, (2,), device)
        if tuple(t.shape) != (B, N):
            raise ValueError(f"{name} must have shape [B, N] = [{B}, {N}] to match {tname} "
                             f"{tuple(target.shape)}, got {tuple(t.shape)}")
    draft = draft_probs if draft_probs is not None else draft_logits
    dname = "draft_probs" if draft_probs is not None else "draft_logits"
    if draft is not None:
        _args.check_tensor(dname, draft, (torch.float32,) if draft_probs is not None
                           else _args.LOGIT_DTYPES, (3,), device)
        if tuple(draft.shape) != (B, N, V):
            raise ValueError(f"{dname} must have shape [B, N, V] = [{B}, {N}, {V}], got "
                             f"{tuple(draft.shape)}")
    num = _args.per_request("num_nodes", N if num_nodes is None else num_nodes, B,
                            torch.int64, device, _args.Range(1, N, False, False,
                                                             f"in [1, N={N}]"),
                            validate=validate)
    reads = _args.may_read(validate, parent_ids) and _args.may_read(validate, node_token_ids)
    depth = tree_depth(parent_ids, num) if (reads or max_depth is None) else None
    if max_depth is None:
        if _args.tracing() or validate is False:
            raise ValueError("verify_tree needs max_depth with validate=False, under "
                             "torch.compile or CUDA-graph capture (the output width must not "
                             "depend on tensor values)")
        max_depth = int(depth.max()) if B > 0 else 0
    else:
        max_depth = _args.scalar("max_depth", max_depth, torch.int64,
                                 _args.Range(0, N - 1, False, False, f"in [0, N-1={N - 1}]"))
    if reads and B > 0:
        _check_tree(node_token_ids, parent_ids, num, V, max_depth, depth)
    params = _args.sampling_params(temperature, top_k, top_p, min_p, B, device, is_probs,
                                   validate)
    seed_t, offset_t = _args.seeds(seed, offset, generator, B, device, params.all_greedy,
                                   validate)
    drows = None if draft is None else _args.rows(draft.reshape(B * N, V))
    return _args.TreeCanonical(
        _args.rows(target.reshape(B * N, V)), is_probs, node_token_ids.long(),
        parent_ids.long(), num, drows, draft_probs is not None, params.inv_temp,
        params.top_k, params.top_p, params.min_p, seed_t, offset_t, int(max_depth), method)
