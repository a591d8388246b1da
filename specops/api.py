"""The public call: argument checks, the two layouts, and dispatch to the custom ops.

Every check here runs before any kernel.  Types, shapes, dtypes and devices are always
checked.  Checks of *values* follow ``validate`` (reference section 8): ``True`` reads every
value on the host (a CUDA tensor's too, which synchronises); ``None`` (default) reads only
what is free (Python scalars, CPU tensors); ``False`` reads nothing.  Under ``torch.compile``
tracing and CUDA-graph capture nothing is read either.  What is not checked on the host the
backends guard: a malformed request emits ``-1``, ``num_accepted = 0``, ``valid = False``,
and nothing is ever read out of bounds.

Per-call cost matters: engines call ``verify_block`` every decoding step.  Python scalars are
range-checked without touching a tensor, and the per-request tensors built from them (and the
row starts of the padded layout) are cached by value, so a steady-state call builds no tensor
it does not return.  In eager mode with no torch dispatch or function mode active the backend
is called directly, the same function the registered op ``specops::verify`` runs, without the
dispatcher's argument boxing; under tracing, capture, any mode or the profiler the op itself
is called.
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from specops import reference as _ref
from specops.backends import registry
from specops.ops import (accept_op, residual_sample_op, sampling_probs_op, verify_method_op,
                         verify_op)
from specops.ops import verify_method as _verify_method

LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ID_DTYPES = (torch.int32, torch.int64)
DEVICE_TYPES = ("cpu", "cuda")


class VerifyOutput(NamedTuple):
    """token_ids [B, K+1] int32: accepted drafts, then the correction or bonus token, then -1.
    num_accepted [B] int32.  valid [B] bool: False where a target row the verifier read was
    invalid (NaN / +inf / all -inf logits, or a malformed probability row); that request's
    row then holds -1 from the failing position on (see specops.reference, section 3)."""
    token_ids: torch.Tensor
    num_accepted: torch.Tensor
    valid: torch.Tensor


class RatedVerifyOutput(VerifyOutput):
    """``VerifyOutput`` plus ``accept_rates`` [B, K] float32 (``return_accept_rates=True``):
    beta_j = sum_x min(p_j(x), q_j(x)) for every position whose rows the verifier read, NaN
    elsewhere (reference section 10).  Still unpacks as the three-tuple."""

    def __new__(cls, token_ids, num_accepted, valid, accept_rates):
        self = super().__new__(cls, token_ids, num_accepted, valid)
        self.accept_rates = accept_rates
        return self


class Canonical(NamedTuple):
    """The checked, flattened arguments of ``specops::verify`` (specops.backends documents
    each one); field order is the op's argument order."""
    target: torch.Tensor
    target_is_probs: bool
    target_row_start: torch.Tensor
    draft_ids: torch.Tensor
    draft_row_start: torch.Tensor
    num_draft: torch.Tensor
    draft: Optional[torch.Tensor]
    draft_is_probs: bool
    inv_temp: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    seed: torch.Tensor
    offset: torch.Tensor
    max_k: int


def _tracing() -> bool:
    """Under torch.compile tracing or CUDA-graph capture: no tensor value may be read."""
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def _check_validate(validate):
    if validate is not None and not isinstance(validate, bool):
        raise TypeError(f"validate must be True, False or None, got {validate!r}")


def _reads(validate, t: Optional[torch.Tensor] = None) -> bool:
    """May the values of tensor ``t`` be read on the host?  ``True``: yes (may sync);
    ``None``: only a CPU tensor's; ``False``, tracing or capture: never."""
    if validate is False or _tracing():
        return False
    return validate is True or t is None or t.device.type == "cpu"


def _eager_direct() -> bool:
    """True when calling the backend directly is indistinguishable from calling the op."""
    return (not torch.compiler.is_compiling() and _get_current_dispatch_mode() is None
            and not torch._C._is_torch_function_mode_enabled()
            and not torch.autograd._profiler_enabled())     # profiles show specops::verify


def _check_tensor(name, t, dtypes, ndims=None, device=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if ndims is not None and t.dim() not in ndims:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndims))} dimensions, "
                         f"got shape {tuple(t.shape)}")
    if device is None:
        if t.device.type not in DEVICE_TYPES:
            raise ValueError(f"{name} must be on a CPU or CUDA device, got {t.device} "
                             "(meta and other devices hold no values to verify)")
    elif t.device != device:
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
TEMPERATURE = _Range(0.0, INF, False, True,
                     "finite and >= 0 (0 = greedy; below 1e-5 counts as greedy)")
