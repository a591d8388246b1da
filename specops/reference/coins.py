"""Caller-supplied uniforms: sgl-kernel's tree walk (contract: ``specops.reference``,
section 13).

``verify_coins_ref`` is the walk every implementation follows, in sgl-kernel's
first-child / next-sibling layout, written for clarity; ``exact_coin_law`` enumerates its
output law for small trees (continuous coins, the implemented integers), so that the exact
mode can be compared with the target law and the relaxed thresholds' distance from it
measured (``threshold_tv``).  The per-level steps (``coin_grid``, ``coin_threshold``,
``acc_mass``, ``child_accepts``) are called by name so that the tests' negative controls can
substitute one of them (SGLang's ``coin <= prob_acc``, for instance).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numbers

import numpy as np

from .checks import probs_row_valid
from .draw import integer_weights
from .law import completion, against_target

COIN_BITS = 24
COIN_SCALE = 1 << COIN_BITS
ACC_CAP = float(np.float32(1e-9))          # sgl-kernel: fmaxf(threshold_acc, 1e-9f)


class Thresholds(NamedTuple):
    single: float = 1.0
    acc: float = 1.0

    @property
    def exact(self) -> bool:
        return self.single == 1.0 and self.acc == 1.0


def check_thresholds(single, acc) -> Thresholds:
    """float32 thresholds in [0, 1] (ValueError naming the argument otherwise)."""
    out = []
    for name, v in (("threshold_single", single), ("threshold_acc", acc)):
        if isinstance(v, (bool, str, bytes)) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a real number in [0, 1], got {v!r}")
        v = float(np.float32(float(v)))
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name}={v!r} must be in [0, 1] (section 13; 1 is exact, below "
                             "1 is sgl-kernel's non-exact relaxation)")
        out.append(v)
    return Thresholds(*out)


# ----------------------------------------------------------------------------- one level
def coin_grid(u) -> int:
    """m(u): the float32 uniform on the 2**-24 grid (NaN and u <= 0 give 0, u >= 1 the top)."""
    u = float(np.float32(u))
    if not u > 0:
        return 0
    if u >= 1:
        return COIN_SCALE - 1
    return int(math.floor(u * COIN_SCALE))


def coin_threshold(u, M: int) -> int:
    """thr(u, M) = floor(m(u) * M / 2**24), exact."""
    return (coin_grid(u) * int(M)) >> COIN_BITS


def acc_mass(A: int, th: Thresholds) -> int:
    """Ath: the mass the level's coin is scaled by (A in the exact mode)."""
    if th.exact or th.acc >= 1.0:
        return int(A)
    return int(math.floor(float(np.float64(A) * np.float64(max(th.acc, ACC_CAP)))))


def child_accepts(C: int, t: int, p_y, th: Thresholds) -> bool:
    """C > t (strict), or in the relaxed mode p(y) >= threshold_single (float32)."""
    if C > t:
        return True
    return (not th.exact) and bool(np.float32(p_y) >= np.float32(th.single))


def final_weights(w, tried) -> np.ndarray:
    """w with the tokens tried at this node zeroed (w itself if that leaves nothing)."""
    W = w.copy()
    W[list(tried)] = 0
    return W if int(W.sum()) > 0 else w


def draw_token(W, u) -> int:
    """The smallest x with W(0) + ... + W(x) > thr(u, sum W); -1 if sum W == 0."""
    S = int(W.sum())
    if S == 0:
        return -1
    tf = coin_threshold(u, S)
    return int(np.searchsorted(np.cumsum(W), tf, side="right"))


