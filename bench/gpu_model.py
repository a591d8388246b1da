"""Bandwidth model of the Triton backend, without a GPU.

The kernels run in Triton's interpreter (TRITON_INTERPRET=1) with its memory ops patched to
count, per launch: programs, bytes loaded / stored by active lanes (masked-off lanes cost
nothing; atomics count one load + one store) and the bytes of the busiest program.  Torch
ops run by specops during the call (fills, copies: device kernels on CUDA) are counted as
launches too.  The interpreter is too slow at V = 128256, so small V and B are measured, each
launch's counts are fitted by a + bB + cV + dBV + eBV^2 and extrapolated; the fit errors
are reported.  The split pipeline (SPECOPS_TRITON_PIPELINE=split) is modelled beside the
fused one when the variable is honoured.

    python -m bench.gpu_model [--quick] [--all] [--pipeline fused|split|both|block|tree]

writes bench/results/gpu_model.md (not with --quick; `--pipeline block`, block verification's
kernel, writes bench/results/gpu_model_block.md; `--pipeline tree`, specops.verify_tree on a
16-node tree along planned walks, writes bench/results/gpu_model_tree.md).
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")     # must precede the first triton import

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench import gpu_model_tree  # noqa: E402
from bench.gpu_counts import Launch, count_launches  # noqa: E402
from bench.gpu_fit import (GRAPH_LAUNCH_US, HBM_BW, LAUNCH_US, N_SM, PER_SM_BW,  # noqa: E402
                           _features, _fit, _programs_model, model, timing)
from bench.gpu_workload import (ALL_SETTINGS, BATCHES, FULL_POINTS, GPU_TILE, K,  # noqa: E402
                                OUT, QUICK_POINTS, RUN_TILE, SETTINGS, V_REAL, _name,
                                _run_jobs, _runs_of, floor_bytes, gpu_chunk, measure)

# the counting, the fit and the workload live beside this module (bench/gpu_counts.py,
# gpu_fit.py, gpu_workload.py; the tree model in gpu_model_tree.py); tests and tools use
# them through this name too
__all__ = ["Launch", "count_launches", "model", "run", "report", "main", "QUICK_POINTS",
           "V_REAL", "_fit", "_programs_model"]


def pipelines_for(choice):
    """'both' -> fused and split if SPECOPS_TRITON_PIPELINE changes the launches, else the
    launcher's default alone (None: the variable left unset)."""
    if choice != "both":
        return [choice]
    sig = {}
    for p in ("fused", "split"):
        try:
            sig[p] = [(r.kernel, r.grid) for r in measure(1, 8192, SETTINGS[0], p)]
        except Exception as exc:       # a path that fails is a path taken: its jobs report it
            sig[p] = repr(exc)
    return ["fused", "split"] if sig["fused"] != sig["split"] else [None]



def _job(p, s, points, tile=RUN_TILE):
    """One (pipeline, setting) in a worker process -> {(B, V): [Launch]}."""
    torch.set_num_threads(1)           # the workers share the cores
    t0 = time.time()
    try:
        out = {pt: measure(*pt, s, p, tile) for pt in points}
    except Exception as exc:           # report a broken code path, keep the others
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    for recs in out.values():
        for r in recs:
            r.per_program = {}         # not needed past measure, and large to pickle
    print(f"  {p or 'default'} {_name(s)} tile {tile}: {time.time() - t0:.0f} s",
          file=sys.stderr, flush=True)
    return out


