"""Tokens/s of ``specops.generate`` (batched speculative decoding) vs the target's plain
Hugging Face ``generate`` on the CPU, at batch 1 and 8; then fixed draft lengths against
``num_draft_tokens="auto"`` (the planner on the verifier's acceptance rates), token-wise
and block verification.

Models are built here with random weights (no downloads): the target is a Llama with
``--target-layers`` layers; the draft is the target truncated to its first ``--draft-layers``
layers (same embeddings, final norm and LM head: a self-speculative "layer-skip" draft, which
agrees with its target often, as a real draft does: the skipped layers' output projections
are scaled by ``--residual-scale``, which sets the acceptance rate without changing the
target's cost).  The script measures the draft's cost ratio (target forward / draft forward,
one token at batch 1) and reports it.

    python -m bench.studies.generate --reps 2 --threads 1 --max-new-tokens 64 --record

(``--record`` writes bench/results/generate.md; ``--quick``: a 2-layer target, 8 new tokens,
batch 1, one repetition.)  The same comparison on a real model is
``python -m bench.studies.generate_real``.
"""
from __future__ import annotations

import copy
import datetime
import os
import platform
import time

import torch

import specops
from bench import _cli, report

PROG = "python -m bench.studies.generate"


def build(args):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=4 * args.hidden, num_hidden_layers=args.target_layers,
                      num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 64,
                      max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    target = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(args.logit_scale)
        # the layers the draft skips write less into the residual stream, so that the draft
        # agrees with the target often (random weights otherwise make every layer matter);
        # their compute is unchanged
        for layer in target.model.layers[args.draft_layers:]:
            layer.self_attn.o_proj.weight.mul_(args.residual_scale)
            layer.mlp.down_proj.weight.mul_(args.residual_scale)
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:args.draft_layers]
    draft.config.num_hidden_layers = args.draft_layers
    return target, draft


@torch.no_grad()
def forward_ms(model, reps=20):
    ids = torch.randint(3, 100, (1, 32))
    out = model(ids, use_cache=True)
    cache = out.past_key_values
    tok = ids[:, -1:]
    t0 = time.perf_counter()
    for i in range(reps):
        model(tok, past_key_values=cache, use_cache=True)
        cache.crop(-1)
    return (time.perf_counter() - t0) / reps * 1e3


@torch.no_grad()
def run(args, target, draft, batch, temperature):
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(3, args.vocab, (batch, args.prompt_len), generator=g)
    mask = torch.ones_like(ids)
    new = args.max_new_tokens
    hf_kw = dict(max_new_tokens=new, min_new_tokens=new, pad_token_id=0, eos_token_id=None)
    if temperature == 0:
        hf_kw["do_sample"] = False
    else:
        hf_kw.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    best_hf, best_sp, stats, same = float("inf"), float("inf"), None, None
    # warm-up (first-call costs of both paths are not what is measured)
    target.generate(ids, attention_mask=mask, **dict(hf_kw, max_new_tokens=2, min_new_tokens=2))
    specops.generate(target, draft, ids, mask, max_new_tokens=2, num_draft_tokens=args.gamma,
                     temperature=temperature, seed=1, eos_token_id=[])
    for _ in range(args.reps):
        torch.manual_seed(1)
        t0 = time.perf_counter()
        ref = target.generate(ids, attention_mask=mask, **hf_kw)
        best_hf = min(best_hf, time.perf_counter() - t0)
        t0 = time.perf_counter()
        out = specops.generate(target, draft, ids, mask, max_new_tokens=new,
                               num_draft_tokens=args.gamma, temperature=temperature,
                               seed=1, eos_token_id=[])
        best_sp = min(best_sp, time.perf_counter() - t0)
        stats = out.stats
        if temperature == 0:
            same = bool(torch.equal(out.sequences, ref))
    toks = batch * new
    return dict(batch=batch, temperature=temperature, hf_tps=toks / best_hf,
                sp_tps=toks / best_sp, speedup=best_hf / best_sp,
                mean_accepted=stats["accepted"] / max(1, stats["steps"] * 1.0) /
                max(1, batch), accept_rate=stats["accepted"] / max(1, stats["proposed"]),
                target_calls=stats["target_calls"], draft_calls=stats["draft_calls"],
                per_pos=stats["accepted_per_position"], same=same)


@torch.no_grad()
def run_variant(args, target, draft, batch, temperature, k, method, draft_cost):
    """specops.generate with a fixed K or "auto", token-wise or block: best tok/s of the
    repeats, tokens per request-step (one target call serves every active request) and the
    K the planner chose."""
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(3, args.vocab, (batch, args.prompt_len), generator=g)
    mask = torch.ones_like(ids)
    kw = dict(max_new_tokens=args.max_new_tokens, num_draft_tokens=k, temperature=temperature,
              seed=1, eos_token_id=[], method=method, max_num_draft_tokens=args.max_auto,
              draft_cost=draft_cost)
    specops.generate(target, draft, ids, mask, **dict(kw, max_new_tokens=2))
    best, out = float("inf"), None
    for _ in range(args.reps):
        t0 = time.perf_counter()
        out = specops.generate(target, draft, ids, mask, **kw)
        best = min(best, time.perf_counter() - t0)
    st = out.stats
    req_steps = sum(st["accept_length_hist"])
    ks = st["num_draft_tokens"]
    return dict(tps=batch * args.max_new_tokens / best,
                per_step=batch * args.max_new_tokens / max(1, req_steps),
                target_calls=st["target_calls"], mean_k=sum(ks) / max(1, len(ks)))


