"""The C++ CPU backend (``specops._C``): torch marshalling around the torch-free kernels.

Each function has exactly the signature of ``specops.backends.reference`` and returns the
same values bit for bit.  Tensors are passed to the native code as raw addresses
(``data_ptr()``) with their sizes and row strides; every tensor whose address is passed is
held in a local variable until the call returns, and outputs are allocated here.  The native
code releases the GIL, never allocates on the hot path, and bounds-checks every row index.
"""
from __future__ import annotations

import torch

from specops import _C

_DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


def _rows(t, probs: bool):
    """A CPU [rows, V] tensor the kernels can read in place (unit column stride)."""
    if (t.device.type == "cpu" and t.dim() == 2 and t.dtype in _DTYPE_CODE
            and (not probs or t.dtype == torch.float32) and (t.size(1) <= 1 or t.stride(1) == 1)):
        return t  # fast path: already readable in place (only raw addresses are taken)
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dim() != 2:
        raise ValueError(f"specops cpu backend: expected a 2-D [rows, V] tensor, got shape "
                         f"{tuple(t.shape)}")
    if probs or t.dtype not in _DTYPE_CODE:
        t = t.to(torch.float32)
    if t.size(1) > 1 and t.stride(1) != 1:
        t = t.contiguous()
    return t


def _vec(t, dtype, n: int, name: str):
    if (type(t) is torch.Tensor and t.dtype == dtype and t.dim() == 1 and t.device.type == "cpu"
            and t.is_contiguous() and t.numel() >= n):
        return t  # fast path: the common case from specops.api, no copy and no new tensor
    t = torch.as_tensor(t).detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.reshape(-1).to(dtype).contiguous()
    if t.numel() < n:
        raise ValueError(f"specops cpu backend: {name} has {t.numel()} entries, expected {n}")
    return t


def _draft_args(draft):
    """(ptr, dtype code, rows, V, row stride) of an optional draft matrix."""
    if draft is None:
        return 0, 0, 0, 0, 0
    return (draft.data_ptr(), _DTYPE_CODE[draft.dtype], draft.size(0), draft.size(1),
            draft.stride(0))


def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k):
    dev = target.device
    tgt = _rows(target, bool(target_is_probs))
    V = tgt.size(1)
    nd = _vec(num_draft, torch.int64, 0, "num_draft")
    B = nd.numel()
    trs = _vec(target_row_start, torch.int64, B, "target_row_start")
    drs = _vec(draft_row_start, torch.int64, B, "draft_row_start")
    ids = _vec(draft_ids, torch.int64, 0, "draft_ids")
    it = _vec(inv_temp, torch.float32, B, "inv_temp")
    tk = _vec(top_k, torch.int64, B, "top_k")
    tp = _vec(top_p, torch.float32, B, "top_p")
    mp = _vec(min_p, torch.float32, B, "min_p")
    sd = _vec(seed, torch.int64, B, "seed")
    of = _vec(offset, torch.int64, B, "offset")
    dr = None if draft is None else _rows(draft, bool(draft_is_probs))
    if dr is not None and dr.size(1) != V:
        raise ValueError(f"specops cpu backend: draft has V={dr.size(1)}, target has V={V}")
    max_k = max(int(max_k), 0)
    tok = torch.empty((B, max_k + 1), dtype=torch.int32)
    nacc = torch.empty(B, dtype=torch.int32)
    valid = torch.empty(B, dtype=torch.bool)
    d_ptr, d_dt, d_rows, d_V, d_stride = _draft_args(dr)
    _C.verify(tgt.data_ptr(), _DTYPE_CODE[tgt.dtype], tgt.size(0), V, tgt.stride(0),
              bool(target_is_probs), trs.data_ptr(), ids.data_ptr(), ids.numel(),
              drs.data_ptr(), nd.data_ptr(), d_ptr, d_dt, d_rows, d_V, d_stride,
              bool(draft_is_probs), it.data_ptr(), tk.data_ptr(), tp.data_ptr(),
              mp.data_ptr(), sd.data_ptr(), of.data_ptr(), B, max_k, tok.data_ptr(),
              nacc.data_ptr(), valid.data_ptr())
    if dev.type == "cpu":
        return tok, nacc, valid
    return tok.to(dev), nacc.to(dev), valid.to(dev)


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    dev = logits.device
    lg = _rows(logits, False)
    N, V = lg.shape
    it = _vec(inv_temp, torch.float32, N, "inv_temp")
    tk = _vec(top_k, torch.int64, N, "top_k")
    tp = _vec(top_p, torch.float32, N, "top_p")
    mp = _vec(min_p, torch.float32, N, "min_p")
    probs = torch.empty((N, V), dtype=torch.float32)
    valid = torch.empty(N, dtype=torch.bool)
    _C.sampling_probs(lg.data_ptr(), _DTYPE_CODE[lg.dtype], N, V, lg.stride(0), it.data_ptr(),
                      tk.data_ptr(), tp.data_ptr(), mp.data_ptr(), probs.data_ptr(),
                      valid.data_ptr())
    return probs.to(dev), valid.to(dev)


def _probs_op_args(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
                   draft_probs, greedy, seed, offset):
    P = _rows(target_probs, True)
    nd = _vec(num_draft, torch.int64, 0, "num_draft")
    B = nd.numel()
    keep = dict(
        P=P, nd=nd,
        trs=_vec(target_row_start, torch.int64, B, "target_row_start"),
        drs=_vec(draft_row_start, torch.int64, B, "draft_row_start"),
        ids=_vec(draft_ids, torch.int64, 0, "draft_ids"),
        gr=_vec(greedy, torch.bool, B, "greedy"),
        sd=_vec(seed, torch.int64, B, "seed"),
        of=_vec(offset, torch.int64, B, "offset"),
        Q=None if draft_probs is None else _rows(draft_probs, True),
    )
    if keep["Q"] is not None and keep["Q"].size(1) != P.size(1):
        raise ValueError("specops cpu backend: draft_probs and target_probs differ in V")
    k = keep
    d_ptr, _, d_rows, d_V, d_stride = _draft_args(k["Q"])
    args = (P.data_ptr(), P.size(0), P.size(1), P.stride(0), k["trs"].data_ptr(),
            k["ids"].data_ptr(), k["ids"].numel(), k["drs"].data_ptr(), nd.data_ptr(), d_ptr,
            d_rows, d_V, d_stride, k["gr"].data_ptr(), k["sd"].data_ptr(), k["of"].data_ptr())
    return args, B, keep


def accept(target_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft_probs,
           greedy, seed, offset, max_k):
    args, B, keep = _probs_op_args(target_probs, target_row_start, draft_ids, draft_row_start,
                                   num_draft, draft_probs, greedy, seed, offset)
    nacc = torch.empty(B, dtype=torch.int32)
    _C.accept(*args, B, max(int(max_k), 0), nacc.data_ptr())
    del keep
    return nacc.to(target_probs.device)


def residual_sample(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
                    draft_probs, greedy, seed, offset, num_accepted, max_k):
    args, B, keep = _probs_op_args(target_probs, target_row_start, draft_ids, draft_row_start,
                                   num_draft, draft_probs, greedy, seed, offset)
    na = _vec(num_accepted, torch.int32, B, "num_accepted")
    tok = torch.empty(B, dtype=torch.int32)
    _C.residual_sample(*args, na.data_ptr(), B, max(int(max_k), 0), tok.data_ptr())
    del keep
    return tok.to(target_probs.device)