def run(quick=False, pipeline="both", settings=None, workers=None):
    """-> ({pipeline: {setting: {(B, V): [Launch]}}}, {pipeline: whether the GPU tile gives
    the same counts as RUN_TILE}); jobs in parallel processes (the interpreter is
    single-threaded Python)."""
    from bench import gpu_model as me  # jobs pickle by module name, also under python -m
    points = QUICK_POINTS if quick else FULL_POINTS
    settings = settings or (SETTINGS[:1] if quick else SETTINGS)
    pipes = ["fused"] if quick and pipeline == "both" else pipelines_for(pipeline)
    cost = {"top_p=0.9": 0, "top_k=50": 1, "T=1": 2}        # slowest first: even finish
    jobs = sorted(((p, s, points, RUN_TILE) for p in pipes for s in settings),
                  key=lambda j: cost[j[1][2]])
    jobs += [] if quick else [(p, settings[0], points[:1], GPU_TILE) for p in pipes]
    done = _run_jobs(me._job, jobs, quick, workers)
    got = {(p, s, tile): r for (p, s, _, tile), r in zip(jobs, done)}
    counts = lambda recs: [(r.kernel, r.grid, r.loaded, r.stored, r.busiest) for r in recs]
    same = {p: counts(got[p, settings[0], GPU_TILE][points[0]])
            == counts(got[p, settings[0], RUN_TILE][points[0]])
            for p in pipes if not isinstance(got.get((p, settings[0], GPU_TILE), ""), str)
            and not isinstance(got[p, settings[0], RUN_TILE], str)}
    return {p: {s: got[p, s, RUN_TILE] for s in settings} for p in pipes}, same



HEADER = """# Bandwidth model of the Triton backend on an H200 (no GPU used)

Made by `python -m bench.gpu_model{argv}` in {sec:.0f} s wall (Triton interpreter, 2-core CPU).

Constants: HBM {hbm} TB/s, {sm} SMs, PER_SM_BW {psm:.0f} GB/s (an ASSUMPTION: one H100/H200 SM
streams roughly 40-60 GB/s), launch {lu} us eager / {gu} us under CUDA-graph replay.  K = {k},
V = {v}, temperature 1.0; split chunk SPECOPS_TRITON_CHUNK = {chunk} (the GPU's), tile
SPECOPS_TRITON_BLOCK_V = {run_tile}; counts at the GPU's tile {gpu_tile} identical: {same}.

Counted per launch: programs; bytes of active lanes loaded / stored (masked lanes free,
atomics = load + store); the busiest program's bytes.  Torch ops specops runs during the call
that would be device kernels on CUDA count as launches (no bytes).  Workload: every draft
accepted (every target row read) and the bonus token at V/2 - 1 (bench/gpu_model.py
`inputs`).  floor = target logits + draft probs read once.  implied time = sum over
launches of max(bytes / HBM, busiest program / PER_SM_BW) + launches x launch cost.
"""

NOTES = """## Notes

- Torch ops: the call passes `validate=False` when verify_block has it, so CPU tensors are
  not read on the host, as CUDA tensors are not by default (`validate=None`).  The [B]
  tensors that broadcast Python-scalar parameters are cached after the warm-up call
  (specops/backends/triton.py `_fill`), so a steady-state call launches only the kernels.
- Filter rounds: the split path launches 8 radix rounds per filter that can be on (a
  `top_p` below 1 or a `top_k` above 0 given as a Python number, or any tensor): the
  top_p=0.9 rows are 5 + 8 launches; a tensor `top_k` and `top_p` make 5 + 16.
- All drafts accepted: the fused walk reads a draft-prob row only at its draft token, so with
  draft probs its total can sit below the floor.  A rejection runs the residual draw instead
  (the rejected position's p and q rows) and skips row K: not measured.
- Scaling: row reads are linear in B and V.  The split's per-chunk partials are read by
  every program of a row (C programs x C partials, C = V / chunk), hence the BV^2 term
  (see "lin err").  The measured V are multiples of 8192: whole chunks, the bonus token at a
  chunk end.  At V = 128256 the last chunk is partial (the fit counts 31.3 chunks, not 32)
  and the fused draw stops 384 elements past V/2 on a 1024 tile: small next to any total.
- busiest / (floor/132) takes the busiest program of any launch.  With more programs than
  SMs an SM's share is at least bytes/132, which at PER_SM_BW is still under the HBM time.
"""



