"""Shared test cases: keyword arguments for ``specops.verify_block`` over every input variant.

One parametrisation for every backend's tests (CPU, Triton, reference): import ``CASES`` /
``make_case`` instead of writing new generators.
"""
from __future__ import annotations

import functools
import itertools

import torch

KINDS = ("full", "point", "draft_logits", "greedy", "mixed", "ragged", "probs", "flat",
         "invalid")
VOCABS = (1, 2, 7, 1000, 32000)
DRAFT_LENGTHS = (0, 1, 4, 8)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _logits(g, shape, dtype, spread=3.0):
    x = torch.randn(shape, generator=g) * spread
    # coarse rounding makes exact ties (top-k / top-p thresholds, argmax ties) common
    x = torch.where(torch.rand(shape, generator=g) < 0.3, (x * 2).round() / 2, x)
    if shape[-1] > 4:
        x = torch.where(torch.rand(shape, generator=g) < 0.05, torch.full_like(x, -float("inf")),
                        x)
    return x.to(dtype)


def _sample(g, probs):
    flat = probs.reshape(-1, probs.shape[-1]).double()
    flat = torch.where(torch.isfinite(flat) & (flat > 0), flat, torch.zeros_like(flat))
    flat[flat.sum(-1) == 0] = 1.0
    return torch.multinomial(flat, 1, generator=g).reshape(probs.shape[:-1])


def make_case(kind: str, V: int, K: int, B: int = 3, dtype=torch.float32, seed: int = 0):
    """Keyword arguments for verify_block (everything except backend)."""
    g = torch.Generator().manual_seed(seed * 1000003 + V * 101 + K * 7 + KINDS.index(kind))
    target = _logits(g, (B, K + 1, V), dtype)
    draft_logits = (target[:, :K].float() + 0.7 * torch.randn((B, K, V), generator=g)).to(dtype)
    q = torch.softmax(draft_logits.float(), -1)
    ids = _sample(g, q) if K else torch.zeros((B, 0), dtype=torch.int64)
    seeds = torch.randint(-(2 ** 62), 2 ** 62, (B,), generator=g)
    offsets = torch.randint(0, 2 ** 40, (B,), generator=g)
    kw = dict(target_logits=target, draft_token_ids=ids, draft_probs=q, seed=seeds,
              offset=offsets, temperature=1.0)
    if kind == "full":
        kw["temperature"] = 1.0
    elif kind == "point":
        kw["draft_probs"] = None
        kw["temperature"] = 0.8
    elif kind == "draft_logits":
        kw["draft_probs"] = None
        kw["draft_logits"] = draft_logits
        kw["temperature"] = 0.8
        kw["top_p"] = 0.9
    elif kind == "greedy":
        arg = target[:, :K].float().argmax(-1)
        keep = torch.rand(arg.shape, generator=g) < 0.7
        kw["draft_token_ids"] = torch.where(keep, arg, ids)
        kw["temperature"] = 0.0
    elif kind == "mixed":
        kw["temperature"] = torch.tensor([0.0, 0.8, 1.3, 0.5, 1.0, 0.7][:B] + [1.0] * (B - 6))
        kw["top_k"] = torch.tensor([0, 5, 0, 50, 0, 2][:B] + [0] * (B - 6))
        kw["top_p"] = torch.tensor([1.0, 0.95, 0.8, 1.0, 0.5, 1.0][:B] + [1.0] * (B - 6))
        kw["min_p"] = torch.tensor([0.0, 0.0, 0.05, 0.1, 0.0, 0.0][:B] + [0.0] * (B - 6))
    elif kind == "ragged":
        kw["num_draft_tokens"] = torch.tensor([K, 0, max(K - 1, 0)] * B)[:B]
        if K >= 2:
            ids = kw["draft_token_ids"].clone()
            ids[-1, K // 2:] = -1
            kw["draft_token_ids"] = ids
        kw["temperature"] = 0.9
    elif kind == "probs":
        kw.pop("target_logits")
        kw["target_probs"] = torch.softmax(target.float(), -1)
        kw["temperature"] = torch.tensor([1.0, 0.0] * B)[:B]
    elif kind == "flat":
        counts = torch.tensor([K, 0, max(K - 2, 0), K] * B)[:B]
        cu = counts.cumsum(0)
        rows = torch.cat([target[b, :counts[b] + 1] for b in range(B)])
        kw["target_logits"] = rows
        kw["draft_token_ids"] = torch.cat([ids[b, :counts[b]] for b in range(B)])
        kw["draft_probs"] = torch.cat([q[b, :counts[b]] for b in range(B)])
        kw["cu_num_draft_tokens"] = cu
        kw["temperature"] = 0.7
        kw["top_k"] = 20
    elif kind == "invalid":
        t = target.clone()
        t[0, min(1, K)] = float("nan")               # NaN row (after an acceptable prefix)
        if B > 1:
            t[1, 0] = -float("inf")                  # all -inf row
        if B > 2 and V > 1:
            t[2, K, V // 2] = float("inf")           # +inf in the bonus row
        kw["target_logits"] = t
        if K:
            # accept the prefix often: drafts = argmax of the target
            kw["draft_token_ids"] = target[:, :K].float().argmax(-1)
        kw["temperature"] = 0.8
    else:
        raise ValueError(kind)
    return kw


def case_ids():
    """(kind, V, K, dtype name) combinations every backend is checked on."""
    out = [(kind, V, K, "fp32") for kind, V, K in itertools.product(KINDS, VOCABS,
                                                                        DRAFT_LENGTHS)]
    out += [(kind, V, K, dt) for kind in ("full", "mixed", "greedy", "draft_logits")
            for V in (7, 1000) for K in (1, 4) for dt in ("bf16", "fp16")]
    return out


# ----------------------------------------------------------------------------- memoised
# The oracle's answer for a shared case is computed once per pytest process and read by every
# backend's test (OpInfo-style): the cases and the outputs are read-only by convention (the
# backends never write their inputs; a test that needs to change a case copies it first).
@functools.lru_cache(maxsize=None)
def _shared_case(kind, V, K, B, dt, seed):
    return make_case(kind, V, K, B=B, dtype=DTYPES[dt], seed=seed)


def shared_case(kind: str, V: int, K: int, B: int = 4, dt: str = "fp32", seed: int = 0) -> dict:
    """``make_case``'s keyword arguments, built once per process (a new dict each call, the
    same tensors: do not modify them in place)."""
    return dict(_shared_case(kind, V, K, B, dt, seed))


@functools.lru_cache(maxsize=None)
def reference_output(kind: str, V: int, K: int, B: int = 4, dt: str = "fp32", seed: int = 0,
                     method: str = "token", rates: bool = False):
    """``specops.verify_block`` on the reference backend for the shared case, once."""
    import specops
    return specops.verify_block(**shared_case(kind, V, K, B, dt, seed), method=method,
                                return_accept_rates=rates, backend="reference")