# ----------------------------------------------------------------------------- the walk
def verify_coins_ref(candidates, next_token, next_sibling, coins, final_coins, target_probs,
                     num_spec: int, threshold_single=1.0, threshold_acc=1.0):
    """The walk of section 13 for a batch in sgl-kernel's layout (numpy or lists): candidates,
    next_token, next_sibling [B, n] int, coins [B, n] / final_coins [B] float32,
    target_probs [B, n, V] float32.  The tree must be well formed (the caller checks links).
    Returns (accepted [B] list of node lists, tokens [B] list: accepted tokens then the final
    token or -1, valid [B] bool list)."""
    th = check_thresholds(threshold_single, threshold_acc)
    target = np.asarray(target_probs, dtype=np.float32)
    B, n, V = target.shape
    accepted, tokens, valid = [], [], []
    for b in range(B):
        nodes, toks, ok = [], [], True
        c = 0
        while True:
            p = target[b, c]
            if not probs_row_valid(p):
                toks.append(-1)
                ok = False
                break
            w = integer_weights(p)
            A = int(w.sum())
            tried = []
            nxt = -1
            if len(nodes) < num_spec - 1:
                t = coin_threshold(coins[b][c], acc_mass(A, th))
                C = 0
                x = int(next_token[b][c])
                while x != -1:
                    y = int(candidates[b][x])
                    if y not in tried:
                        C += int(w[y])
                    if child_accepts(C, t, p[y], th):
                        nxt = x
                        break
                    tried.append(y)
                    x = int(next_sibling[b][x])
            if nxt == -1:
                toks.append(draw_token(final_weights(w, tried), final_coins[b]))
                break
            nodes.append(nxt)
            toks.append(int(candidates[b][nxt]))
            c = nxt
        accepted.append(nodes)
        tokens.append(toks)
        valid.append(ok)
    return accepted, tokens, valid


# ----------------------------------------------------------------------------- the law
def level_law(w, A: int, ys, p, th: Thresholds):
    """(accept probabilities of the children in order, P(all rejected), tried tokens) for
    a continuous coin u: child k is accepted iff no earlier one was and (u * Ath < C_k or
    p(y_k) >= threshold_single)."""
    Ath = acc_mass(A, th)
    probs, tried, C, prev, alive = [], [], 0, 0.0, True
    for y in ys:
        if y not in tried:
            C += int(w[y])
        a = (1.0 if C > 0 else 0.0) if Ath == 0 else min(1.0, C / Ath)
        single = (not th.exact) and bool(np.float32(p[y]) >= np.float32(th.single))
        if not alive:
            probs.append(0.0)
        elif single:
            probs.append(1.0 - prev)
            alive = False
        else:
            probs.append(max(a - prev, 0.0))
            prev = max(prev, a)
        tried.append(y)
    rest = 0.0 if not alive else 1.0 - prev
    return probs, rest


def exact_coin_law(target, candidates, next_token, next_sibling, V: int, num_spec: int,
                   threshold_single=1.0, threshold_acc=1.0, accept=None) -> dict:
    """Exact law (float64) of the section 13 walk's output over independent continuous coins,
    for one small tree with fixed tokens: ``target(prefix) -> p`` (float32 rows after a path
    of tokens, or an array indexed by depth).  The output (accepted tokens, then the final
    token) is completed to D + 1 tokens by sampling the target, D = min(num_spec - 1, tree
    depth).  ``accept`` (tests only) replaces the level law, for negative controls.
    Returns ``law``, ``target_law``, ``tv`` and ``length_law``."""
    th = check_thresholds(threshold_single, threshold_acc)
    kids = {}
    for c in range(len(candidates)):
        x, lst = int(next_token[c]), []
        while x != -1:
            lst.append(x)
            x = int(next_sibling[x])
        kids[c] = lst

    def depth(c, d=0):
        return max([d] + [depth(x, d + 1) for x in kids[c]])
    D = min(num_spec - 1, depth(0))
    fn = target if callable(target) else (lambda prefix, arr=np.asarray(target): arr[len(prefix)])
    law, complete, pvec = completion(fn, V, D + 1)
    length_law = np.zeros(D + 1)
    level = level_law if accept is None else accept

    def walk(c, prefix, wt):
        p = pvec(prefix)
        w = integer_weights(p)
        A = int(w.sum())
        ys = [int(candidates[x]) for x in kids[c]] if len(prefix) < num_spec - 1 else []
        probs, rest = level(w, A, ys, p, th)
        for x, y, a in zip(kids[c], ys, probs):
            if a > 0:
                walk(x, prefix + (y,), wt * a)
        if rest > 0:
            length_law[len(prefix)] += wt * rest
            W = final_weights(w, ys)
            for z, pz in enumerate(W.astype(np.float64) / float(W.sum())):
                complete(prefix + (z,), wt * rest * pz)

    walk(0, (), 1.0)
    return against_target(law, pvec, V, length_law)


def threshold_tv(target, candidates, next_token, next_sibling, V: int, num_spec: int,
                 threshold_single, threshold_acc) -> float:
    """TV between the relaxed walk's output law and the target's (0 up to rounding at 1, 1)."""
    return exact_coin_law(target, candidates, next_token, next_sibling, V, num_spec,
                          threshold_single, threshold_acc)["tv"]
