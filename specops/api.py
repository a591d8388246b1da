"""The public calls ``verify_block``, ``verify_block_unfused`` and ``sampling_probs``.

Arguments are checked and put in canonical form by ``specops._args`` (the rules of
``validate`` are there), then dispatched to the custom ops (``specops.ops``).  In eager mode
with no torch dispatch or function mode active, the op's Python kernel is called directly
(the same function the registered op ``specops::verify`` runs, preconditions included)
without the dispatcher's argument boxing; under tracing, capture, any mode or the profiler
the registered op itself is called.
"""
from __future__ import annotations

from typing import Literal, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
import torch.utils._pytree as pytree

from specops import _args
from specops import reference as _ref
from specops._contract import check_method, malformed_params
from specops._draft_probs import draft_bad_after, raise_draft_bad
from specops.backends import registry
from specops.ops import accept_op, library, residual_sample_op, sampling_probs_op

Method = Literal["token", "block"]
Backend = Literal["auto", "reference", "cpu", "triton"]
# a per-request parameter: one Python number for every request, or B values
PerRequest = Union[float, torch.Tensor, Sequence[float], np.ndarray]
PerRequestInt = Union[int, torch.Tensor, Sequence[int], np.ndarray]


class VerifyOutput(NamedTuple):
    """token_ids [B, K+1] int32: accepted drafts, then the correction or bonus token, then -1.
    num_accepted [B] int32.  valid [B] bool: False where a target row the verifier read was
    invalid (NaN / +inf / all -inf logits, or a malformed probability row); that request's
    row then holds -1 from the failing position on (see specops.reference, section 3)."""
    token_ids: torch.Tensor
    num_accepted: torch.Tensor
    valid: torch.Tensor


class RatedVerifyOutput(VerifyOutput):
    """``VerifyOutput`` plus ``accept_rates`` [B, K] float32 (``return_accept_rates=True``):
    beta_j = min(1, sum_x min(p_j(x), q_j(x))) for every position whose rows the verifier
    read, NaN elsewhere (reference section 10).  Still unpacks as the three-tuple; copies,
    pickles, ``torch.save``, pytree maps and ``_replace`` keep ``accept_rates``."""

    # A list, not a tuple: torch's pytree then flattens this class through its registration
    # below (four children) instead of as a namedtuple of three, which loses accept_rates.
    _fields = ["token_ids", "num_accepted", "valid", "accept_rates"]

    def __new__(cls, token_ids, num_accepted, valid, accept_rates):
        self = super().__new__(cls, token_ids, num_accepted, valid)
        self.accept_rates = accept_rates
        return self

    def __getnewargs__(self):                   # pickle / copy / deepcopy
        return (*self, self.accept_rates)

    @classmethod
    def _make(cls, iterable):
        return cls(*iterable)

    def _asdict(self):
        return dict(zip(self._fields, (*self, self.accept_rates)))

    def _replace(self, **changes):
        values = self._asdict()
        unknown = set(changes) - set(values)
        if unknown:
            raise ValueError(f"Got unexpected field names: {sorted(unknown)!r}")
        values.update(changes)
        return RatedVerifyOutput(**values)

    def __repr__(self):
        return (f"RatedVerifyOutput(token_ids={self.token_ids!r}, "
                f"num_accepted={self.num_accepted!r}, valid={self.valid!r}, "
                f"accept_rates={self.accept_rates!r})")


pytree.register_pytree_node(
    RatedVerifyOutput, lambda o: ([*o, o.accept_rates], None),
    lambda values, _: RatedVerifyOutput(*values),
    serialized_type_name="specops.RatedVerifyOutput")


