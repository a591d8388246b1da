"""What the CPU benchmark suites share (``python -m bench``: the random suite,
``bench/random_suite.py``; the real suite, ``bench/real.py``; the tree section,
``bench/bench_tree.py``): the settings, the inputs, the alternating timer, one table row
against the floor and the peers, its formatting, the measurements beside the aims and the
report header.
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import time

import torch

import specops
from bench import _cli, peers

SETTINGS = {
    "greedy": dict(temperature=0.0),
    "t0.8": dict(temperature=0.8),
    "t0.8+top_p0.95": dict(temperature=0.8, top_p=0.95),
    "top_k50": dict(temperature=1.0, top_k=50),
}


# Draft = target logits + DRAFT_NOISE * N(0, 1): at temperature 0.8 that gives
# alpha = sum min(p, q) ~ 0.75 per position and a greedy drafter agreeing with the target's
# argmax ~ 55% of the time (measured: noise 0.3 / 0.5 / 0.7 -> alpha 0.85 / 0.75 / 0.66),
# the range engines report for real draft models.
DRAFT_NOISE = 0.5


def make_inputs(B, K, V, dtype=torch.float32, noise=DRAFT_NOISE, seed=0):
    """Target logits with a realistic spread; the draft is the target plus noise."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(B, K + 1, V, generator=g) * 2.0
    draft_logits = target[:, :K] + noise * torch.randn(B, K, V, generator=g)
    return target.to(dtype), draft_logits


def draft_side(draft_logits, setting, g):
    """Draft tokens sampled from the draft distribution q (a greedy drafter's argmax for the
    greedy setting), so acceptance is what a real draft model would give."""
    q = peers._transform(draft_logits, setting.get("temperature") or 1.0,
                         setting.get("top_k", 0), setting.get("top_p", 1.0),
                         setting.get("min_p", 0.0))
    B, K, V = q.shape
    if setting.get("temperature") == 0:
        ids = draft_logits.argmax(-1)
    else:
        ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    return q.contiguous(), ids


SLOW_S = 0.25      # a callable slower than this (the eager and HF peers at large shapes) ...
SLOW_REPS = 3      # ... is timed in the first SLOW_REPS rounds only, to keep the suite < 3 min


def timeit(fns: dict, reps: int, stat=statistics.median):
    """Median seconds of each callable, calls alternating between them (round-robin, so slow
    drifts of a shared machine hit every callable alike)."""
    times = {k: [] for k in fns}
    slow = set()
    for k, fn in fns.items():               # warm-up, which also finds the slow peers
        t0 = time.perf_counter()
        fn()
        if time.perf_counter() - t0 > SLOW_S:
            slow.add(k)
    for r in range(reps):
        for k, fn in fns.items():
            if k in slow and r >= SLOW_REPS:
                continue
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: stat(v) for k, v in times.items()}


def run_config(B, K, V, setting_name, reps, with_hf=False, with_ref=False, noise=DRAFT_NOISE,
               backend="cpu", inputs=None, settings=SETTINGS):
    """One table row. ``inputs=(target [B, K+1, V], draft_logits [B, K, V])`` replaces the
    random logits (the real suite); ``settings`` maps ``setting_name`` to its parameters."""
    setting = settings[setting_name]
    g = torch.Generator().manual_seed(1)
    target, draft_logits = inputs if inputs is not None else make_inputs(B, K, V, noise=noise)
    q, ids = draft_side(draft_logits, setting, g)
    seed = torch.arange(B)
    offset = torch.zeros(B, dtype=torch.int64)
    spec_kw = dict(seed=seed, offset=offset, **setting)
    fns = {
        "floor": lambda: peers.floor(target, q),
        "specops": lambda: specops.verify_block(target, ids, q, backend=backend, **spec_kw),
        "eager": lambda: peers.eager_verify(target, ids, q, generator=g, **{
            "temperature": setting.get("temperature", 1.0), "top_k": setting.get("top_k", 0),
            "top_p": setting.get("top_p", 1.0), "min_p": setting.get("min_p", 0.0)}),
    }
    if with_hf and peers.hf_available() and setting_name in ("t0.8",):
        fns["hf"] = lambda: peers.hf_verify(target, ids, draft_logits,
                                            setting.get("temperature") or 1.0)
    res = timeit(fns, reps)
    if with_ref:
        res.update(timeit({"reference": lambda: specops.verify_block(
            target, ids, q, backend="reference", **spec_kw)}, 1))
    out = specops.verify_block(target, ids, q, backend=backend, **spec_kw)
    res["accepted"] = float(out.num_accepted.float().mean())
    res["rows_read"] = float((out.num_accepted.float() + 1).clamp(max=K + 1).mean())
    res["bytes"] = target.numel() * target.element_size() + q.numel() * 4
    # what any exact verifier must read: every entry of the target rows up to the sampled one
    # (the softmax normaliser, or the argmax, needs the whole row)
    res["must_read"] = B * res["rows_read"] * V * target.element_size()
    return res


