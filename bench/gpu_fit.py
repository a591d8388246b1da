"""The bandwidth model of ``python -m bench.gpu_model``: per-launch counts fitted over
(B, V) and extrapolated, and the time they imply on an H200 under the constants production
dispatch uses (``specops/triton_kernels/_launch.py``: which verify path runs is chosen from them).
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")     # must precede the first triton import

import numpy as np  # noqa: E402

from specops.backends import triton as _triton_backend  # noqa: E402

LAUNCH = _triton_backend._K._launch          # the kernels' host module: the model's owner
HBM_BW = LAUNCH.MODEL_HBM_BPS                # H200 HBM3e, bytes/s
N_SM = LAUNCH.MODEL_N_SM                     # H200 SMs
PER_SM_BW = LAUNCH.MODEL_SM_BPS              # ASSUMPTION: one SM streams ~40-60 GB/s
LAUNCH_US = LAUNCH.MODEL_LAUNCH_S * 1e6      # per launch, eager
GRAPH_LAUNCH_US = LAUNCH.MODEL_GRAPH_LAUNCH_S * 1e6   # per launch, CUDA-graph replay


def _features(B, V, quad=True):
    """[1, B, V, BV] (+ BV**2: per-request reads of per-chunk partials, C programs x C
    partials per row, grow as V**2), V in units of 8192 for conditioning."""
    v = V / 8192
    return [1.0, B, v, B * v] + ([B * v * v] if quad else [])


def _fit(points, values, quad=True):
    """Least squares over _features -> (coef, max relative error at the points)."""
    X = np.array([_features(b, v, quad) for b, v in points])
    y = np.array(values, dtype=float)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    err = np.abs(X @ coef - y) / np.maximum(np.abs(y), 1.0)
    return coef, float(err.max())


def _programs_model(points, progs):
    """Grid size as c * B**i * ceil(V/C)**j (C a power of 2) fitted exactly -> (formula, f);
    else the rounded least-squares fit."""
    for C in [1] + [2 ** i for i in range(4, 21)]:
        for per_b in (False, True):
            def f(b, v, c=1, C=C, per_b=per_b):
                return c * (b if per_b else 1) * (-(-v // C) if C > 1 else 1)
            c = progs[0] // max(f(*points[0]), 1)
            if all(f(b, v, c) == p for (b, v), p in zip(points, progs)):
                return (f"{c}" + "*B" * per_b + (f"*ceil(V/{C})" if C > 1 else ""),
                        lambda b, v, f=f, c=c: f(b, v, c))
    coef, err = _fit(points, progs)
    return f"~fit (err {err:.0e})", lambda b, v: round(np.dot(coef, _features(b, v)))


def model(runs):
    """runs: {(B, V): [Launch]} at one setting -> (predict(B, V) -> per-launch dicts, fit
    notes).  Launches are matched by position; the sequence must not change with B or V."""
    pts = sorted(runs)
    names = [[r.kernel for r in runs[p]] for p in pts]
    if any(n != names[0] for n in names):
        raise RuntimeError(f"launch sequence depends on B or V: {names}")
    fits = []
    for i, name in enumerate(names[0]):
        fit = {f: _fit(pts, [getattr(runs[p][i], f) for p in pts])
               for f in ("loaded", "stored", "busiest", "rows")}
        formula, prog = _programs_model(pts, [runs[p][i].programs for p in pts])
        fits.append((name, fit, formula, prog))

    def predict(B, V):
        out = []
        for name, fit, formula, prog in fits:
            row = {f: max(0.0, float(np.dot(c, _features(B, V)))) for f, (c, _) in fit.items()}
            row.update(kernel=name, programs=prog(B, V))
            out.append(row)
        return out
    return predict, fits


def timing(launches, floor, launch_us):
    """us: per launch, max(HBM time, busiest program at PER_SM_BW), plus launch costs."""
    t = sum(max((r["loaded"] + r["stored"]) / HBM_BW, r["busiest"] / PER_SM_BW)
            for r in launches)
    return t * 1e6 + len(launches) * launch_us
