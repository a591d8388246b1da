"""specops::verify — the fused verification step (no probability tensor materialised).

Registered with ``torch.library.Library`` (schema + one Python kernel for CPU and CUDA +
``register_fake``) rather than ``torch.library.custom_op``: the op is not differentiable and
returns fresh tensors, so custom_op's autograd wrapper, dynamo-disable frame and per-call
alias checks buy nothing here and cost ~15-40 us per call (measured in bench/results/cpu.md,
latency case).  ``verify_op`` is the OpOverload ``torch.ops.specops.verify.default``: it is
called, traced (``torch.compile(fullgraph=True)``) and opchecked exactly like the custom op.

``forced_num_accepted`` selects the forced mode of the walk (reference section 7): the
residual-sample view of ``specops/ops/residual_sample.py``.
"""
from __future__ import annotations

import torch

from specops.backends import registry
from specops.ops._preconditions import check_verify

_lib = torch.library.Library("specops", "FRAGMENT")
_lib.define(
    "verify(Tensor target, bool target_is_probs, Tensor target_row_start, Tensor draft_ids, "
    "Tensor draft_row_start, Tensor num_draft, Tensor? draft, bool draft_is_probs, "
    "Tensor inv_temp, Tensor top_k, Tensor top_p, Tensor min_p, Tensor seed, Tensor offset, "
    "int max_k, str backend, Tensor? forced_num_accepted=None) -> (Tensor, Tensor, Tensor)")


def run(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
        draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, backend,
        forced_num_accepted=None):
    """The op's kernel (CPU and CUDA): the backend's walk, after the preconditions.  Eager
    public calls run it directly, with scalar parameters as Python numbers."""
    check_verify(max_k, "token", forced_num_accepted)
    kw = {} if forced_num_accepted is None else {"forced_num_accepted": forced_num_accepted}
    return registry.load(backend).verify(
        target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
        draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, **kw)


_lib.impl("verify", run, "CPU")
_lib.impl("verify", run, "CUDA")


@torch.library.register_fake("specops::verify", lib=_lib)
def _(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft,
      draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, backend,
      forced_num_accepted=None):
    check_verify(max_k, "token", forced_num_accepted)
    B = num_draft.shape[0]
    dev = target.device
    return (target.new_empty((B, max_k + 1), dtype=torch.int32),
            torch.empty((B,), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.bool, device=dev))


verify_op = torch.ops.specops.verify.default
