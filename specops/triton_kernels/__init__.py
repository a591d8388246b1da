"""Triton kernels of specops, installed as ``specops.triton_kernels`` (never as a top-level
``triton_kernels``: that import name belongs to another package).

One op per module, each with its ``@triton.jit`` kernel ``_<op>_kernel`` and its launcher:
``sampling_probs`` (the transform), ``verify`` (the one verification walk with its forced
mode: ``dispatch`` runs it as the fused kernel of ``verify.py``, one program per request, or
as the vocabulary-split pipeline of ``split*.py``), ``verify_block`` (block verification),
``accept_rates`` (beta per position read), ``verify_tree`` (tree verification, reference
section 11), ``verify_traversal`` (traversal verification, section 14) and ``verify_gbv`` (GBV,
section 15).  The launchers take the canonical arguments of ``specops.backends`` and run on
the tensors' device (CUDA, or CPU under ``TRITON_INTERPRET=1``).  Shared device code lives in
``_common`` (the row transform, Philox, the draw), ``_walk_common`` (a request's prologue,
output row and walk positions), ``_split_common``, ``_block_rows`` and ``_tree_rows``; host
code in ``_launch``.
"""
from ._launch import INTERPRETED
from .sampling_probs import sampling_probs
from .dispatch import filters_on, verify
from .verify_block import verify_block
from .accept_rates import accept_rates
from .verify_tree import verify_tree
from .verify_traversal import verify_traversal
from .verify_gbv import verify_gbv

__all__ = ["sampling_probs", "verify", "verify_block", "accept_rates", "verify_tree",
           "verify_traversal", "verify_gbv", "filters_on", "INTERPRETED"]
from .verify_coins import coin_walk