def parser():
    ap = _cli.parser(PROG, __doc__, reps=2, quick="a 2-layer target, 8 new tokens, batch 1, "
                     "temperature 0, K in {2, auto}, one repetition")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--target-layers", type=int, default=12)
    ap.add_argument("--draft-layers", type=int, default=1)
    ap.add_argument("--logit-scale", type=float, default=20.0)
    ap.add_argument("--residual-scale", type=float, default=0.02)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--fixed-k", type=int, nargs="+", default=[1, 2, 4, 6],
                    help="fixed draft lengths compared with num_draft_tokens='auto'")
    ap.add_argument("--max-auto", type=int, default=8, help="max_num_draft_tokens of 'auto'")
    ap.add_argument("--compare-temperature", type=float, default=1.0)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    args.reps = args.reps or (1 if args.quick else 2)
    if args.quick:
        args.batches, args.temperatures, args.fixed_k = [1], [0.0], [2]
        args.target_layers, args.hidden, args.vocab, args.max_new_tokens = 2, 128, 512, 8
        args.prompt_len = 8
    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft = build(args)
    t_ms, d_ms = forward_ms(target), forward_ms(draft)
    rows = [run(args, target, draft, b, t) for b in args.batches for t in args.temperatures]

    lines = [
        "# specops.generate vs Hugging Face generate (CPU)", "",
        f"- command: `{_cli.command(PROG, argv)}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPU cores "
        f"(torch threads {torch.get_num_threads()}), {platform.processor() or 'cpu'}; "
        f"Python {platform.python_version()}, torch {torch.__version__}",
        f"- load average at the end (1/5/15 min): "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} (the machine is shared: "
        "absolute numbers are noisy; each cell is the best of the runs)",
        f"- specops backends: {specops.available_backends()}",
        f"- target: random Llama, {args.target_layers} layers, hidden {args.hidden}, vocab "
        f"{args.vocab} ({sum(p.numel() for p in target.parameters()) / 1e6:.1f} M params), "
        f"layers after the first {args.draft_layers} with output projections scaled by "
        f"{args.residual_scale}; draft: its first {args.draft_layers} layer(s) (layer-skip "
        "self-draft)",
        f"- one-token decode forward at batch 1: target {t_ms:.2f} ms, draft {d_ms:.2f} ms "
        f"(draft {t_ms / d_ms:.1f}x cheaper)",
        f"- prompt {args.prompt_len} tokens, {args.max_new_tokens} new tokens per request (no "
        f"EOS), γ = {args.gamma} draft tokens per step, best of {args.reps} runs", "",
        "| batch | temperature | HF generate tok/s | specops.generate tok/s | speed-up | "
        "accept rate | target calls | draft calls | accepted per position | greedy output "
        "identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} | {r['temperature']:g} | {r['hf_tps']:.1f} | {r['sp_tps']:.1f} | "
            f"{r['speedup']:.2f}x | {r['accept_rate']:.2f} | {r['target_calls']} | "
            f"{r['draft_calls']} | {r['per_pos']} | "
            f"{'-' if r['same'] is None else ('yes' if r['same'] else 'NO')} |")
    lines += ["", "tok/s counts new tokens of all requests.  Target calls and draft calls are "
              "forward passes (prefill included) of the last run; accepted per position counts "
              "request-steps whose draft j was accepted."]
    cost = d_ms / t_ms
    lines += ["", f"## Fixed K vs num_draft_tokens=\"auto\", token-wise vs block "
              f"(temperature {args.compare_temperature:g})", "",
              f"`auto`: specops.best_num_draft_tokens on the running accept_rates each step, "
              f"draft_cost = {cost:.3f} (the measured forward-time ratio above, passed as a "
              f"number so that runs repeat), K in [1, {args.max_auto}].", "",
              "| batch | K | method | tok/s | tokens per request-step | target calls | mean K |",
              "|---|---|---|---|---|---|---|"]
    for b in args.batches:
        variants = [(k, "token") for k in args.fixed_k] + [("auto", "token"), (args.gamma, "block"),
                                                           ("auto", "block")]
        for k, method in variants:
            r = run_variant(args, target, draft, b, args.compare_temperature, k, method, cost)
            lines.append(f"| {b} | {k} | {method} | {r['tps']:.1f} | {r['per_step']:.2f} | "
                         f"{r['target_calls']} | {r['mean_k']:.2f} |")
    report.print_and_write(lines, _cli.out_path(args, "generate.md"))


if __name__ == "__main__":
    main()
