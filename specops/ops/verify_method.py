"""specops::verify_method — the verify walk with a method and the acceptance rates.

``method`` is "token" (reference section 1) or "block" (block verification, section 9);
``want_rates`` adds ``accept_rates`` [B, max_k] float32 (section 10; [B, 0] when not asked
for).  A separate op from ``specops::verify`` so that the plain call keeps its three outputs
and its cost; registered the same way (``torch.library.Library``, one Python kernel for CPU
and CUDA, ``register_fake``).
"""
from __future__ import annotations

import torch

from specops.backends import registry
from specops.ops._preconditions import check_verify

_lib = torch.library.Library("specops", "FRAGMENT")
_lib.define(
    "verify_method(Tensor target, bool target_is_probs, Tensor target_row_start, "
    "Tensor draft_ids, Tensor draft_row_start, Tensor num_draft, Tensor? draft, "
    "bool draft_is_probs, Tensor inv_temp, Tensor top_k, Tensor top_p, Tensor min_p, "
    "Tensor seed, Tensor offset, int max_k, str backend, str method, bool want_rates) "
    "-> (Tensor, Tensor, Tensor, Tensor)")


def run(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
        draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, backend,
        method, want_rates):
    """The op's kernel: the backend's walk after the preconditions; always four outputs
    (rates [B, 0] unless want_rates).  Eager public calls run it directly."""
    check_verify(max_k, method)
    out = registry.load(backend).verify(
        target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
        draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
        method=method, want_rates=want_rates)
    if want_rates:
        return tuple(out)
    tok = out[0]
    return (*out, torch.empty((tok.shape[0], 0), dtype=torch.float32, device=tok.device))


_lib.impl("verify_method", run, "CPU")
_lib.impl("verify_method", run, "CUDA")


@torch.library.register_fake("specops::verify_method", lib=_lib)
def _(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft,
      draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, backend, method,
      want_rates):
    check_verify(max_k, method)
    B = num_draft.shape[0]
    dev = target.device
    return (target.new_empty((B, max_k + 1), dtype=torch.int32),
            torch.empty((B,), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.bool, device=dev),
            torch.empty((B, max_k if want_rates else 0), dtype=torch.float32, device=dev))


verify_method_op = torch.ops.specops.verify_method.default
