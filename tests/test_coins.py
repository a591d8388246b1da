"""Caller-supplied uniforms (contract section 13, ``specops/reference/coins.py``).

Exact law by enumeration (the exact mode equals the target law to 1e-12; the relaxed
thresholds move it, measurably), the walk against that law on a coin grid where every
probability is exact, and negative controls: SGLang's ``coin <= prob_acc``, its re-counted
duplicate siblings, and a final draw that forgets the tried tokens, each of which must fail.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from specops.reference import coins as RC
from specops.reference.law import completion

Q = np.float32(0.25)


def links(children: dict, n: int):
    """first-child / next-sibling arrays from {parent: [children in try order]}."""
    nt, ns = [-1] * n, [-1] * n
    for c, kids in children.items():
        nt[c] = kids[0]
        for a, b in zip(kids, kids[1:]):
            ns[a] = b
    return nt, ns


def random_rows(seed: int, V: int, zero=()):
    """target(prefix): a fixed random float32 row per prefix (tokens in ``zero`` get 0 at
    the root)."""
    rng = np.random.default_rng(seed)
    cache = {}

    def target(prefix):
        if prefix not in cache:
            r = rng.random(V).astype(np.float32) + np.float32(0.05)
            if not prefix:
                r[list(zero)] = 0
            cache[prefix] = (r / r.sum()).astype(np.float32)
        return cache[prefix]
    return target


# (children, candidates, V, zero-probability root tokens): a star with a repeated token, a
# two-level tree, a chain, and a root child of target probability 0 tried first
CASES = {
    "star_dup": ({0: [1, 2, 3]}, [0, 1, 2, 1], 4, ()),
    "two_level": ({0: [1, 2], 1: [3, 4], 2: [5]}, [0, 2, 0, 1, 3, 3], 4, ()),
    "chain": ({0: [1], 1: [2], 2: [3]}, [0, 1, 2, 0], 3, ()),
    "zero_first": ({0: [1, 2], 2: [3]}, [0, 3, 1, 2], 4, (3,)),
}


def case_args(name, seed=0):
    children, cand, V, zero = CASES[name]
    nt, ns = links(children, len(cand))
    return random_rows(seed, V, zero), cand, nt, ns, V


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("num_spec", [1, 2, 4])
def test_exact_mode_law_is_target(name, num_spec):
    """At thresholds 1 the walk's output law is the target's (up to float64 rounding).
    Catches: a coin compared with unnormalised mass, a residual that keeps a tried token,
    a sibling order or level cap (num_spec) handled differently in the law."""
    target, cand, nt, ns, V = case_args(name)
    out = RC.exact_coin_law(target, cand, nt, ns, V, num_spec)
    assert out["tv"] < 1e-12, out["tv"]
    assert abs(out["length_law"].sum() - 1) < 1e-12


@pytest.mark.parametrize("ts,ta", [(0.9, 0.7), (0.3, 1.0), (1.0, 0.5), (0.0, 0.0)])
def test_relaxed_thresholds_move_the_law(ts, ta):
    """SGLang's relaxed thresholds are NON-EXACT: the law moves away from the target by a
    visible TV (computed exactly), which the README's table reports.  Catches: thresholds
    silently ignored (TV 0) or a law that is not a distribution."""
    target, cand, nt, ns, V = case_args("two_level", seed=3)
    out = RC.exact_coin_law(target, cand, nt, ns, V, 3, ts, ta)
    assert abs(out["law"].sum() - 1) < 1e-12
    assert 1e-3 < out["tv"] <= 1.0, out["tv"]
    assert RC.threshold_tv(target, cand, nt, ns, V, 3, ts, ta) == out["tv"]


def _sglang_duplicate_level(w, A, ys, p, th):
    """SGLang's accumulation: a repeated sibling token adds its probability again."""
    probs, C, prev = [], 0, 0.0
    for y in ys:
        C += int(w[y])
        a = min(1.0, C / A)
        probs.append(max(a - prev, 0.0))
        prev = max(prev, a)
    return probs, 1.0 - prev


def test_negative_control_duplicate_recount_fails():
    """Re-counting a repeated sibling (SGLang's ``prob_acc += p(y)``) over-accepts it: the
    law moves off the target.  Shows the exact-law test can fail on this case."""
    target, cand, nt, ns, V = case_args("star_dup", seed=1)
    out = RC.exact_coin_law(target, cand, nt, ns, V, 2, accept=_sglang_duplicate_level)
    assert out["tv"] > 1e-3


def test_negative_control_final_draw_from_p_fails(monkeypatch):
    """A final draw from p (the tried tokens not removed) is the classic wrong fallback:
    the exact-law test must fail with it."""
    monkeypatch.setattr(RC, "final_weights", lambda w, tried: w)
    target, cand, nt, ns, V = case_args("two_level", seed=2)
    assert RC.exact_coin_law(target, cand, nt, ns, V, 3)["tv"] > 1e-3


