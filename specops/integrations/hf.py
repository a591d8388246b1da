"""Hugging Face transformers integration: a drop-in ``_speculative_sampling`` and batched
speculative decoding (``specops.generate``).

``speculative_sampling``
    Same signature and return values as ``transformers.generation.utils._speculative_sampling``
    (batch 1): ``(candidate_input_ids [1, L + γ], candidate_logits [1, γ, V],
    candidate_length, new_logits [1, γ + 1, V]) -> (valid_tokens [1, n + 1] long, n_matches
    0-dim long tensor)``.  The logits are the processed logits transformers hands it (its
    warpers already applied), so they are turned into probabilities by a plain softmax
    (specops' transform at temperature 1) and verified by ``specops.verify_block``; the seed
    is drawn from torch's default generator, so ``torch.manual_seed`` makes it reproducible,
    as with transformers.  ``assistant_ensemble_weight`` (DIVERSE's deliberately biased
    relaxation) is refused unless it is None or 1.

``generate(target_model, draft_model, input_ids, attention_mask=None, *, max_new_tokens,
num_draft_tokens, temperature, top_k, top_p, min_p, seed, eos_token_id, pad_token_id)``
    Speculative decoding at batch size >= 1.  Each step the draft proposes γ tokens per
    request (sampled from its transformed distribution q, or its argmax for temperature 0),
    the target scores all blocks in one forward pass and ``verify_block`` decides.

    KV-cache rollback per request is done by *masking*, not by copying: both models keep one
    ``DynamicCache`` whose time axis is shared by the batch; a request's rejected slots stay
    in the cache but their attention-mask entries are set to 0, so no later query attends to
    them, and position ids are ``cumsum(attention_mask) - 1`` (the convention transformers'
    own ``generate`` uses for left padding), so the positions a request sees are exactly
    those of its unpadded sequence.  Slots that every request has rejected are cropped off
    the end of the cache (``DynamicCache.crop``); once a cache holds 16 or more (and a
    quarter of) slots nobody attends to, each request's attended slots are gathered together
    (left-aligned padding again; positions unchanged), so the cache grows with the tokens
    kept, not with the drafts proposed.  Left padding and a caller's attention mask are
    handled the same way.  Finished requests (EOS or ``max_new_tokens``) leave the batch
    (``DynamicCache.batch_select_indices``).  The cache goes to the model's forward under the
    name that forward takes: ``cache`` where transformers 5.x renamed it (5.24: the old name
    warns, and goes in 5.40), else ``past_key_values`` (transformers 4.x, models not renamed
    yet), so neither raises a deprecation warning.

    Randomness is per request: request b has an int64 seed (``seed`` as an int gives
    ``seed + b``; a list gives each request its own; None draws them from torch's default
    generator).  The draft's sampling uses a ``torch.Generator`` seeded from it, and the
    verifier uses specops' Philox stream (seed_b, offset = step number of that request).  A
    request's tokens therefore do not depend on its batch neighbours: ``generate`` on a batch
    equals ``generate`` on each request alone (up to floating-point differences in the
    models' batched matmuls).

    Returns ``GenerateOutput(sequences [B, L + max_new_tokens] (left-padded input, then the
    new tokens, then pad_token_id), num_new_tokens [B], stats)`` with stats: target_calls and
    draft_calls (forward passes, prefill included), steps, accepted_per_position (how often
    draft position j was accepted), accept_length_hist (histogram of accepted drafts per
    request-step), proposed (draft tokens proposed), accepted (draft tokens accepted) and
    num_draft_tokens (K of each step: fixed, or chosen by the planner with "auto") and
    max_cache_slots (the longest target cache a forward pass attended over).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import torch

import specops
from specops._contract import check_method

__all__ = ["speculative_sampling", "generate", "GenerateOutput"]


class _RatePlanner:
    """Running per-position acceptance rates -> K for the next step.  A position's estimate
    is the mean of every beta the verifier returned for it (a prior of one observation at
    ``PRIOR``); a position never read yet borrows the estimate of the last one read."""

    PRIOR = 0.8

    def __init__(self, kmax: int, draft_cost: float):
        self.kmax, self.draft_cost = kmax, draft_cost
        self.total = torch.full((kmax,), self.PRIOR, dtype=torch.float64)
        self.count = torch.ones(kmax, dtype=torch.float64)
        self.seen = torch.zeros(kmax, dtype=torch.bool)

    def rates(self) -> torch.Tensor:
        est = self.total / self.count
        for j in range(1, self.kmax):
            if not self.seen[j] and self.seen[j - 1]:
                est[j] = est[j - 1]
        return est

    def choose(self) -> int:
        return max(1, specops.best_num_draft_tokens(self.rates(), self.draft_cost, self.kmax))

    def update(self, accept_rates: torch.Tensor):
        r = accept_rates.detach().to("cpu", torch.float64)
        k = r.shape[1]
        ok = torch.isfinite(r)
        self.total[:k] += torch.where(ok, r, 0.0).sum(0)
        self.count[:k] += ok.sum(0)
        self.seen[:k] |= ok.any(0)


# ----------------------------------------------------------------------------- drop-in
def speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                         assistant_ensemble_weight: Optional[float] = None):
    """transformers' ``_speculative_sampling``, verified by specops (batch 1)."""
    if assistant_ensemble_weight is not None and float(assistant_ensemble_weight) != 1.0:
        raise NotImplementedError(
            "assistant_ensemble_weight != 1 relaxes the verification on purpose (biased "
            "output); specops only implements exact speculative sampling")
    if candidate_input_ids.shape[0] != 1 or new_logits.shape[0] != 1:
        raise ValueError("speculative_sampling is batch 1 like transformers'; use "
                         "specops.generate or specops.verify_block for batches")
    gamma = int(candidate_length)
    if candidate_logits.shape[1] != gamma or new_logits.shape[1] != gamma + 1:
        raise ValueError(f"candidate_logits must be [1, {gamma}, V] and new_logits "
                         f"[1, {gamma + 1}, V], got {tuple(candidate_logits.shape)} and "
                         f"{tuple(new_logits.shape)}")
    new_ids = candidate_input_ids[:, candidate_input_ids.shape[1] - gamma:]
    out = specops.verify_block(new_logits, new_ids, draft_logits=candidate_logits,
                               temperature=1.0)
    n = out.num_accepted[0].to(torch.long)
    n_int = int(n)
    valid_tokens = out.token_ids[:, :n_int + 1].to(device=candidate_input_ids.device,
                                                   dtype=torch.long)
    if n_int + 1 > 0 and bool((valid_tokens < 0).any()):
        raise ValueError("speculative_sampling: the target logits contain NaN/+inf or an "
                         "all -inf row; no token can be sampled from them")
    return valid_tokens, n


