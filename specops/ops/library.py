"""Every torch op of specops, in one ``torch.library.Library("specops", "DEF")``.

Four ops, each a schema, one Python kernel registered for CPU and CUDA, and a fake that
gives every output shape from the input shapes alone (so the ops trace under
``torch.compile(fullgraph=True)`` and CUDA-graph capture):

* ``specops::verify``: the chain walk (reference sections 1, 7, 9, 10): ``method`` "token" or
  "block", ``want_rates`` (``accept_rates`` [B, max_k], else [B, 0]), ``check_draft`` (the
  default call's draft_probs check made inside the walk: ``draft_bad`` [B] int32, else [0];
  see ``specops.backends``), ``forced_num_accepted`` (section 7's forced mode);
* ``specops::verify_tree``: every tree method (sections 11, 14, 15);
* ``specops::sampling_probs``: the transform of section 2;
* ``specops::coin_walk``: SGLang's caller-coin tree walk (section 13).

``backend`` is the last argument of every schema: "reference", "cpu" or "triton", already
resolved (``specops.backends.registry.resolve``); an unknown name is a ``ValueError``.  The
preconditions below are what every backend may assume (checked by ``torch._check_value``, a
``ValueError``, in the kernel and in the fake alike), so no backend defines behaviour outside
them.  Registered with ``torch.library.Library`` rather than ``custom_op``: the ops are not
differentiable and return fresh tensors, so custom_op's autograd wrapper and per-call alias
checks buy nothing here and cost ~15-40 us per call.  Public calls in eager mode call the
kernels (``verify``, ``verify_tree``, ...) directly, without the dispatcher's boxing
(``specops._args.eager_direct``); under tracing, capture, any mode or the profiler they call
the registered op (``torch.ops.specops.<name>.default``, the ``*_op`` names here).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from specops._args import Canonical as _Fields
from specops._contract import CHAIN_METHODS, TREE_METHODS
from specops._draft_probs import draft_bad_after
from specops.backends import registry

_lib = torch.library.Library("specops", "DEF")

_lib.define(
    "verify(Tensor target, bool target_is_probs, Tensor target_row_start, Tensor draft_ids, "
    "Tensor draft_row_start, Tensor num_draft, Tensor? draft, bool draft_is_probs, "
    "Tensor inv_temp, Tensor top_k, Tensor top_p, Tensor min_p, Tensor seed, Tensor offset, "
    "int max_k, str method, bool want_rates, bool check_draft, Tensor? forced_num_accepted, "
    "str backend) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")
_lib.define(
    "verify_tree(Tensor target, bool target_is_probs, Tensor node_ids, Tensor parents, "
    "Tensor num_nodes, Tensor? draft, bool draft_is_probs, Tensor inv_temp, Tensor top_k, "
    "Tensor top_p, Tensor min_p, Tensor seed, Tensor offset, int max_depth, str method, "
    "str backend) -> (Tensor, Tensor, Tensor, Tensor)")
_lib.define(
    "sampling_probs(Tensor logits, Tensor inv_temp, Tensor top_k, Tensor top_p, "
    "Tensor min_p, str backend) -> (Tensor, Tensor)")
_lib.define(
    "coin_walk(Tensor target, Tensor candidates, Tensor next_token, Tensor next_sibling, "
    "Tensor coins, Tensor final_coins, int max_depth, float threshold_single, "
    "float threshold_acc, str backend) -> (Tensor, Tensor, Tensor, Tensor)")


# ----------------------------------------------------------------------------- preconditions
def check_verify(max_k, method, forced_num_accepted=None) -> None:
    """``max_k >= 0`` (the output width is max_k + 1); a chain method; the forced mode
    (reference section 7) is token-wise only."""
    torch._check_value(max_k >= 0, lambda: f"max_k must be >= 0 (the output width is "
                                           f"max_k + 1), got {max_k}")
    torch._check_value(method in CHAIN_METHODS, lambda: f"method must be "
                       f"{' or '.join(map(repr, CHAIN_METHODS))}, got {method!r}")
    torch._check_value(forced_num_accepted is None or method == "token", lambda: (
        "forced_num_accepted (the forced mode, reference section 7) is token-wise only; got "
        f"method={method!r}"))


def check_tree(max_depth, method) -> None:
    """``max_depth >= 0`` (the output width is max_depth + 1); a tree method."""
    torch._check_value(max_depth >= 0, lambda: f"max_depth must be >= 0 (the output width is "
                                               f"max_depth + 1), got {max_depth}")
    torch._check_value(method in TREE_METHODS, lambda: f"method must be "
                       f"{' or '.join(map(repr, TREE_METHODS))}, got {method!r}")


def check_coins(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
                threshold_single, threshold_acc) -> None:
    """target [B, N, V] float32 (N, V >= 1); candidates, next_token, next_sibling [B, N]
    int64; coins [B, N] and final_coins [B] float32; ``0 <= max_depth < N``; thresholds in
    [0, 1] (float32 values)."""
    torch._check_value(target.dim() == 3 and target.shape[1] >= 1 and target.shape[2] >= 1
                       and target.dtype == torch.float32, lambda: (
                           f"target must be float32 [B, N, V] with N, V >= 1, got "
                           f"{target.dtype} {tuple(target.shape)}"))
    B, N = target.shape[:2]
    for name, t in (("candidates", candidates), ("next_token", next_token),
                    ("next_sibling", next_sibling)):
        torch._check_value(tuple(t.shape) == (B, N) and t.dtype == torch.int64,
                           lambda: f"{name} must be int64 [B, N] = [{B}, {N}], got "
                                   f"{t.dtype} {tuple(t.shape)}")
    torch._check_value(tuple(coins.shape) == (B, N) and tuple(final_coins.shape) == (B,)
                       and coins.dtype == final_coins.dtype == torch.float32,
                       lambda: f"coins must be float32 [B, N] and final_coins [B], got "
                               f"{tuple(coins.shape)} and {tuple(final_coins.shape)}")
    torch._check_value(0 <= max_depth < N, lambda: f"max_depth must be in [0, N={N}), got "
                                                   f"{max_depth}")
    torch._check_value(0.0 <= threshold_single <= 1.0 and 0.0 <= threshold_acc <= 1.0,
                       lambda: "threshold_single and threshold_acc must be in [0, 1], got "
                               f"{threshold_single}, {threshold_acc}")


# ----------------------------------------------------------------------------- kernels
def verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
           draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
           method, want_rates, check_draft, forced_num_accepted, backend):
    """The kernel of ``specops::verify``: the backend's walk after the preconditions ->
    (token_ids, num_accepted, valid, accept_rates or None, draft_bad or None).  Eager public
    calls run it directly, scalar parameters as Python numbers.  A backend returns
    (token_ids, num_accepted, valid), then accept_rates if asked for, then draft_bad if asked
    for and its walk reports it; else the caller gets None (``draft_bad_after`` decides from
    the outputs)."""
    check_verify(max_k, method, forced_num_accepted)
    out = registry.load(backend).verify(
        target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
        draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, method,
        want_rates, check_draft, forced_num_accepted)
    rates = out[3] if want_rates else None
    bad = out[3 + want_rates] if check_draft and len(out) > 3 + want_rates else None
    return out[0], out[1], out[2], rates, bad


def _verify_op_kernel(*args):
    tok, nacc, valid, rates, bad = verify(*args)
    B, dev = tok.shape[0], tok.device
    if bad is None and args[17]:                # check_draft, not reported by the walk
        bad = draft_bad_after(_Fields(*args[:15]), nacc, valid)
    return (tok, nacc, valid,
            torch.empty((B, 0), dtype=torch.float32, device=dev) if rates is None else rates,
            torch.empty(0, dtype=torch.int32, device=dev) if bad is None else bad.to(dev))


def verify_tree(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
                inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method, backend):
    """The kernel of ``specops::verify_tree`` -> (token_ids, num_accepted, accepted_nodes,
    valid)."""
    check_tree(max_depth, method)
    return tuple(registry.load(backend).verify_tree(
        target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
        inv_temp, top_k, top_p, min_p, seed, offset, max_depth, method))


def sampling_probs(logits, inv_temp, top_k, top_p, min_p, backend):
    """The kernel of ``specops::sampling_probs`` -> (probs [N, V] float32, valid [N])."""
    return tuple(registry.load(backend).sampling_probs(logits, inv_temp, top_k, top_p, min_p))


def coin_walk(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
              threshold_single, threshold_acc, backend):
    """The kernel of ``specops::coin_walk`` -> (token_ids [B, D+1] int32, num_accepted [B]
    int32, accepted_nodes [B, D] int32 (sgl slots), valid [B] bool), D = max_depth; a
    malformed request (``specops._sgl_tree.malformed_sgl_requests``) emits nothing."""
    check_coins(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
                threshold_single, threshold_acc)
    return tuple(registry.load(backend).coin_walk(
        target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
        threshold_single, threshold_acc))


for _name, _kernel in (("verify", _verify_op_kernel), ("verify_tree", verify_tree),
                       ("sampling_probs", sampling_probs), ("coin_walk", coin_walk)):
    _lib.impl(_name, _kernel, "CPU")
    _lib.impl(_name, _kernel, "CUDA")


# ----------------------------------------------------------------------------- fakes
@torch.library.register_fake("specops::verify", lib=_lib)
def _(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft, draft,
      draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k, method, want_rates,
      check_draft, forced_num_accepted, backend):
    check_verify(max_k, method, forced_num_accepted)
    B, dev = num_draft.shape[0], target.device
    return (torch.empty((B, max_k + 1), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.bool, device=dev),
            torch.empty((B, max_k if want_rates else 0), dtype=torch.float32, device=dev),
            torch.empty((B if check_draft else 0,), dtype=torch.int32, device=dev))


@torch.library.register_fake("specops::verify_tree", lib=_lib)
def _(target, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs, inv_temp,
      top_k, top_p, min_p, seed, offset, max_depth, method, backend):
    check_tree(max_depth, method)
    B, dev = node_ids.shape[0], target.device
    return (torch.empty((B, max_depth + 1), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.int32, device=dev),
            torch.empty((B, max_depth), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.bool, device=dev))


@torch.library.register_fake("specops::sampling_probs", lib=_lib)
def _(logits, inv_temp, top_k, top_p, min_p, backend):
    return (torch.empty(logits.shape, dtype=torch.float32, device=logits.device),
            torch.empty(logits.shape[:1], dtype=torch.bool, device=logits.device))


@torch.library.register_fake("specops::coin_walk", lib=_lib)
def _(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
      threshold_single, threshold_acc, backend):
    check_coins(target, candidates, next_token, next_sibling, coins, final_coins, max_depth,
                threshold_single, threshold_acc)
    B, dev = target.shape[0], target.device
    return (torch.empty((B, max_depth + 1), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.int32, device=dev),
            torch.empty((B, max_depth), dtype=torch.int32, device=dev),
            torch.empty((B,), dtype=torch.bool, device=dev))


verify_op = torch.ops.specops.verify.default
verify_tree_op = torch.ops.specops.verify_tree.default
sampling_probs_op = torch.ops.specops.sampling_probs.default
coin_walk_op = torch.ops.specops.coin_walk.default


def run_verify(a, method: str, want_rates: bool, check_draft: bool,
               forced_num_accepted: Optional[torch.Tensor], backend: str, direct: bool
               ) -> Tuple:
    """``specops::verify`` on the argument layer's ``Canonical`` ``a``: its kernel directly
    (``direct``: eager, no mode; scalars as Python numbers) or the registered op (every value
    a tensor)."""
    if direct:
        return verify(*a.op_args(), method, want_rates, check_draft, forced_num_accepted,
                      backend)
    return verify_op(*a.to_op_tensors().op_args(), method, want_rates, check_draft,
                     forced_num_accepted, backend)


def run_verify_tree(a, backend: str, direct: bool) -> Tuple:
    """``specops::verify_tree`` on a ``TreeCanonical`` (as ``run_verify``)."""
    if direct:
        return verify_tree(*a.op_args(), backend)
    return verify_tree_op(*a.to_op_tensors().op_args(), backend)


def run_coin_walk(target, candidates, next_token, next_sibling, coins, final_coins,
                  max_depth: int, threshold_single: float, threshold_acc: float, backend: str,
                  direct: bool) -> Tuple:
    """``specops::coin_walk`` with its inputs in the op's dtypes (as ``run_verify``)."""
    args = (target, candidates.long(), next_token.long(), next_sibling.long(),
            coins.to(torch.float32), final_coins.to(torch.float32), int(max_depth),
            float(threshold_single), float(threshold_acc), backend)
    return coin_walk(*args) if direct else coin_walk_op(*args)
