"""``specops audit``: the lab's deterministic checks plus the exactness self-check of every
available backend.

:func:`run_audit` returns a JSON-ready report; ``report["checks"]`` is a list of
``{"name", "passed", "value"}`` and ``report["grid"]`` summarises a sweep of
``GRID_SIZE`` (= 1,296) settings over all six knobs; ``report["backend_status"]`` says why
each unavailable backend is (``specops.audit_env``).  ``specops.audit_report`` renders the
report for people (:func:`format_report`) and draws it (:func:`plot_report`); ``specops lab``
serves the same report to a page (``specops.lab_server``).

Every check is deterministic: same knobs, same installation, same values.
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from specops import audit_env, lab
from specops import reference as R
from specops._contract import TRAVERSAL_METHODS
from specops.reference.coins import threshold_tv
from specops.audit_report import article_lines, format_report, plot_report  # noqa: F401

EXACT_TOL = 1e-12          # exact-law total variation budget
ALGEBRA_TOL = 1e-12        # float64 identities on dyadic rows

# The grid: 6 x 6 x 3 x 2 x 3 x 2 = 1296 settings over all six knobs.
GRID = {
    "certainty": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "match": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "gamma": (1, 2, 4),
    "cost": (0.05, 0.5),
    "length": (1, 6, 16),
    "seed": (0, 1),
}
GRID_SIZE = int(np.prod([len(v) for v in GRID.values()]))
GRID_EXACT_K = 2           # the grid's exact laws enumerate min(gamma, 2) drafts (V = 8)
# SGLang's threshold_single / threshold_acc (section 13): exact, and two relaxed settings.
RELAXED_THRESHOLDS = {"exact": (1.0, 1.0), "acc 0.9": (1.0, 0.9), "single 0.1": (0.1, 1.0)}
TRAVERSAL_TREE = [-1, 0, 0, 1]   # section 14 beside rsd / mss: 2 siblings, the first with a child

# Knob values that must be rejected (sanitation check): (knob, value).
BAD_KNOBS = (
    ("certainty", -0.1), ("certainty", 1.5), ("certainty", float("nan")),
    ("match", float("inf")), ("match", "high"), ("match", [0.5]),
    ("gamma", 0), ("gamma", 17), ("gamma", 2.5), ("gamma", True),
    ("cost", -1.0), ("cost", float("nan")),
    ("length", 0), ("length", "ten"), ("length", 10 ** 9),
    ("seed", -1), ("seed", 2 ** 63), ("seed", 1.5),
)
GOOD_KNOBS = ({"gamma": "4"}, {"gamma": 4.0}, {"certainty": 0}, {"certainty": 1},
              {"match": "0.25"}, {"cost": 0}, {"seed": np.int64(7)}, {"length": 1})


def _check(name: str, passed: bool, value) -> dict:
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        value = repr(value)                  # keep the JSON strict
    return {"name": name, "passed": bool(passed), "value": value}


def _finite(xs) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


# ----------------------------------------------------------------------------- sections
def sanitation_check() -> dict:
    rejected, bad_msgs = 0, []
    for name, value in BAD_KNOBS:
        try:
            lab.sanitize_knobs(**{name: value})
        except lab.KnobError as exc:
            if repr(name) in str(exc):
                rejected += 1
            else:
                bad_msgs.append(f"{name}: message does not name the knob")
        else:
            bad_msgs.append(f"{name}={value!r} accepted")
    accepted = 0
    for kw in GOOD_KNOBS:
        try:
            lab.sanitize_knobs(**kw)
            accepted += 1
        except lab.KnobError as exc:
            bad_msgs.append(str(exc))
    try:
        lab.sanitize_knobs(temperature=1.0)
    except lab.KnobError:
        rejected_unknown = True
    else:
        rejected_unknown = False
        bad_msgs.append("unknown knob accepted")
    ok = (rejected == len(BAD_KNOBS) and accepted == len(GOOD_KNOBS) and rejected_unknown)
    value = (f"{rejected}/{len(BAD_KNOBS)} bad values rejected with the knob named, "
             f"{accepted}/{len(GOOD_KNOBS)} good values accepted")
    if bad_msgs:
        value += "; " + "; ".join(bad_msgs[:3])
    return _check("knob_sanitation", ok, value)


def _rows_normalised(rows) -> float:
    rows = np.asarray(rows)
    if rows.dtype != np.float32 or not (rows >= 0).all() or not np.isfinite(rows).all():
        return float("inf")
    return float(np.abs(rows.astype(np.float64).sum(axis=1) - 1.0).max())


def model_checks(model: lab.ToyModel, views: List[dict]) -> List[dict]:
    """Normalisation of every distribution and the one-token algebra at every state."""
    out = []
    err_t = _rows_normalised(model.target)
    err_d = _rows_normalised(model.draft)
    out.append(_check("target_rows_normalised", err_t == 0.0, err_t))
    out.append(_check("draft_rows_normalised", err_d == 0.0, err_d))
    resid_err = max(abs(v["residual"].sum() - 1.0) for v in views)
    corr_norm = max(abs(v["corrected"].sum() - 1.0) for v in views)
    wrong_norm = max(abs(v["wrong"].sum() - 1.0) for v in views)
    worst = max(resid_err, corr_norm, wrong_norm)
    out.append(_check("derived_distributions_normalised", worst <= ALGEBRA_TOL, worst))
    e = max(abs(v["residual_mass"] - (1.0 - v["alpha"])) for v in views)
    out.append(_check("residual_mass_equals_1_minus_alpha", e <= ALGEBRA_TOL, e))
    e = max(abs(v["rejection_mass"] - (1.0 - v["alpha"])) for v in views)
    out.append(_check("rejection_mass_equals_1_minus_alpha", e <= ALGEBRA_TOL, e))
    e = max(abs(v["alpha"] - (1.0 - v["tv_pq"])) for v in views)
    out.append(_check("alpha_equals_1_minus_tv", e <= ALGEBRA_TOL, e))
    e = max(v["corrected_tv"] for v in views)
    out.append(_check("corrected_distribution_equals_target", e <= EXACT_TOL, e))
    return out


def length_law_markov(model: lab.ToyModel, K: int, start: Optional[int] = None) -> np.ndarray:
    """P(num_accepted = n) for the Markov model: a_{n+1} = a_n M, M[s, y] = min(p_s, q_s)(y)."""
    P = model.target.astype(np.float64)
    Q = model.draft.astype(np.float64)
    M = np.minimum(P, Q)
    rej = 1.0 - M.sum(axis=1)
    a = np.zeros(lab.V)
    a[model.start if start is None else start] = 1.0
    law = np.zeros(K + 1)
    for n in range(K):
        law[n] = float(a @ rej)
        a = a @ M
    law[K] = float(a.sum())
    return law


def exact_law_checks(model: lab.ToyModel, view: dict, K: int,
                     cache: Optional[dict] = None) -> (List[dict], dict):
    """The exact laws (token-wise, wrong fallback, block, two-sibling trees) and their checks.

    They depend only on the model's rows, its start state and K (``view`` is the model's
    one-token view at the start), so a caller that reruns the audit often (the lab page) may
    pass a ``cache`` dict: the enumerations, the slow part, then run once per model."""
    key = (model.target.tobytes(), model.draft.tobytes(), model.start, int(K))
    if cache is not None and key in cache:
        return cache[key]
    result = _exact_law_checks(model, view, K)
    if cache is not None:
        while len(cache) >= 32:                 # bounded: drop the oldest
            cache.pop(next(iter(cache)))
        cache[key] = result
    return result


def _exact_law_checks(model: lab.ToyModel, view: dict, K: int) -> (List[dict], dict):
    res = lab.exact_law(model, K)
    wrong = lab.exact_law(model, K, fallback="p")
    out = [_check("exact_law_tv", res["tv"] <= EXACT_TOL, res["tv"])]
    norm = max(abs(res["law"].sum() - 1.0), abs(res["length_law"].sum() - 1.0))
    out.append(_check("exact_law_normalised", norm <= ALGEBRA_TOL, norm))
    ll = length_law_markov(model, K)
    e = float(np.abs(ll - res["length_law"]).max())
    out.append(_check("accepted_length_law_matches_alpha_chain", e <= ALGEBRA_TOL, e))
    # The wrong fallback must show its bias wherever a bias is possible at this state.
    bias_possible = view["rejection_mass"] * lab.tv(view["p"], view["residual"]) > ALGEBRA_TOL
    if bias_possible:
        ok = wrong["tv"] > EXACT_TOL and view["wrong_tv"] > EXACT_TOL
        value = wrong["tv"]
    else:
        ok = True
        value = (f"{wrong['tv']:.3g} (no bias possible here: alpha = 1 or residual = p)")
    out.append(_check("wrong_fallback_biased", ok, value))
    block = lab.exact_law(model, K, method="block")
    out.append(_check("block_law_tv", block["tv"] <= EXACT_TOL, block["tv"]))
    n = np.arange(K + 1)
    e_tok, e_blk = float(n @ res["length_law"]), float(n @ block["length_law"])
    out.append(_check("block_accepts_at_least_token_wise", e_blk >= e_tok - ALGEBRA_TOL,
                      f"block {e_blk:.6f} vs token-wise {e_tok:.6f}"))
    # Tree verification (section 11) on the smallest tree that differs from a chain: two
    # siblings at the root, drawn without replacement (rsd) or i.i.d. (mss).
    tree = {m: R.exact_tree_law(model.target_fn(), model.draft_fn(), [-1, 0, 0], lab.V, m)
            for m in ("rsd", "mss")}
    single = 1.0 - float(lab.exact_law(model, 1)["length_law"][0])
    for m, t in tree.items():
        out.append(_check(f"tree_{m}_law_tv", t["tv"] <= EXACT_TOL, t["tv"]))
    acc = {m: 1.0 - float(t["length_law"][0]) for m, t in tree.items()}
    out.append(_check("tree_accepts_at_least_one_draft",
                      min(acc.values()) >= single - ALGEBRA_TOL,
                      f"rsd {acc['rsd']:.6f}, mss {acc['mss']:.6f} vs one draft {single:.6f}"))
    # Traversal verification (section 14) beside rsd and mss on the smallest tree where it
    # differs from them: two siblings at the root, the first with a child (about 0.7 s).
    trav = {}
    for m in ("rsd", "mss", "traversal", "traversal_iid"):
        law = R.exact_traversal_law if m.startswith("traversal") else R.exact_tree_law
        trav[m] = law(model.target_fn(), model.draft_fn(), TRAVERSAL_TREE, lab.V, m)
    for m in TRAVERSAL_METHODS:
        out.append(_check(f"tree_{m}_law_tv", trav[m]["tv"] <= EXACT_TOL, trav[m]["tv"]))
    mean = {m: float(np.arange(3) @ t["length_law"]) for m, t in trav.items()}
    out.append(_check("traversal_accepts_at_least_rsd_mss",
                      mean["traversal"] >= mean["rsd"] - ALGEBRA_TOL
                      and mean["traversal_iid"] >= mean["mss"] - ALGEBRA_TOL,
                      ", ".join(f"{m} {v:.6f}" for m, v in mean.items())))
    # SGLang's relaxed thresholds (section 13, NON-EXACT) on its target-only walk: the draft's
    # two likeliest tokens as siblings at the root, the caller's coins; thresholds 1 are exact.
    q0 = np.asarray(model.draft_fn()(()), dtype=np.float64)
    top2 = [int(t) for t in np.argsort(-q0, kind="stable")[:2]]
    relaxed = {}
    for name, (single_t, acc_t) in RELAXED_THRESHOLDS.items():
        relaxed[name] = threshold_tv(model.target_fn(), [0] + top2, [1, -1, -1], [-1, 2, -1],
                                     lab.V, 2, single_t, acc_t)
    out.append(_check("sglang_coin_law_tv", relaxed["exact"] <= EXACT_TOL, relaxed["exact"]))
    info = {"K": K, "tv": res["tv"], "wrong_fallback_tv": wrong["tv"],
            "tree_tv": max(t["tv"] for t in tree.values()), "tree_accept": acc,
            "single_accept": single,
            "length_law": res["length_law"].tolist(), "length_law_markov": ll.tolist(),
            "block_tv": block["tv"], "block_length_law": block["length_law"].tolist(),
            "expected_accepted_token": e_tok, "expected_accepted_block": e_blk,
            "traversal_tree": TRAVERSAL_TREE, "traversal_expected_accepted": mean,
            "traversal_tv": max(trav[m]["tv"] for m in TRAVERSAL_METHODS),
            "sglang_threshold_tv": relaxed}
    return out, info


def speed_formula_check(alpha: float, cost: float) -> dict:
    e = 0.0
    for g in lab.GAMMAS:
        geometric = sum(alpha ** i for i in range(g + 1)) / (g * cost + 1.0)
        e = max(e, abs(geometric - lab.estimated_speedup(alpha, g, cost)))
    return _check("speedup_estimate_formula", e <= 1e-9, e)


def trace_checks(model: lab.ToyModel, backends: Sequence[str], main_backend: str):
    """Determinism per backend, token counts, ledger, cross-backend agreement, batch
    invariance.  Returns (checks, traces by backend)."""
    out, traces = [], {}
    k = model.knobs
    for name in backends:
        try:
            t1 = lab.run_trace(model, name)
            t2 = lab.run_trace(model, name)
        except Exception as exc:            # a broken backend fails its check, not the audit
            out.append(_check(f"trace_deterministic[{name}]", False,
                              f"{type(exc).__name__}: {exc}"))
            continue
        same = (t1.tokens == t2.tokens and t1.ledger == t2.ledger and not t1.errors)
        out.append(_check(f"trace_deterministic[{name}]", same,
                          f"{len(t1.tokens)} tokens, {t1.target_calls} target calls"
                          + ("" if same else "; traces differ or errored")))
        traces[name] = t1
    if main_backend not in traces:
        raise RuntimeError(f"the trace failed on backend {main_backend!r}: "
                           + "; ".join(c["value"] for c in out if not c["passed"]))
    main = traces[main_backend]
    counts = {n: len(t.tokens) for n, t in traces.items()}
    out.append(_check("trace_token_count_exact",
                      all(c == k.length for c in counts.values()),
                      f"requested {k.length}, emitted " +
                      ", ".join(f"{n}: {c}" for n, c in counts.items())))
    errs = [e for t in traces.values() for e in t.errors]
    in_vocab = all(0 <= x < lab.V for t in traces.values() for x in t.tokens)
    out.append(_check("trace_rows_well_formed", not errs and in_vocab,
                      errs[0] if errs else "every row: accepted drafts, one token, then -1"))
    reported = main.total_cost
    expected = main.target_calls * 1.0 + main.draft_calls * k.cost
    gap = abs(reported - expected)
    ledger_ok = (gap <= 1e-9 * max(1.0, expected) and main.target_calls == len(main.ledger)
                 and main.draft_calls == k.gamma * main.target_calls
                 and sum(e["kept"] for e in main.ledger) == len(main.tokens))
    out.append(_check("latency_ledger_balances", ledger_ok,
                      f"{main.target_calls} x 1 + {main.draft_calls} x {k.cost:g} = "
                      f"{expected:.6g}; ledger total {reported:.6g}"))
    ref = traces.get("reference", main)
    disagree = [n for n, t in traces.items() if t.tokens != ref.tokens]
    out.append(_check("cross_backend_trace_agreement", not disagree,
                      f"{len(traces)} backend(s) agree token for token" if not disagree
                      else f"differ from reference: {', '.join(disagree)}"))
    others = [lab.build_model(lab.sanitize_knobs(k, seed=(k.seed + i) % 2 ** 63,
                                                 match=m_, gamma=g_))
              for i, m_, g_ in ((1, 0.3, k.gamma), (2, 0.9, max(1, k.gamma - 1)))]
    batched = lab.run_traces([others[0], model, others[1]], main_backend)[1]
    out.append(_check("trace_batch_invariant", batched.tokens == main.tokens,
                      "same trace alone and inside a mixed batch"
                      if batched.tokens == main.tokens else "batched trace differs"))
    return out, traces


def run_grid(backend: str) -> dict:
    """Sweep GRID (all six knobs): exact TV per setting (cached per model and K), one trace
    per setting through `backend` (batched), speeds and token counts."""
    names = list(GRID)
    settings = [lab.Knobs(**dict(zip(names, vals)))
                for vals in itertools.product(*(GRID[n] for n in names))]
    models: Dict[tuple, lab.ToyModel] = {}
    per_setting_models = []
    for s in settings:
        key = (s.certainty, s.match, s.seed)
        if key not in models:
            models[key] = lab.build_model(lab.Knobs(certainty=s.certainty, match=s.match,
                                                    seed=s.seed))
        base = models[key]
        per_setting_models.append(lab.ToyModel(s, base.target, base.draft, base.start))
    exact_cache: Dict[tuple, float] = {}
    worst_tv, worst_at = 0.0, None
    alphas = {}
    for m in per_setting_models:
        s = m.knobs
        K = min(s.gamma, GRID_EXACT_K)
        key = (s.certainty, s.match, s.seed, K)
        if key not in exact_cache:
            exact_cache[key] = lab.exact_law(m, K)["tv"]
        if exact_cache[key] > worst_tv or worst_at is None:
            worst_tv = max(worst_tv, exact_cache[key])
            worst_at = s.as_dict()
    traces = lab.run_traces(per_setting_models, backend)
    speeds, wrong_counts, errors = [], 0, 0
    toy, est = [], []
    for m, t in zip(per_setting_models, traces):
        s = m.knobs
        akey = (s.certainty, s.match, s.seed, s.length)
        if akey not in alphas:
            alphas[akey] = lab.mean_alpha(m)
        a = alphas[akey]
        e = lab.estimated_speedup(a, s.gamma, s.cost)
        curve = lab.speedup_curve(a, s.cost)["speedups"]
        speeds.extend([t.toy_speedup, e, *curve])
        toy.append(t.toy_speedup)
        est.append(e)
        wrong_counts += len(t.tokens) != s.length
        errors += bool(t.errors)
    finite = _finite(speeds)
    return {
        "settings": len(settings),
        "knobs": {n: list(v) for n, v in GRID.items()},
        "backend": backend,
        "exact_laws": len(exact_cache),
        "exact_K": f"min(gamma, {GRID_EXACT_K})",
        "worst_exact_tv": worst_tv,
        "worst_exact_tv_at": worst_at,
        "speed_values": len(speeds),
        "all_speeds_finite": finite,
        "wrong_token_counts": int(wrong_counts),
        "trace_errors": int(errors),
        "target_calls": int(sum(t.target_calls for t in traces)),
        "toy_speedup_range": [float(min(toy)), float(max(toy))] if finite else None,
        "estimated_speedup_range": [float(min(est)), float(max(est))] if finite else None,
    }


def grid_checks(grid: dict) -> List[dict]:
    knobs_varied = all(len(v) > 1 for v in grid["knobs"].values())
    return [
        _check("grid_covers_all_knobs", grid["settings"] >= 1296 and knobs_varied,
               f"{grid['settings']} settings over {len(grid['knobs'])} knobs"),
        _check("grid_worst_exact_tv", grid["worst_exact_tv"] <= EXACT_TOL,
               grid["worst_exact_tv"]),
        _check("grid_speeds_finite", grid["all_speeds_finite"],
               f"{grid['speed_values']} values"),
        _check("grid_token_counts_exact",
               grid["wrong_token_counts"] == 0 and grid["trace_errors"] == 0,
               f"{grid['wrong_token_counts']} wrong counts, {grid['trace_errors']} errors "
               f"in {grid['settings']} traces"),
    ]


# ----------------------------------------------------------------------------- self-check
SELF_B, SELF_K, SELF_V = 12, 4, 40


def _selfcheck_inputs():
    """A fixed seeded batch: ragged blocks, adversarial probability rows, mixed sampling
    parameters (greedy, temperature, top-k, top-p, min-p) and one NaN logits row."""
    rng = np.random.default_rng(20240531)
    B, K, V = SELF_B, SELF_K, SELF_V
    logits_t = (rng.standard_normal((B, K + 1, V)) * 2.5).astype(np.float32)
    logits_d = (logits_t + rng.standard_normal((B, K + 1, V)).astype(np.float32))[:, :K]
    logits_d = np.ascontiguousarray(logits_d, dtype=np.float32)
    ones = np.ones(B * (K + 1), np.float32)
    zeros_i = np.zeros(B * (K + 1), np.int64)
    pt = R.sampling_probs_ref(logits_t.reshape(-1, V), ones, zeros_i, ones,
                              np.zeros_like(ones))[0].reshape(B, K + 1, V)
    pd = R.sampling_probs_ref(logits_d.reshape(-1, V), ones[:B * K], zeros_i[:B * K],
                              ones[:B * K], np.zeros(B * K, np.float32))[0].reshape(B, K, V)
    pd64 = pd.astype(np.float64)
    ids = np.stack([[rng.choice(V, p=pd64[b, j] / pd64[b, j].sum())
                     for j in range(K)] for b in range(B)]).astype(np.int64)
    # adversarial probability rows
    pd[0] = pt[0, :K]                                   # p = q: always accept
    pt[1, :, :V // 2] = 0                               # disjoint supports
    pt[1] /= pt[1].sum(-1, keepdims=True)
    pd[1, :, V // 2:] = 0
    pd[1] /= pd[1].sum(-1, keepdims=True)
    ids[1] = rng.integers(0, V // 2, K)
    pt[2, 0] = 0
    pt[2, 0, 3] = 1.0                                   # one-hot target
    pd[3, 0, ids[3, 0]] = 0                             # q(y) = 0 < p(y)
    pd[3, 0] /= pd[3, 0].sum()                          # still a probability row (checked)
    pt[3, 0, ids[3, 0]] = max(pt[3, 0, ids[3, 0]], np.float32(0.05))
    pt, pd = pt.astype(np.float32), pd.astype(np.float32)
    num_draft = np.array([K, K, 2, 3, 0, K, 1, K, K, 3, K, 2], np.int64)[:B]
    seeds = rng.integers(0, 2 ** 62, B).astype(np.int64)
    offsets = rng.integers(0, 1000, B).astype(np.int64)
    temperature = np.array([1.0, 0.8, 0.0, 1.3, 0.7, 0.0, 1.0, 0.9, 0.6, 1.0, 2.0, 0.5],
                           np.float32)[:B]
    top_k = np.array([0, 5, 0, 0, 3, 0, 0, 10, 0, 0, 1, 0], np.int64)[:B]
    top_p = np.array([1.0, 1.0, 1.0, 0.9, 1.0, 1.0, 0.5, 0.95, 1.0, 1.0, 1.0, 0.8],
                     np.float32)[:B]
    min_p = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.05, 0.0, 0.0, 0.0],
                     np.float32)[:B]
    logits_t[9, 0, 5] = np.nan                            # invalid row: valid = False
    return dict(pt=pt, pd=pd, lt=logits_t, ld=logits_d, ids=ids, num_draft=num_draft,
                seeds=seeds, offsets=offsets, temperature=temperature, top_k=top_k,
                top_p=top_p, min_p=min_p)


def _oracle(x, case: str):
    """The reference verifier called directly on the canonical layout (no public API)."""
    B, K, V = SELF_B, SELF_K, SELF_V
    tr = np.arange(B, dtype=np.int64) * (K + 1)
    dr = np.arange(B, dtype=np.int64) * K
    if case == "probs":
        return R.verify_rows_ref(x["pt"].reshape(-1, V), True, tr, x["ids"].reshape(-1), dr,
                                 x["num_draft"], x["pd"].reshape(-1, V), True,
                                 np.ones(B, np.float32), np.zeros(B, np.int64),
                                 np.ones(B, np.float32), np.zeros(B, np.float32),
                                 x["seeds"], x["offsets"], K)
    draft = x["ld"].reshape(-1, V) if case == "logits" else None
    return R.verify_rows_ref(x["lt"].reshape(-1, V), False, tr, x["ids"].reshape(-1), dr,
                             x["num_draft"], draft, False, R.inv_temperature(x["temperature"]),
                             x["top_k"], x["top_p"], x["min_p"], x["seeds"], x["offsets"], K)


def _public(x, case: str, backend: str):
    import torch
    import specops
    dev = lab._device_for(backend)
    T = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)   # noqa: E731
    common = dict(draft_token_ids=T(x["ids"]), num_draft_tokens=T(x["num_draft"]),
                  seed=T(x["seeds"]), offset=T(x["offsets"]), backend=backend)
    if case == "probs":
        out = specops.verify_block(target_probs=T(x["pt"]), draft_probs=T(x["pd"]), **common)
    elif case == "flat":            # vLLM's flattened layout, same rows as the logits case
        n = [int(v) for v in x["num_draft"]]
        lt = np.concatenate([x["lt"][b, :n[b] + 1] for b in range(SELF_B)])
        ld = np.concatenate([x["ld"][b, :n[b]] for b in range(SELF_B)])
        ids = np.concatenate([x["ids"][b, :n[b]] for b in range(SELF_B)])
        out = specops.verify_block(
            T(lt), T(ids), draft_logits=T(ld), cu_num_draft_tokens=T(np.cumsum(n)),
            temperature=T(x["temperature"]), top_k=T(x["top_k"]), top_p=T(x["top_p"]),
            min_p=T(x["min_p"]), seed=T(x["seeds"]), offset=T(x["offsets"]),
            backend=backend)
        tok = out.token_ids.cpu().numpy()
        full = np.full((SELF_B, SELF_K + 1), -1, np.int32)      # pad to the oracle's width
        full[:, :tok.shape[1]] = tok
        return full, out.num_accepted.cpu().numpy(), out.valid.cpu().numpy()
    else:
        out = specops.verify_block(
            T(x["lt"]), draft_logits=T(x["ld"]) if case == "logits" else None,
            temperature=T(x["temperature"]), top_k=T(x["top_k"]), top_p=T(x["top_p"]),
            min_p=T(x["min_p"]), **common)
    return (out.token_ids.cpu().numpy(), out.num_accepted.cpu().numpy(),
            out.valid.cpu().numpy())


def selfcheck_law() -> dict:
    """exact_output_law on a small truncated (top-k) target and a sampled draft, residual
    fallback (must be exact) and wrong fallback (must be biased); plus a point-mass drafter."""
    rng = np.random.default_rng(7)
    V, K = 5, 2
    lt = (rng.standard_normal((K + 1, V)) * 2).astype(np.float32)
    ld = (rng.standard_normal((K, V)) * 2).astype(np.float32)
    # Rows made exactly normalised (counts over 2**20, top-k zeros kept): a float32 row whose
    # mass is 1 +- 1e-8 would show that rounding, not the algorithm, in the law's TV.
    p = np.stack([lab.quantize(R.transform_row(r, np.float32(1.0), 3)[0]) for r in lt])
    q = np.stack([lab.quantize(R.transform_row(r, np.float32(1.0))[0]) for r in ld])
    exact = R.exact_output_law(p, q, K, V)["tv"]
    wrong = R.exact_output_law(p, q, K, V, fallback="p")["tv"]
    point = R.exact_output_law(p, lambda prefix: int(np.argmax(ld[len(prefix)])), K, V)["tv"]
    return {"tv": max(exact, point), "wrong_fallback_tv": wrong}


def selfcheck(backends: Sequence[str], traces: Dict[str, "lab.Trace"], law: dict):
    """Issue 2's exactness self-check, per backend: token-for-token agreement with the
    reference oracle on a fixed seeded batch (probs, logits, point-mass inputs), the trace,
    and the exact-law TV.  Returns (table rows, checks)."""
    x = _selfcheck_inputs()
    oracle = {c: _oracle(x, c) for c in ("probs", "logits", "point_mass")}
    oracle["flat"] = oracle["logits"]
    rows, checks = [], []
    ref_trace = traces.get("reference")
    for name in backends:
        row = {"backend": name}
        ok = True
        for case, want in oracle.items():
            try:
                got = _public(x, case, name)
                agree = int(((got[0] == want[0]).all(axis=1) & (got[1] == want[1])
                             & (got[2] == want[2])).sum())
            except Exception as exc:           # report, don't crash the audit
                agree = 0
                row["error"] = f"{type(exc).__name__}: {exc}"
            row[case] = f"{agree}/{SELF_B}"
            ok &= agree == SELF_B
        t = traces.get(name)
        row["trace"] = ("n/a" if t is None or ref_trace is None else
                        "same" if t.tokens == ref_trace.tokens else "DIFFERENT")
        ok &= row["trace"] != "DIFFERENT"
        row["law_tv"] = law["tv"]
        ok &= law["tv"] <= EXACT_TOL and law["wrong_fallback_tv"] > EXACT_TOL
        row["passed"] = bool(ok)
        rows.append(row)
        checks.append(_check(f"exactness_selfcheck[{name}]", ok,
                             f"probs {row['probs']}, logits {row['logits']}, point-mass "
                             f"{row['point_mass']}, flattened {row['flat']} rows = oracle; "
                             f"law TV {law['tv']:.2e}"
                             + (f"; {row['error']}" if "error" in row else "")))
    return rows, checks


# ----------------------------------------------------------------------------- driver
def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


def run_audit(knobs: Optional[lab.Knobs] = None, backend: str = "auto",
              grid: bool = True, only: Optional[Sequence[str]] = None,
              law_cache: Optional[dict] = None, laws: bool = True) -> dict:
    """Run every check; returns the JSON-ready report (see the module docstring).

    For the lab page, which reruns it as a knob moves: ``only`` checks just these of the
    available backends; ``law_cache`` see :func:`exact_law_checks`; ``laws=False`` leaves
    out the exact-law enumerations and their checks (``report["exact_law"]`` is None), so
    that the page can show the rest first."""
    t0 = time.perf_counter()
    knobs = lab.sanitize_knobs(knobs or lab.DEFAULT_KNOBS)
    backends = lab.available_backends()
    if only is not None:
        missing = [b for b in only if b not in backends]
        if missing or not only:
            raise ValueError(f"only={list(only)!r}: not available here: "
                             f"{', '.join(missing) or 'none given'}; available: "
                             f"{', '.join(backends)}")
        backends = [b for b in backends if b in only]
    if backend in (None, "auto"):
        main_backend = lab.best_backend(backends)
    elif backend in backends:
        main_backend = backend
    else:
        raise ValueError(f"backend {backend!r} is not available here; available: "
                         f"{', '.join(backends)}")
    checks = [sanitation_check()]
    model = lab.build_model(knobs)
    views = [lab.one_token_view(model, s) for s in range(lab.V)]
    view = views[model.start]
    checks += model_checks(model, views)
    K = min(knobs.gamma, lab.MAX_EXACT_K)
    law_checks, law_info = exact_law_checks(model, view, K, law_cache) if laws else ([], None)
    checks += law_checks
    try:
        t_checks, traces = trace_checks(model, backends, main_backend)
    except RuntimeError:
        if main_backend == "reference" or "reference" not in backends:
            raise
        main_backend = "reference"          # show the lab on the oracle; the failure stays
        t_checks, traces = trace_checks(model, backends, main_backend)
    seq = lab.sequence_view(model, main_backend, traces[main_backend])
    seq["planner"] = lab.planner_view(model)
    checks.append(speed_formula_check(seq["alpha_mean"], knobs.cost))
    checks += t_checks
    speed_vals = [seq["toy_speedup"], seq["estimated_speedup"], *seq["curve"]["speedups"]]
    checks.append(_check("speeds_finite", _finite(speed_vals) and min(speed_vals) > 0,
                         f"toy {seq['toy_speedup']:.4g}, estimate "
                         f"{seq['estimated_speedup']:.4g}, curve of {len(lab.GAMMAS)}"))
    law = selfcheck_law()
    table, sc_checks = selfcheck(backends, traces, law)
    checks += sc_checks
    grid_info = None
    if grid:
        try:
            grid_info = run_grid(main_backend)
            checks += grid_checks(grid_info)
        except Exception as exc:            # report it as a failed check
            grid_info = {"settings": 0, "error": f"{type(exc).__name__}: {exc}"}
            checks.append(_check("grid", False, grid_info["error"]))
    passed = sum(c["passed"] for c in checks)
    one = {k: view[k] for k in ("state", "token", "p", "q", "accepted", "residual",
                                "rejection", "corrected", "wrong", "alpha", "tv_pq",
                                "residual_mass", "rejection_mass", "corrected_tv", "wrong_tv")}
    headline = {
        "alpha": view["alpha"], "corrected_tv": view["corrected_tv"],
        "wrong_fallback_tv": view["wrong_tv"], "length": seq["length"],
        "gamma": knobs.gamma, "target_calls": seq["target_calls"],
        "draft_calls": seq["draft_calls"], "toy_speedup": seq["toy_speedup"],
        "estimated_speedup": seq["estimated_speedup"],
        "worst_exact_tv": grid_info.get("worst_exact_tv") if grid_info else None,
        "grid_settings": grid_info.get("settings") if grid_info else 0,
        "wrong_token_counts": grid_info.get("wrong_token_counts") if grid_info else None,
    }
    report = {
        "knobs": knobs.as_dict(),
        "headline": headline,
        "article": dict(lab.ARTICLE),
        "article_source": dict(lab.ARTICLE_SOURCE),
        "tokens": list(lab.TOKENS),
        "backends": backends,
        "backend_status": audit_env.backend_status(backends),
        "build": audit_env.build_info(),
        "backend": main_backend,
        "one_token": one,
        "exact_law": law_info,
        "sequence": {k: v for k, v in seq.items()},
        "selfcheck": {"batch": {"B": SELF_B, "K": SELF_K, "V": SELF_V}, "law": law,
                      "backends": table},
        "checks": checks,
        "grid": grid_info if grid_info is not None else {"settings": 0, "skipped": True},
        "summary": {"passed": int(passed), "total": len(checks),
                    "all_passed": passed == len(checks)},
    }
    report["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return _jsonable(report)