def _points_table(s, runs, predict):
    """Markdown rows: each measured point against the fit (and the fit without BV**2)."""
    pts = sorted(runs)
    total = {p: sum(r.loaded + r.stored for r in runs[p]) for p in pts}
    lin, _ = _fit(pts, [total[p] for p in pts], quad=False)
    rows = []
    for (B, V) in pts:
        recs, pred, tot = runs[B, V], predict(B, V), total[B, V]
        ptot = sum(r["loaded"] + r["stored"] for r in pred)
        worst = max((abs(p["loaded"] + p["stored"] - r.loaded - r.stored) / (r.loaded + r.stored)
                     for r, p in zip(recs, pred) if r.loaded + r.stored), default=0.0)
        bus, pbus = max(r.busiest for r in recs), max(r["busiest"] for r in pred)
        tri = _runs_of([f"{r.kernel} {r.programs}" for r in recs
                        if not r.kernel.startswith("torch:")])
        ops = _runs_of([r.kernel[6:] for r in recs if r.kernel.startswith("torch:")])
        lin_err = abs(np.dot(lin, _features(B, V, False)) - tot) / tot
        rows.append(f"| {_name(s)} | {B} | {V} | {tri} | {ops} | {tot} | "
                    f"{sum(r.rows for r in recs) / tot:.3f} | {lin_err:.1e} | "
                    f"{abs(ptot - tot) / tot:.1e} | {worst:.1e} | {bus} | "
                    f"{abs(pbus - bus) / bus:.1e} |")
    return rows


def _extrapolate(s, predict):
    """One row per B at V_REAL: (setting, B, Triton launches, torch ops, widest grid,
    total/floor, row reads/floor, busiest/even share, us eager, us graph, floor us)."""
    out = []
    for B in BATCHES:
        pred, fl = predict(B, V_REAL), floor_bytes(B, V_REAL, s[0], s[1])
        n_tri = sum(not r["kernel"].startswith("torch:") for r in pred)
        out.append((s, B, n_tri, len(pred) - n_tri, max(r["programs"] for r in pred),
                    sum(r["loaded"] + r["stored"] for r in pred) / fl,
                    sum(r["rows"] for r in pred) / fl,
                    max(r["busiest"] for r in pred) / (fl / N_SM),
                    timing(pred, fl, LAUNCH_US), timing(pred, fl, GRAPH_LAUNCH_US),
                    fl / HBM_BW * 1e6))
    return out


def report(results, same, seconds, argv):
    L = [HEADER.format(argv="".join(" " + a for a in argv), sec=seconds, hbm=HBM_BW / 1e12,
                       sm=N_SM, psm=PER_SM_BW / 1e9, lu=LAUNCH_US, gu=GRAPH_LAUNCH_US, k=K,
                       v=V_REAL, chunk=gpu_chunk(), run_tile=RUN_TILE, gpu_tile=GPU_TILE,
                       same=", ".join(f"{p or 'default'} {'yes' if v else 'NO'}"
                                      for p, v in same.items()) or "not checked")]
    aims = []
    for p, per_setting in results.items():
        pname = p or "launcher default (SPECOPS_TRITON_PIPELINE not honoured)"
        L += [f"## Pipeline: {pname}", "", "### Measured points against the fit "
              "a + bB + cV + dBV + eBV^2 of each launch's loaded, stored, busiest and row "
              "bytes", "", "lin err: the total's fit without eBV^2.  rows: share of the bytes "
              "that are target / draft row reads (the rest: parameters, per-chunk partials, "
              "outputs; likely L2 hits when re-read).", "",
              "| setting | B | V | Triton launch programs | torch ops | bytes | rows | lin err "
              "| fit err | worst launch err | busiest | fit err |", "|---" * 12 + "|"]
        table, progs = [], []
        failed = [f"- {_name(s)}: FAILED ({runs})" for s, runs in per_setting.items()
                  if isinstance(runs, str)]
        for s, runs in per_setting.items():
            if isinstance(runs, str):
                continue
            predict, fits = model(runs)
            L += _points_table(s, runs, predict)
            table += _extrapolate(s, predict)
            progs.append(f"- {_name(s)}: " + _runs_of(
                [f"{n}: {f}" for n, _, f, _ in fits if not n.startswith("torch:")]))
        L += ["", "Programs per Triton launch (exact over every point):", ""] + progs + failed
        L += ["", f"### Extrapolated to V = {V_REAL}", "",
              "| setting | B | launches (Triton + torch) | programs, widest launch | total / "
              "floor | row reads / floor | busiest / (floor/132) | implied us (eager) "
              "| implied us (graph) | floor us |", "|---" * 10 + "|"]
        L += [f"| {_name(s)} | {B} | {nt + no} ({nt} + {no}) | {w} | {rt:.2f} | {rr:.2f} | "
              f"{rb:.2f} | {te:.1f} | {tg:.1f} | {tf:.1f} |"
              for s, B, nt, no, w, rt, rr, rb, te, tg, tf in table] + [""]
        aims += [f"{pname}:", ""] + _aims(table) + [""]
    L += ["", NOTES, "## Against the aims", ""] + aims
    return "\n".join(L)


