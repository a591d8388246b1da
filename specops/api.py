"""The public call: argument checks, the two layouts, and dispatch to the custom ops.

Every check here runs before any kernel.  Checks that need to look at tensor *values*
(draft id range, per-request parameter ranges given as tensors) run on CPU tensors and on
CUDA tensors outside CUDA-graph capture and ``torch.compile`` tracing; inside those the
kernels' own guards apply (ids outside [0, V) end a block; nothing is read out of bounds).
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch

from specops import reference as _ref
from specops.backends import registry
from specops.ops import accept_op, residual_sample_op, sampling_probs_op, verify_op

LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ID_DTYPES = (torch.int32, torch.int64)


class VerifyOutput(NamedTuple):
    """token_ids [B, K+1] int32: accepted drafts, then the correction or bonus token, then -1.
    num_accepted [B] int32.  valid [B] bool: False where a target row the verifier read was
    invalid (NaN / +inf / all -inf logits, or a malformed probability row); that request's
    row then holds -1 from the failing position on (see specops.reference, section 3)."""
    token_ids: torch.Tensor
    num_accepted: torch.Tensor
    valid: torch.Tensor


def _tracing() -> bool:
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _check_tensor(name, t, dtypes, ndims=None, device=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if ndims is not None and t.dim() not in ndims:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndims))} dimensions, "
                         f"got shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device} like the target, got {t.device}")


class _Range(NamedTuple):
    """An allowed interval for a per-request parameter, checked on Python scalars without
    touching a tensor (no device work, no host sync) and on tensors element-wise."""
    lo: float
    hi: float
    lo_open: bool
    hi_open: bool
    text: str

    def holds(self, x):
        lo_ok = (x > self.lo) if self.lo_open else (x >= self.lo)
        hi_ok = (x < self.hi) if self.hi_open else (x <= self.hi)
        return lo_ok & hi_ok


INF = float("inf")
_F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103      # smallest magnitude that rounds to inf in float32
TEMPERATURE = _Range(0.0, INF, False, True, "finite and >= 0 (0 = greedy)")
TOP_K = _Range(0, INF, False, True, "an int >= 0 (0 = off)")
TOP_P = _Range(0.0, 1.0, True, False, "in (0, 1] (1 = off)")
MIN_P = _Range(0.0, 1.0, False, False, "in [0, 1] (0 = off)")


def _per_request(name, value, B, dtype, device, rng: Optional[_Range]):
    """Scalar or [B] tensor/sequence -> [B] tensor of `dtype` on `device`, range-checked."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            value = value.reshape(1).expand(B)
        if value.dim() != 1 or value.shape[0] != B:
            raise ValueError(f"{name} must be a scalar or a [B={B}] tensor, got shape "
                             f"{tuple(value.shape)}")
        if value.dtype.is_complex or value.dtype == torch.bool:
            raise TypeError(f"{name} must be a real number tensor, got {value.dtype}")
        if dtype.is_floating_point is False and value.dtype.is_floating_point:
            raise TypeError(f"{name} must be an integer tensor, got {value.dtype}")
        t = value.to(device=device, dtype=dtype)
        if rng is not None and not _tracing() and not bool(rng.holds(t).all()):
            raise ValueError(f"{name} must be {rng.text}; got {t.tolist() if B <= 16 else t}")
        return t
    if isinstance(value, (list, tuple)):
        return _per_request(name, torch.tensor(value), B, dtype, device, rng)
    if not isinstance(value, numbers.Number) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number or a [B] tensor, got {type(value).__name__}")
    if not dtype.is_floating_point:
        if not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if not -(2 ** 63) <= value < 2 ** 63:
            raise ValueError(f"{name} must fit in int64, got {value}")
    else:
        value = float(value)
        if abs(value) >= _F32_OVERFLOW:         # rounds to inf in float32: fails the range
            value = math.copysign(INF, value)
        else:
            value = float(np.float32(value))    # the value the kernels will see
    if rng is not None and not rng.holds(value):
        raise ValueError(f"{name} must be {rng.text}; got {value!r}")
    return torch.full((B,), value, dtype=dtype, device=device)


def _inv_temperature(temp):
    """1/T on the host side of the contract: float32(1 / float64(T)); 0 marks greedy."""
    t64 = temp.double()
    return torch.where(t64 > 0, 1.0 / torch.where(t64 > 0, t64, torch.ones_like(t64)),
                       torch.zeros_like(t64)).float()


