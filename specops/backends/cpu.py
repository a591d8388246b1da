"""The C++ CPU backend (``specops._C``): torch marshalling around the torch-free kernels.

Each function has exactly the signature of ``specops.backends.reference`` and returns the
same values bit for bit.  Each native call takes its fields by keyword (see
csrc/bindings/fields.h; a missing or unknown name is a ValueError there).  Per-request parameters
(inv_temp, top_k, top_p, min_p, seed, offset) may be Python numbers shared by every request:
the native code stores them in the call's own Scalars, so a scalar costs no tensor at all.
Tensors are passed as small tuples of integers: a matrix view ``(address, dtype code, rows,
cols, row stride)`` and a column view ``(address, element stride, dtype code)``.
Per-request [B] tensors are read in place with their stride (stride 0, a scalar expanded with
``.expand(B)``, included): nothing is copied unless a tensor is not a CPU tensor of an
accepted dtype.  Every tensor whose address is passed is held in a local variable until the
call returns, and outputs are allocated here.  The native code releases the GIL, never
allocates on the hot path, and bounds-checks every row index.  Requests (rows) run on at
most ``torch.get_num_threads()`` threads: the caller's and the workers of specops' own pool
(std::threads, no OpenMP runtime), so ``torch.set_num_threads`` / ``OMP_NUM_THREADS`` govern
specops as they govern torch.

The ISA level of the native passes is chosen when ``specops._C`` loads:
``SPECOPS_CPU_ISA=scalar|sse2|avx2|avx512`` (default: the best this CPU runs).  A level that
is unknown or cannot run here makes this module refuse to load with ``CpuIsaError`` (a
ValueError naming the variable, and a ``BackendUnavailable``): ``backend="cpu"`` raises it,
``available_backends()`` leaves "cpu" out (``backend="auto"`` then runs the reference and
warns why), and the rest of specops (``backend="reference"``, the CLI) works as usual.
"""
from __future__ import annotations

import torch

import specops._C as _C
from specops import _cache
from specops.backends import native
from specops._contract import IID_METHODS, TRAVERSAL_METHODS
from specops.reference.coins import ACC_CAP, check_thresholds
from specops.backends.registry import BackendUnavailable


class CpuIsaError(BackendUnavailable, ValueError):
    """SPECOPS_CPU_ISA names an ISA level that is unknown or cannot run here."""


try:  # the variable is read once, when _C loads; checked here once, not per call
    _C.isa()
except ValueError as exc:
    raise CpuIsaError(f"specops cpu backend: {exc}") from None

if native.stale(_C):
    raise ImportError(native.stale(_C))

_MAT_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_F32, _I32, _I64 = 0, 3, 4
_COL_CODES = {torch.float32: _F32, torch.int32: _I32, torch.int64: _I64}


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


def _matrix(t, probs, keep: list):
    """The matrix view of ``t`` (``_rows``), its copy, if one is made, held in ``keep``.  The
    engine's case (a CPU tensor of an accepted dtype, unit column stride) is read with
    five accessors and no further call."""
    if type(t) is torch.Tensor and t.is_cpu and t.dim() == 2:
        code = _MAT_DTYPES.get(t.dtype)
        if code is not None and (code == 0 or not probs):
            rows, cols = t.shape
            s0, s1 = t.stride()
            if s1 == 1 or cols <= 1:
                return (t.data_ptr(), code, rows, cols, s0)
    t = _rows(t, probs)
    keep.append(t)
    return _mat(t)


_CONST_COLS: dict = {}   # id -> (a constant of specops._cache, the dtype asked, its view)


