"""The C++ CPU backend (``specops._C``): torch marshalling around the torch-free kernels.

Each function has exactly the signature of ``specops.backends.reference`` and returns the
same values bit for bit.  Per-request parameters (inv_temp, top_k, top_p, min_p, seed,
offset) may be Python numbers shared by every request: the native code reads them from the
call's own slots, so a scalar costs no tensor at all.  Tensors are passed to the native code as small tuples of integers
(see csrc/bindings.cpp): a matrix view ``(address, dtype code, rows, cols, row stride)`` and a
column view ``(address, element stride, dtype code)``.  Per-request [B] tensors are read in
place with their stride (stride 0, a scalar expanded with ``.expand(B)``, included): nothing is
copied unless a tensor is not a CPU tensor of an accepted dtype.  Every tensor whose address
is passed is held in a local variable until the call returns, and outputs are allocated here.
The native code releases the GIL, never allocates on the hot path, and bounds-checks every
row index.

The ISA level of the native passes is chosen at import: ``SPECOPS_CPU_ISA=scalar|sse2|avx2``
(default: the best this CPU runs).  A level that is unknown or cannot run here raises
ValueError naming the variable, from this import and from every call.
"""
from __future__ import annotations

import torch

from specops import _C

_C.isa()  # ValueError naming SPECOPS_CPU_ISA when it asks for a level that cannot run here

_MAT_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_F32, _I32, _I64 = 0, 3, 4
_COL_CODES = {torch.float32: _F32, torch.int32: _I32, torch.int64: _I64}

if _C.REQUEST_FIELDS != ("target_row_start", "draft_row_start", "num_draft", "inv_temp",
                         "top_k", "top_p", "min_p", "seed", "offset", "forced_num_accepted"):
    raise ImportError("specops._C was built from other sources than specops/backends/cpu.py "
                      "(REQUEST_FIELDS differ): rebuild it with `pip install -e .`")


def _rows(t, probs: bool):
    """A CPU [rows, V] tensor the kernels can read in place (unit column stride)."""
    if (t.is_cpu and t.dim() == 2 and t.dtype in _MAT_DTYPES
            and (not probs or t.dtype is torch.float32) and (t.size(1) <= 1 or t.stride(1) == 1)):
        return t  # fast path: already readable in place (only raw addresses are taken)
    t = t.detach()
    if not t.is_cpu:
        t = t.cpu()
    if t.dim() != 2:
        raise ValueError(f"specops cpu backend: expected a 2-D [rows, V] tensor, got shape "
                         f"{tuple(t.shape)}")
    if probs or t.dtype not in _MAT_DTYPES:
        t = t.to(torch.float32)
    if t.size(1) > 1 and t.stride(1) != 1:
        t = t.contiguous()
    return t


def _mat(t):
    rows, cols = t.shape
    return (t.data_ptr(), _MAT_DTYPES[t.dtype], rows, cols, t.stride()[0])


