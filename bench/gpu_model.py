"""Bandwidth model of the Triton backend, without a GPU.

The kernels run in Triton's interpreter (TRITON_INTERPRET=1) with its memory ops patched to
count, per launch: programs, bytes loaded / stored by active lanes (masked-off lanes cost
nothing; atomics count one load + one store) and the bytes of the busiest program.  Torch
ops run by specops during the call (fills, copies: device kernels on CUDA) are counted as
launches too.  The interpreter is too slow at V = 128256, so small V and B are measured, the
counts are fitted bilinearly in (B, V) and extrapolated; the fit error is reported.

    python -m bench.gpu_model [--quick] [--pipeline fused|split|both]

writes bench/results/gpu_model.md (not with --quick).
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")     # must precede the first triton import

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from triton.runtime import interpreter as I  # noqa: E402

HBM_BW = 4.8e12          # H200 HBM3e, bytes/s
N_SM = 132               # H200 SMs
PER_SM_BW = 50e9         # ASSUMPTION: one SM streams ~40-60 GB/s; one program per SM
LAUNCH_US = 2.5          # per launch, eager
GRAPH_LAUNCH_US = 1.0    # per launch, CUDA-graph replay
V_REAL, K, BATCHES = 128256, 4, (1, 8, 32, 64)
GPU_BLOCK_V = 1024       # the GPU's vocabulary tile: the draw's early exit stops on a tile
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "gpu_model.md")


@dataclasses.dataclass
class Launch:
    kernel: str
    grid: tuple = ()
    programs: int = 0
    loaded: int = 0
    stored: int = 0
    busiest: int = 0                 # loaded + stored of the busiest program
    per_program: dict = dataclasses.field(default_factory=dict, repr=False)


def _nbytes(ptrs, mask):
    bits = ptrs.get_element_ty().primitive_bitwidth
    lanes = ptrs.data.size if mask is None else int(np.count_nonzero(
        np.broadcast_to(mask.data, ptrs.data.shape)))
    return lanes * max(1, bits // 8)     # int1 pointers are bytes in memory


# Torch ops that launch nothing on CUDA: allocation, metadata, host scalars.
_NO_KERNEL = {"empty", "empty_strided", "detach", "alias", "lift_fresh", "set_", "new_empty",
              "_local_scalar_dense", "resize_", "is_nonzero", "sym_size", "sym_stride"}


class _TorchOps(TorchDispatchMode):
    def __init__(self, sink, state):
        super().__init__()
        self.sink, self.state = sink, state

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not self.state["in_kernel"] and not func.is_view and name not in _NO_KERNEL:
            self.sink.append(Launch("torch:" + name))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def count_launches(torch_ops=True):
    """Yield a list that fills with one Launch per Triton launch (and per device-kernel torch
    op with torch_ops) in the block; the interpreter is restored on exit."""
    records, state = [], {"in_kernel": False, "cur": None, "pid": None}
    B, G = I.InterpreterBuilder, I.GridExecutor
    saved = {(B, n): getattr(B, n) for n in ("create_masked_load", "create_masked_store",
                                            "create_atomic_cas", "create_atomic_rmw",
                                            "set_grid_idx")}
    saved[(G, "__call__")] = G.__call__

    def add(n_load, n_store):
        rec = state["cur"]
        if rec is not None:
            rec.loaded += n_load
            rec.stored += n_store
            rec.per_program[state["pid"]] = rec.per_program.get(state["pid"], 0) + n_load + n_store

    # create_load / create_store / atomic load+store / descriptor ops all go through these two
    def masked_load(self, ptrs, mask, *a, **k):
        add(_nbytes(ptrs, mask), 0)
        return saved[(B, "create_masked_load")](self, ptrs, mask, *a, **k)

    def masked_store(self, ptrs, value, mask, *a, **k):
        add(0, _nbytes(ptrs, mask))
        return saved[(B, "create_masked_store")](self, ptrs, value, mask, *a, **k)

    def atomic_cas(self, ptr, *a, **k):
        n = _nbytes(ptr, None)
        add(n, n)
        return saved[(B, "create_atomic_cas")](self, ptr, *a, **k)

    def atomic_rmw(self, op, ptr, val, mask, *a, **k):
        n = _nbytes(ptr, mask)
        add(n, n)
        return saved[(B, "create_atomic_rmw")](self, op, ptr, val, mask, *a, **k)

    def set_grid_idx(self, x, y, z):
        state["pid"] = (x, y, z)
        return saved[(B, "set_grid_idx")](self, x, y, z)

    def call(self, *a, **k):
        rec = Launch(getattr(self.fn, "__name__", str(self.fn)))
        records.append(rec)
        state.update(cur=rec, in_kernel=True)     # the interpreter's host copies are not ops
        try:
            return saved[(G, "__call__")](self, *a, **k)
        finally:
            state.update(cur=None, in_kernel=False)
            rec.grid = tuple(I.interpreter_builder.grid_dim)
            rec.programs = int(np.prod(rec.grid))
            rec.busiest = max(rec.per_program.values(), default=0)

    patches = {(B, "create_masked_load"): masked_load, (B, "create_masked_store"): masked_store,
               (B, "create_atomic_cas"): atomic_cas, (B, "create_atomic_rmw"): atomic_rmw,
               (B, "set_grid_idx"): set_grid_idx, (G, "__call__"): call}
    api, mode = sys.modules.get("specops.api"), None
    real_mode_fn = getattr(api, "_get_current_dispatch_mode", None)
    try:
        for (cls, name), fn in patches.items():
            setattr(cls, name, fn)
        if torch_ops:
            mode = _TorchOps(records, state)
            if real_mode_fn is not None:       # specops takes another path when a mode watches:
                api._get_current_dispatch_mode = lambda: None    # count the eager one
            mode.__enter__()
        yield records
    finally:
        if mode is not None:
            mode.__exit__(None, None, None)
        if real_mode_fn is not None:
            api._get_current_dispatch_mode = real_mode_fn
        for (cls, name), fn in saved.items():
            setattr(cls, name, fn)


# ----------------------------------------------------------------------------- the workload
SETTINGS = [(dt, q, samp) for samp in ("T=1", "top_p=0.9", "top_k=50")
            for dt in ("fp32", "bf16") for q in (True, False)]
SAMPLING = {"T=1": {}, "top_p=0.9": {"top_p": 0.9}, "top_k=50": {"top_k": 50}}


def inputs(B, V, dtype, with_q):
    """Every draft accepted (the target boosts each draft token by 20, a draft with probs is
    flatter than the target) and the bonus token at V/2: every row is read, and the bonus
    draw's scan stops half way, as for a uniformly placed token."""
    g = torch.Generator().manual_seed(1234)
    t = torch.randn(B, K + 1, V, generator=g)
    ids = torch.randint(0, V, (B, K), generator=g)
    t[:, :K].scatter_add_(2, ids[..., None], torch.full((B, K, 1), 20.0))
    t[:, K, V // 2] += 20.0
    q = torch.softmax(t[:, :K] / 2, -1) if with_q else None
    return t.to(torch.bfloat16 if dtype == "bf16" else torch.float32), ids, q


def measure(B, V, setting, pipeline=None):
    """One verify call (after a tiny warm-up call that fills specops' parameter cache) ->
    its launch records.  Checks the walk went as planned."""
    import specops
    dtype, with_q, samp = setting
    os.environ["SPECOPS_TRITON_BLOCK_V"] = str(GPU_BLOCK_V)
    if pipeline:
        os.environ["SPECOPS_TRITON_PIPELINE"] = pipeline    # read by the launcher per call
    kw = dict(temperature=1.0, seed=0, backend="triton", **SAMPLING[samp])
    for v in (32, V):
        t, ids, q = inputs(B, v, dtype, with_q)
        if v == V:
            with count_launches() as recs:
                out = specops.verify_block(target_logits=t, draft_token_ids=ids, draft_probs=q,
                                           **kw)
        else:
            specops.verify_block(target_logits=t, draft_token_ids=ids.clamp(max=31),
                                 draft_probs=q, **kw)
    assert out.num_accepted.eq(K).all() and out.token_ids[:, K].eq(V // 2).all(), out
    return recs


# ----------------------------------------------------------------------------- fit, model
def _bilinear(points, values):
    """Least squares v = a + b B + c V + d B V -> (coef, max relative error)."""
    X = np.array([[1.0, b, v, b * v] for b, v in points])
    y = np.array(values, dtype=float)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    err = np.abs(X @ coef - y) / np.maximum(np.abs(y), 1.0)
    return coef, float(err.max())


def _programs_model(points, progs):
    """Grid size as c, c*B, c*ceil(V/C) or c*B*ceil(V/C) (C a power of 2) -> (formula, f)."""
    cands = [("%d", lambda b, v, c, C: c), ("%d*B", lambda b, v, c, C: c * b)]
    cands += [(f"%d*ceil(V/{C})", lambda b, v, c, C: c * -(-v // C)) for C in (2 ** i for i in range(4, 21))]
    cands += [(f"%d*B*ceil(V/{C})", lambda b, v, c, C: c * b * -(-v // C)) for C in (2 ** i for i in range(4, 21))]
    for fmt, f in cands:
        C = int(fmt.split("/")[1].rstrip(")")) if "/" in fmt else 1
        unit = f(*points[0], 1, C)
        c = progs[0] // max(unit, 1)
        if all(f(b, v, c, C) == p for (b, v), p in zip(points, progs)):
            return fmt % c, lambda b, v, f=f, c=c, C=C: f(b, v, c, C)
    return None, None


def model(runs):
    """runs: {(B, V): [Launch]} at one setting -> (predict(B, V) -> per-launch dicts, fit
    notes).  Launches are matched by position; the sequence must not change with B or V."""
    pts = sorted(runs)
    names = [[r.kernel for r in runs[p]] for p in pts]
    if any(n != names[0] for n in names):
        raise RuntimeError(f"launch sequence depends on B or V: {names}")
    fits = []
    for i, name in enumerate(names[0]):
        col = {f: [getattr(runs[p][i], f) for p in pts] for f in ("loaded", "stored", "busiest")}
        fit = {f: _bilinear(pts, vals) for f, vals in col.items()}
        formula, prog = _programs_model(pts, [runs[p][i].programs for p in pts])
        fits.append((name, fit, formula, prog))

    def predict(B, V):
        out = []
        for name, fit, formula, prog in fits:
            row = {f: max(0.0, float(np.dot(c, [1, B, V, B * V]))) for f, (c, _) in fit.items()}
            row.update(kernel=name, programs=prog(B, V) if prog else float("nan"))
            out.append(row)
        return out
    return predict, fits


def timing(launches, floor, launch_us):
    """us: per launch, max(HBM time, busiest program at PER_SM_BW), plus launch costs."""
    t = sum(max((r["loaded"] + r["stored"]) / HBM_BW, r["busiest"] / PER_SM_BW)
            for r in launches)
    return t * 1e6 + len(launches) * launch_us


def floor_bytes(B, V, dtype, with_q):
    return B * (K + 1) * V * (2 if dtype == "bf16" else 4) + (B * K * V * 4 if with_q else 0)


# ----------------------------------------------------------------------------- the report
FULL_POINTS = [(1, 2048), (2, 2048), (4, 2048), (1, 4096), (2, 4096), (1, 8192)]
QUICK_POINTS = [(1, 1024), (2, 1024), (1, 2048), (2, 2048)]


def _signature(recs):
    return [(r.kernel, r.grid) for r in recs]


def pipelines_for(choice):
    """'both' -> fused and split if SPECOPS_TRITON_PIPELINE changes the launches, else the
    current path alone (None: the variable left unset)."""
    if choice != "both":
        return [choice]
    sig = {p: _signature(measure(1, 2048, SETTINGS[0], p)) for p in ("fused", "split")}
    return ["fused", "split"] if sig["fused"] != sig["split"] else [None]


def _job(p, s, points):
    """One (pipeline, setting) in a worker process -> {(B, V): [Launch]}."""
    torch.set_num_threads(1)           # the workers share the cores
    if p is None:
        os.environ.pop("SPECOPS_TRITON_PIPELINE", None)
    out = {pt: measure(*pt, s, p) for pt in points}
    for recs in out.values():
        for r in recs:
            r.per_program = {}         # not needed past measure, and large to pickle
    return out


def run(quick=False, pipeline="both", workers=None):
    """-> {pipeline: {setting: {(B, V): [Launch]}}}; settings in parallel processes (the
    interpreter is single-threaded Python)."""
    import concurrent.futures as cf
    import multiprocessing as mp
    from bench import gpu_model as me  # jobs pickle by module name, also under python -m
    points = QUICK_POINTS if quick else FULL_POINTS
    settings = SETTINGS[:1] if quick else SETTINGS
    saved = os.environ.get("SPECOPS_TRITON_PIPELINE")
    try:
        pipes = pipelines_for("fused" if quick and pipeline == "both" else pipeline)
    finally:
        if saved is None:
            os.environ.pop("SPECOPS_TRITON_PIPELINE", None)
        else:
            os.environ["SPECOPS_TRITON_PIPELINE"] = saved
    cost = {"top_p=0.9": 0, "top_k=50": 1, "T=1": 2}        # slowest first: even finish
    jobs = sorted(((p, s) for p in pipes for s in settings), key=lambda j: cost[j[1][2]])
    workers = workers or (1 if quick else min(len(jobs), os.cpu_count() or 1))
    if workers == 1:
        done = [me._job(p, s, points) for p, s in jobs]
    else:
        with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            done = list(pool.map(me._job, *zip(*[(p, s, points) for p, s in jobs])))
    got = dict(zip(jobs, done))
    return {p: {s: got[p, s] for s in settings} for p in pipes}


def _name(s):
    dtype, with_q, samp = s
    return f"{dtype} {'q' if with_q else 'no-q'} {samp}"


def _mb(x):
    return f"{x / 1e6:.3f}"


def report(results, seconds, argv):
    L = [f"# Bandwidth model of the Triton backend (H200, no GPU used)", "",
         f"Made by `python -m bench.gpu_model {' '.join(argv)}` in {seconds:.0f} s "
         f"(Triton interpreter, CPU).", "",
         f"Constants: HBM {HBM_BW / 1e12} TB/s, {N_SM} SMs, PER_SM_BW {PER_SM_BW / 1e9:.0f} GB/s "
         "(an ASSUMPTION: one H100/H200 SM streams roughly 40-60 GB/s), launch "
         f"{LAUNCH_US} us eager / {GRAPH_LAUNCH_US} us under CUDA-graph replay; K = {K}, "
         f"V = {V_REAL}, temperature 1.0, vocabulary tile SPECOPS_TRITON_BLOCK_V = "
         f"{GPU_BLOCK_V} (the GPU's).", "",
         "Counted per launch: programs; bytes of active lanes loaded / stored (masked lanes "
         "free, atomics = load + store); the busiest program's bytes.  Torch ops specops runs "
         "during the call that would be device kernels on CUDA count as launches (0 bytes).",
         "Workload: every draft accepted (all K+1 target rows and K draft rows visited) and "
         "the bonus token at V/2 (the draw's second pass stops there).",
         "floor = target logits + draft probs read once.  implied time = sum over launches "
         "of max(bytes / HBM, busiest program / PER_SM_BW) + launches x launch cost.", ""]
    aims = {}
    for p, per_setting in results.items():
        pname = p or "current (SPECOPS_TRITON_PIPELINE not honoured)"
        L += [f"## Pipeline: {pname}", "", "### Measured points and the bilinear fit "
              "(a + bB + cV + dBV per launch)", "",
              "| setting | B | V | Triton launches: programs | torch ops | bytes | fit err "
              "| busiest | fit err |", "|---|---|---|---|---|---|---|---|---|"]
        table, formulas = [], {}
        for s, runs in per_setting.items():
            predict, fits = model(runs)
            formulas[s] = [(n, f) for n, _, f, _ in fits if not n.startswith("torch:")]
            for (B, V), recs in sorted(runs.items()):
                pred = predict(B, V)
                tot = sum(r.loaded + r.stored for r in recs)
                ptot = sum(r["loaded"] + r["stored"] for r in pred)
                bus = max(r.busiest for r in recs)
                pbus = max(r["busiest"] for r in pred)
                tri = ", ".join(f"{r.kernel} {r.programs}" for r in recs
                                if not r.kernel.startswith("torch:"))
                ops = " ".join(r.kernel[6:] for r in recs if r.kernel.startswith("torch:"))
                L.append(f"| {_name(s)} | {B} | {V} | {tri} | {ops or '-'} | {tot} | "
                         f"{abs(ptot - tot) / tot:.1e} | {bus} | {abs(pbus - bus) / bus:.1e} |")
            for B in BATCHES:
                pred = predict(B, V_REAL)
                fl = floor_bytes(B, V_REAL, s[0], s[1])
                n_tri = sum(not r["kernel"].startswith("torch:") for r in pred)
                tot = sum(r["loaded"] + r["stored"] for r in pred)
                bus = max(r["busiest"] for r in pred)
                widest = max(r["programs"] for r in pred)
                table.append((s, B, n_tri, len(pred) - n_tri, widest, tot / fl,
                              bus / (fl / N_SM), timing(pred, fl, LAUNCH_US),
                              timing(pred, fl, GRAPH_LAUNCH_US), fl / HBM_BW * 1e6))
        L += ["", "Programs per Triton launch (exact fit over every point, per setting):", ""]
        for s, fs in formulas.items():
            L.append(f"- {_name(s)}: " + "; ".join(f"{n}: {f or 'NO MODEL'}" for n, f in fs))
        L += ["", f"### Extrapolated to V = {V_REAL}", "",
              "| setting | B | launches (Triton + torch) | programs, widest launch | total / floor "
              "| busiest / (floor/132) | implied us (eager) | implied us (graph) | floor us |",
              "|---|---|---|---|---|---|---|---|---|"]
        for s, B, nt, no, w, rt, rb, te, tg, tf in table:
            L.append(f"| {_name(s)} | {B} | {nt + no} ({nt} + {no}) | {w} | {rt:.2f} | {rb:.1f} "
                     f"| {te:.1f} | {tg:.1f} | {tf:.1f} |")
        aims[pname] = _aims(table)
    L += ["", "## Aims (issue)", ""]
    for pname, lines in aims.items():
        L += [f"{pname}:", ""] + lines + [""]
    return "\n".join(L) + "\n"


def _aims(table):
    def line(what, rows, ok, val, fmt, worst=max):
        bad = [r for r in rows if not ok(r)]
        worst = worst(rows, key=val)
        return (f"- {what}: {'MET' if not bad else 'NOT MET'} (worst {fmt % val(worst)} at "
                f"{_name(worst[0])} B={worst[1]}; {len(bad)}/{len(rows)} rows miss)")
    return [line("total <= 1.25x floor", table, lambda r: r[5] <= 1.25, lambda r: r[5], "%.2fx"),
            line("busiest program <= 2x even share for B >= 8", [r for r in table if r[1] >= 8],
                 lambda r: r[6] <= 2, lambda r: r[6], "%.1fx"),
            line(">= 132 programs in the widest launch at B=1", [r for r in table if r[1] == 1],
                 lambda r: r[4] >= N_SM, lambda r: r[4], "%d programs", min),
            line("<= 6 launches per call (Triton + torch)", table, lambda r: r[2] + r[3] <= 6,
                 lambda r: r[2] + r[3], "%d")]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one setting, tiny V; no report file")
    ap.add_argument("--pipeline", choices=("fused", "split", "both"), default="both")
    a = ap.parse_args(argv)
    t0 = time.time()
    results = run(a.quick, a.pipeline)
    text = report(results, time.time() - t0, argv)
    if not a.quick:
        os.makedirs(os.path.dirname(OUT), exist_ok=True)
        with open(OUT, "w") as f:
            f.write(text)
    print(text)
    return results


if __name__ == "__main__":
    main()