def _col(t, dtype, n: int, name: str, keep: list, ints: bool = False):
    """Column view (address, element stride, dtype code) of a 1-D tensor with >= n entries,
    read in place (any stride, 0 included); `ints`: int32 is read as is too.  A Python number
    (a value shared by every request) is passed as the number itself.  The view of one of
    the argument layer's constants (``_cache.is_constant``: the padded layout's row starts) is
    remembered: such a tensor is never written, and the entry holds it alive."""
    tt = type(t)
    if tt is float or tt is int:
        return float(t) if dtype is torch.float32 else int(t)
    if tt is torch.Tensor and t.is_cpu:
        hit = _CONST_COLS.get(id(t))
        if hit is not None and hit[0] is t and hit[1] is dtype and t.numel() >= n:
            return hit[2]
        dt = t.dtype
        if (dt is dtype or (ints and dt is torch.int32)) and t.dim() == 1 and t.numel() >= n:
            view = (t.data_ptr(), t.stride()[0], _COL_CODES[dt])  # fast path: read in place
            if _cache.is_constant(t):
                if len(_CONST_COLS) >= 1024:
                    _CONST_COLS.clear()
                _CONST_COLS[id(t)] = (t, dtype, view)
            return view
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
           method="token", want_rates=False, check_draft=False, forced_num_accepted=None,
           native=None):
    """-> (token_ids, num_accepted, valid), then accept_rates with ``want_rates``, then
    draft_bad [B] int32 with ``check_draft`` (the default draft_probs check, made by the
    native walk in the passes that read the values: reference ``walk.draft_check``).
    ``native`` (bench: the kernel timed alone) is called instead of ``_C.verify`` with the
    same keyword fields; then (its result, the tensors the fields point into, the outputs a
    call writes) is returned."""
    keep: list = []  # converted copies, alive until the call returns
    target_is_probs, draft_is_probs = bool(target_is_probs), bool(draft_is_probs)
    tgt = _matrix(target, target_is_probs, keep)
    nd = num_draft
    B = nd.numel() if type(nd) is torch.Tensor else len(nd)
    I64, F32 = torch.int64, torch.float32
    ids = _col(draft_ids, I64, 0, "draft_ids", keep, ints=True)
    num_ids = draft_ids.numel() if type(draft_ids) is torch.Tensor else keep[-1].numel()
    dr = None
    if draft is not None:
        dr = _matrix(draft, draft_is_probs, keep)
        if dr[3] != tgt[3]:
            raise ValueError(f"specops cpu backend: draft has V={dr[3]}, target has "
                             f"V={tgt[3]}")
    max_k = max(int(max_k), 0)
    tok = torch.empty(B, max_k + 1, dtype=torch.int32)     # (sizes as ints: no tuple to parse)
    nacc = torch.empty(B, dtype=torch.int32)
    valid = torch.empty(B, dtype=torch.bool)
    rates = torch.empty(B, max_k, dtype=torch.float32) if want_rates else None
    bad = torch.empty(B, dtype=torch.int32) if check_draft else None
    # Fields by keyword, in the order the binding reads them (any order works; this one makes
    # each lookup a single compare).  A per-request parameter that is already a Python float /
    # int goes in as it is (the engine's common call, spared a function call per parameter).
    r = (native or _C.verify)(
        B=B, target_is_probs=target_is_probs, target=tgt,
        draft_is_probs=draft_is_probs, draft=dr,
        max_k=max_k, num_ids=num_ids, draft_ids=ids,
        target_row_start=_col(target_row_start, I64, B, "target_row_start", keep, True),
        draft_row_start=_col(draft_row_start, I64, B, "draft_row_start", keep, True),
        num_draft=_col(nd, I64, B, "num_draft", keep, True),
        inv_temp=inv_temp if type(inv_temp) is float else _col(inv_temp, F32, B, "inv_temp",
                                                               keep),
        top_k=top_k if type(top_k) is int else _col(top_k, I64, B, "top_k", keep, True),
        top_p=top_p if type(top_p) is float else _col(top_p, F32, B, "top_p", keep),
        min_p=min_p if type(min_p) is float else _col(min_p, F32, B, "min_p", keep),
        seed=seed if type(seed) is int else _col(seed, I64, B, "seed", keep, True),
        offset=offset if type(offset) is int else _col(offset, I64, B, "offset", keep, True),
        forced_num_accepted=None if forced_num_accepted is None else _col(
            forced_num_accepted, I64, B, "forced_num_accepted", keep, True),
        block=method == "block",
        out_tokens=tok.data_ptr(), out_num_accepted=nacc.data_ptr(),
        out_valid=valid.data_ptr(), out_rates=0 if rates is None else rates.data_ptr(),
        out_draft_bad=0 if bad is None else bad.data_ptr(), threads=torch.get_num_threads())
    outs = (tok, nacc, valid) if rates is None else (tok, nacc, valid, rates)
    if bad is not None:
        outs += (bad,)
    if native is not None:
        return r, keep + [target, draft], outs
    del keep
    return outs


