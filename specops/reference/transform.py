"""The target transform of section 2 (logits -> probabilities) and its portable exp."""
from __future__ import annotations

import numpy as np

from .checks import logits_row_valid, params_ok, probs_row_valid
from .constants import (E_SCALE_BITS, EXP_COEFFS, EXP_CUTOFF, EXP_LN2_HI, EXP_LN2_LO,
                        EXP_LOG2E, EXP_ROUND, FLT_MIN, GREEDY_TEMPERATURE)


def pexp(d) -> np.ndarray:
    """Portable float32 exp for d <= 0 (see the contract, section 2)."""
    d = np.asarray(d, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = d >= EXP_CUTOFF
        dd = np.where(ok, d, np.float32(0.0)).astype(np.float32)
        n = (dd * EXP_LOG2E + EXP_ROUND) - EXP_ROUND
        r = (dd - n * EXP_LN2_HI) - n * EXP_LN2_LO
        s = np.full_like(r, EXP_COEFFS[0])
        for c in EXP_COEFFS[1:]:
            s = s * r + c
        scale = ((n.astype(np.int32) + 127) << 23).astype(np.int32).view(np.float32)
        out = s * scale
    return np.where(ok, out, np.float32(0.0)).astype(np.float32)


def inv_temperature(temperature) -> np.ndarray:
    """Host-side 1/T: float32(1 / float64(float32(T))); 0 for greedy (T < 1e-5); NaN for a
    temperature that is NaN, negative or infinite (a malformed request, section 8)."""
    t32 = np.asarray(temperature, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        hot = t32 >= GREEDY_TEMPERATURE
        ok = (t32 >= 0) & np.isfinite(t32)
    t = t32.astype(np.float64)
    with np.errstate(divide="ignore"):
        inv = np.where(hot, 1.0 / np.where(hot, t, 1.0), 0.0)
    return np.where(ok, inv, np.nan).astype(np.float32)


def argmax_row(x: np.ndarray) -> int:
    return int(np.argmax(np.asarray(x, dtype=np.float32)))   # numpy: lowest index on ties


def _int_masses(e: np.ndarray) -> np.ndarray:
    return (e.astype(np.float32) * np.float32(2.0 ** E_SCALE_BITS)).astype(np.int64)


def top_p_threshold(e: np.ndarray, E: np.ndarray, top_p: np.float32) -> np.float32:
    """Largest e-value tau with float64(mass of e >= tau) >= float64(top_p) * float64(S)."""
    target = np.float64(np.float32(top_p)) * np.float64(int(E.sum()))
    order = np.argsort(-e, kind="stable")
    es, cum = e[order], np.cumsum(E[order])
    group_end = np.ones(es.size, dtype=bool)
    group_end[:-1] = es[:-1] != es[1:]
    hit = np.nonzero(group_end & (cum.astype(np.float64) >= target))[0]
    return es[hit[0]] if hit.size else es[-1]


def transform_row(logits, inv_t, top_k=0, top_p=1.0, min_p=0.0):
    """One row of logits -> (p float32 [V], valid). inv_t == 0 means greedy (one-hot)."""
    l = np.asarray(logits).astype(np.float32)
    V = l.size
    p = np.zeros(V, dtype=np.float32)
    if not params_ok(inv_t, top_k, top_p, min_p) or not logits_row_valid(l):
        return p, False
    inv_t = np.float32(inv_t)
    if inv_t == 0:
        p[argmax_row(l)] = 1.0
        return p, True
    x = l * inv_t
    if not logits_row_valid(x):
        return p, False
    keep = np.ones(V, dtype=bool)
    if 0 < int(top_k) < V:
        thr = np.partition(x, V - int(top_k))[V - int(top_k)]
        keep &= x >= thr
    m = x.max()
    e = np.where(keep, pexp(x - m), np.float32(0.0)).astype(np.float32)
    E = _int_masses(e)
    if np.float32(top_p) < 1:
        keep &= e >= top_p_threshold(e, E, np.float32(top_p))
    if np.float32(min_p) > 0:
        keep &= e >= np.float32(min_p)
    s_kept = int(E[keep].sum())
    p = (e.astype(np.float64) * 2.0 ** E_SCALE_BITS / np.float64(s_kept)).astype(np.float32)
    p = np.where(keep & (p >= FLT_MIN), p, np.float32(0.0)).astype(np.float32)
    return p, True


def target_row(row, is_probs: bool, params):
    """p of one target row (sections 2-3) for a request with ``params = (inv_t, top_k,
    top_p, min_p)``, or None if the row is invalid; a greedy request's probability row
    becomes one-hot at its lowest-index argmax."""
    if not is_probs:
        p, ok = transform_row(row, *params)
        return p if ok else None
    row = np.asarray(row).astype(np.float32)
    if not probs_row_valid(row):
        return None
    if np.float32(params[0]) == 0:
        onehot = np.zeros(row.size, dtype=np.float32)
        onehot[argmax_row(row)] = 1
        return onehot
    return row


def sampling_probs_ref(logits, inv_temp, top_k, top_p, min_p):
    """Rows of logits [N, V] + per-row params -> (probs [N, V] float32, valid [N])."""
    logits = np.asarray(logits)
    N, V = logits.shape
    probs = np.zeros((N, V), dtype=np.float32)
    valid = np.zeros(N, dtype=bool)
    for i in range(N):
        probs[i], valid[i] = transform_row(logits[i], inv_temp[i], top_k[i], top_p[i], min_p[i])
    return probs, valid
