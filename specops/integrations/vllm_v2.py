"""A drop-in for the rejection sampler of vLLM's Model Runner V2, backed by ``specops.verify_block``.

vLLM runs its V2 model runner (``vllm/v1/worker/gpu/``) by default wherever Triton works,
that is on every GPU install; its rejection sampler is not V1's class but
``vllm.v1.worker.gpu.spec_decode.rejection_sampler.RejectionSampler``, built by
``vllm.v1.worker.gpu.model_runner``.  ``SpecopsV2RejectionSampler`` subclasses it (same
constructor, same ``__call__(logits, input_batch, draft_logits, invalid_drafts) ->
SamplerOutput``) and replaces only ``_verify``, the step between vLLM's processing of the
logits and its output bookkeeping:

* **Processing stays vLLM's.**  ``self.sampler.apply_sampling_params`` (logit bias,
  penalties, bad words, custom logits processors, the thinking budget, temperature, min-p,
  top-k/top-p, in vLLM's order) makes the target rows exactly as vLLM's own kernels would
  read them; specops then verifies those rows at temperature 1 (0 for greedy requests:
  ``temperature == 0``, vLLM's rule), so the law is the one vLLM means, and specops decides
  acceptance, the residual draw and the bonus token.
* **Layout.**  MRV2's rows are request-major, ``K_b`` draft rows then the bonus row
  (``cu_num_logits``), which is specops' flattened layout as it is
  (``cu_num_draft_tokens[b] = cu_num_logits[b+1] - (b+1)``); draft ``i`` of request ``b`` is
  the input token of its row ``i + 1``.  A ``-1`` draft (MRV2's placeholder, and
  ``invalid_drafts``) ends the block, as in vLLM.  The output width is fixed at
  ``num_speculative_tokens + 1`` and nothing is read back to the host, so the call stays
  free of device synchronisation.
* **Draft distribution.**  With ``draft_sample_method="probabilistic"`` vLLM hands the cached
  pre-temperature draft logits ``[max_num_reqs, K, V]`` (indexed by request state); the
  draft token was drawn from ``softmax(logits / T)`` (no top-k/top-p), so that is the ``q``
  given to specops.  Otherwise drafts are point masses.
* **Randomness.**  Counter-based, like vLLM's: seed = the request's sampling seed
  (``sampling_states.seeds``: the user's, or one vLLM drew for the request), offset = the
  position of the request's first row in this step, which grows every step.  A seeded
  request is therefore reproducible across processes and batch-invariant, and MRV2's drafts
  are seeded too (vLLM derives their Gumbel noise from the same seed through another
  function, murmur3 of (seed, position, token), independent of specops' Philox stream).
* **Methods.**  ``rejection_sample_method="block"`` (or ``SPECOPS_VLLM_METHOD=block``) runs
  specops' block verification, "standard" its token-wise one; "synthetic" (a benchmarking
  mode that accepts by fixed rates, nothing to verify) is left to vLLM's own kernels.
* **Refused at construction** (never silently bypassed): watermarking (``watermark_key``),
  and a vLLM whose ``_verify`` has another signature than the one this class was written
  against (0.32.0).
* **Invalid rows.**  A request whose rows specops finds invalid (NaN/+inf/all -inf, reference
  section 8) emits no token this step (``num_sampled = 0``); ``self.last_valid`` ([B] bool)
  says which requests were valid.
"""
from __future__ import annotations

import inspect

import torch

import specops
from specops.integrations._vllm_method import resolve_method
from vllm.v1.worker.gpu.spec_decode import rejection_sampler as _mrv2

VllmV2RejectionSampler = _mrv2.RejectionSampler

__all__ = ["SpecopsV2RejectionSampler", "VllmV2RejectionSampler", "check_compatible"]

# The parameters of MRV2's RejectionSampler._verify that this drop-in implements (vLLM 0.32.0).
_VERIFY_PARAMS = ("self", "logits", "draft_logits", "draft_sampled", "pos", "cu_num_logits",
                  "idx_mapping", "idx_mapping_np", "expanded_idx_mapping",
                  "expanded_local_pos", "seq_lens_upper_bound_np", "verify_draft_sampled")


def check_compatible() -> None:
    """Raise RuntimeError when the installed vLLM's MRV2 sampler is not the one this targets."""
    params = tuple(inspect.signature(VllmV2RejectionSampler._verify).parameters)
    if params != _VERIFY_PARAMS:
        raise RuntimeError(
            "specops: this vLLM's Model Runner V2 RejectionSampler._verify takes "
            f"{params[1:]}, not {_VERIFY_PARAMS[1:]} (vLLM 0.32.0); the specops drop-in "
            "cannot replace it safely. Unset SPECOPS_VLLM (or set it to 0) to keep vLLM's "
            "sampler, or VLLM_USE_V2_MODEL_RUNNER=0 to use the V1 runner (which the plugin "
            "supports).")


