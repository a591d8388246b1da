"""specops.distributed: exact verification across tensor-parallel ranks, each holding a
vocabulary shard of the logits, without gathering them (reference section 12).

    out = specops.distributed.verify_block(shard_logits, draft_ids, draft_probs=shard_q,
                                           vocab_start=rank_start, group=tp_group, ...)

Every rank returns the tokens the single-device ``specops.verify_block`` returns on the
concatenated rows.  Instead of ``B (K+1) V`` logits per step the ranks exchange a few numbers
per row (about a kilobyte per row with top-k or top-p on, a few dozen bytes without):
``record_exchange()`` lists every collective of a call.
"""
from __future__ import annotations

import numbers
from typing import Optional

import torch

from specops import _args
from specops import reference as _ref
from specops._contract import check_method
from specops.api import Method, PerRequest, PerRequestInt, RatedVerifyOutput, VerifyOutput
from specops.distributed._agree import Agreement, digests
from specops.distributed._comm import Comm, Exchange, exchanged_bytes, record_exchange
from specops.distributed._walk import verify as _verify

__all__ = ["verify_block", "record_exchange", "Exchange", "exchanged_bytes"]


def verify_block(target_logits: Optional[torch.Tensor] = None,
                 draft_token_ids: Optional[torch.Tensor] = None,
                 draft_probs: Optional[torch.Tensor] = None, *, vocab_start: int,
                 group=None, vocab_size: Optional[int] = None,
                 target_probs: Optional[torch.Tensor] = None,
                 draft_logits: Optional[torch.Tensor] = None,
                 temperature: PerRequest = 1.0, top_k: PerRequestInt = 0,
                 top_p: PerRequest = 1.0, min_p: PerRequest = 0.0,
                 num_draft_tokens: Optional[PerRequestInt] = None,
                 cu_num_draft_tokens: Optional[torch.Tensor] = None,
                 seed: Optional[PerRequestInt] = None, offset: Optional[PerRequestInt] = None,
                 generator: Optional[torch.Generator] = None,
                 max_num_draft_tokens: Optional[int] = None, validate: Optional[bool] = None,
                 method: Method = "token", return_accept_rates: bool = False) -> VerifyOutput:
    """``specops.verify_block`` for a rank of ``group`` (a ``torch.distributed`` process
    group; None: the default group, or a world of one when none is initialised) holding the
    columns ``[vocab_start, vocab_start + V_local)`` of the target and draft tensors
    (``[..., V_local]``; shards are contiguous, may be uneven, each at least one column, and
    together cover [0, V)).  ``draft_token_ids`` are global ids.  Every other argument is
    ``verify_block``'s and must be the same on every rank.

    Returns the single-device call's ``VerifyOutput`` (or ``RatedVerifyOutput``) on every
    rank, bit for bit.  The ranks first exchange their shard bounds and a digest of every
    argument that must agree: an argument refused on one rank, or arguments that differ
    between ranks, raise ``ValueError`` on every rank (naming the argument), never a hang.
    ``vocab_size`` (the global V) is optional; with it and ``validate=False`` (or CUDA
    tensors and the default ``validate=None``) nothing is read on the host and that exchange
    is skipped, so the call makes no host synchronisation of its own, and nothing checks that
    the ranks agree (``validate`` and ``vocab_size`` themselves must then be the same on
    every rank: they decide whether the ranks talk first).  Without ``seed``, the seeds drawn
    on the group's first rank are used.
    """
    comm = Comm(group)
    target = target_probs if target_logits is None else target_logits
    device = target.device if isinstance(target, torch.Tensor) else torch.device("cpu")
    v_local = target.shape[-1] if isinstance(target, torch.Tensor) and target.dim() else 0
    exchange = vocab_size is None or not isinstance(validate, (bool, type(None))) or \
        _args.may_read(validate, target if isinstance(target, torch.Tensor) else None)
    error, a, agree = None, None, None
    try:
        check_method(method)
        _args.check_bool("return_accept_rates", return_accept_rates)
        _args.check_validate(validate)
        if isinstance(vocab_start, bool) or not isinstance(vocab_start, numbers.Integral) \
                or vocab_start < 0:
            raise TypeError(f"vocab_start must be an int >= 0, got {vocab_start!r}")
        if vocab_size is not None and (isinstance(vocab_size, bool)
                                       or not isinstance(vocab_size, numbers.Integral)
                                       or not 1 <= vocab_size <= _ref.MAX_VOCAB):
            raise ValueError(f"vocab_size must be an int in [1, {_ref.MAX_VOCAB}], got "
                             f"{vocab_size!r}")
        if v_local < 1:
            raise ValueError("each rank's shard must hold at least one vocabulary column, "
                             f"got target shape {tuple(getattr(target, 'shape', ()))}")
        a = _args.prepare(
            target_logits=target_logits, draft_token_ids=draft_token_ids,
            draft_probs=draft_probs, target_probs=target_probs, draft_logits=draft_logits,
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            num_draft_tokens=num_draft_tokens, cu_num_draft_tokens=cu_num_draft_tokens,
            seed=seed, offset=offset, generator=generator,
            max_num_draft_tokens=max_num_draft_tokens, validate=validate,
            vocab_size=vocab_size or _ref.MAX_VOCAB)
        scalar_inv_temp = a.inv_temp if not isinstance(a.inv_temp, torch.Tensor) else None
        a = a.to_op_tensors()
        agree = _decisions(a, vocab_start, v_local, top_k, top_p, scalar_inv_temp, validate)
    except (ValueError, TypeError) as ex:
        if not exchange:
            raise
        error = ex
    if exchange:
        named = [] if a is None else digests(a, dict(
            method=method, return_accept_rates=return_accept_rates, validate=validate,
            vocab_size=vocab_size, seed=seed))
        V, agree = Agreement.exchange(comm, agree, named, error is not None, device)
        if error is not None:
            raise error
        if vocab_size is not None and V != vocab_size:
            raise ValueError(f"vocab_size={vocab_size} but the shards cover [0, {V})")
        if not V <= _ref.MAX_VOCAB:
            raise ValueError(f"the shards cover V={V} > {_ref.MAX_VOCAB} columns")
        if agree.max_id >= V:
            raise ValueError(f"draft_token_ids must be in [-1, V={V}) (-1 marks padding; "
                             "ids are global)")
    else:
        V = vocab_size
    B = a.batch
    if seed is None and B:
        a = a._replace(seed=comm.broadcast_first(a.seed.clone(), "seeds"))
    if B:
        tok, nacc, valid, rates = _verify(comm, a, int(vocab_start), V, method,
                                          return_accept_rates, agree.has_topk, agree.has_topp,
                                          agree.sampled)
    else:
        tok, nacc, valid = (torch.empty((0, a.max_k + 1), dtype=torch.int32, device=device),
                            torch.empty(0, dtype=torch.int32, device=device),
                            torch.empty(0, dtype=torch.bool, device=device))
        rates = torch.empty((0, a.max_k), dtype=torch.float32, device=device)
    if return_accept_rates:
        return RatedVerifyOutput(tok, nacc, valid, rates)
    return VerifyOutput(tok, nacc, valid)