# ----------------------------------------------------------------------------- the walk
def test_grid_and_threshold_arithmetic():
    """m(u) and thr(u, M) on the exact cases the contract states.  Catches: rounding
    instead of flooring, NaN or negative coins not mapped to 0, an overflowing product."""
    assert RC.coin_grid(0.0) == 0 and RC.coin_grid(float("nan")) == 0
    assert RC.coin_grid(-1.0) == 0 and RC.coin_grid(1.0) == 2 ** 24 - 1
    assert RC.coin_grid(np.float32(1 - 2 ** -24)) == 2 ** 24 - 1
    assert RC.coin_grid(np.float32(3 * 2 ** -24)) == 3
    assert RC.coin_grid(np.float32(2 ** -30)) == 0              # below the grid
    M = 2 ** 62 + 12345
    for m in (0, 1, 2 ** 23 + 7, 2 ** 24 - 1):
        assert RC.coin_threshold(np.float32(m * 2 ** -24), M) == (m * M) // 2 ** 24


def test_zero_probability_draft_never_accepted(monkeypatch):
    """coin 0 on a child whose target probability is 0: rejected (strict C > t).  Negative
    control: SGLang's ``coin <= prob_acc`` (C >= t) accepts it (sglang #35771)."""
    target, cand, nt, ns, V = case_args("zero_first")
    rows = np.stack([target(())] * len(cand))[None]
    args = ([cand], [nt], [ns], np.zeros((1, len(cand)), np.float32),
            np.zeros(1, np.float32), rows, 3)
    acc, toks, _ = RC.verify_coins_ref(*args)
    assert acc[0][:1] != [1] and toks[0][0] != 3
    monkeypatch.setattr(RC, "child_accepts", lambda C, t, p_y, th: C >= t)
    acc, toks, _ = RC.verify_coins_ref(*args)
    assert acc[0][:1] == [1] and toks[0][0] == 3


GRID = 16      # coins k / 16: exact for the quarter rows below (see grid_walk_law)
ROOT = np.array([0.25, 0.25, 0.5, 0.0], np.float32)
NODE2 = np.array([0.0, 0.5, 0.5, 0.0], np.float32)
UNIFORM = np.full(4, Q, np.float32)


def grid_target(prefix):
    return {(): ROOT, (0,): NODE2}.get(prefix, UNIFORM)


def grid_walk_law(ts, ta, num_spec=3):
    """The walk's output law over every coin on the 1/16 grid.  Rows are multiples of 1/4
    and every residual sum a power of two, so each probability the walk implements is a
    multiple of 1/16 and the grid frequencies equal the exact law (not approximately)."""
    cand = [0, 3, 0, 1, 2]                # root tries 1 (token 3, p = 0), 2, 3; 2 -> 4
    nt, ns = links({0: [1, 2, 3], 2: [4]}, 5)
    rows = np.stack([ROOT, UNIFORM, NODE2, UNIFORM, UNIFORM])
    law, complete, _ = completion(grid_target, 4, 3)
    ks = np.arange(GRID, dtype=np.float32) / GRID
    combos = list(itertools.product(ks, ks, ks))
    coins = np.zeros((len(combos), 5), np.float32)
    coins[:, 0] = [c[0] for c in combos]
    coins[:, 2] = [c[1] for c in combos]
    final = np.array([c[2] for c in combos], np.float32)
    B = len(combos)
    _, toks, valid = RC.verify_coins_ref([cand] * B, [nt] * B, [ns] * B, coins, final,
                                         np.broadcast_to(rows, (B, 5, 4)), num_spec, ts, ta)
    assert all(valid)
    for t in toks:
        complete(tuple(t), 1.0 / B)
    want = RC.exact_coin_law(grid_target, cand, nt, ns, 4, num_spec, ts, ta)
    return law, want


@pytest.mark.parametrize("ts,ta", [(1.0, 1.0), (0.5, 0.5), (0.25, 1.0)])
def test_walk_equals_law_on_grid(ts, ta):
    """verify_coins_ref over every grid coin has exactly the law exact_coin_law computes, in
    the exact and the relaxed modes.  Catches any disagreement between the walk and the law
    (sibling order, coin indexing by the accepted node, the residual, thresholds)."""
    law, want = grid_walk_law(ts, ta)
    assert np.abs(law - want["law"]).max() < 1e-12


def test_negative_control_sglang_coin_fails_grid(monkeypatch):
    """With SGLang's ``<=`` the grid walk accepts the zero-probability child at coin 0:
    its law no longer matches (the grid test can fail)."""
    monkeypatch.setattr(RC, "child_accepts", lambda C, t, p_y, th: C >= t)
    law, want = grid_walk_law(1.0, 1.0)
    assert np.abs(law - want["law"]).max() > 1e-3