# ----------------------------------------------------------------------------- generate
@dataclass
class GenerateOutput:
    sequences: torch.Tensor
    num_new_tokens: torch.Tensor
    stats: dict = field(default_factory=dict)


def _per_request(value, B, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype).reshape(-1).expand(B).clone() if value.numel() == 1 else \
            value.to(dtype).reshape(B).clone()
    if isinstance(value, (list, tuple)):
        return torch.tensor(value, dtype=dtype).reshape(B)
    return torch.full((B,), value, dtype=dtype)


def _positions(mask, n_new):
    pos = mask.long().cumsum(-1) - 1
    pos = pos.clamp_(min=0)
    return pos[:, -n_new:]


def _cache_kwarg(model) -> str:
    """The name the model's forward takes its KV cache under: ``cache`` where transformers
    renamed it (5.24 still accepts ``past_key_values`` with a FutureWarning, until 5.40),
    ``past_key_values`` before.  Read from the signature (``deprecate_kwarg`` keeps it via
    ``functools.wraps``), so models whose forward was not renamed keep working."""
    import inspect
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _forward(model, ids, mask, cache, cache_kw):
    out = model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask, ids.shape[1]),
                use_cache=True, **{cache_kw: cache})
    return out.logits.float()


_WINDOWED = {"sliding_attention": "sliding_window", "hybrid_sliding": "sliding_window",
             "reference_sliding_attention": "sliding_window",
             "chunked_attention": "attention_chunk_size"}


