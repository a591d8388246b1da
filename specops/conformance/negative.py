"""Negative controls: samplers with one known bug each, which the kit must fail.

Each control is a vectorised numpy verifier (``ChainControl`` / ``TreeControl``) on
specops' Philox streams (``reference.stream_words``: counter (position, tag), key = the
request's seed), exact when no bug is switched on (``exact_chain`` / ``exact_tree`` are the
positive controls: they must pass), with one switch flipped to reproduce a bug class that
serving engines shipped or fixed in 2026 (``../shared/reviews/frontier-turn3.md``, section 2):

===============================  ==============================================  ===========
control                          bug                                             source
===============================  ==============================================  ===========
``wrong_fallback``               on rejection sample p, not norm(max(p - q, 0))  the classic
``coin_reused_for_residual``     the residual draw reuses the accept coin        vllm-ascend
                                 (after a rejection it is U(p/q, 1), not U(0,1)) #16370/#16920
``bonus_noise_is_last_draft``    the bonus token's noise is the last draft's     vllm #205
                                 coin (local-inference-lab/vllm#205)
``coin_le_p_bf16``               accept iff ``coin * q <= p`` with coins that    sglang #35771
                                 can be 0 (drawn in bfloat16: 1/256 of them)
``same_coin_every_position``     one coin per request, reused at every position  -
``one_stream_per_batch``         every request draws from the first seed         -
``target_row_off_by_one``        position j verified against row j + 1          TRT-LLM #15098
``tree_residual_not_updated``    the residual is not updated between siblings    -
``tree_mss_rule_on_rsd``         mss's rule (q kept) on siblings drafted         -
                                 without replacement (run with method rsd)
``tree_coin_le_p_bf16``          target-only tree, one bfloat16 coin per depth,  sglang #35771
                                 accept while ``coin <= sum of tried p``
``tree_wrong_logits_slice``      node c verified against node c + 1's row        TRT-LLM #15098
``tree_wrong_fallback``          emit from p after the siblings are rejected     the classic
===============================  ==============================================  ===========

``EXPECTED[name]`` lists the checks built to catch each (the tests require at least one of
them to fail, and the report to name it).  ``unseeded_chain`` draws from an unseeded
generator: the kit must report it as unseeded, not fail it.

``PATTERNS[name]`` is the set of checks the control fails in a quick run (kit seed 9; the full
tier holds each control to its own pattern), and ``diagnose`` turns a run's failures into the
report's hint: the control whose pattern they match best (Jaccard similarity of the failed
check ids, on the designs that ran, at least ``HINT_MIN_MATCH``), or nothing.
"""
from __future__ import annotations

import numpy as np
import torch

from specops import reference as R


def _np(t):
    return None if t is None else (t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t))


def _coin(seeds, position, tag) -> np.ndarray:
    """A uniform in [0, 1) (2**-32 steps) from the request's Philox stream."""
    w0 = R.stream_words(seeds, 0, position, tag)[0]
    return w0.astype(np.float64) * 2.0 ** -32


def _u53(seeds, position, tag) -> np.ndarray:
    w0, w1 = R.stream_words(seeds, 0, position, tag)[:2]
    return ((w0.astype(np.uint64) << np.uint64(21)) ^ w1.astype(np.uint64)) \
        .astype(np.float64) * 2.0 ** -53


