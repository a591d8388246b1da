"""The real-logits suite: ``python -m bench --suite real`` (results/cpu_real.md).

The random suite's tables (same columns, same timing, same peers) on blocks a language model
produced: SmolLM2-135M-Instruct's logits on 32 real prompts and a layer-truncated copy of it
as the draft (``bench/real_logits.py``; V = 49152, K = 4).  Real rows are peaked and
long-tailed, which random normal logits are not: a few tokens hold most of the mass (~55% of
the vocabulary sits more than 22 nats below the top), top-p 0.95 at T=0.8 keeps a median of 3
tokens (at most a few hundred) where on the random logits it keeps ~20% of the vocabulary,
and acceptance follows the model, not a noise level.

Then an acceptance check, which needs no timing: over several draws of the draft tokens, the
mean number of accepted drafts of specops, the torch-eager peer and (t0.8) Hugging Face's
``_speculative_sampling`` beside its exact expectation from the rows (given the rows, position
j accepts with probability alpha_j = sum_v min(p_j(v), q_j(v)) independently, so
E[accepted] = sum_k prod_{j<k} alpha_j), and how far the eager peer's transform is from
``specops.sampling_probs`` (it must compute the same distribution to be a fair peer).
"""
from __future__ import annotations

import time

import torch

import specops
from bench import _cli, _harness              # run_config, HEADER, fmt_row, ... (not a copy)
from bench import peers, real_logits

SETTINGS = {
    "greedy": dict(temperature=0.0),
    "t0.8": dict(temperature=0.8),
    "t0.8+top_p0.95": dict(temperature=0.8, top_p=0.95),
    "t0.8+top_k50": dict(temperature=0.8, top_k=50),
    "t0.8+min_p0.05": dict(temperature=0.8, min_p=0.05),
}
TARGETS = (  # (setting, max x floor, min eager/specops) at B=32, K=4, V=49152
    ("greedy", 0.5, 50.0), ("t0.8", 1.25, 25.0), ("t0.8+top_p0.95", 1.5, 100.0))
HEADLINE_B = 32
BATCHES = (1, 8, 64)
BATCH_SETTINGS = ("t0.8", "t0.8+top_p0.95")
ACCEPTANCE_DRAWS = 16      # x 64 blocks: one standard error of the mean accepted ~ 0.04


def _expected_accepted(target, draft_logits, name):
    """(mean alpha per position, E[accepted] per block averaged) for this setting's p and q."""
    s = SETTINGS[name]
    K = draft_logits.shape[1]
    if s["temperature"] == 0:                  # greedy drafter: accepted iff argmaxes agree
        a = (target[:, :K].argmax(-1) == draft_logits.argmax(-1)).float()
    else:
        p, _ = specops.sampling_probs(target[:, :K], **s)
        q = peers._transform(draft_logits, s["temperature"], s.get("top_k", 0),
                             s.get("top_p", 1.0), s.get("min_p", 0.0))
        a = torch.minimum(p, q).sum(-1)
    return float(a.mean()), float(a.cumprod(-1).sum(-1).mean())


def acceptance(target, draft_logits, draws, backend):
    """Mean accepted drafts of specops / eager / hf over ``draws`` independent draft draws."""
    B = target.shape[0]
    rows = {}
    for name, s in SETTINGS.items():
        kw = {k: s.get(k, d) for k, d in (("temperature", 1.0), ("top_k", 0), ("top_p", 1.0),
                                         ("min_p", 0.0))}
        acc = {"specops": [], "eager": [], "hf": []}     # per-block accepted counts
        for d in range(draws):
            g = torch.Generator().manual_seed(100 + d)
            q, ids = _harness.draft_side(draft_logits, s, g)
            out = specops.verify_block(target, ids, q, seed=torch.arange(B) + B * d,
                                       offset=torch.zeros(B, dtype=torch.int64),
                                       backend=backend, **s)
            acc["specops"].append(out.num_accepted.float())
            acc["eager"].append(peers.eager_verify(target, ids, q, generator=g, **kw)[1]
                                .float())
            if name == "t0.8" and peers.hf_available():
                torch.manual_seed(100 + d)     # HF draws from torch's global generator
                acc["hf"].append(torch.stack([n for _, n in peers.hf_verify(
                    target, ids, draft_logits, s["temperature"])]).float())
        a, expected = _expected_accepted(target, draft_logits, name)
        dp, support = 0.0, 0                   # greedy: both take the argmax
        if s["temperature"] != 0:
            p_spec, _ = specops.sampling_probs(target, **s)
            p_eager = peers._transform(target, s["temperature"], kw["top_k"], kw["top_p"],
                                       kw["min_p"])
            dp = float((p_eager - p_spec).abs().max())
            support = int(((p_eager > 0) != (p_spec > 0)).any(-1).sum())
        spec = torch.cat(acc["specops"])       # greedy is deterministic: no sampling error
        se = float(spec.std()) / spec.numel() ** 0.5 if s["temperature"] != 0 else None
        rows[name] = dict(alpha=a, expected=expected, dp=dp, support=support, se=se,
                          **{k: float(torch.cat(v).mean()) for k, v in acc.items() if v})
    return rows


