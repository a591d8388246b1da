"""Counting what Triton kernels touch, without a GPU (``python -m bench.gpu_model``).

The kernels run in Triton's interpreter (TRITON_INTERPRET=1) with its memory ops patched to
count, per launch: programs, bytes loaded / stored by active lanes (masked-off lanes cost
nothing; atomics count one load + one store) and the bytes of the busiest program.  Torch
ops run by specops during the call (fills, copies: device kernels on CUDA) are counted as
launches too.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")     # must precede the first triton import

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from triton.runtime import interpreter as I  # noqa: E402


@dataclasses.dataclass
class Launch:
    kernel: str
    grid: tuple = ()
    programs: int = 0
    loaded: int = 0
    stored: int = 0
    busiest: int = 0                 # loaded + stored of the busiest program
    rows: int = 0                    # loaded from the `rows` tensors (target, draft)
    per_program: dict = dataclasses.field(default_factory=dict, repr=False)


def _nbytes(ptrs, mask, ranges=()):
    """-> (bytes of the active lanes, of those inside one of the address ranges)."""
    size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)   # int1: a byte in memory
    active = np.ones(ptrs.data.shape, bool) if mask is None else np.broadcast_to(
        mask.data.astype(bool), ptrs.data.shape)
    inside = sum(int(np.count_nonzero(active & (ptrs.data >= lo) & (ptrs.data < hi)))
                 for lo, hi in ranges)
    return int(np.count_nonzero(active)) * size, inside * size


# Torch ops that launch nothing on CUDA: allocation, metadata, host scalars.
_NO_KERNEL = {"empty", "empty_strided", "detach", "alias", "lift_fresh", "set_", "new_empty",
              "_local_scalar_dense", "resize_", "is_nonzero", "sym_size", "sym_stride"}


class _TorchOps(TorchDispatchMode):
    def __init__(self, sink, state):
        super().__init__()
        self.sink, self.state = sink, state

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not self.state["in_kernel"] and not func.is_view and name not in _NO_KERNEL:
            self.sink.append(Launch("torch:" + name))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def count_launches(torch_ops=True, rows=()):
    """Yield a list that fills with one Launch per Triton launch (and per device-kernel torch
    op with torch_ops) in the block; loads from the tensors `rows` are also counted apart
    (the interpreter runs CPU tensors in place: their addresses are the kernels').  The
    interpreter is restored on exit."""
    records, state = [], {"in_kernel": False, "cur": None, "pid": None}
    ranges = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
              for t in rows if t is not None]
    B, G = I.InterpreterBuilder, I.GridExecutor
    saved = {(cls, n): getattr(cls, n) for cls, n in (
        (B, "create_masked_load"), (B, "create_masked_store"), (B, "create_atomic_cas"),
        (B, "create_atomic_rmw"), (B, "set_grid_idx"), (G, "__call__"))}

    def counted(name, ptr_at, mask_at, load, store):
        """The builder method `name`, counting its pointer / mask arguments' active lanes."""
        def method(self, *args, **kwargs):
            rec, pid = state["cur"], state["pid"]
            if rec is not None:
                n, inside = _nbytes(args[ptr_at], None if mask_at is None else args[mask_at],
                                    ranges)
                rec.rows += inside * load
                rec.loaded += n * load
                rec.stored += n * store
                rec.per_program[pid] = rec.per_program.get(pid, 0) + n * (load + store)
            return saved[(B, name)](self, *args, **kwargs)
        return method

    def set_grid_idx(self, x, y, z):
        state["pid"] = (x, y, z)
        return saved[(B, "set_grid_idx")](self, x, y, z)

    def call(self, *a, **k):
        rec = Launch(getattr(self.fn, "__name__", str(self.fn)))
        records.append(rec)
        state.update(cur=rec, in_kernel=True)     # the interpreter's host copies are not ops
        try:
            return saved[(G, "__call__")](self, *a, **k)
        finally:
            state.update(cur=None, in_kernel=False)
            rec.grid = tuple(I.interpreter_builder.grid_dim)
            rec.programs = int(np.prod(rec.grid))
            rec.busiest = max(rec.per_program.values(), default=0)

    # create_load / create_store, atomic load / store and descriptor loads / stores all go
    # through the masked ones; an atomic is one load and one store of its active lanes
    patches = {(B, "create_masked_load"): counted("create_masked_load", 0, 1, 1, 0),
               (B, "create_masked_store"): counted("create_masked_store", 0, 2, 0, 1),
               (B, "create_atomic_cas"): counted("create_atomic_cas", 0, None, 1, 1),
               (B, "create_atomic_rmw"): counted("create_atomic_rmw", 1, 3, 1, 1),
               (B, "set_grid_idx"): set_grid_idx, (G, "__call__"): call}
    api, mode = sys.modules.get("specops._args"), None
    real_mode_fn = getattr(api, "_get_current_dispatch_mode", None)
    try:
        for (cls, name), fn in patches.items():
            setattr(cls, name, fn)
        if torch_ops:
            mode = _TorchOps(records, state)
            if real_mode_fn is not None:       # specops takes another path when a mode watches:
                api._get_current_dispatch_mode = lambda: None    # count the eager one
            mode.__enter__()
        yield records
    finally:
        if mode is not None:
            mode.__exit__(None, None, None)
        if real_mode_fn is not None:
            api._get_current_dispatch_mode = real_mode_fn
        for (cls, name), fn in saved.items():
            setattr(cls, name, fn)
