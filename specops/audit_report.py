"""How ``specops audit`` shows its report: the text tables (:func:`format_report`) and the
PNG (:func:`plot_report`, matplotlib, imported only there).  Both read only the JSON-ready
report of :func:`specops.audit.run_audit`."""
from __future__ import annotations

from typing import List

import numpy as np

from specops import audit_env, lab

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
    """Our headline figures beside the essay's (its default controls), with their source."""
    h, a = r["headline"], r["article"]
    rows = []
    for key, label, spec in _HEADLINE_ROWS:
        ours = h.get(key)
        rows.append([label, "-" if ours is None else _n(ours, spec), _n(a[key], spec)])
    note = ("" if r["knobs"] == lab.DEFAULT_KNOBS.as_dict()
            else "  (knobs differ from the defaults: the essay's figures are for the defaults)")
    src = r.get("article_source") or lab.ARTICLE_SOURCE
    return (["Beside the article (its default controls)" + note + ":"]
            + ["  " + x for x in _table(["figure", "this run", "article"], rows)]
            + [f"  article: {src['essay']}, which builds on"]
            + [f"    {paper}" for paper in src["papers"]])


def format_report(r: dict) -> str:
    k = r["knobs"]
    o = r["one_token"]
    s = r["sequence"]
    L = []
    L.append("specops audit: the rejection-sampling lab")
    if "build" in r:
        L += audit_env.build_lines(r["build"])
    if "backend_status" in r:
        L.append("backends:")
        L += ["  " + x for x in audit_env.status_lines(r["backend_status"])]
    L.append("knobs: " + ", ".join(f"{n}={v}" for n, v in k.items())
             + f"   (checked: {', '.join(r['backends'])}; trace on {r['backend']})")
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
    if "traversal_tv" in e:
        mean = e["traversal_expected_accepted"]
        L.append(f"  traversal verification (section 14, tree {e['traversal_tree']}): TV to the "
                 f"target = {_n(e['traversal_tv'], '.1e')}; E[accepted] "
                 + ", ".join(f"{m} {_n(v, '.4f')}" for m, v in mean.items()))
    if "sglang_threshold_tv" in e:
        L.append("  SGLang's relaxed thresholds (section 13, not exact; 2 siblings at the root): "
                 "TV to the target " + ", ".join(f"{m} {_n(v, '.2e')}"
                                                for m, v in e["sglang_threshold_tv"].items()))
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