def sampling_probs(logits, inv_temp, top_k, top_p, min_p):
    dev = logits.device
    keep: list = []
    lg = _rows(logits, False)
    N, V = lg.shape
    probs = torch.empty((N, V), dtype=torch.float32)
    valid = torch.empty(N, dtype=torch.bool)
    _C.sampling_probs(
        logits=_mat(lg),
        inv_temp=_col(inv_temp, torch.float32, N, "inv_temp", keep),
        top_k=_col(top_k, torch.int64, N, "top_k", keep, True),
        top_p=_col(top_p, torch.float32, N, "top_p", keep),
        min_p=_col(min_p, torch.float32, N, "min_p", keep),
        out_probs=probs.data_ptr(), out_valid=valid.data_ptr(),
        threads=torch.get_num_threads())
    del keep
    return probs.to(dev), valid.to(dev)


def verify_tree(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
                inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method="rsd"):
    walk = (_C.verify_gbv if method == "gbv" else
            _C.verify_traversal if method in TRAVERSAL_METHODS else _C.verify_tree)
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
    walk(  # by keyword, in binding order
        B=B, target_is_probs=bool(target_is_probs), target=_mat(tgt),
        draft_is_probs=bool(draft_is_probs), draft=None if dr is None else _mat(dr),
        N=N, max_depth=D,
        node_ids=_col(flat[0], I64, B * N, "node_ids", keep, True),
        parents=_col(flat[1], I64, B * N, "parents", keep, True),
        num_nodes=_col(num_nodes, I64, B, "num_nodes", keep, True),
        inv_temp=_col(inv_temp, F32, B, "inv_temp", keep),
        top_k=_col(top_k, I64, B, "top_k", keep, True),
        top_p=_col(top_p, F32, B, "top_p", keep),
        min_p=_col(min_p, F32, B, "min_p", keep),
        seed=_col(seed, I64, B, "seed", keep, True),
        offset=_col(offset, I64, B, "offset", keep, True),
        mss=method in IID_METHODS,
        out_tokens=tok.data_ptr(), out_num_accepted=nacc.data_ptr(),
        out_nodes=nodes.data_ptr(), out_valid=valid.data_ptr(),
        threads=torch.get_num_threads())
    del keep
    out = (tok, nacc, nodes, valid)
    return out if dev.type == "cpu" else tuple(t.to(dev) for t in out)


def coin_walk(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
              threshold_single, threshold_acc):
    """The caller-coin walk (section 13) by ``csrc/verify/coins.cpp`` on CPU tensors; the
    kernel finds the malformed requests (``specops._sgl_tree.malformed_sgl_requests``)
    itself and emits nothing for them."""
    B, N, V = target.shape
    D = int(max_depth)
    th = check_thresholds(threshold_single, threshold_acc)
    keep = [t.contiguous() for t in (target, candidates, next_token, next_sibling, coins,
                                     final_coins)]
    tokens = torch.empty(B, D + 1, dtype=torch.int32)
    nacc = torch.empty(B, dtype=torch.int32)
    nodes = torch.empty(B, max(D, 1), dtype=torch.int32)
    valid = torch.empty(B, dtype=torch.uint8)
    acc = 1.0 if th.exact or th.acc >= 1.0 else max(th.acc, ACC_CAP)
    _C.coin_walk(B=B, N=N, V=V, max_depth=D, target=keep[0].data_ptr(),
                 candidates=keep[1].data_ptr(), next_token=keep[2].data_ptr(),
                 next_sibling=keep[3].data_ptr(), coins=keep[4].data_ptr(),
                 final_coins=keep[5].data_ptr(), relaxed=not th.exact, single=float(th.single),
                 acc_scale=float(acc), out_tokens=tokens.data_ptr(),
                 out_num_accepted=nacc.data_ptr(), out_nodes=nodes.data_ptr(),
                 out_valid=valid.data_ptr(), threads=torch.get_num_threads())
    return tokens, nacc, nodes[:, :D], valid.bool()