def acceptance_table(emit, target, draft, draws, backend):
    """The acceptance check (module docstring), as a table."""
    n, K1, _ = target.shape
    emit(f"## Real logits: acceptance (all {n} blocks, {draws} draws of the draft tokens)")
    emit()
    emit("`alpha`: sum_v min(p, q) per position under the setting (greedy: how often the "
         "argmaxes agree); `expected`: sum_k prod_{j<k} alpha_j averaged over the blocks, "
         "exact for these rows; the measured means agree with it within sampling noise "
         "(`s.e.`: one standard error of the specops mean; greedy is deterministic).  Last "
         "two columns: the eager peer's transform against `specops.sampling_probs` on all "
         "target rows: torch's float32 softmax is ~1e-5 off a float64 one, and its float "
         "cumsum can move the top-p boundary token in a few rows (specops: integer masses, "
         "reference section 2).")
    emit()
    emit("| setting | alpha | expected accepted | specops | s.e. | eager | hf "
         f"| max abs(p_eager - p_specops) | rows whose support differs (of {n * K1}) |")
    emit("|---|---|---|---|---|---|---|---|---|")
    for name, r in acceptance(target, draft, draws, backend).items():
        hf = f"{r['hf']:.2f}" if "hf" in r else "-"
        se = f"{r['se']:.2f}" if r["se"] is not None else "-"
        emit(f"| {name} | {r['alpha']:.3f} | {r['expected']:.2f} | {r['specops']:.2f} | {se} | "
             f"{r['eager']:.2f} | {hf} | {r['dp']:.1e} | {r['support']} |")
    emit()


def section(emit, reps=7, backend="cpu", quick=False):
    blocks = real_logits.load_blocks()
    target, draft, meta = blocks["target"], blocks["draft_logits"], blocks["meta"]
    n, K1, V = target.shape
    K = K1 - 1
    emit(f"## Real logits: {meta['model_file']}, K={K}, V={V}, fp32 logits + fp32 draft probs")
    emit()
    emit(f"{n} blocks from {meta['prompts']} real prompts (two per prompt, inside a "
         f"{real_logits.NEW_TOKENS}-token continuation the model sampled at T=0.8); draft = "
         f"the first {meta['draft_layers']} of its {meta['layers']} layers (alpha = mean "
         f"sum min(p, q) at T=0.8: {meta['alpha']:.2f}); drafts sampled from q under each "
         f"setting (greedy: the draft's argmax).  B=n uses the first n blocks.")
    emit()
    emit(_harness.HEADER)
    with_ref = not quick                       # numpy reference: ~2 s for the five rows
    main_rows = {}
    t0 = time.time()
    for name in SETTINGS:
        inputs = (target[:HEADLINE_B], draft[:HEADLINE_B])
        res = _harness.run_config(HEADLINE_B, K, V, name, reps, with_hf=True,
                                   with_ref=with_ref, backend=backend, inputs=inputs,
                                   settings=SETTINGS)
        main_rows[name] = res
        emit(_harness.fmt_row(name, HEADLINE_B, K, V, res))
    emit()
    for line in _harness.against_aims(main_rows, TARGETS):
        emit(line)
    emit()
    if not quick:
        emit(f"## Real logits: batch size (K={K}, V={V})")
        emit()
        emit(_harness.HEADER)
        for B in BATCHES:
            for name in BATCH_SETTINGS:
                res = _harness.run_config(B, K, V, name, max(5, reps - 2), with_hf=(B == 1),
                                           backend=backend, inputs=(target[:B], draft[:B]),
                                           settings=SETTINGS)
                emit(_harness.fmt_row(name, B, K, V, res))
        emit()
        acceptance_table(emit, target, draft, ACCEPTANCE_DRAWS, backend)
    emit(f"Real suite wall time: {time.time() - t0:.0f} s")
    emit()


def run(args, out, argv):
    """Header + section, printed and written to ``out`` (no file if ``out`` is empty).
    ``args``: ``quick``, ``reps``, ``backend``.  Raises ``real_logits.ModelMissing`` before
    any output where the model is not installed."""
    lines = []

    def emit(s=""):
        print(s, flush=True)
        lines.append(s)

    real_logits.model_path()
    _harness.header(emit, "specops CPU benchmark: real logits (SmolLM2-135M-Instruct)",
                    "python -m bench", argv, args.backend, args.reps)
    section(emit, args.reps, args.backend, args.quick)
    _cli.write(lines, out)