def _seeds(seed, offset, generator, B, device, all_greedy):
    if seed is not None and generator is not None:
        raise ValueError("pass either seed (with offset) or generator, not both")
    if seed is None:
        if all_greedy:                       # greedy consumes no randomness
            seed_t = torch.zeros(B, dtype=torch.int64, device=device)
        else:
            gdev = generator.device if generator is not None else torch.device("cpu")
            seed_t = torch.randint(-(2 ** 63), 2 ** 63 - 1, (B,), generator=generator,
                                   dtype=torch.int64, device=gdev).to(device)
        if offset is None:
            offset = 0
    else:
        seed_t = _per_request("seed", seed, B, torch.int64, device, None)
    offset_t = _per_request("offset", 0 if offset is None else offset, B, torch.int64, device,
                            None)
    return seed_t, offset_t


def _prepare(target_logits=None, draft_token_ids=None, draft_probs=None, target_probs=None,
             draft_logits=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
             num_draft_tokens=None, cu_num_draft_tokens=None, seed=None, offset=None,
             generator=None):
    """Check everything and return the canonical (flattened) arguments of the ops."""
    if (target_logits is None) == (target_probs is None):
        raise ValueError("pass exactly one of target_logits and target_probs")
    if draft_probs is not None and draft_logits is not None:
        raise ValueError("pass at most one of draft_probs and draft_logits")
    is_probs = target_probs is not None
    tname = "target_probs" if is_probs else "target_logits"
    target = target_probs if is_probs else target_logits
    _check_tensor(tname, target, (torch.float32,) if is_probs else LOGIT_DTYPES, (2, 3))
    device = target.device
    if draft_token_ids is None:
        raise ValueError("draft_token_ids is required (use a [B, 0] tensor for bonus-only)")
    flat = target.dim() == 2
    _check_tensor("draft_token_ids", draft_token_ids, ID_DTYPES, (1,) if flat else (2,), device)
    draft = draft_probs if draft_probs is not None else draft_logits
    dname = "draft_probs" if draft_probs is not None else "draft_logits"
    if draft is not None:
        _check_tensor(dname, draft, (torch.float32,) if draft_probs is not None
                      else LOGIT_DTYPES, (2,) if flat else (3,), device)
    V = target.shape[-1]
    if not 1 <= V <= _ref.MAX_VOCAB:
        raise ValueError(f"{tname}: vocabulary size V must be in [1, {_ref.MAX_VOCAB}], got {V}")
    if draft is not None and draft.shape[-1] != V:
        raise ValueError(f"{dname} must have V={V} columns like {tname}, got shape "
                         f"{tuple(draft.shape)}")

    if flat:
        if cu_num_draft_tokens is None:
            raise ValueError(f"{tname} is 2-D [N, V]: the flattened layout needs "
                             "cu_num_draft_tokens [B]; or pass a [B, K+1, V] tensor")
        if num_draft_tokens is not None:
            raise ValueError("num_draft_tokens is for the padded [B, K+1, V] layout; the "
                             "flattened layout takes cu_num_draft_tokens")
        _check_tensor("cu_num_draft_tokens", cu_num_draft_tokens, ID_DTYPES, (1,))
        cu = cu_num_draft_tokens.to(device=device, dtype=torch.int64)
        B = cu.shape[0]
        T = draft_token_ids.shape[0]
        N = target.shape[0]
        if N != T + B:
            raise ValueError(f"{tname} must have T + B = {T} + {B} = {T + B} rows in the "
                             f"flattened layout (one per draft plus one bonus per request), "
                             f"got {N}")
        if draft is not None and draft.shape[0] != T:
            raise ValueError(f"{dname} must have T={T} rows (one per draft token), got "
                             f"{draft.shape[0]}")
        prev = torch.cat([cu.new_zeros(1), cu[:-1]])
        num_draft = cu - prev
        if not _tracing() and B > 0:
            if bool((num_draft < 0).any()) or int(cu[-1]) != T:
                raise ValueError("cu_num_draft_tokens must be non-decreasing, start at >= 0 "
                                 f"and end at T={T} (the number of draft tokens)")
        max_k = int(num_draft.max()) if B > 0 else 0
        draft_row_start = prev
        target_row_start = prev + torch.arange(B, device=device, dtype=torch.int64)
        target2 = target
        draft2 = draft
        ids = draft_token_ids
    else:
        if cu_num_draft_tokens is not None:
            raise ValueError("cu_num_draft_tokens is for the flattened [N, V] layout; the "
                             "padded [B, K+1, V] layout takes num_draft_tokens")
        B, K1, _ = target.shape
        K = K1 - 1
        if K < 0:
            raise ValueError(f"{tname} must have K+1 >= 1 rows per request, got shape "
                             f"{tuple(target.shape)}")
        if tuple(draft_token_ids.shape) != (B, K):
            raise ValueError(f"draft_token_ids must have shape [B, K] = [{B}, {K}] to match "
                             f"{tname} {tuple(target.shape)}, got {tuple(draft_token_ids.shape)}")
        if draft is not None and tuple(draft.shape) != (B, K, V):
            raise ValueError(f"{dname} must have shape [B, K, V] = [{B}, {K}, {V}], got "
                             f"{tuple(draft.shape)}")
        max_k = K
        if num_draft_tokens is None:
            num_draft = torch.full((B,), K, dtype=torch.int64, device=device)
        else:
            num_draft = _per_request("num_draft_tokens", num_draft_tokens, B, torch.int64,
                                     device, _Range(0, K, False, False, f"in [0, K={K}]"))
        ar = torch.arange(B, device=device, dtype=torch.int64)
        target_row_start = ar * K1
        draft_row_start = ar * K
        target2 = target.reshape(B * K1, V)
        draft2 = None if draft is None else draft.reshape(B * K, V)
        ids = draft_token_ids.reshape(B * K)
    if target2.stride(-1) != 1:
        target2 = target2.contiguous()
    if draft2 is not None and draft2.stride(-1) != 1:
        draft2 = draft2.contiguous()
    if not _tracing() and ids.numel() > 0:
        if bool(((ids < -1) | (ids >= V)).any()):
            raise ValueError(f"draft_token_ids must be in [-1, V={V}) (-1 marks padding)")
    ids = ids.to(torch.int64)

    temp = _per_request("temperature", temperature, B, torch.float32, device, TEMPERATURE)
    top_k_t = _per_request("top_k", top_k, B, torch.int64, device, TOP_K)
    top_p_t = _per_request("top_p", top_p, B, torch.float32, device, TOP_P)
    min_p_t = _per_request("min_p", min_p, B, torch.float32, device, MIN_P)
    if is_probs and not _tracing():
        if not bool(((temp == 0) | (temp == 1)).all()):
            raise ValueError("temperature must be 0 (greedy) or 1 with target_probs: the "
                             "probabilities are taken as final; pass target_logits to apply "
                             "a temperature")
        if bool((top_k_t != 0).any() | (top_p_t != 1).any() | (min_p_t != 0).any()):
            raise ValueError("top_k, top_p and min_p must be off with target_probs (the "
                             "probabilities are taken as final); pass target_logits instead")
    inv_temp = _inv_temperature(temp)
    all_greedy = (not isinstance(temperature, torch.Tensor) and temperature == 0) or (
        isinstance(temperature, torch.Tensor) and temperature.device.type == "cpu"
        and not _tracing() and bool((temp == 0).all()))
    seed_t, offset_t = _seeds(seed, offset, generator, B, device, all_greedy)
    return dict(target=target2, target_is_probs=is_probs, target_row_start=target_row_start,
                draft_ids=ids, draft_row_start=draft_row_start, num_draft=num_draft,
                draft=draft2, draft_is_probs=draft_probs is not None, inv_temp=inv_temp,
                top_k=top_k_t, top_p=top_p_t, min_p=min_p_t, seed=seed_t, offset=offset_t,
                max_k=max_k)