def _attention_window(model) -> Optional[int]:
    """The smallest sliding window / attention chunk among the model's layers (None: every
    layer attends to its whole past).  transformers applies a window over cache *slots*, and
    the masked rollback leaves rejected slots in the cache, so a windowed layer would see
    fewer real tokens than the model's own ``generate`` (and its cache cannot crop past the
    window): such a model is only exact while every slot fits in the window."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        return None
    if hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config(decoder=True)
    types = getattr(cfg, "layer_types", None)
    if types is None:              # older configs: a window set in the config applies to all
        attrs = ["sliding_window", "attention_chunk_size"]
    else:
        attrs = [_WINDOWED[t] for t in types if t in _WINDOWED]
    sizes = [getattr(cfg, a, None) for a in attrs]
    sizes = [int(w) for w in sizes if isinstance(w, int) and w > 0]
    return min(sizes) if sizes else None


def _shrink(cache, mask):
    """Drop the cache slots no request attends to any more: off the end (``crop``), and,
    once they are many, everywhere (``_compact``), so that the caches grow with the tokens
    kept rather than with the drafts proposed."""
    used = torch.nonzero(mask.any(0)).flatten()
    last = int(used[-1]) + 1 if used.numel() else 0
    if mask.shape[1] > last:
        cache.crop(last - mask.shape[1])
        mask = mask[:, :last]
    keep = int(mask.sum(1).max()) if mask.numel() else 0
    if mask.shape[1] - keep >= max(16, keep // 4):
        mask = _compact(cache, mask, keep)
    return mask


def _compact(cache, mask, keep):
    """Gather each request's attended slots, in order, to the right of ``keep`` columns (left
    padding again).  A slot's position is the number of attended slots up to it, so no
    position changes.  Only plain ``DynamicLayer`` caches are rewritten (their ``keys`` /
    ``values`` are [B, heads, slots, dim]); any other cache keeps its holes, which costs
    time, not exactness."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return mask
    layers = getattr(cache, "layers", None)
    if not layers or any(type(x) is not DynamicLayer or not getattr(x, "is_initialized", False)
                         or x.keys.shape[-2] != mask.shape[1] for x in layers):
        return mask
    idx = torch.sort(mask, dim=1, stable=True).indices[:, mask.shape[1] - keep:]
    for x in layers:
        for name in ("keys", "values"):
            t = getattr(x, name)
            setattr(x, name, t.gather(2, idx[:, None, :, None].expand(
                t.shape[0], t.shape[1], keep, t.shape[3])))
    return mask.gather(1, idx)


def _new_cache(model):
    from transformers import DynamicCache
    try:
        return DynamicCache(config=model.config)
    except TypeError:                                     # older transformers
        return DynamicCache()


