"""The chain's arguments: ``prepare`` -> ``Canonical``, the fields of ``specops::verify``."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from specops import _cache
from specops import reference as _ref
from specops._draft_probs import check_draft_probs
from specops._args.common import (ID_DTYPES, LOGIT_DTYPES, MAX_DRAFT_TOKENS, FEW, Range,
                                  check_storage, check_tensor, check_validate, extent_bytes,
                                  may_read, per_request,
                                  pick_target, rows, sampling_params, scalar, seeds, tracing,
                                  with_tensors)


class Canonical(NamedTuple):
    """The checked, flattened arguments of ``specops::verify`` (op argument order), and the
    layout they came from: ``padded`` is True when request b's target rows are
    ``b * (max_k + 1) + j`` and its draft rows ``b * max_k + j`` (the [B, K+1, V] layout;
    ``num_draft`` may still be ragged)."""
    target: torch.Tensor
    target_is_probs: bool
    target_row_start: torch.Tensor
    draft_ids: torch.Tensor
    draft_row_start: torch.Tensor
    num_draft: torch.Tensor
    draft: Optional[torch.Tensor]
    draft_is_probs: bool
    inv_temp: object            # [B] float32 tensor or a Python float
    top_k: object               # [B] int64 tensor or a Python int
    top_p: object
    min_p: object
    seed: object
    offset: object
    max_k: int
    padded: bool = False
    walk_checks_draft: bool = False     # the default draft_probs check runs in the walk

    @property
    def batch(self) -> int:
        return self.num_draft.shape[0]

    def op_args(self) -> tuple:
        """The positional arguments of ``specops::verify`` (before ``backend``)."""
        return tuple(self)[:15]

    def to_op_tensors(self) -> "Canonical":
        """Every per-request value a [B] tensor (the registered op's form)."""
        return with_tensors(self, self.batch, self.target.device)


# ----------------------------------------------------------------------------- the chain
class Layout(NamedTuple):
    """What ``prepare`` derives from the arguments' types, shapes, strides, dtypes and devices
    alone (never from a value): every check of those has passed.  Cached by ``_layout_key``,
    which holds everything it was derived from, so a call with the same key would pass the
    same checks; the value checks (``validate``) run on every call."""
    flat: bool
    B: int                      # padded layout; the flattened one: cu_num_draft_tokens' length
    K: int                      # padded layout: drafts per request
    V: int                      # the vocabulary the draft ids are checked against
    tname: str
    is_probs: bool
    dname: str
    unit: bool                  # target and draft have unit stride along V: rows() is a no-op
    extents: tuple = ()         # bytes each tensor of _STORAGE_ARGS addresses (0: absent):
                                # their storages are checked on every call


_LAYOUTS = _cache.Cache("argument layouts")


def _tensor_key(t):
    """The part of a layout key one tensor argument contributes (None: not a plain tensor or
    absent, which the checks handle on every call)."""
    if type(t) is torch.Tensor and t.layout is torch.strided:   # not a subclass, not sparse
        return (t.shape, t.stride(), t.dtype, t.device)
    return None if t is None else False


def _layout_key(target_logits, draft_token_ids, draft_probs, target_probs, draft_logits,
                num_draft_tokens, cu_num_draft_tokens, max_num_draft_tokens, vocab_size):
    key = (_tensor_key(target_logits), _tensor_key(target_probs),
           _tensor_key(draft_token_ids), _tensor_key(draft_probs), _tensor_key(draft_logits),
           _tensor_key(cu_num_draft_tokens), num_draft_tokens is None,
           max_num_draft_tokens is None, vocab_size)
    return None if False in key else key


def _check_layout(target_logits, draft_token_ids, draft_probs, target_probs, draft_logits,
                  num_draft_tokens, cu_num_draft_tokens, max_num_draft_tokens,
                  vocab_size) -> Layout:
    """Every check of types, shapes, dtypes and devices of the chain's tensors."""
    target, tname, is_probs = pick_target(target_logits, target_probs, draft_probs,
                                          draft_logits, (2, 3))
    device = target.device
    if draft_token_ids is None:
        raise ValueError("draft_token_ids is required (use a [B, 0] tensor for bonus-only)")
    flat = target.dim() == 2
    if flat and cu_num_draft_tokens is None:
        raise ValueError(f"{tname} is 2-D [N, V]: that is the flattened (vLLM) layout, which "
                         "needs cu_num_draft_tokens [B] (and draft_token_ids [T]); or pass "
                         f"{tname} as [B, K+1, V] with draft_token_ids [B, K]")
    check_tensor("draft_token_ids", draft_token_ids, ID_DTYPES, (1,) if flat else (2,), device)
    draft = draft_probs if draft_probs is not None else draft_logits
    dname = "draft_probs" if draft_probs is not None else "draft_logits"
    if draft is not None:
        check_tensor(dname, draft, (torch.float32,) if draft_probs is not None
                     else LOGIT_DTYPES, (2,) if flat else (3,), device)
    V = target.shape[-1] if vocab_size is None else vocab_size
    if not 1 <= V <= _ref.MAX_VOCAB:
        raise ValueError(f"{tname}: vocabulary size V must be in [1, {_ref.MAX_VOCAB}], got {V}")
    if draft is not None and draft.shape[-1] != target.shape[-1]:
        raise ValueError(f"{dname} must have {target.shape[-1]} columns like {tname}, got "
                         f"shape {tuple(draft.shape)}")
    unit = target.stride(-1) == 1 and (draft is None or draft.stride(-1) == 1)
    if flat:
        B = _check_flattened(tname, target, draft_token_ids, draft, dname,
                             cu_num_draft_tokens, num_draft_tokens)
        return Layout(True, B, -1, V, tname, is_probs, dname, unit, _extents(
            target_logits, target_probs, draft_token_ids, draft_probs, draft_logits,
            cu_num_draft_tokens))
    if cu_num_draft_tokens is not None:
        raise ValueError("cu_num_draft_tokens is for the flattened [N, V] layout; the "
                         "padded [B, K+1, V] layout takes num_draft_tokens")
    B, K1, _ = target.shape
    K = K1 - 1
    if K < 0:
        raise ValueError(f"{tname} must have K+1 >= 1 rows per request, got shape "
                         f"{tuple(target.shape)}")
    if tuple(draft_token_ids.shape) == (B, K1):
        raise ValueError(f"{tname} {tuple(target.shape)} has {K1} rows per request for "
                         f"{K1} drafts: the target needs K+1 = {K1 + 1} rows, one per draft "
                         "plus the bonus row (the target's distribution after the last draft)")
    if tuple(draft_token_ids.shape) != (B, K):
        raise ValueError(f"draft_token_ids must have shape [B, K] = [{B}, {K}] to match "
                         f"{tname} {tuple(target.shape)} (K+1 = {K1} rows per request), got "
                         f"{tuple(draft_token_ids.shape)}")
    if draft is not None and tuple(draft.shape) != (B, K, target.shape[-1]):
        raise ValueError(f"{dname} must have shape [B, K, V] = [{B}, {K}, "
                         f"{target.shape[-1]}], got {tuple(draft.shape)}")
    if max_num_draft_tokens is not None:
        raise ValueError("max_num_draft_tokens is for the flattened layout; the padded "
                         "layout's width is K + 1")
    return Layout(False, B, K, V, tname, is_probs, dname, unit, _extents(
        target_logits, target_probs, draft_token_ids, draft_probs, draft_logits, None))


_STORAGE_ARGS = ("target_logits", "target_probs", "draft_token_ids", "draft_probs",
                 "draft_logits", "cu_num_draft_tokens")


def _extents(*tensors) -> tuple:
    """The bytes each tensor argument of ``_STORAGE_ARGS`` addresses (0: absent or empty)."""
    return tuple(0 if t is None else extent_bytes(t) for t in tensors)


def _check_storages(lay: Layout, *tensors) -> None:
    """A cached layout's storages (never while tracing: the cache is not used then)."""
    for name, t, need in zip(_STORAGE_ARGS, tensors, lay.extents):
        if need:
            check_storage(name, t, need, graph=False)


def _check_flattened(tname, target, draft_token_ids, draft, dname, cu_num_draft_tokens,
                     num_draft_tokens) -> int:
    """The shape checks of vLLM's flattened layout; -> B."""
    if cu_num_draft_tokens is None:
        raise ValueError(f"{tname} is 2-D [N, V]: the flattened layout needs "
                         "cu_num_draft_tokens [B]; or pass a [B, K+1, V] tensor")
    if num_draft_tokens is not None:
        raise ValueError("num_draft_tokens is for the padded [B, K+1, V] layout; the "
                         "flattened layout takes cu_num_draft_tokens")
    check_tensor("cu_num_draft_tokens", cu_num_draft_tokens, ID_DTYPES, (1,))
    B = cu_num_draft_tokens.shape[0]
    T = draft_token_ids.shape[0]
    N = target.shape[0]
    if N != T + B:
        raise ValueError(f"{tname} must have T + B = {T} + {B} = {T + B} rows in the "
                         f"flattened layout (one per draft plus one bonus per request), got {N}")
    if draft is not None and draft.shape[0] != T:
        raise ValueError(f"{dname} must have T={T} rows (one per draft token), got "
                         f"{draft.shape[0]}")
    if B == 0 and T != 0:
        raise ValueError(f"cu_num_draft_tokens is empty (B=0) but draft_token_ids has T={T} "
                         "ids: every draft token must belong to a request")
    return B


def _flattened(cu_num_draft_tokens, T, max_num_draft_tokens, device, validate, graph):
    """Row starts, per-request draft counts and max_k of vLLM's flattened layout (its values;
    the shapes passed ``_check_flattened``)."""
    cu = cu_num_draft_tokens.to(device=device, dtype=torch.int64)
    B = cu.shape[0]
    prev = torch.cat([cu.new_zeros(1), cu[:-1]])
    num_draft = cu - prev
    host_ok = may_read(validate, cu_num_draft_tokens, graph)
    if host_ok and B > 0:
        # compared, not subtracted: a difference can wrap around in int64
        if int(cu[0]) < 0 or bool((cu[1:] < cu[:-1]).any()) or int(cu[-1]) != T:
            raise ValueError("cu_num_draft_tokens must be non-decreasing, start at >= 0 "
                             f"and end at T={T} (the number of draft tokens)")
    if max_num_draft_tokens is None:
        if graph or validate is False:
            raise ValueError("the flattened layout with validate=False, under torch.compile "
                             "or CUDA-graph capture needs max_num_draft_tokens (the output "
                             "width must not depend on tensor values)")
        max_k = int(num_draft.max()) if B > 0 else 0
    else:
        max_k = scalar("max_num_draft_tokens", max_num_draft_tokens, torch.int64,
                       Range(0, MAX_DRAFT_TOKENS, False, False,
                             f"an int in [0, {MAX_DRAFT_TOKENS}]"))  # a shape: always checked
        if host_ok and B > 0 and int(num_draft.max()) > max_k:
            raise ValueError(f"max_num_draft_tokens={max_k} is smaller than the longest "
                             f"block in cu_num_draft_tokens ({int(num_draft.max())})")
    target_row_start = prev + torch.arange(B, device=device, dtype=torch.int64)
    return target_row_start, prev, num_draft, max_k


def _padded_rows(B: int, K: int, device, graph=None):
    """(target_row_start, draft_row_start, num_draft) of the padded [B, K+1, V] layout."""
    def make():
        ar = torch.arange(B, device=device, dtype=torch.int64)
        return ar * (K + 1), ar * K, torch.full((B,), K, dtype=torch.int64, device=device)
    return _cache.const(("padded rows", B, K, device), make, graph)


def _check_ids(ids: torch.Tensor, V: int) -> None:
    """Every draft id in [-1, V).  A few ids are compared in Python (one read of the values,
    no reduction kernels); many by one aminmax (an interval: its ends suffice)."""
    if ids.numel() <= FEW:
        vals = ids.tolist()
        lo, hi = min(vals), max(vals)
    else:
        lo, hi = (int(v) for v in torch.aminmax(ids))
    if lo < -1 or hi >= V:
        raise ValueError(f"draft_token_ids must be in [-1, V={V}) (-1 marks padding)")


def prepare(*, target_logits=None, draft_token_ids=None, draft_probs=None, target_probs=None,
            draft_logits=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
            num_draft_tokens=None, cu_num_draft_tokens=None, seed=None, offset=None,
            generator=None, max_num_draft_tokens=None, validate=None,
            vocab_size=None) -> Canonical:
    """Check everything ``validate`` allows and return the canonical (flattened) arguments
    of ``specops::verify`` (scalar parameters as Python numbers: ``to_op_tensors``).
    ``vocab_size``: the global V when the tensors hold a vocabulary shard
    (specops.distributed): draft ids are checked against it, and the draft rows only for
    their range (a shard's row does not sum to 1).  The layout checks run once per layout
    (``Layout``); the value checks on every call.

    ``draft_probs`` values (reference section 8): ``validate=True`` and shards check every
    row the walk may read here (``check_draft_probs``); by default, where the values may be
    read, the walk checks what it reads (``Canonical.walk_checks_draft``: the caller passes
    ``check_draft`` to ``specops::verify`` and raises on its answer)."""
    check_validate(validate)
    graph = tracing()
    shapes = (target_logits, draft_token_ids, draft_probs, target_probs, draft_logits,
              num_draft_tokens, cu_num_draft_tokens, max_num_draft_tokens, vocab_size)
    key = None if graph else _layout_key(*shapes)
    lay = None if key is None else _LAYOUTS.entries.get(key)
    if lay is None:
        lay = _check_layout(*shapes)
        if key is not None:
            _LAYOUTS.get(key, lambda: lay)
    else:                                       # a cached layout: this call's storages
        _check_storages(lay, target_logits, target_probs, draft_token_ids, draft_probs,
                        draft_logits, cu_num_draft_tokens)
    is_probs = lay.is_probs
    target = target_probs if is_probs else target_logits
    draft = draft_probs if draft_probs is not None else draft_logits
    device = target.device
    V, B = target.shape[-1], lay.B
    if lay.flat:
        target_row_start, draft_row_start, num_draft, max_k = _flattened(
            cu_num_draft_tokens, draft_token_ids.shape[0], max_num_draft_tokens, device,
            validate, graph)
        target2, draft2, ids = target, draft, draft_token_ids
    else:
        max_k = K = lay.K
        target_row_start, draft_row_start, num_draft = _padded_rows(B, K, device, graph)
        if num_draft_tokens is not None:
            num_draft = per_request("num_draft_tokens", num_draft_tokens, B, torch.int64,
                                    device, Range(0, K, False, False, f"in [0, K={K}]"),
                                    validate=validate)
        target2 = target.reshape(B * (K + 1), V)
        draft2 = None if draft is None else draft.reshape(B * K, V)
        ids = draft_token_ids.reshape(B * K)
    if not lay.unit:                            # (a view of a unit-stride row has one)
        target2, draft2 = rows(target2), rows(draft2)
    read_ids = ids.numel() > 0 and may_read(validate, ids, graph)
    if read_ids:
        _check_ids(ids, lay.V)
    if ids.dtype != torch.int64:
        ids = ids.to(torch.int64)
    params = sampling_params(temperature, top_k, top_p, min_p, B, device, is_probs, validate,
                             graph)
    seed_t, offset_t = seeds(seed, offset, generator, B, device, params.all_greedy, validate,
                             graph)
    a = Canonical(target2, is_probs, target_row_start, ids, draft_row_start, num_draft,
                  draft2, draft_probs is not None, params.inv_temp, params.top_k,
                  params.top_p, params.min_p, seed_t, offset_t, max_k, not lay.flat)
    if draft_probs is not None and draft2.shape[0] and read_ids and \
            may_read(validate, num_draft, graph):       # (draft2 is on the ids' device)
        if validate is True or vocab_size is not None:
            check_draft_probs(a, shard=vocab_size is not None)
        else:
            a = a._replace(walk_checks_draft=True)
    return a