def verify_block(target_logits=None, draft_token_ids=None, draft_probs=None, *,
                 target_probs=None, draft_logits=None, temperature=1.0, top_k=0, top_p=1.0,
                 min_p=0.0, num_draft_tokens=None, cu_num_draft_tokens=None, seed=None,
                 offset=None, generator=None, backend="auto") -> VerifyOutput:
    """Verify a batch of speculative blocks exactly (see ``specops.reference`` for the spec).

    Padded layout: ``target_logits`` [B, K+1, V] (float32/bfloat16/float16, read in place)
    or ``target_probs`` [B, K+1, V] float32 (final probabilities), ``draft_token_ids`` [B, K],
    ``draft_probs`` [B, K, V] float32 or ``draft_logits`` [B, K, V] or neither (point-mass
    drafts), optional ``num_draft_tokens`` [B] (ragged blocks).  Flattened (vLLM) layout:
    target [T + B, V], ``draft_token_ids`` [T], draft [T, V], ``cu_num_draft_tokens`` [B].

    ``temperature`` (0 = greedy), ``top_k`` (0 = off), ``top_p`` (1 = off), ``min_p``
    (0 = off), ``seed`` and ``offset``: Python scalars or [B] tensors.  Without ``seed``, one
    int64 seed per request is drawn from ``generator`` (or torch's default generator) and the
    offset defaults to 0.  ``backend``: "auto", "reference", "cpu" or "triton".
    """
    args = _prepare(target_logits, draft_token_ids, draft_probs, target_probs, draft_logits,
                    temperature, top_k, top_p, min_p, num_draft_tokens, cu_num_draft_tokens,
                    seed, offset, generator)
    name = registry.resolve(backend, args["target"].device)
    return VerifyOutput(*verify_op(**args, backend=name))