TOP_K = _Range(0, INF, False, True, "an int >= 0 (0 = off)")
TOP_P = _Range(0.0, 1.0, True, False, "in (0, 1] (1 = off)")
MIN_P = _Range(0.0, 1.0, False, False, "in [0, 1] (0 = off)")
_GREEDY_T = float(_ref.GREEDY_TEMPERATURE)


_CONST: dict = {}


def _cached(key, make):
    """Eager calls reuse small constant tensors (never written to: backends only read their
    inputs, and they are never returned to the caller); traced calls build them in-graph."""
    if torch.compiler.is_compiling():
        return make()
    hit = _CONST.get(key)
    if hit is None:
        if len(_CONST) > 1024:
            _CONST.clear()
        hit = _CONST[key] = make()
    return hit


def _const_vec(value, B: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A [B] tensor filled with `value`."""
    return _cached((type(value), value, B, dtype, device),
                   lambda: torch.full((B,), value, dtype=dtype, device=device))


def _padded_rows(B: int, K: int, device: torch.device):
    """(target_row_start, draft_row_start, num_draft) of the padded [B, K+1, V] layout."""
    def make():
        ar = torch.arange(B, device=device, dtype=torch.int64)
        return ar * (K + 1), ar * K, torch.full((B,), K, dtype=torch.int64, device=device)
    return _cached(("rows", B, K, device), make)


_SCALAR_OK: dict = {}      # (name, type, value) -> checked value, for plain int / float


def _scalar(name, value, dtype, rng: Optional[_Range], check=True):
    """Check a Python scalar (its range only with ``check``); return the value the kernels
    will see (float32-rounded)."""
    plain = type(value) in (int, float)
    key = (name, type(value), value, check)
    if plain:
        hit = _SCALAR_OK.get(key)
        if hit is not None:
            return hit
    checked = _check_scalar(name, value, dtype, rng if check else None)
    if plain:
        if len(_SCALAR_OK) > 4096:
            _SCALAR_OK.clear()
        _SCALAR_OK[key] = checked
    return checked


def _check_scalar(name, value, dtype, rng: Optional[_Range]):
    if not isinstance(value, numbers.Number) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number or a [B] tensor, got {type(value).__name__}")
    if not dtype.is_floating_point:
        if not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {value!r}")
        value = int(value)
        if not -(2 ** 63) <= value < 2 ** 63:       # a type limit: checked always
            raise ValueError(f"{name} must fit in int64, got {value}")
    else:
        if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {value!r}")
        value = float(value)
        if abs(value) >= _F32_OVERFLOW:         # rounds to inf in float32: fails the range
            value = math.copysign(INF, value)
        else:
            value = float(np.float32(value))    # the value the kernels will see
    if rng is not None and not rng.holds(value):
        raise ValueError(f"{name} must be {rng.text}; got {value!r}")
    return value


def _per_request(name, value, B, dtype, device, rng: Optional[_Range], scalars=False,
                 validate=None):
    """Scalar or [B] tensor/sequence -> [B] tensor of `dtype` on `device`, range-checked as
    ``validate`` allows (`scalars`: a Python scalar stays a checked Python number)."""
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
        if value.device.type not in DEVICE_TYPES:
            raise ValueError(f"{name} must be on a CPU or CUDA device, got {value.device}")
        t = value.to(device=device, dtype=dtype)
        if rng is not None and B > 0 and _reads(validate, value):
            lo, hi = (float(v) for v in torch.aminmax(t))      # an interval: ends suffice
            if not (rng.holds(lo) and rng.holds(hi)):
                raise ValueError(f"{name} must be {rng.text}; got "
                                 f"{t.tolist() if B <= 16 else t}")
        return t
    if isinstance(value, (list, tuple)):
        return _per_request(name, torch.tensor(value), B, dtype, device, rng,
                            validate=validate)
    checked = _scalar(name, value, dtype, rng, validate is not False)
    return checked if scalars else _const_vec(checked, B, dtype, device)


def _inv_temperature_scalar(t: float) -> float:
    """float32(1 / float64(T)) of a float32-rounded Python T; 0 marks greedy (T < 1e-5);
    NaN a malformed T (NaN, negative, infinite: reference section 8)."""
    if not (t >= 0.0 and t < INF):
        return math.nan
    return float(np.float32(1.0 / t)) if t >= _GREEDY_T else 0.0


def _inv_temperature(temp):
    """1/T on the host side of the contract: float32(1 / float64(T)); 0 marks greedy; NaN
    a malformed T (computed on the tensor's device: nothing is read)."""
    inv = torch.where(temp >= _GREEDY_T, temp.double().reciprocal(), 0.0).float()
    return torch.where((temp >= 0) & torch.isfinite(temp), inv, math.nan)


def _temperature(temperature, B, device, validate=None):
    """-> (inv_temp [B] float32, temp [B] float32 or None, all_greedy: bool or None)."""
    if isinstance(temperature, (torch.Tensor, list, tuple)):
        temp = _per_request("temperature", temperature, B, torch.float32, device, TEMPERATURE,
                            validate=validate)
        inv = _inv_temperature(temp)
        all_greedy = None
        if B > 0 and _reads(validate, temp) and temp.device.type == "cpu":
            all_greedy = float(inv.max()) == 0.0
        return inv, temp, all_greedy
    inv = _inv_temperature_scalar(_scalar("temperature", temperature, torch.float32,
                                          TEMPERATURE, validate is not False))
    return inv, None, inv == 0.0


def _check_generator(generator):
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__}")


def _seeds(seed, offset, generator, B, device, all_greedy, validate=None):
    """-> (seed, offset): [B] int64 tensors, or Python ints for scalar arguments."""
    _check_generator(generator)
    if seed is not None and generator is not None:
        raise ValueError("pass either seed (with offset) or generator, not both")
    if seed is None:
        if all_greedy:                       # greedy consumes no randomness
            seed_t = 0
        else:
            gdev = generator.device if generator is not None else torch.device("cpu")
            seed_t = torch.randint(-(2 ** 63), 2 ** 63 - 1, (B,), generator=generator,
                                   dtype=torch.int64, device=gdev).to(device)
    else:
        seed_t = _per_request("seed", seed, B, torch.int64, device, None, True, validate)
    offset_t = _per_request("offset", 0 if offset is None else offset, B, torch.int64, device,
                            None, True, validate)
    return seed_t, offset_t


def _flattened(tname, target, draft_token_ids, draft, dname, cu_num_draft_tokens,
               num_draft_tokens, max_num_draft_tokens, device, validate):
    """Row starts, per-request draft counts and max_k of vLLM's flattened layout."""
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
                         f"flattened layout (one per draft plus one bonus per request), got {N}")
    if draft is not None and draft.shape[0] != T:
        raise ValueError(f"{dname} must have T={T} rows (one per draft token), got "
                         f"{draft.shape[0]}")
    if B == 0 and T != 0:
        raise ValueError(f"cu_num_draft_tokens is empty (B=0) but draft_token_ids has T={T} "
                         "ids: every draft token must belong to a request")
    prev = torch.cat([cu.new_zeros(1), cu[:-1]])
    num_draft = cu - prev
    host_ok = _reads(validate, cu_num_draft_tokens)
    if host_ok and B > 0:
        if bool((num_draft < 0).any()) or int(cu[-1]) != T:
            raise ValueError("cu_num_draft_tokens must be non-decreasing, start at >= 0 "
                             f"and end at T={T} (the number of draft tokens)")
    if max_num_draft_tokens is None:
        if _tracing() or validate is False:
            raise ValueError("the flattened layout with validate=False, under torch.compile "
                             "or CUDA-graph capture needs max_num_draft_tokens (the output "
                             "width must not depend on tensor values)")
        max_k = int(num_draft.max()) if B > 0 else 0
    else:
        max_k = _scalar("max_num_draft_tokens", max_num_draft_tokens, torch.int64,
                        _Range(0, INF, False, True, "an int >= 0"))   # a shape: always checked
        if host_ok and B > 0 and int(num_draft.max()) > max_k:
            raise ValueError(f"max_num_draft_tokens={max_k} is smaller than the longest "
                             f"block in cu_num_draft_tokens ({int(num_draft.max())})")
    target_row_start = prev + torch.arange(B, device=device, dtype=torch.int64)
    return B, target_row_start, prev, num_draft, max_k