def _decisions(a: _args.Canonical, vocab_start, v_local, top_k, top_p, scalar_inv_temp,
               validate) -> Agreement:
    """What this rank knows before the exchange: its shard, the largest draft id it may
    read (-1: none read), and whether a filter or a sampled row may be on.  The last three
    decide which collectives run, so the exchange ORs them over the ranks.  Greedy is the
    argument layer's decision (``inv_temp == 0``: float32(T) below float32(1e-5)), never
    the raw temperature's (``scalar_inv_temp``: the canonical value of a Python number)."""
    if a.target_is_probs:                   # filters with target_probs are malformed
        has_topk = has_topp = False
    else:
        has_topk = _maybe(top_k, a.top_k, 0, validate)
        has_topp = _maybe(top_p, a.top_p, 1.0, validate)
    sampled = a.batch > 0 and scalar_inv_temp != 0.0
    if sampled and scalar_inv_temp is None and _args.may_read(validate, a.inv_temp):
        sampled = bool((a.inv_temp != 0).any())
    max_id = -1
    if a.draft_ids.numel() and _args.may_read(validate, a.draft_ids):
        max_id = int(a.draft_ids.max())
    return Agreement(int(vocab_start), int(v_local), max_id, has_topk, has_topp, sampled)


def _maybe(given, t: torch.Tensor, off, validate) -> bool:
    """May any request have this filter on?  From the values where they may be read."""
    if not isinstance(given, (torch.Tensor, list, tuple)) and not hasattr(given, "shape"):
        return given != off
    return bool((t != off).any()) if _args.may_read(validate, t) else True