@torch.no_grad()
def generate(target_model, draft_model, input_ids: torch.Tensor,
             attention_mask: Optional[torch.Tensor] = None, *, max_new_tokens: int,
             num_draft_tokens: Union[int, str] = 4, temperature=1.0, top_k=0, top_p=1.0,
             min_p=0.0, seed: Union[None, int, Sequence[int], torch.Tensor] = None,
             eos_token_id: Union[None, int, Sequence[int]] = None,
             pad_token_id: Optional[int] = None, method: str = "token",
             max_num_draft_tokens: int = 8, draft_cost: Optional[float] = None,
             backend: str = "auto") -> GenerateOutput:
    """Batched speculative decoding for Hugging Face causal LMs (see the module docstring).

    ``input_ids`` [B, L] (left-padded where the prompts differ in length, with
    ``attention_mask`` [B, L] marking real tokens); ``temperature`` (0 = greedy), ``top_k``,
    ``top_p``, ``min_p``: scalars or per-request sequences/tensors.  ``eos_token_id``
    defaults to the target's ``generation_config.eos_token_id``.  ``method``: the verifier's
    ("token" or "block", see ``verify_block``).

    ``num_draft_tokens="auto"`` chooses K each step with ``specops.best_num_draft_tokens``
    from a running estimate of the per-position acceptance rates (the verifier's
    ``accept_rates``, averaged over every request-step that read the position), between 1
    and ``max_num_draft_tokens``, with ``draft_cost`` the cost of one draft step in target
    calls (default: the ratio of the models' parameter counts; a number keeps runs
    reproducible, unlike a measured time).
    """
    if input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must be [B, L] with L >= 1, got {tuple(input_ids.shape)}")
    check_method(method)
    auto = isinstance(num_draft_tokens, str)
    if auto and num_draft_tokens != "auto":
        raise ValueError(f"num_draft_tokens must be an int >= 1 or 'auto', got "
                         f"{num_draft_tokens!r}")
    gamma_max = int(max_num_draft_tokens) if auto else int(num_draft_tokens)
    if gamma_max < 1:
        raise ValueError("num_draft_tokens (and max_num_draft_tokens with 'auto') must be >= 1")
    if auto:
        if draft_cost is None:
            draft_cost = (sum(p.numel() for p in draft_model.parameters())
                          / max(1, sum(p.numel() for p in target_model.parameters())))
        planner = _RatePlanner(gamma_max, float(draft_cost))
    gamma = gamma_max
    if max_new_tokens < 0:
        raise ValueError("max_new_tokens must be >= 0")
    device = input_ids.device
    B, L = input_ids.shape
    # each step appends gamma + 1 slots to both caches and emits at least one token
    slots = L - 1 + max_new_tokens * (gamma_max + 1)
    for name, model in (("target_model", target_model), ("draft_model", draft_model)):
        window = _attention_window(model)
        if window is not None and slots >= window:
            raise ValueError(
                f"{name} has sliding-window / chunked attention (window {window}); generate "
                f"rolls back rejected drafts by masking their cache slots, which is exact only "
                f"while all slots fit in the window: prompt length - 1 + max_new_tokens * "
                f"(num_draft_tokens + 1) = {slots} must be < {window}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(device=device, dtype=torch.long)
    if bool((attention_mask[:, -1] == 0).any()):
        raise ValueError("prompts must be left-padded: attention_mask[:, -1] must be 1")
    if eos_token_id is None:
        gc = getattr(target_model, "generation_config", None)
        eos_token_id = getattr(gc, "eos_token_id", None)
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    if pad_token_id is None:
        gc = getattr(target_model, "generation_config", None)
        pad_token_id = getattr(gc, "pad_token_id", None)
        if pad_token_id is None:
            pad_token_id = next(iter(sorted(eos)), 0) if eos else 0
    V = target_model.get_output_embeddings().weight.shape[0] if \
        target_model.get_output_embeddings() is not None else target_model.config.vocab_size

    temp = _per_request(temperature, B, torch.float32)
    tk = _per_request(top_k, B, torch.int64)
    tp = _per_request(top_p, B, torch.float32)
    mp = _per_request(min_p, B, torch.float32)
    if seed is None:
        seeds = torch.randint(-(2 ** 63), 2 ** 63 - 1, (B,), dtype=torch.int64)
    elif isinstance(seed, int):
        seeds = torch.arange(B, dtype=torch.int64) + seed
    else:
        seeds = _per_request(seed, B, torch.int64)
    gens = [torch.Generator(device=device).manual_seed(int(s) & 0x7FFFFFFFFFFFFFFF ^ 0x5DEECE66D)
            for s in seeds.tolist()]
    steps_done = torch.zeros(B, dtype=torch.int64)

    stats = dict(target_calls=0, draft_calls=0, steps=0, proposed=0, accepted=0,
                 accepted_per_position=[0] * gamma, accept_length_hist=[0] * (gamma + 1),
                 num_draft_tokens=[], max_cache_slots=0)
    new_tokens = [[] for _ in range(B)]
    if max_new_tokens == 0:
        return GenerateOutput(input_ids.clone(), torch.zeros(B, dtype=torch.long), stats)

    # prefill both models with the prompt minus its last token (pending for both)
    tcache, dcache = _new_cache(target_model), _new_cache(draft_model)
    tkw, dkw = _cache_kwarg(target_model), _cache_kwarg(draft_model)
    tmask = attention_mask.clone()
    dmask = attention_mask.clone()
    if L > 1:
        _forward(target_model, input_ids[:, :-1], attention_mask[:, :-1], tcache, tkw)
        _forward(draft_model, input_ids[:, :-1], attention_mask[:, :-1], dcache, dkw)
        stats["target_calls"] += 1
        stats["draft_calls"] += 1
    tmask, dmask = attention_mask[:, :-1], attention_mask[:, :-1]
    pending = input_ids[:, -1].clone()                # fed to neither model yet
    # the draft may owe one more token (d_γ when the whole block was accepted)
    extra = torch.zeros(B, dtype=torch.long, device=device)
    extra_valid = torch.zeros(B, dtype=torch.long, device=device)
    active = list(range(B))                           # original indices of the batch rows

    while active:
        Ba = len(active)
        rows = torch.tensor(active, dtype=torch.long)
        t_a, k_a, p_a, m_a = temp[rows], tk[rows], tp[rows], mp[rows]
        if auto:
            gamma = planner.choose()
        stats["num_draft_tokens"].append(gamma)
        # ---- draft proposes γ tokens
        d_ids = torch.empty(Ba, gamma, dtype=torch.long, device=device)
        d_probs = torch.empty(Ba, gamma, V, dtype=torch.float32, device=device)
        for i in range(gamma):
            if i == 0:
                ids = torch.stack([extra, pending], 1)
                dmask = torch.cat([dmask, torch.stack([extra_valid, torch.ones_like(extra)], 1)],
                                  1)
            else:
                ids = d_ids[:, i - 1:i]
                dmask = torch.cat([dmask, torch.ones(Ba, 1, dtype=torch.long, device=device)], 1)
            logits = _forward(draft_model, ids, dmask, dcache, dkw)[:, -1, :V]
            stats["draft_calls"] += 1
            q = specops.sampling_probs(logits, temperature=t_a, top_k=k_a, top_p=p_a,
                                       min_p=m_a, backend=backend)[0]
            d_probs[:, i] = q
            for r in range(Ba):
                if float(t_a[r]) == 0.0:
                    d_ids[r, i] = int(torch.argmax(logits[r]))
                else:
                    d_ids[r, i] = torch.multinomial(q[r], 1, generator=gens[active[r]])[0]
        # ---- target scores every block in one pass
        t_in = torch.cat([pending[:, None], d_ids], 1)
        tmask = torch.cat([tmask, torch.ones(Ba, gamma + 1, dtype=torch.long, device=device)], 1)
        t_logits = _forward(target_model, t_in, tmask, tcache, tkw)[:, :, :V].contiguous()
        stats["max_cache_slots"] = max(stats["max_cache_slots"], tmask.shape[1])
        stats["target_calls"] += 1
        stats["steps"] += 1
        greedy = t_a == 0
        out = specops.verify_block(
            t_logits, d_ids, None if bool(greedy.all()) else d_probs, temperature=t_a,
            top_k=k_a, top_p=p_a, min_p=m_a, seed=seeds[rows], offset=steps_done[rows],
            method=method, return_accept_rates=auto, backend=backend)
        if auto:
            planner.update(out.accept_rates)
        steps_done[rows] += 1
        nacc = out.num_accepted.to(torch.long).tolist()
        toks = out.token_ids.tolist()
        # ---- roll back the rejected slots (mask), record tokens
        finished = []
        new_pending = pending.clone()
        for r in range(Ba):
            n = nacc[r]
            b = active[r]
            stats["proposed"] += gamma
            stats["accepted"] += n
            stats["accept_length_hist"][n] += 1
            for j in range(n):
                stats["accepted_per_position"][j] += 1
            # target slots appended: [pending, d_1..d_γ] -> keep pending, d_1..d_n
            tmask[r, tmask.shape[1] - gamma + n:] = 0
            # draft slots appended: [extra, pending, d_1..d_{γ-1}] -> keep up to d_n
            if n < gamma:
                dmask[r, dmask.shape[1] - (gamma - 1) + n:] = 0
            emitted = toks[r][:n + 1]
            if emitted[-1] < 0:
                raise RuntimeError(f"request {b}: the target produced NaN/inf logits")
            done = False
            for tok in emitted:
                new_tokens[b].append(tok)
                if tok in eos or len(new_tokens[b]) >= max_new_tokens:
                    done = True
                    break
            new_pending[r] = emitted[-1]
            extra[r] = d_ids[r, gamma - 1] if n == gamma else 0
            extra_valid[r] = 1 if n == gamma else 0
            if done:
                finished.append(r)
        pending = new_pending
        if finished:
            keep = [r for r in range(Ba) if r not in finished]
            active = [active[r] for r in keep]
            if not active:
                break
            idx = torch.tensor(keep, dtype=torch.long, device=device)
            tcache.batch_select_indices(idx)
            dcache.batch_select_indices(idx)
            tmask, dmask = tmask[idx], dmask[idx]
            pending, extra, extra_valid = pending[idx], extra[idx], extra_valid[idx]
        tmask, dmask = _shrink(tcache, tmask), _shrink(dcache, dmask)

    sequences = torch.full((B, L + max_new_tokens), int(pad_token_id), dtype=input_ids.dtype,
                           device=device)
    sequences[:, :L] = input_ids
    for b in range(B):
        if new_tokens[b]:
            sequences[b, L:L + len(new_tokens[b])] = torch.tensor(new_tokens[b],
                                                                  dtype=input_ids.dtype)
    num_new = torch.tensor([len(t) for t in new_tokens], dtype=torch.long)
    return GenerateOutput(sequences, num_new, stats)