def pick_target(target_logits, target_probs, draft_probs, draft_logits, ndims):
    """-> (target, its argument name, is_probs), after the either-or and tensor checks."""
    if (target_logits is None) == (target_probs is None):
        raise ValueError("pass exactly one of target_logits and target_probs")
    if draft_probs is not None and draft_logits is not None:
        raise ValueError("pass at most one of draft_probs and draft_logits")
    is_probs = target_probs is not None
    tname = "target_probs" if is_probs else "target_logits"
    target = target_probs if is_probs else target_logits
    _check_tensor(tname, target, (torch.float32,) if is_probs else LOGIT_DTYPES, ndims)
    return target, tname, is_probs


def _prepare(target_logits=None, draft_token_ids=None, draft_probs=None, target_probs=None,
             draft_logits=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
             num_draft_tokens=None, cu_num_draft_tokens=None, seed=None, offset=None,
             generator=None, max_num_draft_tokens=None, scalars=False,
             validate=None, vocab_size=None) -> Canonical:
    """Check everything ``validate`` allows and return the canonical (flattened) arguments
    of the ops; with `scalars`, parameters given as Python scalars stay Python numbers (see
    _tensors).  ``vocab_size``: the global V when the tensors hold a vocabulary shard
    (specops.distributed); draft ids are checked against it."""
    _check_validate(validate)
    target, tname, is_probs = pick_target(target_logits, target_probs, draft_probs,
                                          draft_logits, (2, 3))
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
    V = target.shape[-1] if vocab_size is None else vocab_size
    if not 1 <= V <= _ref.MAX_VOCAB:
        raise ValueError(f"{tname}: vocabulary size V must be in [1, {_ref.MAX_VOCAB}], got {V}")
    if draft is not None and draft.shape[-1] != target.shape[-1]:
        raise ValueError(f"{dname} must have {target.shape[-1]} columns like {tname}, got "
                         f"shape {tuple(draft.shape)}")

    if flat:
        B, target_row_start, draft_row_start, num_draft, max_k = _flattened(
            tname, target, draft_token_ids, draft, dname, cu_num_draft_tokens,
            num_draft_tokens, max_num_draft_tokens, device, validate)
        target2, draft2, ids = target, draft, draft_token_ids
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
        if draft is not None and tuple(draft.shape) != (B, K, target.shape[-1]):
            raise ValueError(f"{dname} must have shape [B, K, V] = [{B}, {K}, "
                             f"{target.shape[-1]}], got {tuple(draft.shape)}")
        if max_num_draft_tokens is not None:
            raise ValueError("max_num_draft_tokens is for the flattened layout; the padded "
                             "layout's width is K + 1")
        max_k = K
        target_row_start, draft_row_start, num_draft = _padded_rows(B, K, device)
        if num_draft_tokens is not None:
            num_draft = _per_request("num_draft_tokens", num_draft_tokens, B, torch.int64,
                                     device, _Range(0, K, False, False, f"in [0, K={K}]"),
                                     validate=validate)
        target2 = target.reshape(B * K1, target.shape[-1])
        draft2 = None if draft is None else draft.reshape(B * K, target.shape[-1])
        ids = draft_token_ids.reshape(B * K)
    if target2.stride(-1) != 1:
        target2 = target2.contiguous()
    if draft2 is not None and draft2.stride(-1) != 1:
        draft2 = draft2.contiguous()
    if ids.numel() > 0 and _reads(validate, ids):
        lo, hi = torch.aminmax(ids)                 # an interval: ends suffice
        if int(lo) < -1 or int(hi) >= V:
            raise ValueError(f"draft_token_ids must be in [-1, V={V}) (-1 marks padding)")
    if ids.dtype != torch.int64:
        ids = ids.to(torch.int64)

    values = (temperature, top_k, top_p, min_p)
    plain = all(type(v) in (int, float) for v in values) and not torch.compiler.is_compiling()
    key = ((B, device, is_probs, values, tuple(type(v) for v in values), validate is False)
           if plain else None)
    params = _PARAMS.get(key) if plain else None
    if params is None:
        params = _params(temperature, top_k, top_p, min_p, B, device, is_probs, validate)
        if plain:                      # all-scalar parameters are checked once, then reused
            if len(_PARAMS) > 256:
                _PARAMS.clear()
            _PARAMS[key] = params
    inv_temp, top_k_t, top_p_t, min_p_t, all_greedy = params
    seed_t, offset_t = _seeds(seed, offset, generator, B, device, all_greedy, validate)
    a = Canonical(target2, is_probs, target_row_start, ids, draft_row_start, num_draft,
                  draft2, draft_probs is not None, inv_temp, top_k_t, top_p_t, min_p_t,
                  seed_t, offset_t, max_k)
    return a if scalars else _tensors(a)


