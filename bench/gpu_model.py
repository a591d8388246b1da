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
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import inspect  # noqa: E402
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
GPU_TILE = 1024          # the GPU's vocabulary tile (triton_kernels/_launch.py GPU_BLOCK_V)
RUN_TILE = 4096          # the tile measured with: 2-3x faster, the same bytes (see inputs)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "gpu_model.md")


@dataclasses.dataclass
class Launch:
    kernel: str
    grid: tuple = ()
    programs: int = 0
    loaded: int = 0
    stored: int = 0
    busiest: int = 0                 # loaded + stored of the busiest program
    rows: int = 0                    # loaded from the `rows` tensors (target, draft)
    per_program: dict = dataclasses.field(default_factory=dict, repr=False)


def _nbytes(ptrs, mask, ranges=()):
    """-> (bytes of the active lanes, of those inside one of the address ranges)."""
    size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)   # int1: a byte in memory
    active = np.ones(ptrs.data.shape, bool) if mask is None else np.broadcast_to(
        mask.data.astype(bool), ptrs.data.shape)
    inside = sum(int(np.count_nonzero(active & (ptrs.data >= lo) & (ptrs.data < hi)))
                 for lo, hi in ranges)
    return int(np.count_nonzero(active)) * size, inside * size


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
def count_launches(torch_ops=True, rows=()):
    """Yield a list that fills with one Launch per Triton launch (and per device-kernel torch
    op with torch_ops) in the block; loads from the tensors `rows` are also counted apart
    (the interpreter runs CPU tensors in place: their addresses are the kernels').  The
    interpreter is restored on exit."""
    records, state = [], {"in_kernel": False, "cur": None, "pid": None}
    ranges = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
              for t in rows if t is not None]
    B, G = I.InterpreterBuilder, I.GridExecutor
    saved = {(cls, n): getattr(cls, n) for cls, n in (
        (B, "create_masked_load"), (B, "create_masked_store"), (B, "create_atomic_cas"),
        (B, "create_atomic_rmw"), (B, "set_grid_idx"), (G, "__call__"))}

    def counted(name, ptr_at, mask_at, load, store):
        """The builder method `name`, counting its pointer / mask arguments' active lanes."""
        def method(self, *args, **kwargs):
            rec, pid = state["cur"], state["pid"]
            if rec is not None:
                n, inside = _nbytes(args[ptr_at], None if mask_at is None else args[mask_at],
                                    ranges)
                rec.rows += inside * load
                rec.loaded += n * load
                rec.stored += n * store
                rec.per_program[pid] = rec.per_program.get(pid, 0) + n * (load + store)
            return saved[(B, name)](self, *args, **kwargs)
        return method

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

    # create_load / create_store, atomic load / store and descriptor loads / stores all go
    # through the masked ones; an atomic is one load and one store of its active lanes
    patches = {(B, "create_masked_load"): counted("create_masked_load", 0, 1, 1, 0),
               (B, "create_masked_store"): counted("create_masked_store", 0, 2, 0, 1),
               (B, "create_atomic_cas"): counted("create_atomic_cas", 0, None, 1, 1),
               (B, "create_atomic_rmw"): counted("create_atomic_rmw", 1, 3, 1, 1),
               (B, "set_grid_idx"): set_grid_idx, (G, "__call__"): call}
    api, mode = sys.modules.get("specops._args"), None
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
SAMPLING = {"T=1": {}, "top_p=0.9": {"top_p": 0.9}, "top_k=50": {"top_k": 50}}
ALL_SETTINGS = [(dt, q, samp) for samp in SAMPLING for dt in ("fp32", "bf16")
                for q in (True, False)]
# a filter costs minutes in the interpreter: top-p with fp32 point-mass drafts (vLLM's usual
# case) by default; --all adds top-k (the same 8 radix rounds) and the other dtype / drafts
SETTINGS = ALL_SETTINGS[:4] + [("fp32", False, "top_p=0.9")]