def verify_block(target_logits: Optional[torch.Tensor] = None,
                 draft_token_ids: Optional[torch.Tensor] = None,
                 draft_probs: Optional[torch.Tensor] = None, *,
                 target_probs: Optional[torch.Tensor] = None,
                 draft_logits: Optional[torch.Tensor] = None,
                 temperature: PerRequest = 1.0, top_k: PerRequestInt = 0,
                 top_p: PerRequest = 1.0, min_p: PerRequest = 0.0,
                 num_draft_tokens: Optional[PerRequestInt] = None,
                 cu_num_draft_tokens: Optional[torch.Tensor] = None,
                 seed: Optional[PerRequestInt] = None, offset: Optional[PerRequestInt] = None,
                 generator: Optional[torch.Generator] = None,
                 max_num_draft_tokens: Optional[int] = None, validate: Optional[bool] = None,
                 method: Method = "token", return_accept_rates: bool = False,
                 backend: Backend = "auto") -> VerifyOutput:
    """Verify a batch of speculative blocks exactly (see ``specops.reference`` for the spec).

    Padded layout: ``target_logits`` [B, K+1, V] (float32/bfloat16/float16, read in place)
    or ``target_probs`` [B, K+1, V] float32 (final probabilities), ``draft_token_ids`` [B, K],
    ``draft_probs`` [B, K, V] float32 or ``draft_logits`` [B, K, V] or neither (point-mass
    drafts), optional ``num_draft_tokens`` [B] (ragged blocks).  Flattened (vLLM) layout:
    target [T + B, V], ``draft_token_ids`` [T], draft [T, V], ``cu_num_draft_tokens`` [B],
    optional ``max_num_draft_tokens`` (an int in [0, 65536]: the output width is its value + 1
    instead of the longest block + 1, read without looking at ``cu_num_draft_tokens``;
    required under ``torch.compile`` and CUDA-graph capture).

    ``draft_probs`` are the probabilities the drafts were drawn from; the draft model's
    logits go in ``draft_logits`` (transformed like the target's).  A checked draft_probs
    row must be finite, in [0, 1] and sum to 1 within 1e-2 (``validate`` below says which
    rows are checked); where they are not, a token the target gives probability 0 is never
    accepted whatever the draft row holds (reference section 1).

    ``temperature`` (0 = greedy; below 1e-5 counts as greedy), ``top_k`` (0 = off; k >= V
    keeps every token), ``top_p`` (1 = off), ``min_p`` (0 = off), ``seed`` and ``offset``:
    each one Python number for every request, or B values (a [B] tensor, a list or tuple, a
    numpy array).  ``seed`` and ``offset`` name the random stream (reference section 4): a
    request's coins depend only on its own (seed, offset), so results are batch-invariant and
    reproducible.  An engine keeps one seed per request and **advances** ``offset`` **every
    step** (for example by 1 per call, or by the number of tokens the request has emitted):
    the same (seed, offset) gives the same coins, so a fixed offset reuses them at every
    step.  Without ``seed``, one int64 seed per request is drawn from ``generator`` (or
    torch's default generator) on every call and ``offset`` defaults to 0 (fresh coins each
    call, not reproducible without the generator's state).  ``backend``: "auto",
    "reference", "cpu" or "triton".

    ``validate``: ``True`` checks every value on the host and raises ``ValueError`` (on
    CUDA tensors this synchronises), every draft_probs row the walk may read included;
    ``None`` (default) checks what is free (Python scalars, CPU tensors): the draft_probs
    values the walk reads anyway (``q(y)`` at every accepted position and the whole row a
    token is drawn from; a greedy request reads none), raising after the walk; ``False``
    reads no value at all.  What is not checked is guarded on the
    device: a malformed request's row is all -1, num_accepted 0, valid False (reference,
    section 8).  ``validate=False`` with ``max_num_draft_tokens`` (flattened layout) makes no
    host synchronisation and can be captured in a CUDA graph.

    ``method``: "token" (default: accept each draft with probability min(1, p/q) in turn) or
    "block" (block verification, reference section 9: the same exact output law, at least as
    many accepted drafts in expectation; it reads every row of the block).
    ``return_accept_rates=True`` returns a ``RatedVerifyOutput`` whose ``accept_rates``
    [B, K] float32 holds beta_j = min(1, sum min(p_j, q_j)) per position read (NaN
    elsewhere; reference section 10).
    """
    if not (type(method) is str and method == "token" and return_accept_rates is False):
        check_method(method)                    # (the engine's call passes both checks)
        _args.check_bool("return_accept_rates", return_accept_rates)
    a = _args.prepare(
        target_logits=target_logits, draft_token_ids=draft_token_ids, draft_probs=draft_probs,
        target_probs=target_probs, draft_logits=draft_logits, temperature=temperature,
        top_k=top_k, top_p=top_p, min_p=min_p, num_draft_tokens=num_draft_tokens,
        cu_num_draft_tokens=cu_num_draft_tokens, seed=seed, offset=offset, generator=generator,
        max_num_draft_tokens=max_num_draft_tokens, validate=validate)
    name = registry.resolve(backend, a.target.device)
    check = a.walk_checks_draft
    tok, nacc, valid, rates, bad = library.run_verify(a, method, return_accept_rates, check,
                                                      None, name, _args.eager_direct())
    if check:                                   # the walk's draft_probs check (section 8)
        raise_draft_bad(a, draft_bad_after(a, nacc, valid) if bad is None else bad)
    if return_accept_rates:
        return RatedVerifyOutput(tok, nacc, valid, rates)
    return VerifyOutput(tok, nacc, valid)


