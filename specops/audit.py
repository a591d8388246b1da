"""``specops audit``: the lab's deterministic checks plus the exactness self-check of every
available backend.

:func:`run_audit` returns a JSON-ready report; ``report["checks"]`` is a list of
``{"name", "passed", "value"}`` and ``report["grid"]`` summarises a sweep of
``GRID_SIZE`` (= 1,296) settings over all six knobs.  :func:`format_report` renders it for
people, :func:`plot_report` draws it (matplotlib, imported only there).

Every check is deterministic: same knobs, same installation, same values.
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from specops import lab
from specops import reference as R

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


def exact_law_checks(model: lab.ToyModel, view: dict, K: int) -> (List[dict], dict):
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
    info = {"K": K, "tv": res["tv"], "wrong_fallback_tv": wrong["tv"],
            "tree_tv": max(t["tv"] for t in tree.values()), "tree_accept": acc,
            "single_accept": single,
            "length_law": res["length_law"].tolist(), "length_law_markov": ll.tolist(),
            "block_tv": block["tv"], "block_length_law": block["length_law"].tolist(),
            "expected_accepted_token": e_tok, "expected_accepted_block": e_blk}
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
              grid: bool = True) -> dict:
    """Run every check; returns the JSON-ready report (see the module docstring)."""
    t0 = time.perf_counter()
    knobs = lab.sanitize_knobs(knobs or lab.DEFAULT_KNOBS)
    backends = lab.available_backends()
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
    law_checks, law_info = exact_law_checks(model, view, K)
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
        "tokens": list(lab.TOKENS),
        "backends": backends,
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


# ----------------------------------------------------------------------------- rendering
def _table(headers, rows) -> List[str]:
    cols = [[str(h)] + [str(r[i]) for r in rows] for i, h in enumerate(headers)]
    widths = [max(len(c) for c in col) for col in cols]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return [line(headers), line("-" * w for w in widths)] + [line(r) for r in rows]


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.3e}" if (v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5)) else f"{v:.4g}"
    return str(v)


def _n(v, spec: str) -> str:
    """Format a number with `spec`; anything else (e.g. 'inf' kept as a string) as is."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return format(v, spec)
    return str(v)


_HEADLINE_ROWS = (   # key, label, format
    ("alpha", "one-token alpha at the start", ".2%"),
    ("corrected_tv", "TV(corrected, p)", ".1e"),
    ("wrong_fallback_tv", "wrong-fallback TV", ".2%"),
    ("length", "trace length", "d"),
    ("gamma", "gamma (drafts per call)", "d"),
    ("target_calls", "target calls", "d"),
    ("draft_calls", "draft calls", "d"),
    ("toy_speedup", "toy speedup", ".2f"),
    ("estimated_speedup", "accounting estimate", ".2f"),
    ("worst_exact_tv", "grid: worst exact TV", ".2e"),
    ("wrong_token_counts", "grid: wrong token counts", "d"),
)


def article_lines(r: dict) -> List[str]:
    """Our headline figures beside the article's (its default controls)."""
    h, a = r["headline"], r["article"]
    rows = []
    for key, label, spec in _HEADLINE_ROWS:
        ours = h.get(key)
        rows.append([label, "-" if ours is None else _n(ours, spec), _n(a[key], spec)])
    note = ("" if r["knobs"] == lab.DEFAULT_KNOBS.as_dict()
            else "  (knobs differ from the defaults: the article's figures are for the defaults)")
    return ["Beside the article (its default controls)" + note + ":"] + [
        "  " + x for x in _table(["figure", "this run", "article"], rows)]


