"""The argument layer: every public entry point's checks and the canonical arguments of the
ops (``specops.backends`` documents each field).

``verify_block``, ``verify_block_unfused``, ``specops.distributed.verify_block``,
``verify_tree``, ``sample_without_replacement`` and the SGLang drop-ins check their
arguments here, with the same rules and the same messages:

* types, shapes, dtypes and devices are always checked;
* *values* are read on the host as ``validate`` allows (reference section 8): ``True`` reads
  every value (a CUDA tensor's too, which synchronises), ``None`` (default) only what is free
  (Python scalars, CPU tensors), ``False`` nothing; under ``torch.compile`` tracing and
  CUDA-graph capture nothing is read either.  What is not checked the backends guard: a
  malformed request emits -1, ``num_accepted = 0``, ``valid = False``, nothing is read out of
  bounds.  Every error is a ``ValueError`` / ``TypeError`` naming the argument, raised before
  any kernel runs.

The result is ``Canonical`` (chain) or ``TreeCanonical`` (tree): the flattened arguments of
``specops::verify`` / ``specops::verify_tree`` by name.  Per-request parameters given as
Python scalars stay Python numbers there (the backends broadcast them, which saves building
tensors on every eager call); ``to_op_tensors()`` turns them into [B] tensors, the form the
registered ops take.  Per-call costs are cached by value (``specops._cache``): the checks of
types, shapes, strides, dtypes and devices run once per argument layout (``Layout``, keyed on
everything they read: a call whose key matches would pass them again), the value checks on
every call; a few [B] values (at most ``FEW``) are read as one list and checked in Python.
"""
from specops._args.common import *  # noqa: F401,F403
from specops._args.common import (_sequence, _temperature, with_tensors)  # noqa: F401
from specops._args.chain import Canonical, Layout, prepare, _LAYOUTS  # noqa: F401
from specops._args.tree import TreeCanonical, prepare_tree, tree_depth  # noqa: F401
