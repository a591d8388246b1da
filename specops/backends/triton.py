"""The Triton backend: the canonical functions (see ``specops.backends``) launched as
``@triton.jit`` kernels on the input tensors' device -- CUDA, or CPU under
``TRITON_INTERPRET=1`` (set before triton is first imported), which is how CI tests it.

The kernels live in ``specops/triton_kernels/``; only this module imports them.

Exactness: both ops reproduce ``specops.reference`` bit for bit (probabilities) and token for
token (ids, num_accepted, valid): exact upcasts, the portable exp, float32 multiply by the
host 1/T, exact top-k / top-p thresholds by radix select over float32 bit patterns with int64
masses, the float64 renormalisation, Philox via ``tl.philox`` and the exact 64x64->128-bit
draw.  Kernels are launched with ``enable_fp_fusion=False``; ``bench/gpu_compile_check.py``
checks the PTX (no float FMA, no approximate division, no flush-to-zero) and
``bench/gpu_check.sh`` checks agreement on a GPU.

Layout: sampling_probs runs one program per row,
looping over the vocabulary in tiles of ``BLOCK_V`` lanes (masked past V).
``verify`` does no host synchronisation (CUDA-graph capturable).  It runs the vocabulary-split
pipeline (``split.py``) or one program per request (``verify.py``): ``dispatch.py`` asks the
bandwidth model of ``_launch.use_split``, which decides from the shapes.  ``verify_tree`` (reference section 11) runs
one program per request (``specops/triton_kernels/verify_tree.py``), also without host
synchronisation; it allocates two [B, V] int64 scratch rows per call.  The traversal methods
(section 14) run ``specops/triton_kernels/verify_traversal.py``, one program per request with four
[B, max_depth + 1, V] scratch rows (float32 / int64) per call.  GBV (section 15,
``method="gbv"``) runs
``specops/triton_kernels/verify_gbv.py``: two kernels around a device sort, with
[B, max_depth (+ 1), V] scratch rows (see its docstring).
"""
from __future__ import annotations

try:
    import triton  # noqa: F401
    import triton.language  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "specops' Triton backend needs the 'triton' package (pip install triton; on CPU, "
        "set TRITON_INTERPRET=1 before importing it to run the kernels in the interpreter). "
        f"Import failed with: {exc}") from exc

import torch

from specops import triton_kernels as _K
from specops._cache import const_vec
from specops._contract import TRAVERSAL_METHODS
from specops._sgl_tree import coin_grid, convert_tree, present_out_of_range
from specops.reference.coins import ACC_CAP, check_thresholds


def _check_device(t):
    if t.device.type != "cuda" and not _K.INTERPRETED:
        raise RuntimeError(
            "specops Triton backend: tensors on %s need TRITON_INTERPRET=1 (set before "
            "importing triton) to run the kernels in the interpreter; compiled kernels run "
            "on CUDA tensors only" % t.device)


def _fill(value, n, dtype, device):
    """A [n] tensor of one Python number, cached (``specops._cache``: not while a graph is
    traced or captured): a steady-state eager call with scalar parameters then launches
    nothing but the kernels (never written: kernels only read their inputs)."""
    return const_vec(value, n, dtype, device)


def _i64(t, n=0, device=None):
    """[n] int64 contiguous; a Python int (shared by every request) is broadcast."""
    if not isinstance(t, torch.Tensor):
        return _fill(int(t), n, torch.int64, device)
    return t.to(torch.int64).contiguous()


def _f32(t, n=0, device=None):
    """[n] float32 contiguous; a Python float (shared by every request) is broadcast."""
    if not isinstance(t, torch.Tensor):
        return _fill(float(t), n, torch.float32, device)
    return t.to(torch.float32).contiguous()


def _rows(t):
    if t is None:
        return None
    return t if t.stride(-1) == 1 else t.contiguous()


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
           method="token", want_rates=False, check_draft=False, forced_num_accepted=None):
    """``check_draft`` is not reported by the kernels (the op computes it from the outputs;
    on CUDA tensors the default call never asks)."""
    _check_device(target)
    B, dev = num_draft.shape[0], target.device
    rows = (_rows(target), bool(target_is_probs), _i64(target_row_start),
            _i64(draft_ids.reshape(-1)), _i64(draft_row_start), _i64(num_draft), _rows(draft),
            bool(draft_is_probs), _f32(inv_temp, B, dev), _i64(top_k, B, dev),
            _f32(top_p, B, dev), _f32(min_p, B, dev))
    stream = (_i64(seed, B, dev), _i64(offset, B, dev), int(max_k))
    if method == "block":
        out = _K.verify_block(*rows, *stream)
    else:
        has_topk, has_topp = _K.filters_on(top_k, top_p)
        out = _K.verify(*rows, *stream,
                        None if forced_num_accepted is None else _i64(forced_num_accepted),
                        has_topk, has_topp)
    if not want_rates:
        return out
    return (*out, _K.accept_rates(*rows, int(max_k), out[1], method == "block"))


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    _check_device(logits)
    return _K.sampling_probs(_rows(logits), _f32(inv_temp), _i64(top_k), _f32(top_p),
                             _f32(min_p))


def verify_tree(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
                inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method="rsd"):
    _check_device(target)
    B, dev = node_ids.shape[0], target.device
    if method == "gbv":         # section 15
        walk = _K.verify_gbv
    else:
        walk = _K.verify_traversal if method in TRAVERSAL_METHODS else _K.verify_tree
    return walk(_rows(target), bool(target_is_probs), _i64(node_ids),
                          _i64(parents), _i64(num_nodes, B, dev), _rows(draft),
                          bool(draft_is_probs), _f32(inv_temp, B, dev), _i64(top_k, B, dev),
                          _f32(top_p, B, dev), _f32(min_p, B, dev), _i64(seed, B, dev),
                          _i64(offset, B, dev), int(max_depth), method)


def coin_walk(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
              threshold_single, threshold_acc):
    """The caller-coin walk (section 13) by ``verify_coins.py`` on ``convert_tree``'s
    renumbering (the coins' grid values computed here with torch); a malformed request
    emits nothing."""
    _check_device(target)
    B, N, V = target.shape
    th = check_thresholds(threshold_single, threshold_acc)
    tree = convert_tree(next_token, next_sibling, int(max_depth))
    order = tree.order
    acc = 1.0 if th.exact or th.acc >= 1.0 else max(th.acc, ACC_CAP)
    tok, nacc, nodes, valid = _K.coin_walk(
        target, order, tree.parent_ids, tree.present, candidates.gather(1, order),
        coin_grid(coins).gather(1, order), coin_grid(final_coins), int(max_depth), th.single,
        acc, not th.exact)
    bad = tree.malformed | present_out_of_range(tree, candidates, V).any(1)
    keep = ~bad
    return (torch.where(keep[:, None], tok, -1), torch.where(keep, nacc, 0),
            torch.where(keep[:, None], nodes, -1), valid & keep)