_SCALAR_FIELDS = (("inv_temp", torch.float32), ("top_k", torch.int64), ("top_p", torch.float32),
                  ("min_p", torch.float32), ("seed", torch.int64), ("offset", torch.int64))


def _tensors(a: Canonical) -> Canonical:
    """The op's form of the canonical arguments: every per-request value a [B] tensor."""
    B, dev = a.num_draft.shape[0], a.target.device
    fix = {f: _const_vec(getattr(a, f), B, dt, dev) for f, dt in _SCALAR_FIELDS
           if not isinstance(getattr(a, f), torch.Tensor)}
    return a._replace(**fix) if fix else a


_PARAMS: dict = {}


def _params(temperature, top_k, top_p, min_p, B, device, is_probs, validate=None):
    """-> (inv_temp, top_k, top_p, min_p: [B] tensors or, for Python scalars, checked
    Python numbers; all_greedy: bool or None)."""
    inv_temp, temp, all_greedy = _temperature(temperature, B, device, validate)
    top_k_t = _per_request("top_k", top_k, B, torch.int64, device, TOP_K, True, validate)
    top_p_t = _per_request("top_p", top_p, B, torch.float32, device, TOP_P, True, validate)
    min_p_t = _per_request("min_p", min_p, B, torch.float32, device, MIN_P, True, validate)
    if is_probs:
        _check_probs_params(temperature, temp, top_k, top_p, min_p, top_k_t, top_p_t, min_p_t,
                            validate)
    return inv_temp, top_k_t, top_p_t, min_p_t, all_greedy


