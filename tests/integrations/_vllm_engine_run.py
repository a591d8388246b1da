"""Driver of tests/integrations/test_vllm_engine.py: runs real ``vllm.LLM`` engines in a fresh
process and writes what they did to a JSON file.

    python -m tests.integrations._vllm_engine_run build MODEL_DIR
    python -m tests.integrations._vllm_engine_run smollm2 MODEL_DIR
    python -m tests.integrations._vllm_engine_run run PLAN.json OUT.json

(a plan's ``"prepare": [["build", DIR], ...]`` does the first two inside ``run``).

``smollm2`` writes SmolLM2-135M as a checkpoint vLLM loads (``bench/vllm_engine.py``).
``build`` makes the test's models from nothing (no download): a byte-level BPE tokenizer
trained on a few strings, a tiny random Llama (the target) and a perturbed copy of it (the
draft: close to the target, so acceptance is neither 0 nor 1).  ``run`` starts each engine
of the plan in turn (float32, eager, CPU), generates every job, and reads back from the
Worker process (``collective_rpc`` with a function: needs
``VLLM_ALLOW_INSECURE_SERIALIZATION=1``) what the rejection sampler saw: its class and, per
verify step, the drafts per request, the tokens it emitted, and the seeds it drew for seeded
requests.  A separate process per plan keeps each engine's RNG history fresh (the
cross-process checks) and keeps vLLM out of the pytest process.
"""
import json
import os
import sys
import time

from bench.vllm_engine import checkpoint as smollm2_checkpoint
from bench.vllm_engine import spec_counters

HIDDEN, LAYERS, HEADS, KV_HEADS = 128, 2, 4, 2      # head_dim 32: vLLM's CPU attention needs >= 32
TEXTS = ["the quick brown fox jumps over the lazy dog. " * 3,
         "hello world, this is a test of speculative decoding on a cpu. " * 2,
         "one two three four five six seven eight nine ten. " * 2]


def build(out_dir: str) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=HIDDEN,
                      intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                      max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                      initializer_range=0.02, tie_word_embeddings=False)
    torch.manual_seed(0)
    target = LlamaForCausalLM(cfg)
    with torch.no_grad():
        # A small-init body barely depends on its input, so the model falls into short
        # loops that n-gram lookup can predict; the scaled output layer makes the
        # next-token law peaked (mean max probability ~0.2): sampled runs then accept
        # some drafts and reject others, for n-gram and draft-model speculation alike.
        target.lm_head.weight.mul_(10.0)
    draft = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for (_, pt), (_, pd) in zip(target.named_parameters(), draft.named_parameters()):
            pd.copy_(pt + 0.05 * pt.std() * torch.randn(pt.shape, generator=gen))
    for name, model in (("target", target), ("draft", draft)):
        path = os.path.join(out_dir, name)
        model.save_pretrained(path)
        fast.save_pretrained(path)


# ---------------------------------------------------------------- Worker-side (collective_rpc)
def _install_probe(worker):
    """Wrap the Worker's rejection sampler so that each verify step is recorded."""
    rs = worker.model_runner.rejection_sampler
    calls = []
    forward, seeds = rs.forward, getattr(rs, "_seeds", None)
    current = {}

    def seeds_probe(sm, B, device):
        out = seeds(sm, B, device)
        current["seeded"] = {int(i): int(out[i]) for i in sm.generators if 0 <= i < B}
        return out

    def forward_probe(metadata, draft_probs, logits, sampling_metadata):
        current.clear()
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        calls.append({"num_draft_tokens": list(metadata.num_draft_tokens),
                      "draft_token_ids": metadata.draft_token_ids.tolist(),
                      "sampled": out.sampled_token_ids.tolist(),
                      "has_draft_probs": draft_probs is not None,
                      "seeded": current.get("seeded", {})})
        return out

    rs.forward = forward_probe
    if seeds is not None:
        rs._seeds = seeds_probe
    rs._specops_probe_calls = calls
    return type(rs).__module__ + "." + type(rs).__qualname__


def _mark_probe(worker, job):
    """Close a job: the verify steps recorded so far belong to it."""
    worker.model_runner.rejection_sampler._specops_probe_calls.append({"end_of_job": job})


def _read_probe(worker):
    rs = worker.model_runner.rejection_sampler
    import specops.integrations.vllm as sv
    return {"class": type(rs).__module__ + "." + type(rs).__qualname__,
            "is_specops": isinstance(rs, sv.SpecopsRejectionSampler),
            "pid": os.getpid(), "calls": rs._specops_probe_calls}


# ---------------------------------------------------------------- driver
def run(plan_path: str, out_path: str) -> None:
    from vllm import LLM, SamplingParams

    with open(plan_path) as f:
        plan = json.load(f)
    # Models are made in the same process as the engines: one interpreter start less.
    for what, where in plan.get("prepare", []):
        {"build": build, "smollm2": smollm2_checkpoint}[what](where)
    results = {"driver_pid": os.getpid(), "engines": {}}
    for eng in plan["engines"]:
        t0 = time.time()
        spec = eng.get("speculative_config")
        llm = LLM(model=eng["model"], dtype="float32", enforce_eager=True, max_model_len=256,
                  max_num_seqs=4, seed=0, kv_cache_memory_bytes=64 * 2 ** 20,
                  disable_log_stats=False, distributed_executor_backend="mp",
                  speculative_config=spec)
        init_s = time.time() - t0
        probe = None
        if spec is not None:
            probe = llm.collective_rpc(_install_probe)[0]
        jobs = {}
        for job in eng["jobs"]:
            params = [SamplingParams(max_tokens=job["max_tokens"],
                                     temperature=job["temperature"],
                                     seed=None if job.get("seed") is None else job["seed"] + i,
                                     ignore_eos=True)
                      for i in range(len(job["prompts"]))]
            outs = llm.generate(job["prompts"], params, use_tqdm=False)
            jobs[job["name"]] = [list(o.outputs[0].token_ids) for o in outs]
            if spec is not None:
                llm.collective_rpc(_mark_probe, args=(job["name"],))
        res = {"init_s": init_s, "jobs": jobs, "probe_class": probe}
        if spec is not None:
            res["counters"] = spec_counters(llm)
            res["sampler"] = llm.collective_rpc(_read_probe)[0]
        res["total_s"] = time.time() - t0
        results["engines"][eng["name"]] = res
        llm.llm_engine.engine_core.shutdown()
        del llm
        import gc
        gc.collect()
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2])
    elif sys.argv[1] == "smollm2":
        smollm2_checkpoint(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3])
