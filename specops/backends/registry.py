"""Finding a backend module by name, with errors that say how to get a missing one."""
from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from typing import Optional

import torch

BACKENDS = ("reference", "cpu", "triton")

_HOW_TO_GET = {
    "cpu": "the C++ extension specops._C is not built; reinstall specops with a C++17 "
           "compiler and without SPECOPS_BUILD_CPP=0 (for example `pip install .`)",
    "triton": "`pip install triton` (CUDA GPUs; on a machine without a GPU, also set "
              "TRITON_INTERPRET=1 before importing triton to run the kernels on CPU)",
}
_cache: dict = {}
_warned = []                # the fallback warning, once per process


class BackendUnavailable(RuntimeError):
    pass


def load(name: str):
    """Import specops.backends.<name>; raise BackendUnavailable saying how to get it."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of 'auto', {', '.join(map(repr, BACKENDS))}; "
                         f"got {name!r}")
    if name not in _cache:
        try:
            _cache[name] = importlib.import_module(f"specops.backends.{name}")
        except ImportError as exc:
            raise BackendUnavailable(f"specops backend {name!r} is unavailable: "
                                     f"{_HOW_TO_GET.get(name, '')} ({exc})") from exc
    return _cache[name]


def why_unavailable(name: str, device: str = "cpu") -> Optional[str]:
    """None if backend ``name`` runs on ``device`` ("cpu" or "cuda") here, else why not
    (a missing or unloadable extension, a bad ``SPECOPS_CPU_ISA``, no interpreter...)."""
    if name == "triton" and importlib.util.find_spec("triton") is None:
        return f"Triton is not installed: {_HOW_TO_GET['triton']}"
    if name == "triton" and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "Triton on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported"
    if name in ("cpu", "reference") and device != "cpu":
        return f"backend {name!r} runs on CPU tensors only"
    try:
        load(name)
    except (BackendUnavailable, RuntimeError, ValueError) as exc:
        return str(exc)
    return None


def is_available(name: str, device: str = "cpu") -> bool:
    return why_unavailable(name, device) is None


def available_backends(device: str = "cpu") -> list:
    """Backends that can run on `device` ("cpu" or "cuda") in this process
    (``why_unavailable`` says why the others cannot)."""
    return [b for b in BACKENDS if is_available(b, device)]


def resolve(backend: str, device: torch.device) -> str:
    """Pick the backend for tensors on `device`, or explain why the requested one can't run."""
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {type(backend).__name__}")
    return _resolve(backend, device.type)


def _resolve(backend: str, dev: str) -> str:
    # Imports backends: run eagerly even under torch.compile (the answer is a constant).
    if backend == "auto":
        if dev == "cuda":
            load("triton")
            return "triton"
        reason = why_unavailable("cpu")
        if reason is not None and not _warned:
            _warned.append(reason)
            warnings.warn("specops: backend='auto' runs the numpy reference on CPU tensors "
                          "(exact, but tens of times slower than the C++ backend) because "
                          f"the C++ backend cannot run: {reason}", RuntimeWarning,
                          stacklevel=4)
        return "reference" if reason is not None else "cpu"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of 'auto', {', '.join(map(repr, BACKENDS))}; "
                         f"got {backend!r}")
    if backend == "cpu" and dev != "cpu":
        raise ValueError(f"backend='cpu' needs CPU tensors; target is on {dev}")
    if backend == "reference" and dev != "cpu":
        raise ValueError(f"backend='reference' needs CPU tensors; target is on {dev}")
    if backend == "triton" and importlib.util.find_spec("triton") is None:
        raise BackendUnavailable(f"specops backend 'triton' is unavailable: {_HOW_TO_GET['triton']}")
    if backend == "triton" and dev == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailable("backend='triton' on CPU tensors needs TRITON_INTERPRET=1 "
                                 "set before triton is imported (the Triton interpreter)")
    load(backend)
    return backend


# What ``torch.compiler.assume_constant_result`` does (tests/test_contract.py checks that it
# still is), without importing torch._dynamo at ``import specops`` (it doubles the import
# time): under torch.compile ``_resolve`` runs eagerly and its answer is a constant.
_resolve._dynamo_marked_constant = True


def shard_passes():
    """The C++ backend's shard-local passes for ``specops.distributed``
    (``specops.backends.cpu_shard``; its ``usable(device)`` is False where ``specops._C`` is
    not built, and the distributed walk then runs its torch code)."""
    return importlib.import_module("specops.backends.cpu_shard")
