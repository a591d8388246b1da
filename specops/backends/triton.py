"""The Triton backend: the four canonical functions (see ``specops.backends``) launched as
``@triton.jit`` kernels on the input tensors' device -- CUDA, or CPU under
``TRITON_INTERPRET=1`` (set before triton is first imported), which is how CI tests it.

The kernels live in the top-level ``triton_kernels/`` directory, installed as
``specops.triton_kernels``.  In a source checkout that was not installed, the directory is
loaded under that same name from the repository root.

Exactness: every op reproduces ``specops.reference`` bit for bit (probabilities) and token for
token (ids, num_accepted, valid): the portable exp, float32 multiply by the host 1/T, exact
top-k / top-p thresholds by radix select over float32 bit patterns with int64 masses, the
float64 renormalisation, Philox via ``tl.philox`` and the exact 64x64->128-bit draw.  Kernels
are launched with ``enable_fp_fusion=False``; ``bench/gpu_compile_check.py`` checks the PTX
(no float FMA, no approximate division, no flush-to-zero) and ``bench/gpu_check.sh`` checks
agreement on a GPU.

Layout: one program per request walks its block (verify, accept, residual_sample) or one
program per row (sampling_probs), looping over the vocabulary in tiles of ``BLOCK_V`` lanes
(masked past V).  ``verify`` does no host synchronisation (CUDA-graph capturable).  The
vocabulary is not split across programs yet, so small batches leave most of a GPU idle.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

try:
    import triton  # noqa: F401
    import triton.language  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "specops' Triton backend needs the 'triton' package (pip install triton; on CPU, "
        "set TRITON_INTERPRET=1 before importing it to run the kernels in the interpreter). "
        f"Import failed with: {exc}") from exc

import torch


def _load_kernels():
    name = "specops.triton_kernels"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in (name, "specops.triton_kernels"):
            raise
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pkg_dir = os.path.join(root, "triton_kernels")
    init = os.path.join(pkg_dir, "__init__.py")
    if not os.path.isfile(init):
        raise ImportError("specops.triton_kernels is not installed and no triton_kernels/ "
                          "directory was found next to the specops package")
    spec = importlib.util.spec_from_file_location(name, init,
                                                  submodule_search_locations=[pkg_dir])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


_K = _load_kernels()


def _interpreting() -> bool:
    """Whether the kernels were decorated for Triton's interpreter (TRITON_INTERPRET=1 when
    they were first imported)."""
    kern = importlib.import_module(_K.__name__ + ".verify")._verify_kernel
    return type(kern).__name__ == "InterpretedFunction"


def _check_device(t):
    if t.device.type != "cuda" and not _interpreting():
        raise RuntimeError(
            "specops Triton backend: tensors on %s need TRITON_INTERPRET=1 (set before "
            "importing triton) to run the kernels in the interpreter; compiled kernels run "
            "on CUDA tensors only" % t.device)


def _i64(t):
    return t.to(torch.int64).contiguous()


def _f32(t):
    return t.to(torch.float32).contiguous()


def _rows(t):
    if t is None:
        return None
    return t if t.stride(-1) == 1 else t.contiguous()


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k):
    _check_device(target)
    return _K.verify(_rows(target), bool(target_is_probs), _i64(target_row_start),
                     _i64(draft_ids.reshape(-1)), _i64(draft_row_start), _i64(num_draft),
                     _rows(draft), bool(draft_is_probs), _f32(inv_temp), _i64(top_k),
                     _f32(top_p), _f32(min_p), _i64(seed), _i64(offset), int(max_k))


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    _check_device(logits)
    return _K.sampling_probs(_rows(logits), _f32(inv_temp), _i64(top_k), _f32(top_p),
                             _f32(min_p))


def accept(target_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft_probs,
           greedy, seed, offset, max_k):
    _check_device(target_probs)
    return _K.accept(_rows(_f32(target_probs)), _i64(target_row_start),
                     _i64(draft_ids.reshape(-1)), _i64(draft_row_start), _i64(num_draft),
                     None if draft_probs is None else _rows(_f32(draft_probs)),
                     greedy.to(torch.bool).contiguous(), _i64(seed), _i64(offset), int(max_k))


def residual_sample(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
                    draft_probs, greedy, seed, offset, num_accepted, max_k):
    _check_device(target_probs)
    return _K.residual_sample(_rows(_f32(target_probs)), _i64(target_row_start),
                              _i64(draft_ids.reshape(-1)), _i64(draft_row_start),
                              _i64(num_draft),
                              None if draft_probs is None else _rows(_f32(draft_probs)),
                              greedy.to(torch.bool).contiguous(), _i64(seed), _i64(offset),
                              num_accepted.to(torch.int32).contiguous(), int(max_k))
