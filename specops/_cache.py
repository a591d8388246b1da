"""The per-call caches of the argument layer and the backends, with one policy.

Engines call the verifier every decoding step with the same shapes and parameters, so the
small things a call builds from Python values are cached by value: checked scalars, the
parameters of an all-scalar call, the [B] tensors of a number shared by every request, the
row starts of the padded layout.  Cached tensors are never written (backends only read
their inputs) and never returned to the caller.

The policy, in one place:

* while a graph is being built -- ``torch.compile`` tracing or CUDA-graph capture -- a cache
  is neither read nor written.  Traced code builds its constants in the graph; a captured
  graph must own its tensors: one created during capture holds its values only after
  replay (an eager call reading it before then would read garbage), and one taken from the
  cache could be freed by an eviction while the graph still reads it.  So under capture
  every constant is made afresh, and its fill is captured with the graph;
* each cache holds at most ``MAX_ENTRIES`` entries and is emptied when full (steady-state
  engines use a handful of keys; a cache that fills up is being fed varying values).
"""
from __future__ import annotations

from typing import Callable, Dict, Hashable, List

import torch

MAX_ENTRIES = 1024


def capturing() -> bool:
    """A CUDA graph is being captured on the current stream (False without CUDA)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def building_graph() -> bool:
    """Under torch.compile tracing or CUDA-graph capture: no cache, no host read of a value."""
    return torch.compiler.is_compiling() or capturing()


class Cache:
    """A dict of values made from their key, bypassed while a graph is built."""

    def __init__(self, name: str):
        self.name = name
        self.entries: Dict[Hashable, object] = {}
        CACHES.append(self)

    def get(self, key: Hashable, make: Callable[[], object], graph=None):
        """``graph``: the caller's ``building_graph()``, asked once per call."""
        if building_graph() if graph is None else graph:
            return make()
        hit = self.entries.get(key)
        if hit is None:
            if len(self.entries) >= MAX_ENTRIES:
                self.entries.clear()
            hit = self.entries[key] = make()
        return hit

    def clear(self) -> None:
        self.entries.clear()


CACHES: List[Cache] = []
_TENSORS = Cache("constant tensors")
_MADE: Dict[int, torch.Tensor] = {}     # id -> every tensor _TENSORS made (held: ids stay unique)


def _made(make: Callable[[], object]) -> Callable[[], object]:
    def make_and_note():
        value = make()
        if building_graph():                # not cached, and no id() while tracing
            return value
        if len(_MADE) >= 4 * MAX_ENTRIES:
            _MADE.clear()
        for t in value if isinstance(value, tuple) else (value,):
            _MADE[id(t)] = t
        return value
    return make_and_note


def is_constant(t) -> bool:
    """``t`` is a tensor this module made (never written, never returned to a caller), so
    anything derived from its address, shape and strides stays true while it is alive."""
    return _MADE.get(id(t)) is t


def const_vec(value, n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A [n] tensor filled with the Python number ``value``."""
    return _TENSORS.get((type(value), value, n, dtype, device),
                        _made(lambda: torch.full((n,), value, dtype=dtype, device=device)))


def const(key: Hashable, make: Callable[[], object], graph=None):
    """Any other constant tensor (or tuple of tensors) of the call, built by ``make``."""
    return _TENSORS.get(key, _made(make), graph)
