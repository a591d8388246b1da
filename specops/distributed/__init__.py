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

from specops import api as _api
from specops import reference as _ref
from specops.distributed._comm import Comm, Exchange, exchanged_bytes, record_exchange
from specops.distributed._walk import verify as _verify

__all__ = ["verify_block", "record_exchange", "Exchange", "exchanged_bytes"]


def _layout(comm: Comm, vocab_start: int, v_local: int, error: bool, shape_key, device):
    """Gather (vocab_start, V_local, error, shape key) from every rank; raise on every rank if
    one rank's arguments were refused, the shapes disagree or the shards do not tile [0, V).
    Returns V."""
    mine = torch.tensor([vocab_start, v_local, int(error), *shape_key], dtype=torch.int64,
                        device=device)
    every = comm.all_gather(mine, "shard layout and argument check").tolist()
    if error:
        return None
    bad = [r for r, row in enumerate(every) if row[2]]
    if bad:
        raise ValueError(f"rank(s) {bad} of the process group refused their arguments; "
                         "every rank must pass the same arguments except its shard")
    if any(row[3:] != every[0][3:] for row in every):
        raise ValueError("the ranks passed tensors of different shapes (batch, block, rows "
                         f"or layout): {[row[3:] for row in every]}; every rank must pass the "
                         "same arguments except its vocabulary shard")
    end = 0
    for start, width, *_ in sorted(every):
        if start != end:
            raise ValueError(f"vocabulary shards must be contiguous and cover [0, V) in "
                             f"order: got (vocab_start, V_local) = "
                             f"{[tuple(r[:2]) for r in every]}")
        end = start + width
    return end


def verify_block(target_logits=None, draft_token_ids=None, draft_probs=None, *,
                 vocab_start, group=None, vocab_size=None, target_probs=None,
                 draft_logits=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                 num_draft_tokens=None, cu_num_draft_tokens=None, seed=None, offset=None,
                 generator=None, max_num_draft_tokens=None, validate=None, method="token",
                 return_accept_rates=False) -> _api.VerifyOutput:
    """``specops.verify_block`` for a rank of ``group`` (a ``torch.distributed`` process
    group; None: the default group, or a world of one when none is initialised) holding the
    columns ``[vocab_start, vocab_start + V_local)`` of the target and draft tensors
    (``[..., V_local]``; shards are contiguous, may be uneven, each at least one column, and
    together cover [0, V)).  ``draft_token_ids`` are global ids.  Every other argument is
    ``verify_block``'s and must be the same on every rank.

    Returns the single-device call's ``VerifyOutput`` (or ``RatedVerifyOutput``) on every
    rank, bit for bit.  ``vocab_size`` (the global V) is optional; with it and
    ``validate=False`` (or CUDA tensors and the default ``validate=None``) no value is read
    on the host and the layout check is skipped, so the call makes no host synchronisation
    of its own.  Without ``seed``, the seeds drawn on the group's first rank are used.
    """
    _api._check_method(method, return_accept_rates)
    _api._check_validate(validate)
    if isinstance(vocab_start, bool) or not isinstance(vocab_start, numbers.Integral) \
            or vocab_start < 0:
        raise TypeError(f"vocab_start must be an int >= 0, got {vocab_start!r}")
    if vocab_size is not None and (isinstance(vocab_size, bool)
                                   or not isinstance(vocab_size, numbers.Integral)
                                   or not 1 <= vocab_size <= _ref.MAX_VOCAB):
        raise ValueError(f"vocab_size must be an int in [1, {_ref.MAX_VOCAB}], got "
                         f"{vocab_size!r}")
    comm = Comm(group)
    target = target_probs if target_logits is None else target_logits
    device = target.device if isinstance(target, torch.Tensor) else torch.device("cpu")
    v_local = target.shape[-1] if isinstance(target, torch.Tensor) and target.dim() else 0
    exchange = vocab_size is None or _api._reads(validate, target if isinstance(
        target, torch.Tensor) else None)
    error, args = None, None
    try:
        if v_local < 1:
            raise ValueError("each rank's shard must hold at least one vocabulary column, "
                             f"got target shape {tuple(getattr(target, 'shape', ()))}")
        args = _api._prepare(target_logits, draft_token_ids, draft_probs, target_probs,
                             draft_logits, temperature, top_k, top_p, min_p,
                             num_draft_tokens, cu_num_draft_tokens, seed, offset, generator,
                             max_num_draft_tokens, validate=validate,
                             vocab_size=vocab_size or _ref.MAX_VOCAB)
    except (ValueError, TypeError) as ex:
        if not exchange:
            raise
        error = ex
    V = vocab_size
    if exchange:
        key = ((-1,) * 5 if args is None else
               (args.num_draft.shape[0], args.max_k, args.target.shape[0],
                args.draft_ids.shape[0], -1 if args.draft is None else args.draft.shape[0]))
        V = _layout(comm, int(vocab_start), v_local, error is not None, key, device)
        if error is not None:
            raise error
        if vocab_size is not None and V != vocab_size:
            raise ValueError(f"vocab_size={vocab_size} but the shards cover [0, {V})")
        if not V <= _ref.MAX_VOCAB:
            raise ValueError(f"the shards cover V={V} > {_ref.MAX_VOCAB} columns")
    a = args
    if a.draft_ids.numel() and _api._reads(validate, a.draft_ids) \
            and int(a.draft_ids.max()) >= V:
        raise ValueError(f"draft_token_ids must be in [-1, V={V}) (-1 marks padding; ids "
                         "are global)")
    B = a.num_draft.shape[0]
    if seed is None and B:
        a = a._replace(seed=comm.broadcast_first(a.seed.clone(), "seeds"))
    has_topk, has_topp = _filters(a, top_k, top_p, validate)
    if B:
        sampled = not (isinstance(temperature, numbers.Real)      # all greedy: no exp pass
                       and float(temperature) < float(_ref.GREEDY_TEMPERATURE))
        if sampled and _api._reads(validate, a.inv_temp):
            sampled = bool((a.inv_temp != 0).any())
        tok, nacc, valid, rates = _verify(comm, a, int(vocab_start), V, method,
                                          bool(return_accept_rates), has_topk, has_topp,
                                          sampled)
    else:
        tok, nacc, valid = (torch.empty((0, a.max_k + 1), dtype=torch.int32, device=device),
                            torch.empty(0, dtype=torch.int32, device=device),
                            torch.empty(0, dtype=torch.bool, device=device))
        rates = torch.empty((0, a.max_k), dtype=torch.float32, device=device)
    if return_accept_rates:
        return _api.RatedVerifyOutput(tok, nacc, valid, rates)
    return _api.VerifyOutput(tok, nacc, valid)


def _filters(a, top_k, top_p, validate):
    """(has_topk, has_topp): whether a filter may be on; decided alike on every rank (from
    the argument types, and from the values where they may be read), since it decides which
    collectives run."""
    if a.target_is_probs:                   # filters with target_probs are malformed
        return False, False
    has_topk = isinstance(top_k, (torch.Tensor, list, tuple)) or int(top_k) != 0
    has_topp = isinstance(top_p, (torch.Tensor, list, tuple)) or float(top_p) < 1.0
    if has_topk and _api._reads(validate, a.top_k):
        has_topk = bool((a.top_k != 0).any())
    if has_topp and _api._reads(validate, a.top_p):
        has_topp = bool((a.top_p != 1).any())
    return has_topk, has_topp
