"""GPU check of the specops Triton backend (run by bench/gpu_check.sh on a CUDA machine).

1. Bitwise agreement with the numpy reference at large V (a few rows: the reference is slow):
   sampling_probs (probabilities compared bit for bit), verify (token ids, num_accepted,
   valid) for full / point-mass / draft-logits drafts and greedy / temperature / top-p / top-k
   / min-p, and the accept / residual-sample views (verify on probabilities, its forced mode).
2. Tree verification (specops.verify_tree): bitwise agreement of backend="triton" with
   backend="reference" on CPU copies at V = 128256 and 151936, B = 4, the 16-node tree of
   bench/bench_tree.py, fp32 / bf16 logits, rsd / mss / point-mass drafts, greedy and
   temperature 0.8 + top-p 0.95; and its time (rsd, temperature 0.8, B = 32, V = 128256)
   beside the chain with as many target rows (verify_block, K = 15) and the HBM floor.
3. Timings at the DESIGN.md section 6 reference shapes, in one run, side by side: the Triton
   verify, a batched torch-eager verifier (softmax, sort-based top-p, gather, rand, residual,
   multinomial), and the HBM floor: a device-to-device copy of the same bytes (target logits
   + draft probs) and a torch sum over both.  sampling_probs and the accept / residual-sample
   views (verify on probabilities, its forced mode) are timed at a subset of shapes.

Prints a short table last and writes the full results (markdown) to --out.
Everything is bounded by --budget-s, in shares (the end of each as a fraction of it):
bitwise 0.35, tree bitwise 0.50 and its timing 0.58, per-op timings 0.70, the shapes 1.0
(--no-tree: bitwise 0.40, per-op 0.55, as before the tree part).  Checks and shapes left
when a share runs out are listed as skipped (a check started in time runs to its end).
Exit status 1 if any bitwise check (tree included) failed.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback

SMOKE = "--smoke" in sys.argv     # CPU smoke test of this script under the interpreter
os.environ["TRITON_INTERPRET"] = "1" if SMOKE else "0"   # compiled kernels on the GPU
DEVICE = "cpu" if SMOKE else "cuda"

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from specops import reference as R  # noqa: E402
from specops.backends import reference as RB  # noqa: E402
from specops.backends import triton as TB  # noqa: E402
from bench.bench_tree import TREE16  # noqa: E402

SETTINGS = {
    "greedy": dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0),
    "t0.8": dict(temp=0.8, top_k=0, top_p=1.0, min_p=0.0),
    "t0.8+p0.95": dict(temp=0.8, top_k=0, top_p=0.95, min_p=0.0),
    "k50": dict(temp=1.0, top_k=50, top_p=1.0, min_p=0.0),
}
EXTRA_BITWISE_SETTINGS = {
    "all": dict(temp=0.7, top_k=200, top_p=0.9, min_p=0.01),
}
VOCABS = (32000, 128256, 151936)
BATCHES = (1, 8, 32, 64)
DRAFTS = (1, 4, 8)

LOG = []


def log(msg=""):
    print(msg, flush=True)
    LOG.append(msg)


# ----------------------------------------------------------------------------- inputs
def canon(B, K, V, setting, *, dtype=torch.bfloat16, mode="probs", seed=0, device=DEVICE):
    """Canonical verify arguments (padded layout) on `device`."""
    g = torch.Generator(device=device).manual_seed(seed)
    s = SETTINGS.get(setting) or EXTRA_BITWISE_SETTINGS[setting]
    target = (torch.randn((B * (K + 1), V), generator=g, device=device) * 3).to(dtype)
    tv = target.view(B, K + 1, V)
    dl = (tv[:, :K].float() + 0.7 * torch.randn((B, K, V), generator=g, device=device))
    q = torch.softmax(dl, -1).reshape(B * K, V).contiguous()
    ids = torch.multinomial(q, 1, generator=g).reshape(-1) if K else \
        torch.zeros(0, dtype=torch.int64, device=device)
    if K:   # half the drafts are the target's argmax: acceptance is common even when greedy
        am = tv[:, :K].float().argmax(-1).reshape(-1)
        coin = torch.rand(am.shape, generator=g, device=device) < 0.5
        ids = torch.where(coin, am, ids)
    inv = torch.from_numpy(R.inv_temperature(np.full(B, s["temp"], np.float32))).to(device)
    a = dict(target=target, target_is_probs=False,
             target_row_start=torch.arange(B, device=device, dtype=torch.int64) * (K + 1),
             draft_ids=ids.to(torch.int64),
             draft_row_start=torch.arange(B, device=device, dtype=torch.int64) * K,
             num_draft=torch.full((B,), K, dtype=torch.int64, device=device),
             draft=q, draft_is_probs=True, inv_temp=inv,
             top_k=torch.full((B,), s["top_k"], dtype=torch.int64, device=device),
             top_p=torch.full((B,), s["top_p"], dtype=torch.float32, device=device),
             min_p=torch.full((B,), s["min_p"], dtype=torch.float32, device=device),
             seed=torch.randint(-(2 ** 62), 2 ** 62, (B,), generator=g, device=device),
             offset=torch.randint(0, 2 ** 40, (B,), generator=g, device=device), max_k=K)
    if mode == "point":
        a["draft"] = None
    elif mode == "draft_logits":
        a["draft"] = dl.reshape(B * K, V).to(dtype).contiguous()
        a["draft_is_probs"] = False
    return a


def to_cpu(a):
    return {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}


# ----------------------------------------------------------------------------- bitwise
def bitwise_checks(budget_end):
    rows = []
    fails = 0

    def record(name, ok, detail=""):
        nonlocal fails
        rows.append((name, "equal" if ok else "DIFFERENT", detail))
        if not ok:
            fails += 1
        log(f"  {'ok  ' if ok else 'FAIL'} {name} {detail}")

    for V in sorted(VOCABS, reverse=True):          # the largest vocabulary first
        for dtype in (torch.bfloat16, torch.float32, torch.float16):
            if time.time() > budget_end:
                log("  bitwise: budget exhausted, rest skipped")
                return rows, fails
            dn = str(dtype).replace("torch.", "")
            # sampling_probs: 2 rows per setting, probabilities bit for bit
            names = list(SETTINGS) + list(EXTRA_BITWISE_SETTINGS)
            n = 2 * len(names)
            g = torch.Generator(device=DEVICE).manual_seed(V)
            logits = (torch.randn((n, V), generator=g, device=DEVICE) * 3).to(dtype)
            logits[1, :: 7] = -float("inf")
            allset = {**SETTINGS, **EXTRA_BITWISE_SETTINGS}
            temps = np.repeat([allset[s]["temp"] for s in names], 2).astype(np.float32)
            inv = torch.from_numpy(R.inv_temperature(temps))
            k = torch.tensor(np.repeat([allset[s]["top_k"] for s in names], 2))
            tp = torch.tensor(np.repeat([allset[s]["top_p"] for s in names], 2),
                              dtype=torch.float32)
            mp = torch.tensor(np.repeat([allset[s]["min_p"] for s in names], 2),
                              dtype=torch.float32)
            try:
                pg, vg = TB.sampling_probs(logits, inv.to(DEVICE), k.to(DEVICE), tp.to(DEVICE), mp.to(DEVICE))
                pr, vr = RB.sampling_probs(logits.cpu(), inv, k, tp, mp)
                pg = pg.cpu()
                diff = (pg.view(torch.int32) != pr.view(torch.int32))
                ok = bool(torch.equal(vg.cpu(), vr)) and not diff.any()
                detail = "" if ok else (f"{int(diff.sum())} elements in rows "
                                        f"{sorted(set(diff.nonzero()[:, 0].tolist()))[:8]}; "
                                        f"max |diff| {float((pg - pr).abs().max()):.3e}")
                record(f"sampling_probs V={V} {dn} ({', '.join(names)})", ok, detail)
            except Exception as exc:   # noqa: BLE001
                record(f"sampling_probs V={V} {dn}", False, f"error {exc!r}")
                traceback.print_exc()
            if dtype == torch.float16:
                continue
            for mode in ("probs", "point", "draft_logits"):
                for setting in names:
                    if time.time() > budget_end:
                        break
                    a = canon(3, 2, V, setting, dtype=dtype, mode=mode, seed=V + len(setting))
                    try:
                        ref = RB.verify(**to_cpu(a))
                        ok = True
                        for path in ("split", "fused"):
                            os.environ["SPECOPS_TRITON_PIPELINE"] = path
                            got = [t.cpu() for t in TB.verify(**a)]
                            ok &= all(torch.equal(x, y) for x, y in zip(got, ref))
                        os.environ["SPECOPS_TRITON_PIPELINE"] = "auto"
                        # block verification and the acceptance rates (NaN where not read)
                        for method in ("block", "token"):
                            ref_m = RB.verify(**to_cpu(a), method=method, want_rates=True)
                            got_m = [t.cpu() for t in TB.verify(**a, method=method,
                                                                want_rates=True)]
                            ok &= all(torch.equal(x.nan_to_num(-7), y.nan_to_num(-7))
                                      for x, y in zip(got_m, ref_m))
                        detail = "" if ok else f"triton {got[0].tolist()} ref {ref[0].tolist()}"
                        record(f"verify (token, block, rates) V={V} {dn} {mode} {setting}", ok,
                               detail)
                    except Exception as exc:   # noqa: BLE001
                        record(f"verify V={V} {dn} {mode} {setting}", False, f"error {exc!r}")
                        traceback.print_exc()
        # the accept / residual-sample views: verify on probabilities, then its forced mode
        a = canon(4, 3, V, "t0.8+p0.95", dtype=torch.float32, mode="probs", seed=V)
        p, _ = RB.sampling_probs(a["target"].cpu(), torch.full((16,), 1.25),
                                 torch.zeros(16, dtype=torch.int64), torch.full((16,), 0.95),
                                 torch.zeros(16))
        for has_q in (True, False):
            views = dict(to_cpu(a), target=p, target_is_probs=True,
                         draft=a["draft"].cpu() if has_q else None, draft_is_probs=True,
                         inv_temp=torch.tensor([1.0, 0.0, 1.0, 1.0]),
                         top_k=torch.zeros(4, dtype=torch.int64), top_p=torch.ones(4),
                         min_p=torch.zeros(4))
            on_dev = {k2: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v)
                      for k2, v in views.items()}
            name = f"verify+forced (probability views) V={V} {'q' if has_q else 'point'}"
            try:
                ref = RB.verify(**views)
                got = [t.cpu() for t in TB.verify(**on_dev)]
                forced = torch.tensor([0, 1, 3, -1])
                ref_f = RB.verify(**views, forced_num_accepted=forced)
                got_f = [t.cpu() for t in TB.verify(**on_dev,
                                                    forced_num_accepted=forced.to(DEVICE))]
                ok = all(torch.equal(x, y) for x, y in zip(got + got_f, list(ref) + list(ref_f)))
                record(name, ok, "" if ok else f"triton {got[0].tolist()} {got_f[0].tolist()} "
                                               f"ref {ref[0].tolist()} {ref_f[0].tolist()}")
            except Exception as exc:   # noqa: BLE001
                record(name, False, f"error {exc!r}")
                traceback.print_exc()
    return rows, fails


# ----------------------------------------------------------------------------- tree verification
# TREE16: bench/bench_tree.py's 16-node tree (depth 4): 4 root children, then 2, 2, 1, 1 ...
TREE_DEPTH = 4
TREE_VOCABS = (128256, 151936)
TREE_B = 4                     # requests per bitwise check
TREE_TIMING = (32, 128256)     # (B, V) of the tree vs chain timing
# (target dtype, draft mode): the compiled variant each new entry costs first, most telling first
TREE_VARIANTS = ((torch.float32, "rsd"), (torch.bfloat16, "rsd"), (torch.float32, "point"),
                 (torch.float32, "mss"), (torch.bfloat16, "point"), (torch.bfloat16, "mss"))
TREE_SETTINGS = ("greedy", "t0.8+p0.95")


def tree_case(B, V, setting, *, dtype=torch.float32, mode="rsd", seed=0, device=DEVICE,
              parents=TREE16):
    """verify_tree keyword arguments on `device`: target logits [B, 16, V] (x3 normals),
    draft probs softmax(logits + 0.7 noise) ("point": none), children drafted from their
    parent's draft row without replacement (rsd, point) or i.i.d. (mss); the first child of
    each node is the target's argmax with probability 1/2 (acceptance is common even when
    greedy; under rsd it can duplicate a sibling: the skip rule)."""
    g = torch.Generator(device=device).manual_seed(seed)
    s = SETTINGS[setting]
    N = len(parents)
    logits = torch.randn((B, N, V), generator=g, device=device) * 3
    q = torch.softmax(logits + 0.7 * torch.randn((B, N, V), generator=g, device=device), -1)
    target = logits.to(dtype)
    am = target.float().argmax(-1)
    ids = torch.zeros((B, N), dtype=torch.int64, device=device)
    for c in range(N):
        kids = [n for n in range(1, N) if parents[n] == c]
        if not kids:
            continue
        draws = torch.multinomial(q[:, c], len(kids), replacement=mode == "mss", generator=g)
        coin = torch.rand((B,), generator=g, device=device) < 0.5
        draws[:, 0] = torch.where(coin, am[:, c], draws[:, 0])
        ids[:, kids] = draws
    return dict(target_logits=target, node_token_ids=ids,
                parent_ids=torch.tensor(parents, device=device).expand(B, N).contiguous(),
                draft_probs=None if mode == "point" else q.contiguous(),
                method="mss" if mode == "mss" else "rsd", temperature=s["temp"],
                top_k=s["top_k"], top_p=s["top_p"], min_p=s["min_p"],
                seed=torch.randint(-(2 ** 62), 2 ** 62, (B,), generator=g, device=device),
                offset=torch.randint(0, 2 ** 40, (B,), generator=g, device=device),
                max_depth=TREE_DEPTH)


def drafted_tree(B, V, temperature=0.8, seed=0, device=DEVICE, parents=TREE16):
    """bench_tree.tree_inputs built on `device` (its construction; that one takes ~30 s on a
    CPU at B=32, V=128256): target logits 2 x normals, draft probs softmax((target + noise) /
    T), children from their parent's draft row by specops.sample_without_replacement ->
    verify_tree keyword arguments (rsd, T, seeds 0..B-1, offset 0, as bench_tree times)."""
    import specops
    from bench._harness import DRAFT_NOISE
    g = torch.Generator(device=device).manual_seed(seed)
    N = len(parents)
    target = torch.randn((B, N, V), generator=g, device=device) * 2.0
    q = torch.softmax((target + DRAFT_NOISE * torch.randn((B, N, V), generator=g,
                                                           device=device)) / temperature, -1)
    ids = torch.zeros((B, N), dtype=torch.int64, device=device)
    for c in range(N):
        kids = [n for n in range(1, N) if parents[n] == c]
        if kids:
            ids[:, kids] = specops.sample_without_replacement(
                q[:, c], len(kids), seed=torch.arange(B, device=device) * 131 + c)
    return dict(target_logits=target, node_token_ids=ids,
                parent_ids=torch.tensor(parents, device=device).expand(B, N).contiguous(),
                draft_probs=q.contiguous(), method="rsd", temperature=temperature,
                seed=torch.arange(B, device=device), offset=0, max_depth=TREE_DEPTH)


def tree_agreement(kw):
    """specops.verify_tree(backend="triton") on kw's device against backend="reference" on
    CPU copies -> (equal, detail): token_ids, num_accepted, accepted_nodes, valid bit for
    bit."""
    import specops
    got = [t.cpu() for t in specops.verify_tree(**kw, backend="triton")]
    ref = specops.verify_tree(**to_cpu(kw), backend="reference")
    ok = all(torch.equal(x, y) for x, y in zip(got, ref))
    detail = (f"accepted {ref[1].tolist()}" if ok else
              f"triton {got[0].tolist()} nodes {got[2].tolist()} ref {ref[0].tolist()} nodes "
              f"{ref[2].tolist()}")
    return ok, detail


def tree_precompile():
    """Compile the TREE_VARIANTS' kernels at once: a tiny verify_tree call each, in threads
    (Triton's compile releases the GIL: ~10 s per variant, in parallel on the GPU host's
    cores).  Sequential under the interpreter (its state is global).  Errors are only
    logged: the checks compile what is missing on their first call."""
    import concurrent.futures as cf
    import specops

    def one(variant):
        dt, mode = variant
        out = specops.verify_tree(**tree_case(1, 64, "t0.8", dtype=dt, mode=mode),
                                  backend="triton")
        if not SMOKE:
            torch.cuda.synchronize()
        return out
    t0 = time.time()
    try:
        with cf.ThreadPoolExecutor(1 if SMOKE else len(TREE_VARIANTS)) as pool:
            list(pool.map(one, TREE_VARIANTS))
        log(f"  tree kernels compiled ({len(TREE_VARIANTS)} variants): {time.time() - t0:.1f} s")
    except Exception as exc:   # noqa: BLE001
        log(f"  tree precompile: error {exc!r} ({time.time() - t0:.1f} s); compiling on demand")
        traceback.print_exc()


def tree_bitwise(budget_end):
    """Bitwise agreement of verify_tree, variant by variant (compiled at once first, else
    each first call compiles one); what the budget leaves is listed as skipped."""
    rows, fails, skipped = [], 0, []
    if time.time() < budget_end:
        tree_precompile()
    todo = [(dt, mode, V, setting) for dt, mode in TREE_VARIANTS for V in TREE_VOCABS
            for setting in TREE_SETTINGS]
    for i, (dt, mode, V, setting) in enumerate(todo):
        dn = str(dt).replace("torch.", "")
        if time.time() > budget_end:
            skipped = [f"{str(d).replace('torch.', '')} {m} V={v} {s}"
                       for d, m, v, s in todo[i:]]
            log(f"  tree bitwise: budget exhausted, {len(skipped)} checks skipped")
            break
        name = f"verify_tree V={V} B={TREE_B} {dn} {mode} {setting}"
        try:
            ok, detail = tree_agreement(tree_case(TREE_B, V, setting, dtype=dt, mode=mode,
                                                  seed=V + 17 * len(rows)))
        except Exception as exc:   # noqa: BLE001
            ok, detail = False, f"error {exc!r}"
            traceback.print_exc()
        rows.append((name, "equal" if ok else "DIFFERENT", detail))
        fails += not ok
        log(f"  {'ok  ' if ok else 'FAIL'} {name} {detail}")
    return rows, fails, skipped


def tree_timing(budget_end):
    """verify_tree (rsd, t0.8: fp32 logits, fp32 draft probs; bench_tree's drafted trees) at
    B, 16 nodes, V = TREE_TIMING beside the chain with as many target rows (verify_block,
    K = 15, auto pipeline) and the HBM floor (a device copy of the same bytes; a torch sum
    over both tensors) -> rows (what, ms, mean accepted); entries the budget leaves are
    missing.  Then mss and point-mass drafts on the same trees."""
    import specops
    B, V = TREE_TIMING
    if time.time() > budget_end:
        log("  tree timing: budget exhausted, skipped")
        return [], 0
    kw = drafted_tree(B, V)
    N, K = len(TREE16), len(TREE16) - 1
    target, q = kw["target_logits"], kw["draft_probs"]
    g = torch.Generator(device=DEVICE).manual_seed(12)
    chain_q = q[:, :K].contiguous()
    chain_ids = torch.multinomial(chain_q.reshape(-1, V), 1, generator=g).reshape(B, K)
    chain_kw = dict(temperature=0.8, seed=kw["seed"], offset=kw["offset"], backend="triton")
    nbytes = target.numel() * target.element_size() + q.numel() * q.element_size()
    src = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    point = dict(kw, draft_probs=None)
    mss = dict(kw, method="mss")
    fns = [("tree rsd", lambda: specops.verify_tree(**kw, backend="triton"),
            lambda: specops.verify_tree(**kw, backend="triton")[1]),
           ("chain K=15 (verify_block)",
            lambda: specops.verify_block(target, chain_ids, chain_q, **chain_kw),
            lambda: specops.verify_block(target, chain_ids, chain_q, **chain_kw).num_accepted),
           ("floor: copy of the bytes", lambda: dst.copy_(src), None),
           ("floor: sum of both tensors", lambda: (target.sum(), q.sum()), None),
           ("tree mss", lambda: specops.verify_tree(**mss, backend="triton"),
            lambda: specops.verify_tree(**mss, backend="triton")[1]),
           ("tree point-mass", lambda: specops.verify_tree(**point, backend="triton"),
            lambda: specops.verify_tree(**point, backend="triton")[1])]
    rows = []
    for what, fn, acc in fns:
        if time.time() > budget_end:
            log(f"  tree timing: budget exhausted, {what} and after skipped")
            break
        try:
            ms = cuda_time(fn)
            mean = float(acc().float().mean()) if acc is not None else None
            rows.append((what, ms, mean))
            log(f"  B={B} N={N} V={V} {what:28s} {ms:8.3f} ms" +
                ("" if mean is None else f"  mean accepted {mean:.2f}"))
        except Exception as exc:   # noqa: BLE001
            log(f"  tree timing {what}: error {exc!r}")
            traceback.print_exc()
    del src, dst
    return rows, nbytes


def tree_markdown(bit_rows, skipped, timing_rows, nbytes):
    B, V = TREE_TIMING
    md = ["", "## Tree verification (specops.verify_tree, reference section 11)\n",
          f"Bitwise: backend=\"triton\" on the device against backend=\"reference\" on CPU "
          f"copies (token_ids, num_accepted, accepted_nodes, valid), B = {TREE_B}, the 16-node "
          f"tree `{list(TREE16)}` (max_depth {TREE_DEPTH}), draft probs softmax(logits + "
          "noise) (point: none), the first child the target's argmax half the time.\n",
          "| check | result | detail |", "|---|---|---|"]
    md += [f"| {n} | {r} | {d} |" for n, r, d in bit_rows]
    if skipped:
        md += ["", f"Skipped (time budget): {len(skipped)} checks: " + ", ".join(skipped)]
    md += ["", f"Timing: B = {B}, 16 nodes, V = {V}, fp32 logits + fp32 draft probs, "
           "temperature 0.8, bench_tree.tree_inputs' drafted trees (built on the device); "
           "mss and point-mass on the same trees; the chain (verify_block, K = 15) has the same 16 target rows "
           f"and 15 draft rows; the floor moves the {nbytes / 2 ** 20:.1f} MiB of target logits "
           "and draft probs of all 16 nodes (copy: read + write; sum: read once).  "
           "Model: bench/results/gpu_model_tree.md.\n",
           "| what | ms | x copy | x sum | mean accepted |", "|---|---|---|---|---|"]
    ref = {w: ms for w, ms, _ in timing_rows}
    copy, tsum = ref.get("floor: copy of the bytes"), ref.get("floor: sum of both tensors")
    ratio = lambda ms, base: f"{ms / base:.2f}" if base else "-"   # noqa: E731
    md += [f"| {w} | {ms:.3f} | {ratio(ms, copy)} | {ratio(ms, tsum)} | "
           f"{'-' if acc is None else f'{acc:.2f}'} |" for w, ms, acc in timing_rows]
    if not timing_rows:
        md += ["| (skipped: time budget) | - | - | - | - |"]
    return md


# ----------------------------------------------------------------------------- eager verifier
def eager_verify(logits, ids, q, temp, top_k, top_p, greedy):
    """What an engine writes without specops (batched torch eager, padded layout)."""
    B, K1, V = logits.shape
    K = K1 - 1
    if greedy:
        am = logits.argmax(-1)
        acc = am[:, :K] == ids
        nacc = acc.to(torch.int32).cumprod(-1).sum(-1)
        return nacc, am.gather(1, nacc[:, None].long())
    x = logits.float() / temp
    if top_k > 0:
        kth = x.topk(top_k, -1).values[..., -1:]
        x = x.masked_fill(x < kth, -float("inf"))
    p = x.softmax(-1)
    if top_p < 1.0:
        s, i = p.sort(-1, descending=True)
        c = s.cumsum(-1)
        s = s.masked_fill((c - s) > top_p, 0.0)
        p = torch.zeros_like(p).scatter_(-1, i, s)
        p = p / p.sum(-1, keepdim=True)
    py = p[:, :K].gather(-1, ids[..., None])[..., 0]
    qy = q.gather(-1, ids[..., None])[..., 0]
    u = torch.rand((B, K), device=logits.device)
    acc = u * qy < py
    nacc = acc.to(torch.int32).cumprod(-1).sum(-1).long()
    prow = p.gather(1, nacc[:, None, None].expand(B, 1, V))[:, 0]
    qrow = q.gather(1, nacc.clamp(max=K - 1)[:, None, None].expand(B, 1, V))[:, 0]
    r = (prow - qrow).clamp_min(0)
    r = torch.where((nacc == K)[:, None], prow, r)
    r = torch.where(r.sum(-1, keepdim=True) > 0, r, prow)
    return nacc, torch.multinomial(r, 1)


def cuda_time(fn, min_reps=3, max_reps=20, target_s=0.05):
    if SMOKE:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - t0
    reps = int(max(min_reps, min(max_reps, target_s / max(one, 1e-6))))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps      # ms


def timings(budget_end):
    rows, skipped = [], []
    shapes = [(V, B, K, s) for V in VOCABS for B in BATCHES for K in DRAFTS for s in SETTINGS]
    # most informative first (K = 4, B in {1, 64}), so a short budget still covers every V
    shapes.sort(key=lambda c: (c[2] != 4, c[1] not in (1, 64), c[2], c[1]))
    for V, B, K, setting in shapes:
        if time.time() > budget_end:
            skipped.append((V, B, K, setting))
            continue
        try:
            rows.append(time_one(V, B, K, setting))
            r = rows[-1]
            log(f"  V={V:6d} B={B:2d} K={K} {setting:11s} triton {r['triton']:8.3f} "
                f"ms  eager {r['eager']:8.3f} ms  copy {r['copy']:7.3f} ms")
        except Exception as exc:   # noqa: BLE001
            log(f"  V={V} B={B} K={K} {setting}: error {exc!r}")
            traceback.print_exc()
        if not SMOKE:
            torch.cuda.empty_cache()
    rows.sort(key=lambda r: (r["V"], r["B"], r["K"], list(SETTINGS).index(r["setting"])))
    return rows, skipped


def time_one(V, B, K, setting):
    s = SETTINGS[setting]
    a = canon(B, K, V, setting, dtype=torch.bfloat16, mode="probs", seed=B * 31 + K)
    nbytes = a["target"].numel() * a["target"].element_size() + \
        a["draft"].numel() * a["draft"].element_size()
    src = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    r = dict(V=V, B=B, K=K, setting=setting, MB=nbytes / 2 ** 20)
    r["copy"] = cuda_time(lambda: dst.copy_(src))
    r["sum"] = cuda_time(lambda: (a["target"].sum(dtype=torch.float32), a["draft"].sum()))
    r["triton"] = cuda_time(lambda: TB.verify(**a))
    for path in ("split", "fused"):              # both Triton paths, whatever auto picks
        os.environ["SPECOPS_TRITON_PIPELINE"] = path
        r[path] = cuda_time(lambda: TB.verify(**a))
    os.environ["SPECOPS_TRITON_PIPELINE"] = "auto"
    r["block"] = cuda_time(lambda: TB.verify(**a, method="block"))
    lg = a["target"].view(B, K + 1, V)
    ids = a["draft_ids"].view(B, K)
    q = a["draft"].view(B, K, V)
    r["eager"] = cuda_time(lambda: eager_verify(lg, ids, q, s["temp"], s["top_k"], s["top_p"],
                                                s["temp"] == 0))
    del src, dst
    return r


def op_timings(budget_end):
    rows = []
    for V in VOCABS:
        for B in BATCHES:
            if time.time() > budget_end:
                return rows
            K = 4
            a = canon(B, K, V, "t0.8+p0.95", dtype=torch.bfloat16, mode="probs", seed=7)
            N = a["target"].shape[0]
            rowp = lambda t: t.repeat_interleave(K + 1)[:N]   # noqa: E731
            probs_args = (a["target"], rowp(a["inv_temp"]), rowp(a["top_k"]), rowp(a["top_p"]),
                          rowp(a["min_p"]))
            p, _ = TB.sampling_probs(*probs_args)
            ones = torch.ones(B, device=DEVICE)
            views = dict(a, target=p, target_is_probs=True, draft_is_probs=True, inv_temp=ones,
                         top_k=torch.zeros(B, dtype=torch.int64, device=DEVICE), top_p=ones,
                         min_p=torch.zeros(B, device=DEVICE))
            nacc = TB.verify(**views)[1]
            src = torch.empty(N * V * 2, dtype=torch.uint8, device=DEVICE)
            dst = torch.empty_like(src)
            r = dict(V=V, B=B, K=K)
            r["copy_logits"] = cuda_time(lambda: dst.copy_(src))
            r["sampling_probs"] = cuda_time(lambda: TB.sampling_probs(*probs_args))
            r["accept"] = cuda_time(lambda: TB.verify(**views))      # the accept view
            r["residual_sample"] = cuda_time(lambda: TB.verify(**views, forced_num_accepted=nacc))
            try:
                import specops
                vb = specops.verify_block
                tl3 = a["target"].view(B, K + 1, V)
                kw = dict(draft_token_ids=a["draft_ids"].view(B, K),
                          draft_probs=a["draft"].view(B, K, V), temperature=0.8, top_p=0.95,
                          seed=a["seed"], offset=a["offset"], backend="triton")
                r["verify_block_api"] = cuda_time(lambda: vb(tl3, **kw))
            except Exception as exc:   # noqa: BLE001
                r["verify_block_api"] = float("nan")
                log(f"  verify_block(backend='triton') not timed: {exc!r}")
            rows.append(r)
            log(f"  V={V:6d} B={B:2d} K={K} sampling_probs {r['sampling_probs']:.3f} ms accept "
                f"{r['accept']:.3f} ms residual {r['residual_sample']:.3f} ms api "
                f"{r['verify_block_api']:.3f} ms (copy of the logits {r['copy_logits']:.3f} ms)")
            del src, dst
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gpu.md"))
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--tests-log", default=None)
    ap.add_argument("--quick", action="store_true", help="V=32000 only, B in {1, 64}")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on CPU (interpreter)")
    ap.add_argument("--no-tree", action="store_true", help="skip the tree verification part")
    args = ap.parse_args()
    global VOCABS, BATCHES, DRAFTS, TREE_VOCABS, TREE_TIMING
    if args.quick:
        VOCABS, BATCHES, DRAFTS = (32000,), (1, 64), (4,)
        TREE_VOCABS, TREE_TIMING = (32000,), (32, 32000)
    if args.smoke:
        VOCABS, BATCHES, DRAFTS = (1000,), (1, 2), (1, 2)
        TREE_VOCABS, TREE_TIMING = (1000,), (2, 1000)
    t_start = time.time()
    end = t_start + args.budget_s
    if not SMOKE and not torch.cuda.is_available():
        log("gpu_bench: no CUDA device visible to torch")
        return 2
    import triton
    dev_name = "CPU (interpreter smoke test)" if SMOKE else torch.cuda.get_device_name(0)
    env = (f"{dev_name}; torch {torch.__version__} (CUDA "
           f"{torch.version.cuda}); triton {triton.__version__}; python "
           f"{platform.python_version()}")
    log(f"[gpu_bench] {env}")
    at = lambda frac: t_start + frac * args.budget_s     # noqa: E731
    tree_share = not args.no_tree
    log("[gpu_bench] 1/4 bitwise agreement with the numpy reference (large V) ...")
    bit_rows, fails = bitwise_checks(at(0.35 if tree_share else 0.40))
    log(f"[gpu_bench] bitwise: {len(bit_rows) - fails}/{len(bit_rows)} equal "
        f"({time.time() - t_start:.0f} s)")
    tree_rows, tree_fails, tree_skipped, tree_times, tree_bytes = [], 0, [], [], 0
    if tree_share:
        log("[gpu_bench] 2/4 tree verification: bitwise agreement, then timing ...")
        tree_rows, tree_fails, tree_skipped = tree_bitwise(at(0.50))
        log(f"[gpu_bench] tree bitwise: {len(tree_rows) - tree_fails}/{len(tree_rows)} equal, "
            f"{len(tree_skipped)} skipped ({time.time() - t_start:.0f} s)")
        try:
            tree_times, tree_bytes = tree_timing(at(0.58))
        except Exception as exc:   # noqa: BLE001
            log(f"  tree timing: error {exc!r}")
            traceback.print_exc()
        if not SMOKE:
            torch.cuda.empty_cache()
    else:
        log("[gpu_bench] 2/4 tree verification: skipped (--no-tree)")
    log("[gpu_bench] 3/4 per-op timings ...")
    op_rows = op_timings(at(0.70 if tree_share else 0.55))
    log("[gpu_bench] 4/4 verify timings at the reference shapes ...")
    rows, skipped = timings(end)
    log(f"[gpu_bench] done in {time.time() - t_start:.0f} s")

    md = [f"# specops Triton backend on GPU\n", f"{env}\n",
          f"Run {time.strftime('%Y-%m-%d %H:%M:%S')}, {time.time() - t_start:.0f} s.\n",
          "## Bitwise agreement with the numpy reference\n",
          "| check | result | detail |", "|---|---|---|"]
    md += [f"| {n} | {r} | {d} |" for n, r, d in bit_rows]
    if tree_share:
        md += tree_markdown(tree_rows, tree_skipped, tree_times, tree_bytes)
    md += ["", "## Per-op timings (bf16 logits, temperature 0.8 + top_p 0.95, K = 4)\n",
           "| V | B | sampling_probs ms | accept ms | residual_sample ms | verify_block(api) ms |"
           " copy of logits ms |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['V']} | {r['B']} | {r['sampling_probs']:.3f} | {r['accept']:.3f} | "
           f"{r['residual_sample']:.3f} | {r['verify_block_api']:.3f} | {r['copy_logits']:.3f} |"
           for r in op_rows]
    md += ["", "## verify vs torch eager vs HBM floor (bf16 logits + fp32 draft probs)\n",
           "floor = device-to-device copy of the same bytes (reads and writes them); sum = "
           "torch sum over both tensors (reads once).\n",
           "block = method=\"block\" (one program per request, every row read).\n",
           "| V | B | K | setting | MB | triton ms | split ms | fused ms | block ms | eager ms | "
           "copy ms | sum ms | triton/copy | eager/copy | eager/triton |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['V']} | {r['B']} | {r['K']} | {r['setting']} | {r['MB']:.1f} | "
           f"{r['triton']:.3f} | {r['split']:.3f} | {r['fused']:.3f} | {r['block']:.3f} | "
           f"{r['eager']:.3f} | "
           f"{r['copy']:.3f} | {r['sum']:.3f} | "
           f"{r['triton'] / r['copy']:.2f} | {r['eager'] / r['copy']:.2f} | "
           f"{r['eager'] / r['triton']:.2f} |" for r in rows]
    if skipped:
        md += ["", f"Skipped (time budget): {len(skipped)} shapes: " +
               ", ".join(f"V={v} B={b} K={k} {s}" for v, b, k, s in skipped)]
    if args.tests_log and os.path.exists(args.tests_log):
        md += ["", "## CUDA test subset (tail)\n", "```", open(args.tests_log).read()[-4000:],
               "```"]
    md += ["", "## Log\n", "```"] + LOG + ["```", ""]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(md))

    # short table last
    print("\n=== specops Triton on GPU: summary ===")
    print(f"bitwise checks: {len(bit_rows) - fails}/{len(bit_rows)} equal"
          + ("" if not fails else "  <-- MISMATCHES, see results file"))
    if tree_share:
        print(f"tree bitwise checks: {len(tree_rows) - tree_fails}/{len(tree_rows)} equal"
              + (f", {len(tree_skipped)} skipped" if tree_skipped else "")
              + ("" if not tree_fails else "  <-- MISMATCHES, see results file"))
        print("tree timing (B={}, V={}): ".format(*TREE_TIMING) + (", ".join(
            f"{w} {ms:.3f} ms" for w, ms, _ in tree_times) or "skipped"))
    print(f"{'V':>6} {'B':>3} {'K':>2} {'setting':11} {'triton':>9} {'eager':>9} {'copy':>8} "
          f"{'tri/copy':>8} {'eager/tri':>9}")
    for r in rows:
        if r["K"] == 4 and r["B"] in (1, 64):
            print(f"{r['V']:6d} {r['B']:3d} {r['K']:2d} {r['setting']:11} {r['triton']:8.3f}m "
                  f"{r['eager']:8.3f}m {r['copy']:7.3f}m {r['triton'] / r['copy']:8.2f} "
                  f"{r['eager'] / r['triton']:9.2f}")
    if skipped:
        print(f"({len(skipped)} shapes skipped for time)")
    print(f"full results: {args.out}")
    return 1 if fails or tree_fails else 0


if __name__ == "__main__":
    sys.exit(main())