def _col(t, dtype, n: int, name: str, keep: list, ints: bool = False):
    """Column view (address, element stride, dtype code) of a 1-D tensor with >= n entries,
    read in place (any stride, 0 included); `ints`: int32 is read as is too.  A Python number
    (a value shared by every request) is passed as the number itself."""
    tt = type(t)
    if tt is float or tt is int:
        return float(t) if dtype is torch.float32 else int(t)
    if tt is torch.Tensor and t.is_cpu:
        dt = t.dtype
        if (dt is dtype or (ints and dt is torch.int32)) and t.dim() == 1 and t.numel() >= n:
            return (t.data_ptr(), t.stride()[0], _COL_CODES[dt])  # fast path: read in place
    t = torch.as_tensor(t).detach()
    if not t.is_cpu:
        t = t.cpu()
    t = t.reshape(-1).to(dtype).contiguous()
    if t.numel() < n:
        raise ValueError(f"specops cpu backend: {name} has {t.numel()} entries, expected {n}")
    keep.append(t)
    return (t.data_ptr(), 1, _COL_CODES[dtype])


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
           forced_num_accepted=None, method="token", want_rates=False):
    dev = target.device
    keep: list = []  # converted copies, alive until the call returns
    tgt = _rows(target, bool(target_is_probs))
    nd = num_draft
    B = nd.numel() if type(nd) is torch.Tensor else len(nd)
    I64, F32 = torch.int64, torch.float32
    ids = _col(draft_ids, I64, 0, "draft_ids", keep, ints=True)
    num_ids = draft_ids.numel() if type(draft_ids) is torch.Tensor else keep[-1].numel()
    requests = (
        _col(target_row_start, I64, B, "target_row_start", keep, True),
        _col(draft_row_start, I64, B, "draft_row_start", keep, True),
        _col(nd, I64, B, "num_draft", keep, True),
        _col(inv_temp, F32, B, "inv_temp", keep),
        _col(top_k, I64, B, "top_k", keep, True),
        _col(top_p, F32, B, "top_p", keep),
        _col(min_p, F32, B, "min_p", keep),
        _col(seed, I64, B, "seed", keep, True),
        _col(offset, I64, B, "offset", keep, True),
        None if forced_num_accepted is None else _col(forced_num_accepted, I64, B,
                                                      "forced_num_accepted", keep, True),
    )
    dr = None
    if draft is not None:
        dr = _rows(draft, bool(draft_is_probs))
        if dr.size(1) != tgt.size(1):
            raise ValueError(f"specops cpu backend: draft has V={dr.size(1)}, target has "
                             f"V={tgt.size(1)}")
    max_k = max(int(max_k), 0)
    tok = torch.empty((B, max_k + 1), dtype=torch.int32)
    nacc = torch.empty(B, dtype=torch.int32)
    valid = torch.empty(B, dtype=torch.bool)
    if method == "token" and not want_rates:
        _C.verify(_mat(tgt), bool(target_is_probs), None if dr is None else _mat(dr),
                  bool(draft_is_probs), ids, num_ids, requests, B, max_k, tok.data_ptr(),
                  nacc.data_ptr(), valid.data_ptr())
        del keep
        if dev.type == "cpu":
            return tok, nacc, valid
        return tok.to(dev), nacc.to(dev), valid.to(dev)
    rates = torch.empty((B, max_k), dtype=torch.float32)
    _C.verify(_mat(tgt), bool(target_is_probs), None if dr is None else _mat(dr),
              bool(draft_is_probs), ids, num_ids, requests, B, max_k, tok.data_ptr(),
              nacc.data_ptr(), valid.data_ptr(), method == "block",
              rates.data_ptr() if want_rates else 0)
    del keep
    out = (tok, nacc, valid) + ((rates,) if want_rates else ())
    return tuple(t.to(dev) for t in out)


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    dev = logits.device
    keep: list = []
    lg = _rows(logits, False)
    N, V = lg.shape
    rows = (_col(inv_temp, torch.float32, N, "inv_temp", keep),
            _col(top_k, torch.int64, N, "top_k", keep, True),
            _col(top_p, torch.float32, N, "top_p", keep),
            _col(min_p, torch.float32, N, "min_p", keep))
    probs = torch.empty((N, V), dtype=torch.float32)
    valid = torch.empty(N, dtype=torch.bool)
    _C.sampling_probs(_mat(lg), rows, probs.data_ptr(), valid.data_ptr())
    del keep
    return probs.to(dev), valid.to(dev)


def verify_tree(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
                inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method="rsd"):
    if method not in ("rsd", "mss"):
        raise ValueError(f"method must be 'rsd' or 'mss', got {method!r}")
    dev = target.device
    keep: list = []  # converted copies, alive until the call returns
    tgt = _rows(target, bool(target_is_probs))
    B, N = node_ids.shape
    if tgt.size(0) != B * N:
        raise ValueError(f"specops cpu backend: target has {tgt.size(0)} rows, expected "
                         f"B * N = {B * N}")
    I64, F32 = torch.int64, torch.float32
    # [B, N] -> B * N entries, node n of request b at b * N + n (a view unless not contiguous)
    flat = [t.reshape(-1) for t in (node_ids, parents)]
    keep += flat
    ids = _col(flat[0], I64, B * N, "node_ids", keep, True)
    par = _col(flat[1], I64, B * N, "parents", keep, True)
    nn = _col(num_nodes, I64, B, "num_nodes", keep, True)
    requests = (_col(inv_temp, F32, B, "inv_temp", keep),
                _col(top_k, I64, B, "top_k", keep, True),
                _col(top_p, F32, B, "top_p", keep),
                _col(min_p, F32, B, "min_p", keep),
                _col(seed, I64, B, "seed", keep, True),
                _col(offset, I64, B, "offset", keep, True))
    dr = None
    if draft is not None:
        dr = _rows(draft, bool(draft_is_probs))
        if tuple(dr.shape) != tuple(tgt.shape):
            raise ValueError(f"specops cpu backend: draft has shape {tuple(dr.shape)}, target "
                             f"{tuple(tgt.shape)}")
    D = max(int(max_depth), 0)
    tok = torch.empty((B, D + 1), dtype=torch.int32)
    nacc = torch.empty(B, dtype=torch.int32)
    nodes = torch.empty((B, D), dtype=torch.int32)
    valid = torch.empty(B, dtype=torch.bool)
    _C.verify_tree(_mat(tgt), bool(target_is_probs), None if dr is None else _mat(dr),
                   bool(draft_is_probs), ids, par, nn, requests, B, N, D, method == "mss",
                   tok.data_ptr(), nacc.data_ptr(), nodes.data_ptr(), valid.data_ptr())
    del keep
    out = (tok, nacc, nodes, valid)
    return out if dev.type == "cpu" else tuple(t.to(dev) for t in out)