def verify_block_unfused(target_logits=None, draft_token_ids=None, draft_probs=None, *,
                         backend="auto", **kwargs) -> VerifyOutput:
    """``verify_block`` composed from the three single-purpose ops (sampling_probs, accept,
    residual_sample), materialising probabilities.  Same arguments, same tokens as the fused
    op; kept for engines that already hold probabilities and as a cross-check in the tests."""
    a = _prepare(target_logits, draft_token_ids, draft_probs, **kwargs)
    name = registry.resolve(backend, a["target"].device)
    B, max_k = a["num_draft"].shape[0], a["max_k"]
    dev = a["target"].device
    greedy = a["inv_temp"] == 0

    def probs(rows, row_start):
        """The transform of each row with its own request's parameters."""
        rows_of = _rows_to_request(row_start, rows.shape[0], dev)
        params = [a[k][rows_of] for k in ("inv_temp", "top_k", "top_p", "min_p")]
        return sampling_probs_op(rows, *params, backend=name)

    target, draft = a["target"], a["draft"]
    if not a["target_is_probs"]:
        target, _ = probs(target, a["target_row_start"])
    if draft is not None and not a["draft_is_probs"]:
        q, qvalid = probs(draft, a["draft_row_start"])
        draft = torch.where(qvalid[:, None], q, torch.full_like(q, float("nan")))   # q = NaN
    common = (a["target_row_start"], a["draft_ids"], a["draft_row_start"], a["num_draft"],
              draft, greedy, a["seed"], a["offset"])
    nacc = accept_op(target, *common, max_k, backend=name)
    tok = residual_sample_op(target, *common, nacc, max_k, backend=name)
    j = torch.arange(max_k + 1, device=dev)
    ids_pad = torch.full((B, max_k + 1), -1, dtype=torch.int64, device=dev)
    if max_k > 0:
        gather = (a["draft_row_start"][:, None] + j[None, :max_k]).clamp(
            max=max(a["draft_ids"].shape[0] - 1, 0))
        if a["draft_ids"].numel() > 0:
            ids_pad[:, :max_k] = a["draft_ids"][gather]
    out = torch.where(j[None] < nacc[:, None].long(), ids_pad, torch.full_like(ids_pad, -1))
    out = torch.where(j[None] == nacc[:, None].long(), tok[:, None].long(), out)
    return VerifyOutput(out.to(torch.int32), nacc, tok >= 0)


def _rows_to_request(row_start, nrows, device):
    """Map each row of a flattened tensor to its request (rows before request 0's start and
    rows shared by no request map to the nearest request below; they are never read)."""
    rows = torch.arange(nrows, device=device)
    return (torch.searchsorted(row_start, rows, right=True) - 1).clamp(min=0)


def sampling_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, backend="auto"):
    """Probabilities after the sampling transform (specops.reference, section 2) for rows of
    logits [..., V]; per-row parameters are scalars or tensors of shape [...].
    Returns (probs float32 [..., V], valid bool [...])."""
    _check_tensor("logits", logits, LOGIT_DTYPES)
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a vocabulary dimension V >= 1, got shape "
                         f"{tuple(logits.shape)}")
    lead = logits.shape[:-1]
    rows = logits.reshape(-1, logits.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    n, dev = rows.shape[0], logits.device

    def flat(name, v, dtype, rng):
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            if tuple(v.shape) != tuple(lead):
                raise ValueError(f"{name} must be a scalar or have shape {tuple(lead)}")
            v = v.reshape(-1)
        return _per_request(name, v, n, dtype, dev, rng)
    inv = _inv_temperature(flat("temperature", temperature, torch.float32, TEMPERATURE))
    k = flat("top_k", top_k, torch.int64, TOP_K)
    p = flat("top_p", top_p, torch.float32, TOP_P)
    m = flat("min_p", min_p, torch.float32, MIN_P)
    name = registry.resolve(backend, dev)
    probs, valid = sampling_probs_op(rows, inv, k, p, m, backend=name)
    return probs.reshape(logits.shape), valid.reshape(lead)
