"""Shared by the sync-free tests: a guard that fails any host read of a tensor value made by
specops code, and a switch of the Triton pipeline (fused / vocabulary-split)."""
from __future__ import annotations

import contextlib
import os
import sys

import torch

import specops

_ROOTS = (os.path.dirname(os.path.abspath(specops.__file__)),)    # specops/, kernels included
_READS = ("__bool__", "__int__", "__index__", "__float__", "item", "tolist", "numpy", "cpu",
          "nonzero")


@contextlib.contextmanager
def no_host_reads():
    """Fail any tensor value read whose caller is specops code (torch and Triton's
    interpreter may read what they like: on a GPU the interpreter is not there)."""
    saved = {name: getattr(torch.Tensor, name) for name in _READS}
    seen = []

    def guard(name, orig):
        def wrapper(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(_ROOTS):
                seen.append(f"{name} from {caller}:{sys._getframe(1).f_lineno}")
            return orig(self, *args, **kwargs)
        return wrapper

    for name, orig in saved.items():
        setattr(torch.Tensor, name, guard(name, orig))
    try:
        yield seen
    finally:
        for name, orig in saved.items():
            setattr(torch.Tensor, name, orig)


@contextlib.contextmanager
def triton_path(path):
    old = os.environ.get("SPECOPS_TRITON_PIPELINE")
    if path is not None:
        os.environ["SPECOPS_TRITON_PIPELINE"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SPECOPS_TRITON_PIPELINE", None)
        else:
            os.environ["SPECOPS_TRITON_PIPELINE"] = old