def _check_probs_params(temperature, temp, top_k, top_p, min_p, top_k_t, top_p_t, min_p_t,
                        validate=None):
    """With final probabilities only T in {0, 1} and no filters make sense."""
    scalars = not any(isinstance(v, (torch.Tensor, list, tuple))
                      for v in (temperature, top_k, top_p, min_p))
    if validate is False:
        return                                      # the backends' guard (section 8)
    if scalars:
        t_ok = float(temperature) in (0.0, 1.0)
        f_ok = top_k == 0 and float(top_p) == 1.0 and float(min_p) == 0.0
    elif not all(_reads(validate, v) for v in (temp, top_k_t, top_p_t, min_p_t)
                 if isinstance(v, torch.Tensor)):
        return
    else:
        t_ok = temp is None or bool(((temp == 0) | (temp == 1)).all())
        f_ok = not any(bool(torch.as_tensor(v != off).any())
                       for v, off in ((top_k_t, 0), (top_p_t, 1.0), (min_p_t, 0.0)))
    if not t_ok:
        raise ValueError("temperature must be 0 (greedy) or 1 with target_probs: the "
                         "probabilities are taken as final; pass target_logits to apply "
                         "a temperature")
    if not f_ok:
        raise ValueError("top_k, top_p and min_p must be off with target_probs (the "
                         "probabilities are taken as final); pass target_logits instead")


def _run_verify(a: Canonical, backend: str):
    """``specops::verify`` on canonical arguments: the backend directly (scalars as Python
    numbers) when eager, else the registered op (every value a tensor)."""
    if _eager_direct():
        return registry.load(backend).verify(*a)
    return verify_op(*_tensors(a), backend)


