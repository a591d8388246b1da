"""Triton kernels of specops, installed as ``specops.triton_kernels`` (never as a top-level
``triton_kernels``: that import name belongs to another package).

One op per module, each with its ``@triton.jit`` kernel ``_<op>_kernel`` and its launcher:
``sampling_probs`` (the transform), ``verify`` (the one verification walk, with its forced
mode, run as the vocabulary-split pipeline of ``split.py`` or one program per request),
``verify_block`` (block verification), ``accept_rates`` (beta per position read) and
``verify_tree`` (tree verification, reference section 11).  The
launchers take the canonical arguments of ``specops.backends`` and run on the
tensors' device (CUDA, or CPU under ``TRITON_INTERPRET=1``).
"""
from ._launch import INTERPRETED
from .sampling_probs import sampling_probs
from .split import filters_on
from .verify import verify
from .verify_block import verify_block
from .accept_rates import accept_rates
from .verify_tree import verify_tree

__all__ = ["sampling_probs", "verify", "verify_block", "accept_rates", "verify_tree",
           "filters_on", "INTERPRETED"]