def _draw(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw per row of nonnegative weights (rows of mass 0: token 0)."""
    w = np.maximum(weights, 0.0)
    c = np.cumsum(w, 1)
    t = u * c[:, -1]
    return np.minimum((c <= t[:, None]).sum(1), w.shape[1] - 1)


def _bf16_floor(u: np.ndarray) -> np.ndarray:
    """A coin drawn in bfloat16: 8 significant bits, 0 with probability 1/256."""
    return np.floor(u * 256.0) / 256.0


class ChainControl:
    """Token-wise verification (reference section 1) with switchable bugs."""

    def __init__(self, name: str, **bugs):
        self.__name__ = self.__qualname__ = name
        self.bugs = bugs

    def __repr__(self):
        return f"ChainControl({self.__name__})"

    def __call__(self, target_probs, draft_probs, draft_token_ids, seeds):
        bug = self.bugs.get
        p = _np(target_probs).astype(np.float64)
        q = _np(draft_probs)
        ids = _np(draft_token_ids).astype(np.int64)
        seeds = _np(seeds).astype(np.int64)
        if bug("one_stream"):
            seeds = np.full_like(seeds, seeds[0])
        rng = np.random.default_rng() if bug("unseeded") else None
        B, K1, V = p.shape
        K = K1 - 1
        if bug("row_shift"):
            p = p[:, np.minimum(np.arange(K1) + 1, K)]
        b = np.arange(B)
        out = np.full((B, K1), -1, dtype=np.int64)
        alive = np.ones(B, dtype=bool)
        coins = []
        for j in range(K):
            y = ids[:, j]
            qrow = np.eye(V)[y] if q is None else q[:, j].astype(np.float64)
            u = rng.random(B) if rng is not None else _coin(seeds, 0 if bug("same_coin") else j, 0)
            coins.append(u)
            if bug("coin_le_p"):
                acc = _bf16_floor(u) * qrow[b, y] <= p[b, j, y]
            else:
                acc = u * qrow[b, y] < p[b, j, y]
            r = p[:, j] if bug("wrong_fallback") else np.maximum(p[:, j] - qrow, 0.0)
            r = np.where(r.sum(1, keepdims=True) > 0, r, p[:, j])
            U = u if bug("reuse_coin") else (rng.random(B) if rng is not None
                                            else _u53(seeds, j, 1))
            x = _draw(r, U)
            out[alive, j] = np.where(acc, y, x)[alive]
            alive &= acc
        U = (coins[-1] if bug("bonus_is_last") and K else
             rng.random(B) if rng is not None else _u53(seeds, K, 1))
        out[alive, K] = _draw(p[:, K], U)[alive]
        return torch.from_numpy(out)


class TreeControl:
    """Tree verification (reference section 11: rsd, mss, point-mass target_only) with
    switchable bugs; one pass over the nodes in index order does the walk (children come
    after their parents, siblings in index order)."""

    def __init__(self, name: str, **bugs):
        self.__name__ = self.__qualname__ = name
        self.bugs = bugs

    def __repr__(self):
        return f"TreeControl({self.__name__})"

    def __call__(self, target_probs, draft_probs, node_token_ids, parent_ids, seeds, method):
        bug = self.bugs.get
        p = _np(target_probs).astype(np.float64)
        q = _np(draft_probs)
        point = q is None or method == "target_only"
        ids = _np(node_token_ids).astype(np.int64)
        par = _np(parent_ids).astype(np.int64)
        seeds = _np(seeds).astype(np.int64)
        B, N, V = p.shape
        if bug("row_shift"):
            p = p[:, (np.arange(N) + 1) % N]
        b = np.arange(B)
        depth = np.zeros((B, N), dtype=np.int64)
        for n in range(1, N):
            depth[:, n] = depth[b, par[:, n]] + 1
        D = int(depth.max())
        out = np.full((B, D + 1), -1, dtype=np.int64)
        cur = np.zeros(B, dtype=np.int64)
        rank = np.zeros(B, dtype=np.int64)
        R_ = p[:, 0].copy()
        Q_ = None if point else q[:, 0].astype(np.float64).copy()
        tried = np.zeros((B, V), dtype=bool)
        for n in range(1, N):
            y = ids[:, n]
            j = depth[b, cur]
            kid = par[:, n] == cur
            act = kid & ~((method != "mss") & tried[b, y])
            if bug("cumulative_coin"):               # sglang: one coin per depth, cumsum of p
                coin = _bf16_floor(_coin(seeds, j, 0))
                acc = act & (coin <= (p[b, cur] * (tried | (np.arange(V) == y[:, None]))
                                      ).sum(1))
            else:
                u = _coin(seeds, j, 2 * rank)
                rn = R_[b, y] / np.maximum(R_.sum(1), 1e-300)
                qn = 1.0 if point else Q_[b, y] / np.maximum(Q_.sum(1), 1e-300)
                acc = act & (u * qn < rn)
            rej = act & ~acc
            if rej.any() and not bug("no_residual_update"):
                rn_all = R_ / np.maximum(R_.sum(1, keepdims=True), 1e-300)
                qn_all = (np.eye(V)[y] if point else
                          Q_ / np.maximum(Q_.sum(1, keepdims=True), 1e-300))
                R_ = np.where(rej[:, None], np.maximum(rn_all - qn_all, 0.0), R_)
            if rej.any() and method == "rsd" and not point and not bug("keep_q"):
                Q_[rej, y[rej]] = 0.0
            tried[rej, y[rej]] = True
            rank = np.where(rej, rank + 1, rank)
            if acc.any():
                out[acc, j[acc]] = y[acc]
                cur = np.where(acc, n, cur)
                rank = np.where(acc, 0, rank)
                tried[acc] = False
                R_[acc] = p[acc, n]
                if not point:
                    Q_[acc] = q[acc, n]
        j = depth[b, cur]
        r = p[b, cur] if bug("wrong_fallback") else R_
        r = np.where(r.sum(1, keepdims=True) > 0, r, p[b, cur])
        U = _u53(seeds, j, 1)
        out[b, j] = _draw(r, U)
        return torch.from_numpy(out)


# name: (bug switches, the method the kit runs it with, the checks built to catch it)
CHAIN_BUGS = {
    "wrong_fallback": ({"wrong_fallback": True}, "token",
                       ("law.output", "law.next_token", "boundary")),
    "coin_reused_for_residual": ({"reuse_coin": True}, "token",
                                 ("coupling.accept_residual", "law.next_token")),
    "bonus_noise_is_last_draft": ({"bonus_is_last": True}, "token",
                                  ("coupling.decision_bonus",)),
    "coin_le_p_bf16": ({"coin_le_p": True}, "token",
                       ("boundary.zero_target_prob", "boundary")),
    "same_coin_every_position": ({"same_coin": True}, "token",
                                 ("coupling.positions", "law.length")),
    "one_stream_per_batch": ({"one_stream": True}, "token",
                             ("coupling.batch", "seeds.batch_invariant")),
    "target_row_off_by_one": ({"row_shift": True}, "token", ("law.output", "boundary")),
}
TREE_BUGS = {
    "tree_residual_not_updated": ({"no_residual_update": True}, "rsd",
                                  ("law.output", "coupling.siblings")),
    "tree_mss_rule_on_rsd": ({"keep_q": True}, "rsd", ("law.output", "coupling.siblings")),
    "tree_coin_le_p_bf16": ({"cumulative_coin": True}, "target_only",
                            ("boundary.zero_target_prob", "boundary")),
    "tree_wrong_logits_slice": ({"row_shift": True}, "rsd", ("law.output", "boundary")),
    "tree_wrong_fallback": ({"wrong_fallback": True}, "rsd",
                            ("law.output", "law.next_token")),
}
for _name, (_bugs, _, _) in CHAIN_BUGS.items():
    globals()[_name] = ChainControl(_name, **_bugs)
for _name, (_bugs, _, _) in TREE_BUGS.items():
    globals()[_name] = TreeControl(_name, **_bugs)
exact_chain = ChainControl("exact_chain")
unseeded_chain = ChainControl("unseeded_chain", unseeded=True)
exact_tree = TreeControl("exact_tree")

BUGS = {
    "wrong_fallback": "on rejection it samples p instead of norm(max(p - q, 0))",
    "coin_reused_for_residual": "the residual draw reuses the accept coin",
    "bonus_noise_is_last_draft": "the bonus token's noise is the last draft's coin",
    "coin_le_p_bf16": "accept iff coin * q <= p with coins that can be 0",
    "same_coin_every_position": "one coin per request, reused at every position",
    "one_stream_per_batch": "every request draws from the first request's seed",
    "target_row_off_by_one": "position j is verified against target row j + 1",
    "tree_residual_not_updated": "the residual is not updated between siblings",
    "tree_mss_rule_on_rsd": "mss's rule (q kept) on siblings drafted without replacement",
    "tree_coin_le_p_bf16": "one bfloat16 coin per depth, accepted while coin <= sum of tried p",
    "tree_wrong_logits_slice": "node c is verified against node c + 1's target row",
    "tree_wrong_fallback": "after the siblings are rejected it samples p, not the residual",
}
# {check name: "designs it fails on"} per control, from a quick run (kit seed 9)
_PATTERNS = {
    "bonus_noise_is_last_draft": {
        "law.output": "sun_toy markov markov_point_mass random_prefix q_zero_where_p_positive",
        "law.next_token": "sun_toy markov markov_point_mass random_prefix q_zero_where_p_positive",
        "coupling.decision_bonus": "decision_bonus",
        "coupling.positions": "positions",
    },
    "coin_le_p_bf16": {
        "boundary.zero_target_prob": "",
        "boundary": "one_hot_target zero_target_draft",
        "law.output": "disjoint topk_truncated",
        "law.length": "disjoint",
        "law.next_token": "disjoint topk_truncated",
    },
    "coin_reused_for_residual": {
        "law.output": "markov_point_mass random_prefix q_zero_where_p_positive",
        "law.next_token": "markov_point_mass random_prefix q_zero_where_p_positive",
        "coupling.accept_residual": "accept_residual",
        "coupling.positions": "positions",
    },
    "one_stream_per_batch": {
        "law.output": ("sun_toy markov markov_point_mass random_prefix disjoint "
                       "q_zero_where_p_positive topk_truncated"),
        "law.length": "sun_toy markov markov_point_mass random_prefix q_zero_where_p_positive",
        "law.next_token": ("sun_toy markov markov_point_mass random_prefix disjoint "
                           "q_zero_where_p_positive topk_truncated"),
        "coupling.accept_residual": "accept_residual",
        "coupling.decision_bonus": "decision_bonus",
        "coupling.positions": "positions",
        "coupling.batch": "batch_pairs",
        "seeds.batch_invariant": "markov",
    },
    "same_coin_every_position": {
        "law.output": "sun_toy markov markov_point_mass random_prefix q_zero_where_p_positive",
        "law.length": "sun_toy markov markov_point_mass random_prefix q_zero_where_p_positive",
        "coupling.positions": "positions",
    },
    "target_row_off_by_one": {
        "boundary.zero_target_prob": "",
        "boundary": "equal_rows one_hot_target zero_target_draft",
        "law.output": ("markov markov_point_mass random_prefix disjoint q_zero_where_p_positive "
                       "topk_truncated"),
        "law.length": "markov markov_point_mass random_prefix q_zero_where_p_positive",
        "law.next_token": ("markov_point_mass random_prefix disjoint q_zero_where_p_positive "
                           "topk_truncated"),
    },
    "tree_coin_le_p_bf16": {
        "boundary.zero_target_prob": "",
        "boundary": "zero_target_children one_hot_target",
    },
    "tree_mss_rule_on_rsd": {
        "law.output": "v4_three_children binary_depth2",
        "law.length": "v4_three_children binary_depth2",
        "law.next_token": "binary_depth2",
        "coupling.siblings": "siblings",
    },
    "tree_residual_not_updated": {
        "law.output": "v4_two_children v4_three_children v5_markov_tree binary_depth2",
        "law.length": "v4_two_children v4_three_children binary_depth2",
        "law.next_token": "v4_two_children v4_three_children v5_markov_tree binary_depth2",
        "coupling.siblings": "siblings",
    },
    "tree_wrong_fallback": {
        "law.output": "v4_two_children v4_three_children v5_markov_tree binary_depth2",
        "law.next_token": "v4_two_children v4_three_children v5_markov_tree binary_depth2",
        "coupling.siblings": "siblings",
    },
    "tree_wrong_logits_slice": {
        "boundary.zero_target_prob": "",
        "boundary": "equal_rows one_hot_target",
        "law.output": "v5_markov_tree binary_depth2",
        "law.length": "v5_markov_tree binary_depth2",
        "law.next_token": "v5_markov_tree binary_depth2",
    },
    "wrong_fallback": {
        "boundary": "one_hot_draft",
        "law.output": ("sun_toy markov markov_point_mass random_prefix q_zero_where_p_positive "
                       "topk_truncated"),
        "law.next_token": ("sun_toy markov markov_point_mass random_prefix q_zero_where_p_positive "
                           "topk_truncated"),
        "coupling.accept_residual": "accept_residual",
        "coupling.positions": "positions",
    },
}
PATTERNS = {name: frozenset(f"{check}[{d}]" if d else check for check, ds in pat.items()
                            for d in (ds.split() or [""]))
            for name, pat in _PATTERNS.items()}
HINT_MIN_MATCH = 0.6


def diagnose(kind: str, checks) -> str:
    """The hint for a run's ``checks`` (``Check`` objects): the negative control of the same
    kind whose failure pattern the failures match best, or "" (no failure, a malformed output
    or a sampler that raised: the report's own details say more than a pattern)."""
    failed = {c.id for c in checks if c.failed}
    if not failed or any(c.name == "output.well_formed" for c in checks if c.failed):
        return ""
    present = {c.id for c in checks}
    scores = []
    for name, pattern in PATTERNS.items():
        if EXPECTED[name][0] != kind:
            continue
        pat = pattern & present
        if pat:
            scores.append((len(failed & pat) / len(failed | pat), name, pat))
    scores.sort(key=lambda x: (-x[0], x[1]))
    if not scores or scores[0][0] < HINT_MIN_MATCH:
        return ""
    score, name, pat = scores[0]
    close = [n for s, n, _ in scores[1:] if s >= HINT_MIN_MATCH and s > score - 0.1]
    return (f"this failure pattern matches the negative control {name!r} ({BUGS[name]}): "
            f"{len(failed & pat)} of its {len(pat)} failing checks failed here, and "
            f"{len(failed - pat)} other(s)"
            + (f"; close: {', '.join(map(repr, close))}" if close else "")
            + "; see specops.conformance.negative")


# control -> (kind, method, the checks built to catch it: at least one must fail)
EXPECTED = {**{n: ("chain", m, c) for n, (_, m, c) in CHAIN_BUGS.items()},
            **{n: ("tree", m, c) for n, (_, m, c) in TREE_BUGS.items()}}
POSITIVE = {"exact_chain": ("chain", "token"), "exact_tree": ("tree", "rsd"),
            "unseeded_chain": ("chain", "token")}