def verify_block(target_logits=None, draft_token_ids=None, draft_probs=None, *,
                 target_probs=None, draft_logits=None, temperature=1.0, top_k=0, top_p=1.0,
                 min_p=0.0, num_draft_tokens=None, cu_num_draft_tokens=None, seed=None,
                 offset=None, generator=None, max_num_draft_tokens=None, validate=None,
                 method="token", return_accept_rates=False, backend="auto") -> VerifyOutput:
    """Verify a batch of speculative blocks exactly (see ``specops.reference`` for the spec).

    Padded layout: ``target_logits`` [B, K+1, V] (float32/bfloat16/float16, read in place)
    or ``target_probs`` [B, K+1, V] float32 (final probabilities), ``draft_token_ids`` [B, K],
    ``draft_probs`` [B, K, V] float32 or ``draft_logits`` [B, K, V] or neither (point-mass
    drafts), optional ``num_draft_tokens`` [B] (ragged blocks).  Flattened (vLLM) layout:
    target [T + B, V], ``draft_token_ids`` [T], draft [T, V], ``cu_num_draft_tokens`` [B],
    optional ``max_num_draft_tokens`` (int: the output width is its value + 1 instead of the
    longest block + 1, read without looking at ``cu_num_draft_tokens``; required under
    ``torch.compile`` and CUDA-graph capture).

    ``temperature`` (0 = greedy; below 1e-5 counts as greedy), ``top_k`` (0 = off), ``top_p``
    (1 = off), ``min_p`` (0 = off), ``seed`` and ``offset``: Python scalars or [B] tensors.
    Without ``seed``, one int64 seed per request is drawn from ``generator`` (or torch's
    default generator) and the offset defaults to 0.  ``backend``: "auto", "reference",
    "cpu" or "triton".

    ``validate``: ``True`` checks every value on the host and raises ``ValueError`` (on
    CUDA tensors this synchronises); ``None`` (default) checks what is free (Python scalars,
    CPU tensors); ``False`` reads no value at all.  What is not checked is guarded on the
    device: a malformed request's row is all -1, num_accepted 0, valid False (reference,
    section 8).  ``validate=False`` with ``max_num_draft_tokens`` (flattened layout) makes no
    host synchronisation and can be captured in a CUDA graph.

    ``method``: "token" (default: accept each draft with probability min(1, p/q) in turn) or
    "block" (block verification, reference section 9: the same exact output law, at least as
    many accepted drafts in expectation; it reads every row of the block).
    ``return_accept_rates=True`` returns a ``RatedVerifyOutput`` whose ``accept_rates``
    [B, K] float32 holds beta_j = sum min(p_j, q_j) per position read (NaN elsewhere;
    reference section 10).
    """
    _check_method(method, return_accept_rates)
    args = _prepare(target_logits, draft_token_ids, draft_probs, target_probs, draft_logits,
                    temperature, top_k, top_p, min_p, num_draft_tokens, cu_num_draft_tokens,
                    seed, offset, generator, max_num_draft_tokens, scalars=True,
                    validate=validate)
    name = registry.resolve(backend, args.target.device)
    if method == "token" and not return_accept_rates:
        return VerifyOutput(*_run_verify(args, name))
    if _eager_direct():
        out = _verify_method.run(*args, name, method, bool(return_accept_rates))
    else:
        out = verify_method_op(*_tensors(args), name, method, bool(return_accept_rates))
    if return_accept_rates:
        return RatedVerifyOutput(*out)
    return VerifyOutput(*out[:3])


def _check_method(method, return_accept_rates):
    if not isinstance(method, str) or method not in _verify_method.METHODS:
        raise ValueError(f"method must be 'token' or 'block', got {method!r}")
    if not isinstance(return_accept_rates, bool):
        raise TypeError(f"return_accept_rates must be a bool, got "
                        f"{type(return_accept_rates).__name__}")