class SpecopsV2RejectionSampler(VllmV2RejectionSampler):
    """MRV2 ``RejectionSampler`` whose verification is ``specops.verify_block``.

    Same constructor as vLLM's (``sampler``, ``spec_config``, ``device``, keyword
    ``watermark_key``) plus keyword-only ``backend`` (specops backend, default "auto") and
    ``method`` ("token" or "block"; default ``SPECOPS_VLLM_METHOD``, else "block" when vLLM
    was configured with ``rejection_sample_method="block"``, else "token").
    """

    def __init__(self, sampler, spec_config, device, *, watermark_key=None,
                 backend: str = "auto", method: str | None = None):
        check_compatible()
        super().__init__(sampler, spec_config, device, watermark_key=watermark_key)
        if watermark_key is not None:
            raise NotImplementedError(
                "specops' MRV2 rejection sampler does not implement vLLM's watermarking "
                "(watermark_config); unset SPECOPS_VLLM (or set it to 0) to use vLLM's sampler")
        method = resolve_method(method, self.use_block_verification)
        self.specops_method = method
        self.specops_backend = backend
        self.last_valid: torch.Tensor | None = None

    def _verify(self, logits, draft_logits, draft_sampled, pos, cu_num_logits, idx_mapping,
                idx_mapping_np, expanded_idx_mapping, expanded_local_pos,
                seq_lens_upper_bound_np, verify_draft_sampled):
        if self.synthetic_conditional_rates is not None:
            return super()._verify(logits, draft_logits, draft_sampled, pos, cu_num_logits,
                                   idx_mapping, idx_mapping_np, expanded_idx_mapping,
                                   expanded_local_pos, seq_lens_upper_bound_np,
                                   verify_draft_sampled)
        processed = self.sampler.apply_sampling_params(
            logits, expanded_idx_mapping, idx_mapping, idx_mapping_np, pos, draft_sampled,
            expanded_local_pos, seq_lens_upper_bound_np)
        sampled, num_sampled = self.verify_rows(processed, draft_logits, verify_draft_sampled,
                                                pos, cu_num_logits, idx_mapping)
        return processed, sampled, num_sampled

    def verify_rows(self, processed, draft_logits, draft_sampled, pos, cu_num_logits,
                    idx_mapping):
        """(sampled [B, K+1] int64, num_sampled [B] int32) for processed target rows in
        MRV2's layout; ``draft_sampled[r]`` is the input token of row r."""
        dev = processed.device
        B = cu_num_logits.shape[0] - 1
        K = self.num_speculative_steps
        num_rows, V = processed.shape
        T = num_rows - B
        cu = cu_num_logits.to(device=dev, dtype=torch.int64)
        cu_draft = cu[1:] - torch.arange(1, B + 1, device=dev, dtype=torch.int64)
        t = torch.arange(T, device=dev, dtype=torch.int64)
        req_of_t = torch.searchsorted(cu_draft, t, right=True)
        draft_ids = draft_sampled.to(dev)[t + req_of_t + 1].to(torch.int64)

        states = self.sampler.sampling_states
        req_state = idx_mapping.to(device=dev, dtype=torch.int64)
        temp = states.temperature.gpu.to(dev)[req_state].to(torch.float32)
        greedy = temp == 0.0
        draft_probs = None
        if draft_logits is not None and T > 0:
            Vd = draft_logits.shape[-1]
            step = t - (cu_draft - (cu[1:] - cu[:-1] - 1))[req_of_t]
            rows = draft_logits[req_state[req_of_t], step].to(torch.float32)
            t_safe = torch.where(greedy, torch.ones_like(temp), temp)[req_of_t]
            draft_probs = torch.softmax(rows / t_safe[:, None], dim=-1)
            if Vd < V:
                # vLLM verifies only the columns both vocabularies share (padded targets).
                processed = processed[:, :Vd].contiguous()
            elif Vd > V:
                draft_probs = draft_probs[:, :V].contiguous()
        seed = states.seeds.gpu.to(dev)[req_state].to(torch.int64)
        offset = pos.to(dev)[cu[:-1]].to(torch.int64)
        out = specops.verify_block(
            processed, draft_ids, draft_probs, cu_num_draft_tokens=cu_draft,
            temperature=torch.where(greedy, torch.zeros_like(temp), torch.ones_like(temp)),
            seed=seed, offset=offset, max_num_draft_tokens=K, method=self.specops_method,
            backend=self.specops_backend)
        self.last_valid = out.valid
        num_sampled = torch.where(out.valid, out.num_accepted + 1,
                                  torch.zeros_like(out.num_accepted)).to(torch.int32)
        return out.token_ids.to(torch.int64), num_sampled
