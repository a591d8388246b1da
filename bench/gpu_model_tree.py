"""The tree part of ``python -m bench.gpu_model --pipeline tree`` (results/gpu_model_tree.md):
specops.verify_tree on bench_tree's 16-node tree along planned walks, its bytes per event
(``tree_formula``) against the counts, and bench_tree's drafted trees.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

from bench.gpu_counts import count_launches
from bench.gpu_fit import (GRAPH_LAUNCH_US, HBM_BW, LAUNCH_US, N_SM, PER_SM_BW, model,
                           timing)
from bench.gpu_workload import (GPU_TILE, OUT, QUICK_POINTS, FULL_POINTS, RUN_TILE, SAMPLING,
                                SETTINGS, V_REAL, _env, _name, _run_jobs, _runs_of, measure)


TREE_DEPTH = 4           # bench/bench_tree.py's TREE16: 16 nodes, depth 4
# Planned walks over TREE16 (the accepted path, node indices).  At every node of a walk the
# children tried before the next node of the path are rejected for sure (their token's target
# logit is -inf: R(y) = 0), that node is accepted for sure (+40 on its token's logit: rn ~ 1),
# at the walk's last node every child is rejected, and the draw there lands on V/2 - 1 (+40):
# every (B, V) point takes the same walk, so the counts fit exactly.
TREE_WALKS = {"deep": (1, 5, 11, 15),              # every first child accepted: 0 rejections
              "reject 1 per node": (2, 8),         # 1 rejected, 2 accepted; 7 rejected, 8 ...
              "root rejects all": ()}              # the root's 4 children rejected
CHAIN_K = 15             # bench_tree's chain: as many target rows as TREE16
DRAFTED_POINTS = ((4, 8192), (4, 16384))   # bench_tree.tree_inputs' drafted trees
TREE_OUT = OUT.replace(".md", "_tree.md")


def _tree16():
    from bench.bench_tree import TREE16
    return TREE16


def _children(parents, c):
    return [n for n in range(1, len(parents)) if parents[n] == c]


def walk_events(parents, path):
    """A walk (the root, then the accepted nodes `path`) -> (visited nodes, visited nodes
    with children, rejected children): at each visited node the children before the next
    node of the path are rejected, at the last one every child (distinct sibling tokens,
    usable rows: every rejection runs the residual update)."""
    nodes = (0,) + tuple(path)
    kids = [_children(parents, c) for c in nodes]
    rej = [k.index(n) for k, n in zip(kids, path)] + [len(kids[-1])]
    return len(nodes), sum(bool(k) for k in kids), sum(rej)


def stat_passes(samp):
    """Passes of _common.row_stats over a row of logits: logits_scan + the kept mass, and
    with top_p the 8 radix rounds and the kept mass again (top_k: 8 rounds)."""
    return 2 + 9 * (samp == "top_p=0.9") + 8 * (samp == "top_k=50")


def tree_formula(V, setting, events, draw_elems):
    """(loaded, stored) bytes of one request's walk, from the kernel's passes over V alone
    (verify_tree.py / _tree_rows.py; the per-node scalars, the shape and the outputs are
    left out): per visited node, the statistics passes and store_weights over the target
    row (its int64 R stored); per visited node with children and draft probs, store_weights
    over the draft row (Qw stored); per rejection, update_residual (R, and Qw with draft
    probs, read; R' stored); the draw, find_weight reading R up to its token's tile."""
    dtype, with_q, samp = setting
    ts, qs = (2 if dtype == "bf16" else 4), (4 if with_q else 0)
    visits, kids, rej = events
    loaded = V * (visits * (stat_passes(samp) + 1) * ts + kids * qs + rej * (8 + 2 * qs)) \
        + 8 * draw_elems
    stored = V * (visits * 8 + kids * 2 * qs + rej * 8)
    return loaded, stored


def deferred_formula(V, setting, parents, path, draw_elems):
    """Bytes of the same walk if the scratch rows were written only once a child is
    rejected (an ESTIMATE of a kernel change, not measured; the contract's values are
    unchanged): store_weights' passes compute A and Q without storing; a node's first
    rejection recomputes R from the target row (and Qw = trunc(q * 2**60) from the draft
    row) and writes R'; later rejections read R' and the draft row (rsd's removed tokens are
    the rejected siblings'); a draw after no rejection searches the target row (as the
    chain's draw_row, A already known), after one it searches R."""
    dtype, with_q, samp = setting
    ts, qs = (2 if dtype == "bf16" else 4), (4 if with_q else 0)
    nodes = (0,) + tuple(path)
    kids = [_children(parents, c) for c in nodes]
    rej = [k.index(n) for k, n in zip(kids, path)] + [len(kids[-1])]
    per_v = sum((stat_passes(samp) + 1) * ts + (qs if k else 0)
                + (ts + qs + 8 if r else 0) + max(r - 1, 0) * (8 + qs + 8)
                for k, r in zip(kids, rej))
    return V * per_v + draw_elems * (8 if rej[-1] else ts)


def path_floor(V, setting, parents, path):
    """Bytes one request must read at least: every target row on its walk and the draft row
    of each of those nodes with children (draft probs), once."""
    dtype, with_q, _ = setting
    visits, kids, _ = walk_events(parents, path)
    return V * (visits * (2 if dtype == "bf16" else 4) + (kids * 4 if with_q else 0))


def rows16_floor(V, setting, N=16):
    """bench_tree's floor: all N target rows (and N draft rows) read once."""
    dtype, with_q, _ = setting
    return N * V * ((2 if dtype == "bf16" else 4) + (4 if with_q else 0))


def tree_walk_inputs(B, V, dtype, with_q, path):
    """(target logits [B, 16, V], node ids, parents, draft probs or None) of a planned walk
    (TREE_WALKS): node tokens distinct and never V/2 - 1; draft rows softmax(noise / 2),
    independent of the target (every accepted token has rn ~ 1 >= qn)."""
    parents = _tree16()
    g = torch.Generator().manual_seed(1234)
    N, bonus = len(parents), V // 2 - 1
    t = torch.randn(B, N, V, generator=g)
    tok = torch.randperm(V - 1, generator=g)[:N]
    tok = tok + (tok >= bonus).long()
    c = 0
    for nxt in tuple(path) + (None,):
        for x in _children(parents, c):
            if x == nxt:
                break
            t[:, c, tok[x]] = -float("inf")
        t[:, c, bonus if nxt is None else tok[nxt]] += 40.0
        c = nxt
    q = torch.softmax(torch.randn(B, N, V, generator=g) / 2, -1) if with_q else None
    ids = tok.expand(B, N).contiguous()
    par = torch.tensor(parents, dtype=torch.int64).expand(B, N).contiguous()
    return t.to(torch.bfloat16 if dtype == "bf16" else torch.float32), ids, par, q


def measure_tree(B, V, setting, path, tile=RUN_TILE):
    """One specops.verify_tree call (triton, rsd, validate=False, max_depth given; after a
    tiny warm-up call) on a planned walk -> its launch records.  Checks the walk."""
    import specops
    dtype, with_q, samp = setting
    kw = dict(method="rsd", temperature=1.0, seed=0, backend="triton", validate=False,
              max_depth=TREE_DEPTH, **SAMPLING[samp])
    with _env(SPECOPS_TRITON_BLOCK_V=str(tile)):
        t, ids, par, q = tree_walk_inputs(B, 32, dtype, with_q, path)
        specops.verify_tree(t, ids, par, q, **kw)
        t, ids, par, q = tree_walk_inputs(B, V, dtype, with_q, path)
        with count_launches(rows=(t, q)) as recs:
            out = specops.verify_tree(t, ids, par, q, **kw)
    want = torch.tensor(list(path) + [-1] * (TREE_DEPTH - len(path)), dtype=torch.int32)
    assert (out.accepted_nodes.eq(want).all() and out.valid.all()
            and out.token_ids[:, len(path)].eq(V // 2 - 1).all()), (path, out)
    return recs


def measure_drafted(B, V, tile=RUN_TILE):
    """bench_tree's drafted trees (tree_inputs: fp32 logits, fp32 draft probs, siblings
    without replacement), rsd at temperature 0.8 -> per request (path, token, bytes)."""
    import specops
    from bench.bench_tree import tree_inputs
    parents = _tree16()
    target, q, par, ids = tree_inputs(B, parents, V)
    kw = dict(method="rsd", temperature=0.8, seed=torch.arange(B), offset=0,
              backend="triton", validate=False, max_depth=TREE_DEPTH)
    with _env(SPECOPS_TRITON_BLOCK_V=str(tile)):
        specops.verify_tree(target, ids, par, q, **kw)        # warm-up: parameter cache
        with count_launches(rows=(target, q)) as recs:
            out = specops.verify_tree(target, ids, par, q, **kw)
    (rec,) = [r for r in recs if not r.kernel.startswith("torch:")]
    assert out.valid.all(), out
    return [(tuple(n for n in out.accepted_nodes[b].tolist() if n >= 0),
             int(out.token_ids[b, out.num_accepted[b]]), rec.per_program[(b, 0, 0)])
            for b in range(B)]


def _tree_job(kind, s, walk, points, tile=RUN_TILE):
    """One tree measurement in a worker process.  kind "tree": a planned walk ->
    {(B, V): [Launch]}; "chain": verify_block K=CHAIN_K with pipeline `walk`; "drafted":
    {(B, V): per request rows}.  A failure comes back as its message."""
    torch.set_num_threads(1)
    t0 = time.time()
    try:
        if kind == "drafted":
            return {pt: measure_drafted(*pt, tile) for pt in points}
        if kind == "chain":
            out = {pt: measure(*pt, s, walk, tile, k=CHAIN_K) for pt in points}
        else:
            out = {pt: measure_tree(*pt, s, TREE_WALKS[walk], tile) for pt in points}
    except Exception as exc:           # report a broken code path, keep the others
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    for recs in out.values():
        for r in recs:
            r.per_program = {}
    print(f"  {kind} {walk} {_name(s)} tile {tile}: {time.time() - t0:.0f} s",
          file=sys.stderr, flush=True)
    return out


def run_tree(quick=False, settings=None, workers=None):
    """-> {"tree": {(setting, walk): runs}, "chain": {pipeline: runs}, "drafted": {(B, V):
    rows}, "same": whether the GPU tile gives RUN_TILE's counts}; jobs as in run()."""
    from bench import gpu_model_tree as me  # jobs pickle by module name
    points = QUICK_POINTS if quick else FULL_POINTS
    settings = settings or (SETTINGS[:1] if quick else SETTINGS)
    walks = list(TREE_WALKS)[:1] if quick else list(TREE_WALKS)
    cost = {"top_p=0.9": 0, "top_k=50": 1, "T=1": 2}
    jobs = sorted((("tree", s, w, points, RUN_TILE) for s in settings for w in walks),
                  key=lambda j: cost[j[1][2]])
    if not quick:
        jobs += [("chain", SETTINGS[0], p, points, RUN_TILE) for p in ("fused", "split")]
        jobs += [("tree", settings[0], walks[0], points[:1], GPU_TILE),
                 ("drafted", None, None, DRAFTED_POINTS, RUN_TILE)]
    done = _run_jobs(me._tree_job, jobs, quick, workers)
    res = {"tree": {}, "chain": {}, "drafted": {}, "same": None}
    for (kind, s, w, _, tile), r in zip(jobs, done):
        if kind == "tree" and tile == RUN_TILE:
            res["tree"][s, w] = r
        elif kind == "chain":
            res["chain"][w] = r
        elif kind == "drafted":
            res["drafted"] = r
        else:
            gpu = r
    if not quick:
        counts = lambda recs: [(r.kernel, r.grid, r.loaded, r.stored, r.busiest) for r in recs]
        ref = res["tree"].get((settings[0], walks[0]))
        if not isinstance(gpu, str) and not isinstance(ref, str) and ref is not None:
            res["same"] = counts(gpu[points[0]]) == counts(ref[points[0]])
    return res


TREE_HEADER = """# Bandwidth model of specops.verify_tree (Triton) on an H200 (no GPU used)

Made by `python -m bench.gpu_model{argv}` in {sec:.0f} s wall (Triton interpreter, 2-core CPU).

Constants as bench/results/gpu_model.md: HBM {hbm} TB/s, {sm} SMs, PER_SM_BW {psm:.0f} GB/s (an
ASSUMPTION: one SM streams roughly 40-60 GB/s), launch {lu} us eager / {gu} us under CUDA-graph
replay; V = {v}; tile SPECOPS_TRITON_BLOCK_V = {run_tile}; counts at the GPU's tile {gpu_tile}
identical (deep walk, first setting, B=1 V=8192): {same}.

Workload: `specops.verify_tree(backend="triton", method="rsd", validate=False, max_depth=4)`
on bench/bench_tree.py's 16-node tree `{tree}` (depth 4), temperature 1.0, along planned
walks (bench/gpu_model.py `TREE_WALKS`, `tree_walk_inputs`): at each node of a walk the
children before the next node of the path are rejected for sure, that node accepted for
sure, at the last node every child rejected, and the draw lands on V/2 - 1.  No draft probs
(`no-q`) = point-mass drafts.  Counted as in gpu_model.md (active lanes loaded / stored,
programs, the busiest program; torch ops that would be device kernels).  One program per
request, so the busiest program is one request's bytes.

- path floor: every target row on the walk and the draft row of each of its nodes with
  children, read once (what an exact verifier must read: the full rows normalise p and q).
- 16-row floor: all 16 target rows (and 16 draft rows) read once: bench_tree's `floor`.
- implied time = sum over launches of max(bytes / HBM, busiest program / PER_SM_BW) +
  launches x launch cost.  With B <= 132 programs the busiest program (one request at
  PER_SM_BW) sets it.
"""

def _tree_notes(table, diffs, ddiffs):
    parents = _tree16()
    L = ["## Notes", ""]
    if diffs:
        L += [f"- `tree_formula` (the table of bytes per event) reproduces every measured "
              f"point's per-request bytes to within {min(diffs):+d} .. {max(diffs):+d} bytes "
              "(per-node scalars R(y) / Qw(y), the tree shape, the parameters, the outputs): "
              "the events above are the whole V-dependent traffic."
              + (f"  On the drafted trees (their own walks and draw positions): "
                 f"{min(ddiffs):+d} .. {max(ddiffs):+d} bytes." if ddiffs else "")]
    L += ["- Passes over V: the kernel makes exactly the passes the contract (section 11) "
          "needs: the target's statistics (the chain's _common.row_stats: 2 passes at T "
          "without filters, 11 with top-p), one for the integer mass A = sum trunc(p * 2**60) "
          "(p needs the statistics first), one over the draft row for Q, one residual pass "
          "per rejection, and the draw's search.  No row is read more often than that."]
    deep = [r for r in table if r["B"] == 32 and r["walk"] == "deep"]
    share = "; ".join(f"{_name(r['s'])} {r['scratch']:.0%}" for r in deep)
    est = []
    for r in table:
        if r["B"] != 32:
            continue
        path = TREE_WALKS[r["walk"]]
        now = sum(tree_formula(V_REAL, r["s"], walk_events(parents, path), V_REAL // 2))
        later = deferred_formula(V_REAL, r["s"], parents, path, V_REAL // 2)
        est.append(f"{_name(r['s'])} {r['walk']}: {now / later:.2f}x")
    if est:
        L += ["- The excess is in what the passes touch, the int64 scratch rows: (a) R, and Qw "
              "with draft probs, are written in full at every visited node (8 + 8 bytes per "
              "entry) before any child is tried, though only a rejection needs them (a coin "
              "reads the scalars R(y), Qw(y), computable from the rows); (b) a rejection reads "
              "Qw (8 bytes per entry) where the draft row (4) gives Qw(z) = trunc(q(z) * 2**60) "
              "pointwise (rsd's removed tokens are the rejected siblings'); (c) a draw at a node "
              "where nothing was rejected (the bonus at a leaf) searches R (8) instead of the "
              "target row (2-4, as the chain's draw_row).  Scratch share of the bytes on the "
              f"all-accepted `deep` walk: {share}.  Writing the scratch rows only at a node's "
              "first rejection (bench/gpu_model.py `deferred_formula`, an estimate, not "
              "measured; the values, hence bit-identity, unchanged) would cut the bytes per "
              "request by (current / deferred): " + "; ".join(est) + "."]
    L += ["- One program per request: with B <= 132 the busiest program (one request's bytes "
          "at PER_SM_BW) sets the implied time, not HBM; the time does not fall below one "
          "request's bytes / PER_SM_BW however small B is.  A vocabulary-split pipeline (as "
          "the chain's `split`) would be the remedy.", ""]
    return L


def _tree_points_table(s, walk, runs, predict, diffs):
    parents = _tree16()
    path = TREE_WALKS[walk]
    ev = walk_events(parents, path)
    rows = []
    for (B, V) in sorted(runs):
        recs, pred = runs[B, V], predict(B, V)
        tot = sum(r.loaded + r.stored for r in recs)
        ptot = sum(r["loaded"] + r["stored"] for r in pred)
        bus = max(r.busiest for r in recs)
        lo, st = tree_formula(V, s, ev, V // 2)
        diffs.append(bus - lo - st)
        tri = _runs_of([f"{r.kernel} {r.programs}" for r in recs
                        if not r.kernel.startswith("torch:")])
        ops = _runs_of([r.kernel[6:] for r in recs if r.kernel.startswith("torch:")])
        rows.append(f"| {_name(s)} | {walk} | {B} | {V} | {tri} | {ops} | {tot} | "
                    f"{sum(r.rows for r in recs) / tot:.3f} | {abs(ptot - tot) / tot:.1e} | "
                    f"{bus} | {bus - lo - st:+d} |")
    return rows


def _tree_extrapolate(s, walk, predict, Bs=(1, 32, 64)):
    parents = _tree16()
    fl_req = path_floor(V_REAL, s, parents, TREE_WALKS[walk])
    out = []
    for B in Bs:
        pred = predict(B, V_REAL)
        tot = sum(r["loaded"] + r["stored"] for r in pred)
        rows = sum(r["rows"] for r in pred)
        fl = B * fl_req
        out.append(dict(s=s, walk=walk, B=B, launches=len(pred),
                        programs=max(r["programs"] for r in pred), req=tot / B,
                        floor_req=fl_req, x=tot / fl, rows_x=rows / fl,
                        scratch=1 - rows / tot, busiest=max(r["busiest"] for r in pred),
                        eager=timing(pred, fl, LAUNCH_US), graph=timing(pred, fl, GRAPH_LAUNCH_US),
                        floor_us=fl / HBM_BW * 1e6,
                        rows16_us=B * rows16_floor(V_REAL, s) / HBM_BW * 1e6))
    return out


def _event_table(settings):
    """Bytes per vocabulary entry per request, by event (tree_formula)."""
    L = ["| setting | target row (each visited node): read / write | draft row (each visited "
         "node with children): read / write | rejection: read / write | draw: read "
         "(x token/V) | path floor per visited node (+ per node with children) |",
         "|---|---|---|---|---|---|"]
    for s in settings:
        dtype, with_q, samp = s
        ts, qs = (2 if dtype == "bf16" else 4), (4 if with_q else 0)
        L.append(f"| {_name(s)} | {(stat_passes(samp) + 1) * ts} ({stat_passes(samp) + 1} "
                 f"passes x {ts}) / 8 | {qs} / {2 * qs} | {8 + 2 * qs} / 8 | 8 | {ts} (+ {qs}) |")
    return L


def report_tree(res, seconds, argv):
    parents = _tree16()
    L = [TREE_HEADER.format(argv="".join(" " + a for a in argv), sec=seconds,
                            hbm=HBM_BW / 1e12, sm=N_SM, psm=PER_SM_BW / 1e9, lu=LAUNCH_US,
                            gu=GRAPH_LAUNCH_US, v=V_REAL, run_tile=RUN_TILE, gpu_tile=GPU_TILE,
                            same={None: "not checked", True: "yes", False: "NO"}[res["same"]],
                            tree=parents)]
    walks = ["| walk | accepted path | visited nodes | with children | rejections |",
             "|---|---|---|---|---|"]
    for w, path in TREE_WALKS.items():
        v, k, r = walk_events(parents, path)
        walks.append(f"| {w} | 0 -> {' -> '.join(map(str, path)) or '(none)'} | {v} | {k} | "
                     f"{r} |")
    table, pts, progs, failed, diffs, ddiffs = [], [], [], [], [], []
    for (s, w), runs in res["tree"].items():
        if isinstance(runs, str):
            failed.append(f"- {_name(s)} {w}: FAILED ({runs})")
            continue
        predict, fits = model(runs)
        pts += _tree_points_table(s, w, runs, predict, diffs)
        table += _tree_extrapolate(s, w, predict)
        progs.append(f"- {_name(s)} {w}: " + _runs_of(
            [f"{n}: {f}" for n, _, f, _ in fits if not n.startswith("torch:")]))
    b32 = [r for r in table if r["B"] == 32]
    L += ["## Headline: B = 32, V = 128256", "",
          "| setting | walk | MB read+written per request | path floor MB per request | x path "
          "floor | row reads x path floor | implied us (graph) | path floor us (HBM) | "
          "16-row floor us |", "|---" * 9 + "|"]
    L += [f"| {_name(r['s'])} | {r['walk']} | {r['req'] / 1e6:.2f} | {r['floor_req'] / 1e6:.2f} "
          f"| {r['x']:.2f} | {r['rows_x']:.2f} | {r['graph']:.1f} | {r['floor_us']:.1f} | "
          f"{r['rows16_us']:.1f} |" for r in b32]
    L += [""] + _chain_lines(res["chain"]) + ["", "## Walks", ""] + walks + [""]
    L += ["## Bytes per vocabulary entry per request, by event", "",
          "From the kernel's passes (bench/gpu_model.py `tree_formula`; sampled requests, "
          "target logits).  R and Qw are int64 scratch rows ([B, V] each).", ""]
    L += _event_table([s for s in dict.fromkeys(s for s, _ in res["tree"])]) + [""]
    L += ["## Measured points against the fit a + bB + cV + dBV + eBV^2", "",
          "rows: share of the bytes that are target / draft row reads (the rest: the R / Qw "
          "scratch rows, parameters, outputs).  per request: the busiest program's bytes; "
          "measured - formula: it against `tree_formula`, in bytes.", "",
          "| setting | walk | B | V | Triton launch programs | torch ops | bytes | rows | fit err "
          "| per request | measured - formula |", "|---" * 11 + "|"] + pts
    L += ["", "Programs per Triton launch (exact over every point):", ""] + progs + failed
    L += ["", f"## Extrapolated to V = {V_REAL}", "",
          "| setting | walk | B | launches | programs | MB per request | x path floor | row "
          "reads x path floor | scratch share | busiest / (path floor/132) | implied us "
          "(eager) | implied us (graph) | path floor us | 16-row floor us |",
          "|---" * 14 + "|"]
    L += [f"| {_name(r['s'])} | {r['walk']} | {r['B']} | {r['launches']} | {r['programs']} | "
          f"{r['req'] / 1e6:.2f} | {r['x']:.2f} | {r['rows_x']:.2f} | {r['scratch']:.2f} | "
          f"{r['busiest'] / (r['B'] * r['floor_req'] / N_SM):.1f} | {r['eager']:.1f} | "
          f"{r['graph']:.1f} | {r['floor_us']:.1f} | {r['rows16_us']:.1f} |" for r in table]
    L += [""] + _drafted_lines(res["drafted"], ddiffs) + [""]
    L += _tree_notes(table, diffs, ddiffs)
    return "\n".join(L)


def _chain_lines(chain):
    """The chain of bench_tree (verify_block, K = 15, every draft accepted: 16 target rows,
    15 draft rows), fp32 logits + fp32 draft probs, T = 1, at B = 32."""
    s = SETTINGS[0]
    L = [f"Beside it, the chain with as many target rows (verify_block, K = {CHAIN_K}, every "
         f"draft accepted: 16 target rows + 15 draft rows read), {_name(s)}, B = 32 (its "
         "floor: those rows once):", ""]
    if not chain:
        return L[:0]
    fl = 32 * V_REAL * ((CHAIN_K + 1) * 4 + CHAIN_K * 4)
    for p, runs in chain.items():
        if isinstance(runs, str):
            L.append(f"- {p}: FAILED ({runs})")
            continue
        predict, _ = model(runs)
        pred = predict(32, V_REAL)
        tot = sum(r["loaded"] + r["stored"] for r in pred)
        L.append(f"- {p}: {len(pred)} launches, {tot / 32 / 1e6:.2f} MB per request "
                 f"({tot / fl:.2f}x its floor), implied {timing(pred, fl, LAUNCH_US):.1f} us "
                 f"eager / {timing(pred, fl, GRAPH_LAUNCH_US):.1f} us graph; floor "
                 f"{fl / HBM_BW * 1e6:.1f} us")
    return L


def _drafted_lines(drafted, diffs):
    if not drafted:
        return []
    if isinstance(drafted, str):
        return [f"Drafted trees: FAILED ({drafted})"]
    parents = _tree16()
    s = ("fp32", True, "T=0.8")
    L = ["## Drafted trees (bench_tree.tree_inputs: fp32 logits, fp32 draft probs, siblings "
         "without replacement; rsd, temperature 0.8)", "",
         "| B | V | request | accepted path | rejections | token | bytes | path floor | x path "
         "floor | measured - formula |", "|---" * 10 + "|"]
    ratios = []
    for (B, V), rows in sorted(drafted.items()):
        for b, (path, token, nbytes) in enumerate(rows):
            ev = walk_events(parents, path)
            draw = min(V, -(-(token + 1) // RUN_TILE) * RUN_TILE)
            lo, st = tree_formula(V, s, ev, draw)
            fl = path_floor(V, s, parents, path)
            ratios.append(nbytes / fl)
            diffs.append(nbytes - lo - st)
            L.append(f"| {B} | {V} | {b} | 0 -> {' -> '.join(map(str, path)) or '(none)'} | "
                     f"{ev[2]} | {token} | {nbytes} | {fl} | {nbytes / fl:.2f} | "
                     f"{nbytes - lo - st:+d} |")
    L += ["", f"Mean x path floor over these requests: {np.mean(ratios):.2f} (min "
          f"{min(ratios):.2f}, max {max(ratios):.2f})."]
    return L