def _aims(table):
    """Each aim with the model's worst row and how many rows are within it (a measurement
    beside the aim, not a verdict)."""
    def line(what, rows, ok, val, fmt, worst=max):
        if not rows:
            return f"- {what}: no data"
        within = sum(1 for r in rows if ok(r))
        w = worst(rows, key=val)
        return (f"- {what}: worst {fmt % val(w)} at {_name(w[0])} B={w[1]}; "
                f"{within}/{len(rows)} rows within")
    return [line("total <= 1.25x floor", table, lambda r: r[5] <= 1.25, lambda r: r[5], "%.2fx"),
            line("(row reads alone <= 1.25x floor)", table, lambda r: r[6] <= 1.25,
                 lambda r: r[6], "%.2fx"),
            line("busiest program <= 2x even share for B >= 8", [r for r in table if r[1] >= 8],
                 lambda r: r[7] <= 2, lambda r: r[7], "%.2fx"),
            line(">= 132 programs in the widest launch at B=1", [r for r in table if r[1] == 1],
                 lambda r: r[4] >= N_SM, lambda r: r[4], "%d programs", min),
            line("<= 6 launches per call (Triton + torch)", table, lambda r: r[2] + r[3] <= 6,
                 lambda r: r[2] + r[3], "%d")]



def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one setting, tiny V; no report file")
    ap.add_argument("--pipeline", choices=("fused", "split", "both", "block", "tree"),
                    default="both", help="block: method='block' (written to "
                    "gpu_model_block.md); tree: specops.verify_tree (gpu_model_tree.md)")
    ap.add_argument("--all", action="store_true", help="the filters with every dtype / draft")
    a = ap.parse_args(argv)
    t0 = time.time()
    if a.pipeline == "tree":
        res = gpu_model_tree.run_tree(a.quick, ALL_SETTINGS if a.all else None)
        text = gpu_model_tree.report_tree(res, time.time() - t0, argv)
        if not a.quick:
            os.makedirs(os.path.dirname(gpu_model_tree.TREE_OUT), exist_ok=True)
            with open(gpu_model_tree.TREE_OUT, "w") as f:
                f.write(text)
        print(text)
        return res
    results, same = run(a.quick, a.pipeline, ALL_SETTINGS if a.all else None)
    text = report(results, same, time.time() - t0, argv)
    if not a.quick:
        os.makedirs(os.path.dirname(OUT), exist_ok=True)
        out = OUT.replace(".md", "_block.md") if a.pipeline == "block" else OUT
        with open(out, "w") as f:
            f.write(text)
    print(text)
    return results


if __name__ == "__main__":
    main()