def format_report(r: dict) -> str:
    k = r["knobs"]
    o = r["one_token"]
    s = r["sequence"]
    L = []
    L.append("specops audit: the rejection-sampling lab")
    L.append("knobs: " + ", ".join(f"{n}={v}" for n, v in k.items())
             + f"   backends: {', '.join(r['backends'])} (trace on {r['backend']})")
    L.append("")
    L.append(f"One token after {o['token']!r}: alpha = sum min(p, q) = {_n(o['alpha'], '.6f')}"
             f" = 1 - TV(p, q) = {_n(1 - o['tv_pq'], '.6f')}")
    rows = []
    for i, tok in enumerate(r["tokens"]):
        rows.append([tok] + [f"{_n(o[c][i], '.4f')}" for c in
                             ("p", "q", "accepted", "residual", "rejection", "corrected",
                              "wrong")])
    L += ["  " + x for x in _table(["token", "p", "q", "min(p,q)", "residual", "rejected",
                                    "corrected", "wrong"], rows)]
    L.append(f"  rejection mass {_n(o['rejection_mass'], '.6f')} = residual mass "
             f"{_n(o['residual_mass'], '.6f')};  "
             f"TV(corrected, p) = {_n(o['corrected_tv'], '.1e')};  "
             f"wrong fallback TV(wrong, p) = {_n(o['wrong_tv'], '.6f')}")
    e = r["exact_law"]
    L.append(f"  exact law (reference.exact_output_law, K = {e['K']} drafts): TV to the "
             f"target = {_n(e['tv'], '.1e')}; "
             f"wrong fallback TV = {_n(e['wrong_fallback_tv'], '.6f')}")
    if "block_tv" in e:
        L.append(f"  block verification (method=\"block\", K = {e['K']}): TV to the target = "
                 f"{_n(e['block_tv'], '.1e')}; E[accepted] {_n(e['expected_accepted_block'], '.4f')}"
                 f" vs token-wise {_n(e['expected_accepted_token'], '.4f')}")
    if "tree_tv" in e:
        L.append(f"  tree verification (verify_tree, 2 siblings at the root): TV to the target "
                 f"= {_n(e['tree_tv'], '.1e')}; P(accept) rsd {_n(e['tree_accept']['rsd'], '.4f')}"
                 f", mss {_n(e['tree_accept']['mss'], '.4f')} vs one draft "
                 f"{_n(e['single_accept'], '.4f')}")
    L.append("")
    L.append(f"Sequence of {s['length']} tokens on {s['backend']} (seed {k['seed']}, "
             f"offset = step):")
    text = s["text"]
    L.append("  " + (text if len(text) <= 200 else text[:197] + "..."))
    L.append(f"  target calls {s['target_calls']}, draft calls {s['draft_calls']}, accepted "
             f"{s['accepted']}/{s['drafted']} drafts, {_n(s['tokens_per_target_call'], '.3f')} "
             f"tokens per target call")
    L.append(f"  cost {s['target_calls']} x 1 + {s['draft_calls']} x {_n(k['cost'], 'g')} = "
             f"{_n(s['total_cost'], '.4g')} vs {s['length']} autoregressive: toy speedup "
             f"{_n(s['toy_speedup'], '.3f')}x; estimate (1 - a^(g+1)) / ((1 - a)(g c + 1)) with "
             f"mean alpha {_n(s['alpha_mean'], '.4f')}: {_n(s['estimated_speedup'], '.3f')}x")
    c = s["curve"]
    L.append("  expected speedup by gamma: " + "  ".join(
        f"{g}:{_n(v, '.2f')}" for g, v in zip(c["gammas"], c["speedups"])))
    L.append(f"  best gamma = {c['best_gamma']} ({_n(c['best_speedup'], '.3f')}x)")
    pl = s.get("planner")
    if pl:
        L.append(f"  planner (specops.best_num_draft_tokens on the chain's per-position rates "
                 f"{', '.join(_n(x, '.3f') for x in pl['rates'][:4])}, ...): K = "
                 f"{pl['best_k']}, {_n(pl['expected_tokens'], '.3f')} tokens per step, "
                 f"{_n(pl['speedup'], '.3f')}x")
    L.append("")
    L += article_lines(r)
    L.append("")
    sc = r["selfcheck"]
    b = sc["batch"]
    L.append(f"Exactness self-check (fixed seeded batch B={b['B']}, K={b['K']}, V={b['V']}, "
             f"vs the reference oracle):")
    rows = [[t["backend"], t["probs"], t["logits"], t["point_mass"], t["flat"], t["trace"],
             f"{_n(t['law_tv'], '.1e')}", "ok" if t["passed"] else "FAIL"] for t in sc["backends"]]
    L += ["  " + x for x in _table(["backend", "probs", "logits", "point-mass", "flattened",
                                    "trace vs ref", "law TV", "status"], rows)]
    L.append("")
    g = r["grid"]
    if "error" in g:
        L.append(f"Grid: failed: {g['error']}")
        L.append("")
    elif not g.get("skipped"):
        L.append(f"Grid: {g['settings']} settings over all six knobs on {g['backend']}: "
                 f"worst exact TV {_n(g['worst_exact_tv'], '.1e')} ({g['exact_laws']} exact laws, "
                 f"K = {g['exact_K']}), {g['speed_values']} speed values finite: "
                 f"{g['all_speeds_finite']}, wrong token counts {g['wrong_token_counts']}")
        L.append("")
    rows = [["PASS" if ch["passed"] else "FAIL", ch["name"], _fmt(ch["value"])]
            for ch in r["checks"]]
    L += _table(["", "check", "value"], rows)
    sm = r["summary"]
    L.append("")
    L.append(f"{sm['passed']}/{sm['total']} checks passed ({_n(r['elapsed_s'], '.1f')} s)")
    return "\n".join(L)


def plot_report(r: dict, path: str) -> None:
    """Draw the one-token view and the expected-speedup curve to `path` (PNG)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib, which is not installed: "
                           "pip install matplotlib") from exc
    o, s = r["one_token"], r["sequence"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    x = np.arange(len(r["tokens"]))
    series = [("target p", o["p"]), ("draft q", o["q"]), ("corrected", o["corrected"]),
              ("residual (norm.)", o["residual"]), ("rejection mass", o["rejection"])]
    w = 0.8 / len(series)
    for i, (label, vals) in enumerate(series):
        ax1.bar(x + (i - (len(series) - 1) / 2) * w, vals, w, label=label)
    ax1.set_xticks(x)
    ax1.set_xticklabels(r["tokens"])
    ax1.set_ylabel("probability")
    ax1.set_title(f"next token after {o['token']!r}: alpha = {_n(o['alpha'], '.3f')}, "
                  f"wrong-fallback TV = {_n(o['wrong_tv'], '.3f')}")
    ax1.legend(fontsize=8)
    c = s["curve"]
    ax2.plot(c["gammas"], c["speedups"], marker="o", label="expected (mean alpha)")
    ax2.axvline(c["best_gamma"], color="grey", ls=":", label=f"best gamma {c['best_gamma']}")
    ax2.scatter([r["knobs"]["gamma"]], [s["toy_speedup"]], color="red", zorder=3,
                label=f"toy trace ({_n(s['toy_speedup'], '.2f')}x)")
    ax2.set_xlabel("draft length gamma")
    ax2.set_ylabel("speedup over autoregressive")
    ax2.set_title(f"cost c = {r['knobs']['cost']:g}, mean alpha = {s['alpha_mean']:.3f}")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
