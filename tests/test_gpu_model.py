"""bench/gpu_model.py counts what the kernels touch: exact counts on a kernel of known
traffic, and a quick run on the real verify.  Interpreter only (the counter patches it)."""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":      # compiled kernels: nothing to count
    pytest.skip("the bandwidth model runs in Triton's interpreter only",
                allow_module_level=True)

from bench import gpu_model as GM  # noqa: E402


@triton.jit
def _traffic_kernel(x_ptr, y_ptr, acc_ptr, n, m, BLOCK: tl.constexpr):
    """Program (i, j) loads n + i float32 (masked), stores m int32, adds 1 atomically."""
    i = tl.program_id(0)
    pid = i * tl.num_programs(1) + tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n + i, other=0.0)
    tl.store(y_ptr + pid * BLOCK + offs, x.to(tl.int32), mask=offs < m)
    tl.atomic_add(acc_ptr + pid, 1)


def test_counts_exact():
    n, m, block, grid = 5, 3, 16, (3, 2)
    x = torch.arange(block, dtype=torch.float32)
    y = torch.zeros(6 * block, dtype=torch.int32)
    acc = torch.zeros(6, dtype=torch.int64)
    with GM.count_launches(torch_ops=False, rows=(x,)) as recs:
        _traffic_kernel[grid](x, y, acc, n, m, BLOCK=block)
    assert len(recs) == 1
    r = recs[0]
    assert (r.kernel, r.grid, r.programs) == ("_traffic_kernel", (3, 2, 1), 6)
    loads = sum((n + i) * 4 for i in range(3) for _ in range(2))
    assert r.loaded == loads + 6 * 8                # + the atomics' read of one int64 each
    assert r.rows == loads                          # loads from x alone
    assert r.stored == 6 * m * 4 + 6 * 8            # + the atomics' write
    assert r.busiest == (n + 2) * 4 + m * 4 + 16     # program (2, *): the widest load
    assert acc.eq(1).all() and y.view(6, block)[:, :m].eq(torch.arange(m)).all()


def test_patch_restored_and_torch_ops_counted():
    from triton.runtime import interpreter as I
    before = I.InterpreterBuilder.create_masked_load, I.GridExecutor.__call__
    with GM.count_launches() as recs:
        torch.zeros(4).fill_(1.0)
    assert [r.kernel for r in recs] == ["torch:zeros", "torch:fill_"]
    assert (I.InterpreterBuilder.create_masked_load, I.GridExecutor.__call__) == before


@pytest.mark.full                       # the model's interpreter run of the kernels
def test_quick_run_on_verify():
    env = {k: os.environ.get(k) for k in ("SPECOPS_TRITON_BLOCK_V", "SPECOPS_TRITON_PIPELINE",
                                          "SPECOPS_TRITON_CHUNK")}
    res, _ = GM.run(quick=True)
    assert {k: os.environ.get(k) for k in env} == env      # the suite's environment is kept
    (runs,) = [r for per in res.values() for r in per.values()]
    assert sorted(runs) == sorted(GM.QUICK_POINTS)
    for (B, V), recs in runs.items():
        tri = [r for r in recs if not r.kernel.startswith("torch:")]
        assert tri and all(r.programs >= 1 and r.busiest > 0 for r in tri)
        total = sum(r.loaded + r.stored for r in tri)
        assert total >= B * V * 4             # at least one float32 target row per request
    predict, _ = GM.model(runs)
    assert sum(r["loaded"] for r in predict(64, GM.V_REAL)) > 0


def test_fits():
    pts = [(1, 8192), (2, 8192), (3, 8192), (2, 16384), (1, 24576)]
    formula, f = GM._programs_model(pts, [5 * b * -(-v // 4096) for b, v in pts])
    assert formula == "5*B*ceil(V/4096)" and f(64, 128256) == 5 * 64 * 32
    assert GM._programs_model(pts, [b for b, v in pts])[0] == "1*B"
    coef, err = GM._fit(pts + [(3, 16384)], [7 + 3 * b * v + 2 * v + b * v * v / 8192
                                             for b, v in pts + [(3, 16384)]])
    assert err < 1e-9 and np.allclose(coef, [7, 0, 2 * 8192, 3 * 8192, 8192], rtol=1e-6)
