"""The argument layer: every public entry point's checks and the canonical arguments of the
ops (``specops.backends`` documents each field).

``verify_block``, ``verify_block_unfused``, ``specops.distributed.verify_block``,
``verify_tree``, ``sample_without_replacement`` and the SGLang drop-ins check their
arguments here, with the same rules and the same messages:

* types, shapes, dtypes and devices are always checked;
* *values* are read on the host as ``validate`` allows (reference section 8): ``True`` reads
  every value (a CUDA tensor's too, which synchronises), ``None`` (default) only what is free
  (Python scalars, CPU tensors), ``False`` nothing; under ``torch.compile`` tracing and
  CUDA-graph capture nothing is read either.  What is not checked the backends guard: a
  malformed request emits -1, ``num_accepted = 0``, ``valid = False``, nothing is read out of
  bounds.  Every error is a ``ValueError`` / ``TypeError`` naming the argument, raised before
  any kernel runs.

The result is ``Canonical`` (chain) or ``TreeCanonical`` (tree): the flattened arguments of
``specops::verify`` / ``specops::verify_tree`` by name.  Per-request parameters given as
Python scalars stay Python numbers there (the backends broadcast them, which saves building
tensors on every eager call); ``to_op_tensors()`` turns them into [B] tensors, the form the
registered ops take.  Per-call costs are cached by value (``specops._cache``): the checks of
types, shapes, strides, dtypes and devices run once per argument layout (``Layout``, keyed on
everything they read: a call whose key matches would pass them again), the value checks on
every call; a few [B] values (at most ``FEW``) are read as one list and checked in Python.
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from specops import _cache
from specops._draft_probs import DRAFT_PROBS_TOLERANCE, check_draft_probs  # noqa: F401
from specops import reference as _ref

LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ID_DTYPES = (torch.int32, torch.int64)
DEVICE_TYPES = ("cpu", "cuda")
INF = float("inf")
F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103      # smallest magnitude that rounds to inf in float32
GREEDY_T = float(_ref.GREEDY_TEMPERATURE)
FEW = 64                                    # [B] values this few are read as a list
MAX_DRAFT_TOKENS = 1 << 16                  # max_num_draft_tokens: the output's width - 1


class Range(NamedTuple):
    """An allowed interval for a per-request value, checked on Python scalars without
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


TEMPERATURE = Range(0.0, INF, False, True,
                    "finite and >= 0 (0 = greedy; below 1e-5 counts as greedy)")
TOP_K = Range(0, INF, False, True, "an int >= 0 (0 = off)")
TOP_P = Range(0.0, 1.0, True, False, "in (0, 1] (1 = off)")
MIN_P = Range(0.0, 1.0, False, False, "in [0, 1] (0 = off)")

# per-request fields that may arrive as Python numbers, and their op dtype
_SCALAR_FIELDS = (("inv_temp", torch.float32), ("top_k", torch.int64), ("top_p", torch.float32),
                  ("min_p", torch.float32), ("seed", torch.int64), ("offset", torch.int64))


def _with_tensors(a, B: int, device):
    fix = {f: _cache.const_vec(getattr(a, f), B, dt, device) for f, dt in _SCALAR_FIELDS
           if not isinstance(getattr(a, f), torch.Tensor)}
    return a._replace(**fix) if fix else a


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

    @property
    def batch(self) -> int:
        return self.num_draft.shape[0]

    def op_args(self) -> tuple:
        """The positional arguments of ``specops::verify`` (before ``backend``)."""
        return tuple(self)[:15]

    def to_op_tensors(self) -> "Canonical":
        """Every per-request value a [B] tensor (the registered op's form)."""
        return _with_tensors(self, self.batch, self.target.device)


class TreeCanonical(NamedTuple):
    """The checked arguments of ``specops::verify_tree`` (op argument order)."""
    target: torch.Tensor        # [B * N, V]
    target_is_probs: bool
    node_ids: torch.Tensor      # [B, N] int64
    parents: torch.Tensor       # [B, N] int64
    num_nodes: torch.Tensor     # [B] int64
    draft: Optional[torch.Tensor]
    draft_is_probs: bool
    inv_temp: object
    top_k: object
    top_p: object
    min_p: object
    seed: object
    offset: object
    max_depth: int
    method: str

    @property
    def batch(self) -> int:
        return self.node_ids.shape[0]

    def op_args(self) -> tuple:
        """The positional arguments of ``specops::verify_tree`` (before ``backend``)."""
        return tuple(self)

    def to_op_tensors(self) -> "TreeCanonical":
        return _with_tensors(self, self.batch, self.target.device)


