"""The random-logits suite of ``python -m bench`` (``--suite random``, results/cpu.md): the
targets at B=32, K=4, V=128256, the design's reference shapes, block verification and the
acceptance rates, the tree section (``bench/bench_tree.py``), the latency case and the
scaling with the acceptance rate.  Draft = target logits + noise (``_harness.make_inputs``).
"""
from __future__ import annotations

import sys
import time
from typing import Optional, Tuple

import torch

import specops
from bench import bench_tree, peers
from bench import _cli
from bench._harness import (DRAFT_NOISE, HEADER, SETTINGS, against_aims, draft_side, fmt_row,
                            header, make_inputs, run_config, timeit)


def run_methods(B, K, V, setting_name, reps, noise=DRAFT_NOISE):
    """Token-wise, block verification and token-wise with accept_rates on the same inputs,
    beside the floor (block reads every row: its floor is the same full read)."""
    setting = SETTINGS[setting_name]
    g = torch.Generator().manual_seed(1)
    target, draft_logits = make_inputs(B, K, V, noise=noise)
    q, ids = draft_side(draft_logits, setting, g)
    kw = dict(seed=torch.arange(B), offset=torch.zeros(B, dtype=torch.int64), **setting)
    fns = {
        "floor": lambda: peers.floor(target, q),
        "token": lambda: specops.verify_block(target, ids, q, backend="cpu", **kw),
        "block": lambda: specops.verify_block(target, ids, q, method="block", backend="cpu",
                                              **kw),
        "rates": lambda: specops.verify_block(target, ids, q, return_accept_rates=True,
                                              backend="cpu", **kw),
    }
    res = timeit(fns, reps)
    for m in ("token", "block"):
        out = specops.verify_block(target, ids, q, method=m, backend="cpu", **kw)
        res[f"accepted_{m}"] = float(out.num_accepted.float().mean())
    return res