def verify_block_unfused(target_logits: Optional[torch.Tensor] = None,
                         draft_token_ids: Optional[torch.Tensor] = None,
                         draft_probs: Optional[torch.Tensor] = None, *,
                         backend: Backend = "auto", **kwargs) -> VerifyOutput:
    """``verify_block`` composed from the single-purpose steps (sampling_probs, then the
    accept and residual-sample views), materialising probabilities.  Same arguments, same
    tokens as the fused op on every input (reference section 7); kept for engines that
    already hold probabilities and as a cross-check in the tests."""
    if kwargs.pop("method", "token") != "token" or kwargs.pop("return_accept_rates", False):
        raise ValueError("verify_block_unfused composes the token-wise views (accept, residual "
                         "sample); method='block' and return_accept_rates need verify_block")
    a = _args.prepare(target_logits=target_logits, draft_token_ids=draft_token_ids,
                      draft_probs=draft_probs, **kwargs).to_op_tensors()
    name = registry.resolve(backend, a.target.device)
    B, max_k = a.batch, a.max_k
    dev = a.target.device
    greedy = a.inv_temp == 0
    bad = malformed_params(a.inv_temp, a.top_k, a.top_p, a.min_p, a.target_is_probs)

    def probs(rows, row_start):
        """The transform of each row with its own request's parameters; an invalid row
        becomes NaN, which the accept test rejects and the draw reports invalid."""
        rows_of = _args.rows_to_request(row_start, rows.shape[0], dev)
        params = [t[rows_of] for t in (a.inv_temp, a.top_k, a.top_p, a.min_p)]
        p, ok = sampling_probs_op(rows, *params, backend=name)
        return torch.where(ok[:, None], p, torch.full_like(p, float("nan")))

    target = a.target if a.target_is_probs else probs(a.target, a.target_row_start)
    draft = a.draft
    if draft is not None and not a.draft_is_probs:
        draft = probs(draft, a.draft_row_start)                        # invalid row: q = NaN
    common = (a.target_row_start, a.draft_ids, a.draft_row_start, a.num_draft, draft, greedy,
              a.seed, a.offset)
    nacc = accept_op(target, *common, max_k, backend=name)
    tok = residual_sample_op(target, *common, nacc, max_k, backend=name)
    j = torch.arange(max_k + 1, device=dev)
    ids_pad = torch.full((B, max_k + 1), -1, dtype=torch.int64, device=dev)
    if max_k > 0 and a.draft_ids.numel() > 0:
        gather = (a.draft_row_start[:, None] + j[None, :max_k]).clamp(
            max=a.draft_ids.shape[0] - 1)
        ids_pad[:, :max_k] = a.draft_ids[gather]
    out = torch.where(j[None] < nacc[:, None].long(), ids_pad, torch.full_like(ids_pad, -1))
    out = torch.where(j[None] == nacc[:, None].long(), tok[:, None].long(), out)
    out = torch.where(bad[:, None], torch.full_like(out, -1), out)
    nacc = torch.where(bad, torch.zeros_like(nacc), nacc)
    valid = (tok >= 0) & ~bad
    if a.walk_checks_draft:                     # the fused walk's check, from the outputs
        raise_draft_bad(a, draft_bad_after(a, nacc, valid))
    return VerifyOutput(out.to(torch.int32), nacc, valid)


def sampling_probs(logits: torch.Tensor, temperature: PerRequest = 1.0,
                   top_k: PerRequestInt = 0, top_p: PerRequest = 1.0,
                   min_p: PerRequest = 0.0, backend: Backend = "auto",
                   validate: Optional[bool] = None):
    """Probabilities after the sampling transform (specops.reference, section 2) for rows of
    logits [..., V] (1 <= V <= 2**22); per-row parameters are scalars or tensors of shape
    [...] (1-D: also lists / numpy arrays).  Returns (probs float32 [..., V], valid bool
    [...]).  ``validate`` as in ``verify_block``: a row whose own parameters are malformed
    and were not checked on the host is invalid (zeros, valid False)."""
    _args.check_validate(validate)
    _args.check_tensor("logits", logits, _args.LOGIT_DTYPES)
    if logits.dim() < 1 or not 1 <= logits.shape[-1] <= _ref.MAX_VOCAB:
        raise ValueError(f"logits must have a vocabulary dimension V in [1, {_ref.MAX_VOCAB}], "
                         f"got shape {tuple(logits.shape)}")
    lead = logits.shape[:-1]
    rows = _args.rows(logits.reshape(-1, logits.shape[-1]))
    n, dev = rows.shape[0], logits.device

    def flat(name, v, dtype, rng):
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            if tuple(v.shape) != tuple(lead):
                raise ValueError(f"{name} must be a scalar or have shape {tuple(lead)}")
            v = v.reshape(-1)
        return _args.per_request(name, v, n, dtype, dev, rng, validate=validate)
    inv = _args.inv_temperature(flat("temperature", temperature, torch.float32,
                                     _args.TEMPERATURE))
    k = flat("top_k", top_k, torch.int64, _args.TOP_K)
    p = flat("top_p", top_p, torch.float32, _args.TOP_P)
    m = flat("min_p", min_p, torch.float32, _args.MIN_P)
    name = registry.resolve(backend, dev)
    probs, valid = sampling_probs_op(rows, inv, k, p, m, backend=name)
    return probs.reshape(logits.shape), valid.reshape(lead)