def verify_block_unfused(target_logits=None, draft_token_ids=None, draft_probs=None, *,
                         backend="auto", **kwargs) -> VerifyOutput:
    """``verify_block`` composed from the single-purpose steps (sampling_probs, then the
    accept and residual-sample views), materialising probabilities.  Same arguments, same
    tokens as the fused op on every input (reference section 7); kept for engines that
    already hold probabilities and as a cross-check in the tests."""
    if kwargs.pop("method", "token") != "token" or kwargs.pop("return_accept_rates", False):
        raise ValueError("verify_block_unfused composes the token-wise views (accept, residual "
                         "sample); method='block' and return_accept_rates need verify_block")
    a = _prepare(target_logits, draft_token_ids, draft_probs, **kwargs)
    name = registry.resolve(backend, a.target.device)
    B, max_k = a.num_draft.shape[0], a.max_k
    dev = a.target.device
    greedy = a.inv_temp == 0
    bad = _malformed_params(a)

    def probs(rows, row_start):
        """The transform of each row with its own request's parameters; an invalid row
        becomes NaN, which the accept test rejects and the draw reports invalid."""
        rows_of = _rows_to_request(row_start, rows.shape[0], dev)
        params = [t[rows_of] for t in (a.inv_temp, a.top_k, a.top_p, a.min_p)]
        p, ok = sampling_probs_op(rows, *params, backend=name)
        return torch.where(ok[:, None], p, torch.full_like(p, float("nan")))

    target = a.target if a.target_is_probs else probs(a.target, a.target_row_start)
    draft = a.draft
    if draft is not None and not a.draft_is_probs:
        draft = probs(draft, a.draft_row_start)                        # invalid row: q = NaN
    common = (a.target_row_start, a.draft_ids, a.draft_row_start, a.num_draft, draft, greedy,
              a.seed, a.offset)
    nacc = accept_op(target, *common, max_k, backend=name)
    tok = residual_sample_op(target, *common, nacc, max_k, backend=name)
    j = torch.arange(max_k + 1, device=dev)
    ids_pad = torch.full((B, max_k + 1), -1, dtype=torch.int64, device=dev)
    if max_k > 0 and a.draft_ids.numel() > 0:
        gather = (a.draft_row_start[:, None] + j[None, :max_k]).clamp(
            max=a.draft_ids.shape[0] - 1)
        ids_pad[:, :max_k] = a.draft_ids[gather]
    out = torch.where(j[None] < nacc[:, None].long(), ids_pad, torch.full_like(ids_pad, -1))
    out = torch.where(j[None] == nacc[:, None].long(), tok[:, None].long(), out)
    out = torch.where(bad[:, None], torch.full_like(out, -1), out)
    nacc = torch.where(bad, torch.zeros_like(nacc), nacc)
    return VerifyOutput(out.to(torch.int32), nacc, (tok >= 0) & ~bad)


def _malformed_params(a: Canonical) -> torch.Tensor:
    """[B] bool: the request's sampling parameters are malformed (reference section 8),
    computed on the device; the views guard num_draft and the draft ids themselves."""
    inv, k, tp, mp = a.inv_temp, a.top_k, a.top_p, a.min_p
    ok = (inv >= 0) & (inv < INF) & (k >= 0) & (tp > 0) & (tp <= 1) & (mp >= 0) & (mp <= 1)
    if a.target_is_probs:
        ok &= ((inv == 0) | (inv == 1)) & (k == 0) & (tp == 1) & (mp == 0)
    return ~ok


def _rows_to_request(row_start, nrows, device):
    """Map each row of a flattened tensor to its request (rows before request 0's start and
    rows shared by no request map to the nearest request below; they are never read)."""
    rows = torch.arange(nrows, device=device)
    return (torch.searchsorted(row_start.contiguous(), rows, right=True) - 1).clamp(min=0)


def sampling_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, backend="auto",
                   validate=None):
    """Probabilities after the sampling transform (specops.reference, section 2) for rows of
    logits [..., V] (1 <= V <= 2**22); per-row parameters are scalars or tensors of shape
    [...].  Returns (probs float32 [..., V], valid bool [...]).  ``validate`` as in
    ``verify_block``: a row whose own parameters are malformed and were not checked on the
    host is invalid (zeros, valid False)."""
    _check_validate(validate)
    _check_tensor("logits", logits, LOGIT_DTYPES)
    if logits.dim() < 1 or not 1 <= logits.shape[-1] <= _ref.MAX_VOCAB:
        raise ValueError(f"logits must have a vocabulary dimension V in [1, {_ref.MAX_VOCAB}], "
                         f"got shape {tuple(logits.shape)}")
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
        return _per_request(name, v, n, dtype, dev, rng, validate=validate)
    inv = _inv_temperature(flat("temperature", temperature, torch.float32, TEMPERATURE))
    k = flat("top_k", top_k, torch.int64, TOP_K)
    p = flat("top_p", top_p, torch.float32, TOP_P)
    m = flat("min_p", min_p, torch.float32, MIN_P)
    name = registry.resolve(backend, dev)
    probs, valid = sampling_probs_op(rows, inv, k, p, m, backend=name)
    return probs.reshape(logits.shape), valid.reshape(lead)