def inputs(B, V, dtype, with_q, k=K):
    """Every draft accepted (the target boosts each draft token by 20, a draft with probs is
    flatter than the target), so every target row is read, and the bonus token at V/2 - 1.
    With V a multiple of 8192 that token ends a 4096-element chunk and tile: the fused
    draw's second pass reads exactly V/2 (as for a uniformly placed token), the split find
    its chunk in full, for any tile up to 4096, so RUN_TILE counts the GPU tile's bytes."""
    g = torch.Generator().manual_seed(1234)
    t = torch.randn(B, k + 1, V, generator=g)
    ids = torch.randint(0, V, (B, k), generator=g)
    t[:, :k].scatter_add_(2, ids[..., None], torch.full((B, k, 1), 20.0))
    t[:, k, V // 2 - 1] += 20.0
    q = torch.softmax(t[:, :k] / 2, -1) if with_q else None
    return t.to(torch.bfloat16 if dtype == "bf16" else torch.float32), ids, q


def gpu_chunk():
    """The split pipeline's vocabulary chunk on the GPU (the interpreter's default differs)."""
    try:
        from specops.backends import triton as TB
        return int(getattr(TB._K._launch, "GPU_CHUNK", 4096))
    except (ImportError, AttributeError):
        return 4096


@contextlib.contextmanager
def _env(**values):
    """Set environment variables (None: unset) for the block, then restore them: the test
    suite shares the process."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def measure(B, V, setting, pipeline=None, tile=RUN_TILE, k=K):
    """One verify call (after a tiny warm-up call that fills specops' parameter cache) ->
    its launch records.  Checks the walk went as planned.  pipeline None: the variable
    SPECOPS_TRITON_PIPELINE is unset (the launcher's default).  k: drafts per request."""
    import specops
    dtype, with_q, samp = setting
    kw = dict(temperature=1.0, seed=0, backend="triton", **SAMPLING[samp])
    if pipeline == "block":           # block verification: its own kernel, every row read
        kw["method"], pipeline = "block", None
    if "validate" in inspect.signature(specops.verify_block).parameters:
        kw["validate"] = False    # no host reads of values: the default for CUDA tensors
    # the launcher reads these variables per call; the GPU's chunk, not the interpreter's
    with _env(SPECOPS_TRITON_BLOCK_V=str(tile), SPECOPS_TRITON_CHUNK=str(gpu_chunk()),
              SPECOPS_TRITON_PIPELINE=pipeline):
        t, ids, q = inputs(B, 32, dtype, with_q, k)
        specops.verify_block(target_logits=t, draft_token_ids=ids, draft_probs=q, **kw)
        t, ids, q = inputs(B, V, dtype, with_q, k)
        with count_launches(rows=(t, q)) as recs:
            out = specops.verify_block(target_logits=t, draft_token_ids=ids, draft_probs=q,
                                       **kw)
    assert out.num_accepted.eq(k).all() and out.token_ids[:, k].eq(V // 2 - 1).all(), out
    return recs


# ----------------------------------------------------------------------------- fit, model
def _features(B, V, quad=True):
    """[1, B, V, BV] (+ BV**2: per-request reads of per-chunk partials, C programs x C
    partials per row, grow as V**2), V in units of 8192 for conditioning."""
    v = V / 8192
    return [1.0, B, v, B * v] + ([B * v * v] if quad else [])


def _fit(points, values, quad=True):
    """Least squares over _features -> (coef, max relative error at the points)."""
    X = np.array([_features(b, v, quad) for b, v in points])
    y = np.array(values, dtype=float)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    err = np.abs(X @ coef - y) / np.maximum(np.abs(y), 1.0)
    return coef, float(err.max())


def _programs_model(points, progs):
    """Grid size as c * B**i * ceil(V/C)**j (C a power of 2) fitted exactly -> (formula, f);
    else the rounded least-squares fit."""
    for C in [1] + [2 ** i for i in range(4, 21)]:
        for per_b in (False, True):
            def f(b, v, c=1, C=C, per_b=per_b):
                return c * (b if per_b else 1) * (-(-v // C) if C > 1 else 1)
            c = progs[0] // max(f(*points[0]), 1)
            if all(f(b, v, c) == p for (b, v), p in zip(points, progs)):
                return (f"{c}" + "*B" * per_b + (f"*ceil(V/{C})" if C > 1 else ""),
                        lambda b, v, f=f, c=c: f(b, v, c))
    coef, err = _fit(points, progs)
    return f"~fit (err {err:.0e})", lambda b, v: round(np.dot(coef, _features(b, v)))


def model(runs):
    """runs: {(B, V): [Launch]} at one setting -> (predict(B, V) -> per-launch dicts, fit
    notes).  Launches are matched by position; the sequence must not change with B or V."""
    pts = sorted(runs)
    names = [[r.kernel for r in runs[p]] for p in pts]
    if any(n != names[0] for n in names):
        raise RuntimeError(f"launch sequence depends on B or V: {names}")
    fits = []
    for i, name in enumerate(names[0]):
        fit = {f: _fit(pts, [getattr(runs[p][i], f) for p in pts])
               for f in ("loaded", "stored", "busiest", "rows")}
        formula, prog = _programs_model(pts, [runs[p][i].programs for p in pts])
        fits.append((name, fit, formula, prog))

    def predict(B, V):
        out = []
        for name, fit, formula, prog in fits:
            row = {f: max(0.0, float(np.dot(c, _features(B, V)))) for f, (c, _) in fit.items()}
            row.update(kernel=name, programs=prog(B, V))
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
FULL_POINTS = [(1, 8192), (2, 8192), (3, 8192), (1, 16384), (2, 16384), (1, 24576)]
QUICK_POINTS = FULL_POINTS[:2] + FULL_POINTS[3:]        # 5 points: the fit's 5 terms


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


def _run_jobs(fn, jobs, quick, workers=None):
    """fn(*job) for every job: in this process (quick, or one worker) or in spawned worker
    processes (fn must pickle by module name); a quick run raises on the first failure."""
    import concurrent.futures as cf
    import multiprocessing as mp
    workers = workers or (1 if quick else min(len(jobs), os.cpu_count() or 1))
    if workers == 1:
        done = [fn(*j) for j in jobs]
    else:
        with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            done = list(pool.map(fn, *zip(*jobs)))
    if quick and any(isinstance(r, str) for r in done):
        raise RuntimeError(done)
    return done


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


def _name(s):
    dtype, with_q, samp = s
    return f"{dtype} {'q' if with_q else 'no-q'} {samp}"


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


def _runs_of(names):
    """'a, b x8, c' for a list with consecutive repeats."""
    out = []
    for n in names:
        if out and out[-1][0] == n:
            out[-1][1] += 1
        else:
            out.append([n, 1])
    return ", ".join(n + (f" x{c}" if c > 1 else "") for n, c in out) or "-"


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
    L += ["", NOTES, "## Aims (issue)", ""] + aims
    return "\n".join(L)


def _aims(table):
    def line(what, rows, ok, val, fmt, worst=max):
        if not rows:
            return f"- {what}: no data"
        bad = [r for r in rows if not ok(r)]
        w = worst(rows, key=val)
        return (f"- {what}: {'MET' if not bad else 'NOT MET'} (worst {fmt % val(w)} at "
                f"{_name(w[0])} B={w[1]}; {len(bad)}/{len(rows)} rows miss)")
    return [line("total <= 1.25x floor", table, lambda r: r[5] <= 1.25, lambda r: r[5], "%.2fx"),
            line("(row reads alone <= 1.25x floor)", table, lambda r: r[6] <= 1.25,
                 lambda r: r[6], "%.2fx"),
            line("busiest program <= 2x even share for B >= 8", [r for r in table if r[1] >= 8],
                 lambda r: r[7] <= 2, lambda r: r[7], "%.2fx"),
            line(">= 132 programs in the widest launch at B=1", [r for r in table if r[1] == 1],
                 lambda r: r[4] >= N_SM, lambda r: r[4], "%d programs", min),
            line("<= 6 launches per call (Triton + torch)", table, lambda r: r[2] + r[3] <= 6,
                 lambda r: r[2] + r[3], "%d")]


# ----------------------------------------------------------------------------- tree verification
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
    from bench import gpu_model as me
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
        res = run_tree(a.quick, ALL_SETTINGS if a.all else None)
        text = report_tree(res, time.time() - t0, argv)
        if not a.quick:
            os.makedirs(os.path.dirname(TREE_OUT), exist_ok=True)
            with open(TREE_OUT, "w") as f:
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