# ----------------------------------------------------------------------------- when to read
tracing = _cache.building_graph        # no tensor value may be read, no cache used


def check_validate(validate) -> None:
    if validate is not None and not isinstance(validate, bool):
        raise TypeError(f"validate must be True, False or None, got {validate!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def may_read(validate, t: Optional[torch.Tensor] = None, graph=None) -> bool:
    """May the values of tensor ``t`` be read on the host?  ``True``: yes (may sync);
    ``None``: only a CPU tensor's; ``False``, tracing or capture: never (``graph``: the
    caller's ``tracing()``, asked once per call)."""
    if validate is False or (tracing() if graph is None else graph):
        return False
    return validate is True or t is None or t.device.type == "cpu"


def eager_direct() -> bool:
    """True when calling the op's Python kernel directly is indistinguishable from calling
    the registered op (no tracing, no dispatch or function mode, no profiler)."""
    return (not torch.compiler.is_compiling() and _get_current_dispatch_mode() is None
            and not torch._C._is_torch_function_mode_enabled()
            and not torch.autograd._profiler_enabled())     # profiles show specops::verify


# ----------------------------------------------------------------------------- tensors
def check_tensor(name, t, dtypes, ndims=None, device=None) -> None:
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


def rows(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``t`` with unit stride along the vocabulary (a copy only when it has none)."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


# ----------------------------------------------------------------------------- numbers
_SCALARS = _cache.Cache("checked scalars")       # (name, type, value, range) -> value


def scalar(name, value, dtype, rng: Optional[Range], check=True):
    """Check a Python scalar (its range only with ``check``); return the value the kernels
    will see (float32-rounded)."""
    if rng is None and type(value) is int and dtype is torch.int64 and \
            -(2 ** 63) <= value < 2 ** 63:
        return value            # an int64 with no range (seed, offset): nothing to round
    if type(value) in (int, float):
        return _SCALARS.get((name, type(value), value, rng if check else None),
                            lambda: check_scalar(name, value, dtype, rng if check else None))
    return check_scalar(name, value, dtype, rng if check else None)


def check_scalar(name, value, dtype, rng: Optional[Range]):
    if not isinstance(value, numbers.Number) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, a [B] tensor or a sequence of numbers, "
                        f"got {type(value).__name__}")
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
        if abs(value) >= F32_OVERFLOW:          # rounds to inf in float32: fails the range
            value = math.copysign(INF, value)
        else:
            value = float(np.float32(value))    # the value the kernels will see
    if rng is not None and not rng.holds(value):
        raise ValueError(f"{name} must be {rng.text}; got {value!r}")
    return value


def _sequence(name, value) -> torch.Tensor:
    """A list, tuple or numpy array of numbers -> a CPU tensor (TypeError naming ``name``)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:      # ragged nesting
        raise TypeError(f"{name} must be a number, a [B] tensor or a sequence of numbers, "
                        f"got {value!r}") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a number, a [B] tensor or a sequence of numbers "
                        f"(int or float), got {value!r}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
        arr = arr.astype(np.float64 if arr.max(initial=0) >= 2 ** 63 else np.int64)
    return torch.from_numpy(np.ascontiguousarray(arr))


def per_request(name, value, B, dtype, device, rng: Optional[Range], scalars=False,
                validate=None):
    """A scalar, a [B] tensor, or a sequence / numpy array of B numbers -> [B] tensor of
    ``dtype`` on ``device``, range-checked as ``validate`` allows (``scalars``: a Python
    scalar stays a checked Python number)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        value = _sequence(name, value)
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            value = value.reshape(1).expand(B)
        if value.dim() != 1 or value.shape[0] != B:
            raise ValueError(f"{name} must be a scalar or have B={B} values, got shape "
                             f"{tuple(value.shape)}")
        if value.dtype.is_complex or value.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers, got {value.dtype}")
        if not dtype.is_floating_point and value.dtype.is_floating_point:
            raise TypeError(f"{name} must hold integers, got {value.dtype}")
        vdev = value.device
        if vdev.type not in DEVICE_TYPES:
            raise ValueError(f"{name} must be on a CPU or CUDA device, got {vdev}")
        # (.to would return the tensor itself here; asked first, it costs no argument parsing)
        t = value if value.dtype is dtype and vdev == device else value.to(device=device,
                                                                           dtype=dtype)
        if rng is not None and B > 0 and may_read(validate, value):
            if B <= FEW and t.is_cpu:                   # one read, compared in Python
                ok = all(rng.holds(v) for v in t.tolist())
            else:
                lo, hi = (float(v) for v in torch.aminmax(t))  # an interval: ends suffice
                ok = rng.holds(lo) and rng.holds(hi)
            if not ok:
                raise ValueError(f"{name} must be {rng.text}; got "
                                 f"{t.tolist() if B <= 16 else t}")
        return t
    checked = scalar(name, value, dtype, rng, validate is not False)
    return checked if scalars else _cache.const_vec(checked, B, dtype, device)


# ----------------------------------------------------------------------------- parameters
def inv_temperature_scalar(t: float) -> float:
    """float32(1 / float64(T)) of a float32-rounded Python T; 0 marks greedy (T < 1e-5);
    NaN a malformed T (NaN, negative, infinite: reference section 8)."""
    if not (t >= 0.0 and t < INF):
        return math.nan
    return float(np.float32(1.0 / t)) if t >= GREEDY_T else 0.0


def inv_temperature(temp: torch.Tensor) -> torch.Tensor:
    """1/T on the host side of the contract: float32(1 / float64(T)); 0 marks greedy; NaN
    a malformed T (computed on the tensor's device: nothing is read)."""
    inv = torch.where(temp >= GREEDY_T, temp.double().reciprocal(), 0.0).float()
    return torch.where((temp >= 0) & torch.isfinite(temp), inv, math.nan)


def _is_sequence(v) -> bool:
    return isinstance(v, (torch.Tensor, list, tuple, np.ndarray))


def _temperature(temperature, B, device, validate=None):
    """-> (inv_temp [B] float32 or Python float, temp [B] float32 or None,
    all_greedy: bool or None)."""
    if _is_sequence(temperature):
        temp = per_request("temperature", temperature, B, torch.float32, device, TEMPERATURE,
                           validate=validate)
        if 0 < B <= FEW and temp.is_cpu and may_read(validate, temp):
            # a few readable values: the scalar rule on each (the same float32 arithmetic;
            # tests/test_api.py compares the two), no tensor kernels; one value shared by
            # every request stays a Python number, as a scalar temperature does
            inv_l = [inv_temperature_scalar(v) for v in temp.tolist()]
            shared = all(v == inv_l[0] for v in inv_l)        # (a NaN is never shared)
            inv = inv_l[0] if shared else torch.tensor(inv_l, dtype=torch.float32)
            return inv, temp, all(v == 0.0 for v in inv_l)
        inv = inv_temperature(temp)
        all_greedy = None
        if B > 0 and may_read(validate, temp) and temp.device.type == "cpu":
            all_greedy = float(inv.max()) == 0.0
        return inv, temp, all_greedy
    inv = inv_temperature_scalar(scalar("temperature", temperature, torch.float32,
                                        TEMPERATURE, validate is not False))
    return inv, None, inv == 0.0


class Params(NamedTuple):
    """The sampling parameters of every request: [B] tensors, or for Python scalars checked
    Python numbers; ``all_greedy``: every request greedy (None: unknown without a read)."""
    inv_temp: object
    top_k: object
    top_p: object
    min_p: object
    all_greedy: Optional[bool]


_PARAMS = _cache.Cache("all-scalar sampling parameters")
_NUM = (int, float)


def sampling_params(temperature, top_k, top_p, min_p, B, device, is_probs,
                    validate=None, graph=None) -> Params:
    """Check temperature / top_k / top_p / min_p (scalars or B values each)."""
    values = (temperature, top_k, top_p, min_p)
    if type(temperature) in _NUM and type(top_k) in _NUM and type(top_p) in _NUM and \
            type(min_p) in _NUM:                         # checked once, then reused
        key = (B, device, is_probs, values, type(temperature), type(top_k), type(top_p),
               type(min_p), validate is False)
        return _PARAMS.get(key, lambda: _sampling_params(*values, B, device, is_probs,
                                                         validate), graph)
    return _sampling_params(*values, B, device, is_probs, validate)


def _sampling_params(temperature, top_k, top_p, min_p, B, device, is_probs, validate):
    inv_temp, temp, all_greedy = _temperature(temperature, B, device, validate)
    if type(top_k) in _NUM and type(top_p) in _NUM and type(min_p) in _NUM:
        # filters given as numbers (per-request temperatures): checked once, then reused
        top_k_t, top_p_t, min_p_t = _FILTERS.get(
            (top_k, top_p, min_p, type(top_k), type(top_p), type(min_p), validate is False),
            lambda: _filters(top_k, top_p, min_p, B, device, validate))
    else:
        top_k_t, top_p_t, min_p_t = _filters(top_k, top_p, min_p, B, device, validate)
    if is_probs and validate is not False:
        _check_probs_params(temperature, temp, top_k, top_p, min_p, top_k_t, top_p_t,
                            min_p_t, validate)
    return Params(inv_temp, top_k_t, top_p_t, min_p_t, all_greedy)


_FILTERS = _cache.Cache("scalar filters")


def _filters(top_k, top_p, min_p, B, device, validate):
    return (per_request("top_k", top_k, B, torch.int64, device, TOP_K, True, validate),
            per_request("top_p", top_p, B, torch.float32, device, TOP_P, True, validate),
            per_request("min_p", min_p, B, torch.float32, device, MIN_P, True, validate))


def _check_probs_params(temperature, temp, top_k, top_p, min_p, top_k_t, top_p_t, min_p_t,
                        validate):
    """With final probabilities only T in {0, 1} and no filters make sense."""
    if not any(_is_sequence(v) for v in (temperature, top_k, top_p, min_p)):
        t_ok = float(temperature) in (0.0, 1.0)
        f_ok = top_k == 0 and float(top_p) == 1.0 and float(min_p) == 0.0
    elif not all(may_read(validate, v) for v in (temp, top_k_t, top_p_t, min_p_t)
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


def check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__}")


def seeds(seed, offset, generator, B, device, all_greedy, validate=None):
    """-> (seed, offset): [B] int64 tensors, or Python ints for scalar arguments."""
    if type(seed) is int and type(offset) is int and generator is None and \
            -(2 ** 63) <= seed < 2 ** 63 and -(2 ** 63) <= offset < 2 ** 63:
        return seed, offset                  # the engine's call: two int64s, nothing to do
    check_generator(generator)
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
        seed_t = per_request("seed", seed, B, torch.int64, device, None, True, validate)
    offset_t = per_request("offset", 0 if offset is None else offset, B, torch.int64, device,
                           None, True, validate)
    return seed_t, offset_t


def pick_target(target_logits, target_probs, draft_probs, draft_logits, ndims):
    """-> (target, its argument name, is_probs), after the either-or and tensor checks."""
    if (target_logits is None) == (target_probs is None):
        raise ValueError("pass exactly one of target_logits and target_probs")
    if draft_probs is not None and draft_logits is not None:
        raise ValueError("pass at most one of draft_probs and draft_logits")
    is_probs = target_probs is not None
    tname = "target_probs" if is_probs else "target_logits"
    target = target_probs if is_probs else target_logits
    check_tensor(tname, target, (torch.float32,) if is_probs else LOGIT_DTYPES, ndims)
    return target, tname, is_probs


def rows_to_request(row_start, nrows, device):
    """Map each row of a flattened tensor to its request (rows before request 0's start and
    rows shared by no request map to the nearest request below; they are never read)."""
    r = torch.arange(nrows, device=device)
    return (torch.searchsorted(row_start.contiguous(), r, right=True) - 1).clamp(min=0)


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


_LAYOUTS = _cache.Cache("argument layouts")


def _tensor_key(t):
    """The part of a layout key one tensor argument contributes (None: not a plain tensor or
    absent, which the checks handle on every call)."""
    if type(t) is torch.Tensor:                 # not a subclass (fake, functional, ...)
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
        return Layout(True, B, -1, V, tname, is_probs, dname, unit)
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
    return Layout(False, B, K, V, tname, is_probs, dname, unit)


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


def prepare(target_logits=None, draft_token_ids=None, draft_probs=None, target_probs=None,
            draft_logits=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
            num_draft_tokens=None, cu_num_draft_tokens=None, seed=None, offset=None,
            generator=None, max_num_draft_tokens=None, validate=None,
            vocab_size=None) -> Canonical:
    """Check everything ``validate`` allows and return the canonical (flattened) arguments
    of ``specops::verify`` (scalar parameters as Python numbers: ``to_op_tensors``).
    ``vocab_size``: the global V when the tensors hold a vocabulary shard
    (specops.distributed): draft ids are checked against it, and the draft rows only for
    their range (a shard's row does not sum to 1).  The layout checks run once per layout
    (``Layout``); the value checks on every call."""
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
    seed_t, offset_t = seeds(seed, offset, generator, B, device, params.all_greedy, validate)
    a = Canonical(target2, is_probs, target_row_start, ids, draft_row_start, num_draft,
                  draft2, draft_probs is not None, params.inv_temp, params.top_k,
                  params.top_p, params.min_p, seed_t, offset_t, max_k, not lay.flat)
    if draft_probs is not None and draft2.shape[0] and read_ids and \
            may_read(validate, num_draft, graph):       # (draft2 is on the ids' device)
        check_draft_probs(a, shard=vocab_size is not None)
    return a