METHODS_HEADER = ("| setting | B | K | V | floor ms | token ms | block ms | rates ms | token x "
                  "floor | block x floor | rates x floor | block / token | accepted token | "
                  "accepted block |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def fmt_methods(name, B, K, V, r):
    f = r["floor"]
    return (f"| {name} | {B} | {K} | {V} | {f * 1e3:.2f} | {r['token'] * 1e3:.2f} | "
            f"{r['block'] * 1e3:.2f} | {r['rates'] * 1e3:.2f} | {r['token'] / f:.2f} | "
            f"{r['block'] / f:.2f} | {r['rates'] / f:.2f} | {r['block'] / r['token']:.2f} | "
            f"{r['accepted_token']:.2f} | {r['accepted_block']:.2f} |")


def latency_case(reps):
    """B=1, K=4, V=32000: the whole Python-to-result call, and how much of it is dispatch.

    Rows, each timed alone (same inputs): the public call; its argument checks
    (``specops._args.prepare``); the registered op ``specops::verify`` (torch.library.Library
    schema + kernel); the same backend body behind a ``torch.library.custom_op`` (the
    registration it replaced, for comparison); the backend function (marshalling + kernel, no
    dispatcher: what eager calls run); the native kernel alone (the C++ backend's kernel on
    pre-marshalled fields)."""
    B, K, V = 1, 4, 32000
    setting = SETTINGS["t0.8"]
    g = torch.Generator().manual_seed(2)
    target, dl = make_inputs(B, K, V)
    q, ids = draft_side(dl, setting, g)
    seed, offset = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    from specops import _args
    from specops.backends import cpu as cpu_backend
    from specops.ops import verify_op
    call = dict(target_logits=target, draft_token_ids=ids, draft_probs=q, temperature=0.8,
                seed=seed, offset=offset)
    a = _args.prepare(**call).to_op_tensors()
    custom = _custom_op_twin()
    fields, keep, _ = cpu_backend.verify(*a.op_args(), native=dict)  # keep: its tensors
    kernel = cpu_backend._C.verify        # the C++ backend's kernel, on the fields it built

    def native():
        kernel(**fields)

    fns = {
        "verify_block (public call)": lambda: specops.verify_block(
            target, ids, q, temperature=0.8, seed=seed, offset=offset, backend="cpu"),
        "argument checks only (specops._args.prepare)": lambda: _args.prepare(**call),
        "op specops::verify (torch.library.Library)": lambda: verify_op(
            *a.op_args(), "token", False, False, None, "cpu"),
        "same body as torch.library.custom_op (replaced)": lambda: custom(*a.op_args(),
                                                                          backend="cpu"),
        "backend function (what eager calls use; no dispatcher)": lambda: cpu_backend.verify(
            *a.op_args()),
        "native kernel only (_C.verify)": native,
    }
    med = timeit(fns, reps)
    best = timeit(fns, reps, stat=min)
    floor = timeit({"floor": lambda: peers.floor(target, q)}, reps)["floor"]
    return med, best, floor


_TWIN = []


def _custom_op_twin():
    """The verify body registered with torch.library.custom_op (what specops used before)."""
    if _TWIN:
        return _TWIN[0]
    from specops.backends import registry

    @torch.library.custom_op("specops_bench::verify_custom_op", mutates_args=(),
                             device_types=("cpu",))
    def twin(target: torch.Tensor, target_is_probs: bool, target_row_start: torch.Tensor,
             draft_ids: torch.Tensor, draft_row_start: torch.Tensor, num_draft: torch.Tensor,
             draft: Optional[torch.Tensor], draft_is_probs: bool, inv_temp: torch.Tensor,
             top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
             seed: torch.Tensor, offset: torch.Tensor, max_k: int, backend: str
             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = registry.load(backend).verify(
            target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
            draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k)
        return tuple(out[:3])

    _TWIN.append(twin)
    return twin


def scaling(reps):
    """Time vs acceptance rate (rows touched) at B=32, K=8, V=32000, t0.8."""
    rows = []
    for noise in (0.0, 0.3, 0.5, 1.0, 3.0, 10.0):
        res = run_config(32, 8, 32000, "t0.8", reps, noise=noise)
        rows.append((noise, res))
    return rows


def _fit(xs, ys):
    """Least-squares line y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def scaling_note(sweep_v, sweep_b, sweep_k, sweep_a):
    """How time grows with V, B, K and the acceptance rate, from this run's numbers."""
    out = ["## Scaling note (t0.8, computed from the tables above)", ""]
    if sweep_v:
        per = ", ".join(f"V={V}: {r['specops'] / (32 * r['rows_read'] * V) * 1e9:.2f}"
                        for V, r in sweep_v)
        out.append(f"- **V** (B=32, K=4): ns per token per target row read (time / (32 x "
                   f"rows read per request x V)): {per}.")
    if sweep_b:
        per = ", ".join(f"B={B}: {r['specops'] / B * 1e3:.3f}" for B, r in sweep_b)
        out.append(f"- **B** (K=4, V=128256): ms per request: {per}. Requests are spread over "
                   f"the threads (dynamic schedule, one request at a time): B=1 runs on one "
                   f"core, larger B on all of them.")
    if sweep_k:
        per = ", ".join(f"K={K}: {r['specops'] * 1e3:.2f} ms ({r['specops'] / r['floor']:.2f}x "
                        f"floor, {r['rows_read']:.2f} rows/request)" for K, r in sweep_k)
        out.append(f"- **K** (B=32, V=128256): {per}. specops reads only the rows up to the "
                   f"first rejection (early exit) while the floor reads all K+1 target and K "
                   f"draft rows, so the ratio to the floor falls as K grows at a fixed "
                   f"acceptance rate.")
    if len(sweep_a) >= 2:
        xs = [r["rows_read"] for _, r in sweep_a]
        ys = [r["specops"] * 1e3 for _, r in sweep_a]
        a, b = _fit(xs, ys)
        out.append(f"- **Acceptance** (B=32, K=8, V=32000): time = {a:.2f} ms + {b:.3f} ms x "
                   f"(target rows read per request) (least squares over the {len(xs)} points "
                   f"above, from {min(xs):.2f} to {max(xs):.2f} rows): each accepted draft "
                   f"costs one more full target row (transform + accept test; the draft row is "
                   f"read at one entry only), the final row adds the residual/bonus draw.")
    return out


def run(args, out, argv):
    """The random-logits suite (draft = target + noise), written to ``out`` ("" writes no
    file).  ``args``: ``quick``, ``reps``, ``backend``, ``plot``."""
    reps = args.reps
    t_begin = time.time()
    lines = []

    def emit(s=""):
        print(s, flush=True)
        lines.append(s)

    header(emit, "specops CPU benchmark", "python -m bench", argv, args.backend, reps)
    emit("## Targets: B=32, K=4, V=128256, fp32 logits + fp32 draft probs")
    emit()
    emit(HEADER)
    main_rows = {}
    names = [n for n in SETTINGS if not args.quick or n in QUICK_SETTINGS]
    for i, name in enumerate(names):
        progress(f"{name} at B=32, K=4, V=128256 ({i + 1}/{len(names)})", t_begin)
        res = run_config(32, 4, 128256, name, reps, with_hf=not args.quick,
                         with_ref=not args.quick)
        main_rows[name] = res
        emit(fmt_row(name, 32, 4, 128256, res))
    emit()
    for line in against_aims(main_rows):
        emit(line)
    emit()
    if args.quick:                         # the headline table only
        finish(emit, lines, out, t_begin)
        return
    emit("## Reference shapes (the design's benchmark shapes)")
    emit()
    emit(HEADER)
    sweep_v, sweep_b, sweep_k = [], [], []
    shapes = [(32, 4, V) for V in (32000, 128256, 151936)]
    shapes += [(B, 4, 128256) for B in (1, 8, 64)]
    shapes += [(32, K, 128256) for K in (1, 8)]
    for B, K, V in shapes:
        for name in SETTINGS:
            if (B, K, V) == (32, 4, 128256) and name in main_rows:
                res = main_rows[name]
            else:
                progress(f"{name} at B={B}, K={K}, V={V}", t_begin)
                res = run_config(B, K, V, name, max(5, reps - 2), with_hf=(B == 1))
            emit(fmt_row(name, B, K, V, res))
            if name == "t0.8" and (B, K) == (32, 4):
                sweep_v.append((V, res))
            if name == "t0.8" and (K, V) == (4, 128256):
                sweep_b.append((B, res))
            if name == "t0.8" and (B, V) == (32, 128256):
                sweep_k.append((K, res))
    emit()
    emit("## Block verification and acceptance rates (reference sections 9-10)")
    emit()
    emit("`block`: `method=\"block\"` (reads every row of the block, no early exit); `rates`: "
         "token-wise with `return_accept_rates=True` (the whole draft row at every position "
         "read).  Same inputs as above: draft = target + noise, drafts sampled from q.")
    emit()
    emit(METHODS_HEADER)
    mshapes = [(32, 4, 128256), (32, 4, 32000), (8, 4, 128256), (32, 8, 32000)]
    block_main = None
    for B, K, V in mshapes:
        for name in ("greedy", "t0.8", "t0.8+top_p0.95") if (B, K, V) == (32, 4, 128256) \
                else ("t0.8",):
            progress(f"methods, {name} at B={B}, K={K}, V={V}", t_begin)
            r = run_methods(B, K, V, name, max(5, reps - 2))
            emit(fmt_methods(name, B, K, V, r))
            if (B, K, V, name) == (32, 4, 128256, "t0.8"):
                block_main = r
    if block_main is not None:
        xf = block_main["block"] / block_main["floor"]
        emit()
        emit(f"Block at B=32, K=4, V=128256, t0.8: {xf:.2f}x the floor (aim <= 3x).")
    emit()
    bench_tree.section(emit, max(5, reps - 2), args.backend)
    emit("## Latency case: B=1, K=4, V=32000, t0.8 (whole call vs its parts)")
    emit()
    emit("| what | median us | min us |")
    emit("|---|---|---|")
    med, best, lat_floor = latency_case(max(reps * 40, 200))
    for k, v in med.items():
        emit(f"| {k} | {v * 1e6:.1f} | {best[k] * 1e6:.1f} |")
    emit(f"| floor (sum of inputs, timed separately) | {lat_floor * 1e6:.1f} | - |")
    pub, nat = med["verify_block (public call)"], med["native kernel only (_C.verify)"]
    emit()
    emit(f"Dispatch overhead (public call - native kernel): {(pub - nat) * 1e6:.0f} us of "
         f"{pub * 1e6:.0f} us ({100 * (pub - nat) / pub:.0f}%).")
    emit()
    emit("## Scaling with the acceptance rate: B=32, K=8, V=32000, t0.8")
    emit()
    emit("| draft noise | mean accepted | rows read / request | specops ms | x floor |")
    emit("|---|---|---|---|---|")
    sweep_a = scaling(max(5, reps - 2))
    for noise, res in sweep_a:
        emit(f"| {noise} | {res['accepted']:.2f} | {res['rows_read']:.2f} | "
             f"{res['specops'] * 1e3:.3f} | {res['specops'] / res['floor']:.2f} |")
    emit()
    sweep_v.sort(key=lambda t: t[0])
    sweep_b.sort(key=lambda t: t[0])
    for line in scaling_note(sweep_v, sweep_b, sorted(sweep_k, key=lambda t: t[0]), sweep_a):
        emit(line)
    emit()
    finish(emit, lines, out, t_begin)
    if args.plot:
        plot(args.plot, sweep_v, sweep_b)


QUICK_SETTINGS = ("greedy", "t0.8", "t0.8+top_p0.95")


def progress(what, t_begin):
    """A line on stderr before each timed configuration (stdout holds the report)."""
    print(f"  [{time.time() - t_begin:5.0f} s] timing {what}", file=sys.stderr, flush=True)


def finish(emit, lines, out, t_begin):
    """The wall time, then the report file."""
    emit(f"Total wall time: {time.time() - t_begin:.0f} s")
    _cli.write(lines, out)


def plot(path, sweep_v, sweep_b):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, sweep, label in ((axes[0], sweep_v, "V (B=32, K=4)"),
                             (axes[1], sweep_b, "B (K=4, V=128256)")):
        if not sweep:
            continue
        xs = [x for x, _ in sweep]
        for key, style in (("specops", "o-"), ("floor", "k--"), ("eager", "s-")):
            ax.plot(xs, [r[key] * 1e3 for _, r in sweep], style, label=key)
        ax.set_xlabel(label)
        ax.set_ylabel("ms (median)")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title(f"t0.8: time vs {label.split()[0]}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")
