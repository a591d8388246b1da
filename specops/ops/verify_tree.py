"""specops::verify_tree — tree verification (reference section 11; traversal: section 14).

Registered like ``specops::verify`` (``torch.library.Library``, one Python kernel for CPU and
CUDA, ``register_fake``): the output shapes depend only on B and ``max_depth``, so the op
traces under ``torch.compile(fullgraph=True)`` and CUDA graphs.
"""
from __future__ import annotations

import torch

from specops.backends import registry
from specops.ops._preconditions import check_tree

_lib = torch.library.Library("specops", "FRAGMENT")
_lib.define(
    "verify_tree(Tensor target, bool target_is_probs, Tensor node_ids, Tensor parents, "
    "Tensor num_nodes, Tensor? draft, bool draft_is_probs, Tensor inv_temp, Tensor top_k, "
    "Tensor top_p, Tensor min_p, Tensor seed, Tensor offset, int max_depth, str method, "
    "str backend) -> (Tensor, Tensor, Tensor, Tensor)")


def run(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
        inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method, backend):
    """The op's kernel: the backend's tree walk after the preconditions: (token_ids,
    num_accepted, accepted_nodes, valid).  Eager public calls run it directly."""
    check_tree(max_depth, method)
    return tuple(registry.load(backend).verify_tree(
        target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
        inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method))


_lib.impl("verify_tree", run, "CPU")
_lib.impl("verify_tree", run, "CUDA")


@torch.library.register_fake("specops::verify_tree", lib=_lib)
def _(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs, inv_temp,
      top_k, top_p, min_p, seed, offset, max_depth, method, backend):
    check_tree(max_depth, method)
    B = node_ids.shape[0]
    dev = target.device
    return (torch.empty((B, max_depth + 1), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.int32, device=dev),
            torch.empty((B, max_depth), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.bool, device=dev))


verify_tree_op = torch.ops.specops.verify_tree.default
