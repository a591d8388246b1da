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
from specops.api import Backend, PerRequest, PerRequestInt
from specops.backends import registry
from specops.ops import library


class TreeVerifyOutput(NamedTuple):
    """token_ids [B, D+1] int32: the accepted path's tokens, then the correction or bonus
    token, then -1.  num_accepted [B] int32.  accepted_nodes [B, D] int32: the node index of
    each accepted token (-1 after), for keeping the right KV-cache entries.  valid [B] bool:
    False where a target row on the path was invalid or the request malformed."""
    token_ids: torch.Tensor
    num_accepted: torch.Tensor
    accepted_nodes: torch.Tensor
    valid: torch.Tensor


def verify_tree(target_logits: Optional[torch.Tensor] = None,
                node_token_ids: Optional[torch.Tensor] = None,
                parent_ids: Optional[torch.Tensor] = None,
                draft_probs: Optional[torch.Tensor] = None, *,
                target_probs: Optional[torch.Tensor] = None,
                draft_logits: Optional[torch.Tensor] = None,
                method: Literal["rsd", "mss", "traversal", "traversal_iid", "gbv"] = "rsd",
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
    chains).  "gbv": greedy multi-path block verification (reference section 15, Thomas &
    Pal): on K i.i.d. draft paths (a root with K chains of one length, drawn from the draft
    rows; any other shape is a malformed request), the lexicographically greatest path under
    each node's order of p / q, verified by block verification with q replaced by the law of
    the best of K draws.  Exact, but it can accept fewer tokens than block verification on
    one path when the draft is close to the target: an option, not a default.
    ``max_depth``: the output width - 1; default the deepest level of the trees, which reads
    ``parent_ids`` on the host (a synchronisation for CUDA tensors): pass it under
    ``torch.compile``, CUDA-graph capture or ``validate=False``.
    ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``, ``offset``, ``generator``,
    ``backend`` and ``validate`` as in ``specops.verify_block``.

    Returns ``TreeVerifyOutput(token_ids [B, D+1] int32, num_accepted [B] int32,
    accepted_nodes [B, D] int32, valid [B] bool)``.
    """
    a = _args.prepare_tree(
        target_logits=target_logits, node_token_ids=node_token_ids, parent_ids=parent_ids,
        draft_probs=draft_probs, target_probs=target_probs, draft_logits=draft_logits,
        method=method, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
        num_nodes=num_nodes, max_depth=max_depth, seed=seed, offset=offset,
        generator=generator, validate=validate)
    name = registry.resolve(backend, a.target.device)
    return TreeVerifyOutput(*library.run_verify_tree(a, name, _args.eager_direct()))
