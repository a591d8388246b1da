"""The checks every public entry point shares: when a value may be read, tensors, Python
numbers and [B] values, the sampling parameters, the seeds (``specops._args`` documents the
rules)."""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from specops import _cache
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


def with_tensors(a, B: int, device):
    fix = {f: _cache.const_vec(getattr(a, f), B, dt, device) for f, dt in _SCALAR_FIELDS
           if not isinstance(getattr(a, f), torch.Tensor)}
    return a._replace(**fix) if fix else a


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
def extent_bytes(t: torch.Tensor) -> int:
    """Bytes from a strided tensor's first element to one past its last (0 if empty)."""
    if t.numel() == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


def check_storage(name, t: torch.Tensor, extent: Optional[int] = None,
                  graph: Optional[bool] = None) -> None:
    """The tensor's storage holds every element its shape and strides address (a storage
    freed or resized under a tensor, as FSDP-style code does, would be read past its end).
    ``graph``: the caller's ``tracing()`` (a traced tensor has no storage to check)."""
    if tracing() if graph is None else graph:
        return
    need = extent_bytes(t) if extent is None else extent
    if need and t.untyped_storage().nbytes() - t.storage_offset() * t.element_size() < need:
        raise ValueError(
            f"{name}'s storage holds {t.untyped_storage().nbytes()} bytes, fewer than its "
            f"shape {tuple(t.shape)}, strides {t.stride()} and offset {t.storage_offset()} "
            f"address ({need} from its start): was its storage freed or resized?")


def check_tensor(name, t, dtypes, ndims=None, device=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}: "
                        "call .to_dense() first")
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
    if type(t) is torch.Tensor:                 # (fake and other subclasses hold no storage)
        check_storage(name, t)


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
                validate=None, graph=None):
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
        if value.layout is not torch.strided:
            raise TypeError(f"{name} must be a dense (strided) tensor, got layout "
                            f"{value.layout}")
        if type(value) is torch.Tensor:
            check_storage(name, value, graph=graph)
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


def seeds(seed, offset, generator, B, device, all_greedy, validate=None, graph=None):
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
        seed_t = per_request("seed", seed, B, torch.int64, device, None, True, validate, graph)
    offset_t = per_request("offset", 0 if offset is None else offset, B, torch.int64, device,
                           None, True, validate, graph)
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