def fmt_row(name, B, K, V, res):
    f = res["floor"]
    s = res["specops"]
    cells = [name, str(B), str(K), str(V), f"{s * 1e3:.3f}", f"{f * 1e3:.3f}", f"{s / f:.2f}",
             f"{res['eager'] / s:.1f}"]
    cells.append(f"{res['hf'] / s:.1f}" if "hf" in res else "-")
    cells.append(f"{res['reference'] / s:.0f}" if "reference" in res else "-")
    cells.append(f"{res['bytes'] / s / 1e9:.1f}")
    cells.append(f"{res['accepted']:.2f}")
    return "| " + " | ".join(cells) + " |"


HEADER = ("| setting | B | K | V | specops ms | floor ms | x floor | eager/specops | hf/specops "
          "| ref/specops | input GB/s | mean accepted |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")


TARGETS = (  # (setting, max x floor, min eager/specops or None): the aims at this shape
    ("greedy", 1.5, None), ("t0.8", 2.0, 20.0), ("t0.8+top_p0.95", 4.0, 100.0))


def against_aims(rows, targets=TARGETS):
    """The headline rows' ratios beside the aims they are read against (a measurement, not a
    pass / fail: the aims are the project's, the machine is whatever ran)."""
    out = ["Against the aims (same run):", ""]
    for name, max_floor, min_eager in targets:
        if name not in rows:
            continue
        r = rows[name]
        xf, xe = r["specops"] / r["floor"], r["eager"] / r["specops"]
        aim = f"<= {max_floor}x floor" + (f", >= {min_eager:.0f}x eager" if min_eager else "")
        out.append(f"- {name}: {xf:.2f}x floor" + (f", {xe:.0f}x eager" if min_eager else "")
                   + f" (aims {aim})")
        if min_eager and "must_read" in r:
            # the same run's floor bandwidth bounds every verifier, so it bounds the ratio
            bw = r["bytes"] / r["floor"]
            t_min = r["must_read"] / bw
            out.append(f"  - read bound: the target rows an exact verifier must read in full "
                       f"({r['must_read'] / 1e6:.1f} MB) take {t_min * 1e3:.3f} ms at the "
                       f"floor's {bw / 1e9:.1f} GB/s, so no verifier is more than "
                       f"{r['eager'] / t_min:.0f}x eager here")
    return out


RESULTS = _cli.RESULTS


def _isa():
    """The C++ path's active SIMD level (SPECOPS_CPU_ISA or the best this CPU runs)."""
    from specops.backends import native
    build = native.build()
    return build["isa"] or "unavailable"


def header(emit, title, prog, argv, backend, reps):
    """Command, date, machine, torch and threads: the top of every CPU report."""
    cpu_model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    emit(f"# {title}")
    emit()
    emit(f"- command: `{_cli.command(prog, argv)}`")
    emit(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    emit(f"- machine: {os.cpu_count()} cores, {cpu_model}, {platform.platform()}")
    emit(f"- torch {torch.__version__}, threads {torch.get_num_threads()}, specops backend "
         f"`{backend}` (C++ SIMD level {_isa()}), medians of {reps} alternating repetitions")
    emit("- ratios: `x floor` = specops / (torch sum over target logits + draft probs); "
         "`eager/specops`, `hf/specops`, `ref/specops` = peer time / specops time")
    emit()
