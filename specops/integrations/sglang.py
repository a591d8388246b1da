"""A drop-in for sgl-kernel's tree speculative sampling (contract section 13, and
``specops.verify_tree``).

SGLang's EAGLE worker verifies its draft tree with sgl-kernel's
``tree_speculative_sampling_target_only`` (``sgl-kernel/python/sgl_kernel/speculative.py``;
CUDA in ``sgl-kernel/csrc/speculative/speculative_sampling.cu(h)``), called with keyword
arguments from ``python/sglang/srt/speculative/eagle_info.py`` (``eagle_utils.py`` in older
releases).  ``tree_speculative_sampling_target_only`` here has the same parameters, in the
same order, and writes the same three outputs in place (the caller's uniforms are its coins
by default, contract section 13); ``tree_speculative_sampling`` is the exact variant that
also uses the draft probabilities (sgl-kernel's ``FIXME: leverage draft probs``).  Neither
imports SGLang or sgl-kernel.

**sgl-kernel's layout** (``bs`` requests, ``n = candidates.shape[1]`` tree nodes each,
vocabulary ``d``).  Node ``i`` of request ``b`` is slot ``[b, i]``; slot 0 is the root (the
last verified token; its candidate is not a draft).

* ``candidates`` [bs, n] int: the token of every node.
* ``retrive_next_token`` [bs, n] int: the first child of node i (-1: a leaf);
  ``retrive_next_sibling`` [bs, n] int: the next sibling of node i (-1: the last).  sgl-kernel
  starts at the root, tries the children of the current node in first-child, next-sibling,
  next-sibling... order, descends into the first one it accepts, and stops after
  ``num_spec = accept_index.shape[1]`` levels (at most ``num_spec - 1`` accepted drafts).
* ``retrive_index`` [bs, n] int: the flat position of node i in ``predicts``.
* ``target_probs`` [bs, n, d] float32: row i is the target distribution after the path
  root..i (SGLang passes softmax(logits / T) after its top-k / top-p / min-p renorms).
* Outputs, written in place and nowhere else: ``accept_token_num[b]`` = number of accepted
  drafts A; ``accept_index[b, 0] = retrive_index[b, 0]`` and ``accept_index[b, k]`` =
  ``retrive_index`` of the k-th accepted node, ``k = 1..A`` (columns after A keep what the
  caller put there, -1 in SGLang); ``predicts[accept_index[b, k]]`` = the token that follows
  that node: the (k+1)-th accepted draft for ``k < A``, the correction / bonus token for
  ``k = A`` (other entries of ``predicts`` are left as they are).

**The mapping to ``verify_tree``** (the Philox mode and ``tree_speculative_sampling``) happens on the tensors' device with a fixed number of
vectorised torch ops (no host synchronisation, no data-dependent shapes, so nothing stands
in the way of CUDA-graph capture): the links are turned into each node's first-child/next-sibling "binary
tree" parent, and pointer jumping (``ceil(log2 n)`` rounds) gives every node's reachability
from the root, its depth in the tree and its tree parent.  Nodes are then renumbered by
their depth in the binary tree (stable sort), which puts every parent before its children
and every sibling after the siblings sgl-kernel tries before it: ``verify_tree`` tries
children in increasing node index, so it tries them in exactly sgl-kernel's order.  Nodes
deeper than ``max_depth = min(num_spec, n) - 1`` (never reached by sgl-kernel) and nodes not
reachable from the root are absent.  ``target_probs`` (and ``draft_probs``) are gathered
into the new node order (one copy of the [bs, n, d] tensor: ``verify_tree`` reads node i's
row at index i), and the accepted nodes are mapped back to sgl's slots and
``retrive_index``.  ``convert_tree`` exposes the conversion.

**What differs from sgl-kernel.**

* *Exactness.*  sgl-kernel accepts child y while ``coin <= p(y_1) + ... + p(y)`` (one coin
  per node) and samples the correction from ``relu(p - tried siblings)``: exact for
  distinct sibling tokens, in float32.  The caller-coin walk (section 13) is that rule on
  integer masses; the Philox mode is reference section 11 with point-mass drafts.  Both have
  the target's law at thresholds 1, handle duplicate sibling tokens exactly, and give
  bit-identical results wherever they run.
* *Randomness.*  By default (``randomness="uniforms"``) the caller's ``uniform_samples``
  are the accept coins and ``uniform_samples_for_final_sampling`` the final draw, read as
  sgl-kernel reads them (the coin of the last accepted node per level), with the arithmetic
  of the contract's section 13: a float32 uniform is taken on the ``2**-24`` grid and compared
  with integer masses, so the tokens are a function of the caller's numbers, identical on every
  device (``backend="auto"``: the C++ kernel ``csrc/verify/coins.cpp`` for CPU tensors, the
  vectorised int64 torch ops of ``specops.integrations.sglang_coins`` elsewhere, no host
  sync; ``"cpu"``: the C++ kernel; ``"triton"``: ``specops/triton_kernels/verify_coins.py``, one
  launch, verified under Triton's interpreter only; any other name: the torch ops), and
  equal to sgl-kernel's wherever its float32 arithmetic is not within rounding of a boundary
  and it is exact (section 13 lists where specops deliberately differs: strict ``C > t``, so a
  zero-probability draft is never accepted by the coin, sglang #35771; masses normalised by
  the row's integer mass; a repeated sibling token not counted twice; invalid rows emit -1).
  ``randomness="philox"`` (implied by keyword ``seed`` (int or [bs] int64, with optional
  ``offset``) or ``generator``, and used when either uniform tensor is None, as in the oldest
  sgl-kernel) runs ``verify_tree``'s exact walk on specops' own Philox streams (reference
  section 4): each request's 64-bit seed is derived on the device from the bit patterns of
  its uniforms (``seeds_from_uniforms``: two 32-bit multiply-add lanes, each mixed by a
  32-bit integer finaliser), with ``offset`` as given (default 0); with no uniforms and
  neither keyword, seeds come from torch's default generator.
* ``deterministic`` is accepted and ignored: specops is always deterministic.
* ``draft_probs`` in the target-only function is ignored and *not* written (sgl-kernel uses
  it as scratch).  The argument may be omitted: the newest sgl-kernel dropped it, and a
  call in that newer positional form (a number in the ``draft_probs`` slot) is recognised.
  ``uniform_samples_for_final_sampling`` may be omitted as in the oldest sgl-kernel.
* An invalid target row on the accepted path (NaN, negative, mass outside (0, 4];
  reference section 3) writes -1 at that position of ``predicts`` instead of a made-up
  token; a malformed tree (a link outside [-1, n), a node that is the target of two links,
  a link to the root, or a present node's candidate outside [0, d)) raises ``ValueError``
  for CPU tensors and, on CUDA, writes ``accept_token_num = 0`` and -1 at the root's
  ``predicts`` entry.  Both functions return the ``valid`` [bs] bool tensor (sgl-kernel
  returns None).

**Thresholds.**  ``threshold_single`` / ``threshold_acc`` below 1 (SGLang's
``--speculative-accept-threshold-single/-acc``) are sgl-kernel's relaxed acceptance, defined in
section 13 exactly as sgl-kernel applies them (``coin <= prob_acc / threshold_acc`` with
``threshold_acc`` capped below at 1e-9, or ``p(y) >= threshold_single``) and **NON-EXACT**: the
output law moves away from the target's (``specops.reference.coins.threshold_tv`` computes by
how much for a given tree; ``bench/results/sglang_thresholds.md``).  Values outside [0, 1] or
NaN raise ``ValueError``.  The Philox mode has no relaxed rule: there thresholds other than 1
raise ``ValueError``.

**The other sgl-kernel calls.**  ``tree_speculative_sampling_target_only_rejmask`` (sgl-kernel's
variant that keeps the rejected tokens in a bit mask; same outputs) is the same walk;
``verify_tree_greedy`` follows sgl-kernel's greedy loop (``target_predict`` read at the flat
``retrive_index`` of the last accepted node); ``top_k_renorm_prob_fallback`` /
``top_p_renorm_prob_fallback`` are SGLang's torch renorm fallbacks (host-side helpers, plain
torch float arithmetic, not part of the contract).  Every call accepts ``retrieve_*`` (older
sgl-kernel) beside ``retrive_*``.

**The exact variant** ``tree_speculative_sampling(..., draft_probs, method="rsd")``:
``draft_probs`` [bs, n, d] float32 has the shape SGLang already allocates (zeros, in its
verify step), with sgl-kernel's own indexing: row i is the draft distribution the children
of node i were drawn from (sgl-kernel reads ``draft_probs`` at the parent's row and the
child's token).  ``method="rsd"``: the children of a node were drawn without replacement
from that row, in next-sibling order (e.g. ``specops.sample_without_replacement``);
``"mss"``: drawn i.i.d.  Only then is the output law exact *and* the acceptance higher than
the target-only walk's.  EAGLE's trees take the draft's top-k tokens deterministically; such
children are not samples of q, and for them the target-only function (which treats every
child as an arbitrary proposal) is the exact choice.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numbers

import torch

from specops import _args, _contract
from specops._sgl_tree import SglTree, convert_tree, present_out_of_range
from specops.backends import registry
from specops.integrations._sglang_torch import (greedy_walk, top_k_renorm_prob_fallback,
                                                top_p_renorm_prob_fallback)
from specops.ops import library
from specops.reference.coins import check_thresholds
from specops.tree import verify_tree

__all__ = ["tree_speculative_sampling_target_only", "tree_speculative_sampling",
           "tree_speculative_sampling_target_only_rejmask", "verify_tree_greedy",
           "top_k_renorm_prob_fallback", "top_p_renorm_prob_fallback",
           "convert_tree", "SglTree", "seeds_from_uniforms"]

_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser on int64 values in [0, 2**32) (no int64 overflow)."""
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _MASK32
    return x ^ (x >> 16)


def seeds_from_uniforms(uniform_samples: torch.Tensor,
                        uniform_samples_for_final_sampling: Optional[torch.Tensor] = None
                        ) -> torch.Tensor:
    """[bs] int64 Philox seeds derived on the device from the bit patterns of each request's
    uniforms (row b of ``uniform_samples`` [bs, n] and entry b of the final-sampling
    uniforms [bs]): two independent 32-bit lanes, each a sum of ``(bits_i * M_i) mod 2**32``
    with distinct odd multipliers, mixed by a 32-bit finaliser.  No host synchronisation."""
    u = uniform_samples
    u = u[:, None] if u.dim() == 1 else u.flatten(1)
    if uniform_samples_for_final_sampling is not None:
        u = torch.cat([u, uniform_samples_for_final_sampling.reshape(u.shape[0], 1).to(
            device=u.device, dtype=u.dtype)], 1)
    if u.dtype.itemsize == 4:
        bits = u.contiguous().view(torch.int32).to(torch.int64) & _MASK32
    else:                                   # other dtypes: their float32 bit pattern
        bits = u.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & _MASK32
    i = torch.arange(bits.shape[1], device=bits.device, dtype=torch.int64)
    odd = 2 * i + 1
    m1 = (odd * 0x9E3779B1) & _MASK32
    m2 = (odd * 0x85EBCA77 + 0x27D4EB2F) & _MASK32 | 1
    # each product < 2**64 would overflow: split the multiplier into 16-bit halves
    def lane(m):
        lo = (bits * (m & 0xFFFF)) & _MASK32
        hi = ((bits * (m >> 16)) & 0xFFFF) << 16
        return _mix32(((lo + hi) & _MASK32).sum(1) & _MASK32)
    h1, h2 = lane(m1), _mix32(lane(m2) ^ 0x5BD1E995)
    return (h1 - 2 ** 31) * (2 ** 32) + h2


# ----------------------------------------------------------------------------- the calls
def _is_number(x) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, torch.Tensor)


def _check_thresholds(threshold_single, threshold_acc) -> None:
    for name, v in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        if isinstance(v, torch.Tensor):
            if v.numel() != 1:
                raise ValueError(f"{name} must be a number, got a tensor of shape "
                                 f"{tuple(v.shape)}")
            v = v.item()
        if isinstance(v, (bool, str, bytes)) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {v!r}")
        if float(v) != 1.0:
            raise ValueError(
                f"{name}={v!r}: specops verifies exactly and refuses sgl-kernel's relaxed "
                f"acceptance (threshold_single / threshold_acc below 1 accept drafts the "
                f"target would reject, which changes the output distribution); pass 1.0 "
                f"(SGLang: --speculative-accept-threshold-single 1 "
                f"--speculative-accept-threshold-acc 1, the defaults)")


def _int_tensor(name, t, ndim):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")


def _run(predicts, accept_index, accept_token_num, candidates, retrive_index,
         retrive_next_token, retrive_next_sibling, uniform_samples,
         uniform_samples_for_final_sampling, target_probs, draft_probs, method, seed, offset,
         generator, backend, validate, _verify=None):
    if target_probs is None:
        raise ValueError("target_probs is required")
    if not isinstance(target_probs, torch.Tensor) or target_probs.dim() != 3:
        raise ValueError("target_probs must be a [bs, n, vocab] tensor, got "
                         f"{getattr(target_probs, 'shape', type(target_probs).__name__)}")
    if target_probs.dtype != torch.float32:
        raise TypeError(f"target_probs must be float32, got {target_probs.dtype}")
    B, N, V = target_probs.shape
    dev = target_probs.device
    S = _check_layout(predicts, accept_index, accept_token_num, candidates, retrive_index,
                      retrive_next_token, retrive_next_sibling, B, N, dev)
    if uniform_samples is not None and (not isinstance(uniform_samples, torch.Tensor)
                                        or uniform_samples.shape[0] != B):
        raise ValueError(f"uniform_samples must be a [bs={B}, n] tensor")
    if uniform_samples_for_final_sampling is not None and (
            not isinstance(uniform_samples_for_final_sampling, torch.Tensor)
            or uniform_samples_for_final_sampling.numel() != B):
        raise ValueError(f"uniform_samples_for_final_sampling must be a [bs={B}] tensor")
    if draft_probs is not None:
        if not isinstance(draft_probs, torch.Tensor) or tuple(draft_probs.shape) != (B, N, V):
            raise ValueError(f"draft_probs must be a [bs, n, vocab] = [{B}, {N}, {V}] tensor "
                             "(row i: the distribution the children of node i were drawn "
                             f"from), got {getattr(draft_probs, 'shape', None)}")
        if draft_probs.dtype != torch.float32 or draft_probs.device != dev:
            raise TypeError(f"draft_probs must be float32 on {dev}, got {draft_probs.dtype} "
                            f"on {draft_probs.device}")
    _args.check_validate(validate)
    D = min(S, N) - 1

    tree = convert_tree(retrive_next_token, retrive_next_sibling, D)
    if _args.may_read(validate, retrive_next_token) and \
            _args.may_read(validate, retrive_next_sibling):
        bad = tree.malformed.nonzero().flatten().tolist()
        if bad:
            raise ValueError(
                f"malformed sgl tree in request(s) {bad}: every retrive_next_token / "
                f"retrive_next_sibling entry must be -1 or in [0, n={N}), no node may be the "
                "target of two links, and no link may point at the root (node 0)")
    parents = tree.parent_ids.clone()
    parents[:, 0] = torch.where(tree.malformed, 0, -1)        # malformed: refused by the walk
    order = tree.order
    tokens = torch.where(tree.present, candidates.long().gather(1, order),
                         torch.zeros_like(order))
    if _args.may_read(validate, candidates):
        bad = (tree.present[:, 1:] & ((tokens[:, 1:] < 0) | (tokens[:, 1:] >= V))).any(1)
        bad = bad.nonzero().flatten().tolist()
        if bad:
            raise ValueError(f"candidates of request(s) {bad} hold a token outside "
                             f"[0, vocab={V}) at a node of the tree")
    idx3 = order[:, :, None].expand(B, N, V)
    target = target_probs.gather(1, idx3)
    draft = None if draft_probs is None else draft_probs.gather(1, idx3)
    if seed is None and generator is None and uniform_samples is not None:
        seed = seeds_from_uniforms(uniform_samples, uniform_samples_for_final_sampling)
    if validate is None and dev.type != "cpu":
        validate = False
    verify = verify_tree if _verify is None else _verify
    out = verify(None, tokens, parents, draft, target_probs=target, method=method,
                 max_depth=D, seed=seed, offset=offset, generator=generator,
                 backend=backend, validate=validate)
    _write_outputs(out, order, retrive_index, predicts, accept_index, accept_token_num, D)
    return out.valid


def _write_outputs(out, order, retrive_index, predicts, accept_index, accept_token_num, D):
    """Write verify_tree's result into sgl-kernel's three output tensors, in place."""
    B, N = order.shape
    ri = retrive_index.long()
    nacc = out.num_accepted.long()
    k = torch.arange(D + 1, device=order.device, dtype=torch.int64)
    used = k[None, :] <= nacc[:, None]                             # [B, D+1]
    new_nodes = torch.cat([torch.zeros(B, 1, dtype=torch.int64, device=order.device),
                           out.accepted_nodes.long()], 1)          # root, then accepted
    slots = order.gather(1, new_nodes.clamp(0, N - 1))
    acc = ri.gather(1, slots)
    cols = accept_index[:, :D + 1]
    cols.copy_(torch.where(used, acc.to(accept_index.dtype), cols))
    accept_token_num.copy_(nacc.to(accept_token_num.dtype))
    P = predicts.shape[0]
    where = torch.where(used & (acc >= 0) & (acc < P), acc, torch.full_like(acc, P))
    buf = torch.cat([predicts, predicts.new_zeros(1)])
    buf.scatter_(0, where.reshape(-1), out.token_ids.reshape(-1).to(predicts.dtype))
    predicts.copy_(buf[:P])


def tree_speculative_sampling_target_only(
        predicts: torch.Tensor,                       # mutable
        accept_index: torch.Tensor,                   # mutable
        accept_token_num: torch.Tensor,               # mutable
        candidates: torch.Tensor,
        retrive_index: Optional[torch.Tensor] = None,
        retrive_next_token: Optional[torch.Tensor] = None,
        retrive_next_sibling: Optional[torch.Tensor] = None,
        uniform_samples: Optional[torch.Tensor] = None,
        uniform_samples_for_final_sampling: Optional[torch.Tensor] = None,
        target_probs: Optional[torch.Tensor] = None,
        draft_probs: Optional[torch.Tensor] = None,
        threshold_single: float = 1.0,
        threshold_acc: float = 1.0,
        deterministic: bool = True,
        *, randomness: str = "uniforms", seed=None, offset=None,
        generator: Optional[torch.Generator] = None, backend: str = "auto",
        validate: Optional[bool] = None, retrieve_index=None, retrieve_next_token=None,
        retrieve_next_sibling=None) -> torch.Tensor:
    """sgl-kernel's ``tree_speculative_sampling_target_only``, verified by specops.

    Same parameters in the same order, same in-place outputs (``predicts``,
    ``accept_index``, ``accept_token_num``; see the module docstring for the layout);
    ``retrieve_*`` (older sgl-kernel) is accepted beside ``retrive_*``.  Every child is an
    arbitrary proposal (point-mass drafts, as in sgl-kernel, which ignores the draft
    probabilities).  ``draft_probs`` is ignored and never written; ``deterministic`` is
    ignored (specops is always deterministic).

    ``randomness="uniforms"`` (default, contract section 13): the caller's
    ``uniform_samples`` [bs, n] are the accept coins and
    ``uniform_samples_for_final_sampling`` [bs] the final draw, as in sgl-kernel; exact at
    ``threshold_single = threshold_acc = 1``; other thresholds in [0, 1] are sgl-kernel's
    NON-EXACT relaxation (``specops.reference.coins.threshold_tv`` measures it).
    ``randomness="philox"`` (implied by ``seed=`` or ``generator=``, and used when
    ``uniform_samples`` is None): ``verify_tree``'s exact walk with specops' Philox streams,
    seeded as the module docstring says; thresholds must then be 1.  (The oldest
    sgl-kernel form, without ``uniform_samples_for_final_sampling``, gets this mode too.)  ``backend`` and
    ``validate`` as in ``specops.verify_tree`` (validate defaults to False for CUDA
    tensors, so nothing synchronises).  Returns ``valid`` [bs] bool.
    """
    del deterministic                 # specops is always deterministic
    retrive_index, retrive_next_token, retrive_next_sibling = _spellings(
        retrive_index, retrive_next_token, retrive_next_sibling, retrieve_index,
        retrieve_next_token, retrieve_next_sibling)
    if _is_number(draft_probs):       # the newest sgl-kernel: (..., target_probs, ts, ta, det)
        threshold_single, threshold_acc = draft_probs, threshold_single
    if randomness not in ("uniforms", "philox"):
        raise ValueError(f"randomness must be 'uniforms' or 'philox', got {randomness!r}")
    if (randomness == "philox" or seed is not None or generator is not None
            or uniform_samples is None or uniform_samples_for_final_sampling is None):
        _check_thresholds(threshold_single, threshold_acc)
        return _run(predicts, accept_index, accept_token_num, candidates, retrive_index,
                    retrive_next_token, retrive_next_sibling, uniform_samples,
                    uniform_samples_for_final_sampling, target_probs, None, "rsd", seed,
                    offset, generator, backend, validate)
    return _run_coins(predicts, accept_index, accept_token_num, candidates, retrive_index,
                      retrive_next_token, retrive_next_sibling, uniform_samples,
                      uniform_samples_for_final_sampling, target_probs, threshold_single,
                      threshold_acc, validate, backend)


def tree_speculative_sampling_target_only_rejmask(
        predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
        candidates: torch.Tensor, retrive_index: Optional[torch.Tensor] = None,
        retrive_next_token: Optional[torch.Tensor] = None,
        retrive_next_sibling: Optional[torch.Tensor] = None,
        uniform_samples: Optional[torch.Tensor] = None,
        uniform_samples_for_final_sampling: Optional[torch.Tensor] = None,
        target_probs: Optional[torch.Tensor] = None, threshold_single: float = 1.0,
        threshold_acc: float = 1.0, deterministic: bool = True, **kw) -> torch.Tensor:
    """sgl-kernel's ``..._rejmask`` variant (signature without ``draft_probs``).  sgl-kernel
    keeps the rejected tokens in a bit mask instead of writing ``draft_probs``; its outputs
    equal the target-only kernel's, and so do these: the same walk (section 13)."""
    return tree_speculative_sampling_target_only(
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling, uniform_samples,
        uniform_samples_for_final_sampling, target_probs, None, threshold_single,
        threshold_acc, deterministic, **kw)


def verify_tree_greedy(predicts: torch.Tensor, accept_index: torch.Tensor,
                       accept_token_num: torch.Tensor, candidates: torch.Tensor,
                       retrive_index: Optional[torch.Tensor] = None,
                       retrive_next_token: Optional[torch.Tensor] = None,
                       retrive_next_sibling: Optional[torch.Tensor] = None,
                       target_predict: Optional[torch.Tensor] = None, *,
                       retrieve_index=None, retrieve_next_token=None,
                       retrieve_next_sibling=None, validate: Optional[bool] = None) -> None:
    """sgl-kernel's ``verify_tree_greedy``: accept the first child (next-sibling order) whose
    candidate equals ``target_predict`` at the last accepted node, for at most
    ``accept_index.shape[1] - 1`` levels; the token after the last accepted node is its
    ``target_predict``.  ``target_predict`` [bs, n] int64 is read, as in sgl-kernel, at the
    flat position ``retrive_index[b, node]``.  Outputs in place, as the sampling call."""
    retrive_index, retrive_next_token, retrive_next_sibling = _spellings(
        retrive_index, retrive_next_token, retrive_next_sibling, retrieve_index,
        retrieve_next_token, retrieve_next_sibling)
    _int_tensor("target_predict", target_predict, 2)
    B, N = candidates.shape
    if tuple(target_predict.shape) != (B, N):
        raise ValueError(f"target_predict must be [bs, n] = [{B}, {N}], got "
                         f"{tuple(target_predict.shape)}")
    S = _check_layout(predicts, accept_index, accept_token_num, candidates, retrive_index,
                      retrive_next_token, retrive_next_sibling, B, N, target_predict.device)
    tree = _checked_tree(retrive_next_token, retrive_next_sibling, S, N, validate)
    walk = greedy_walk(candidates, retrive_next_token, retrive_next_sibling, retrive_index,
                       target_predict, S)
    bad = tree.malformed
    walk = _Walked(torch.where(bad[:, None], -1, walk.token_ids),
                   torch.where(bad, 0, walk.num_accepted), walk.accepted_nodes, ~bad)
    _write_walk(walk, retrive_index, predicts, accept_index, accept_token_num, S, N)


def tree_speculative_sampling(
        predicts: torch.Tensor,                       # mutable
        accept_index: torch.Tensor,                   # mutable
        accept_token_num: torch.Tensor,               # mutable
        candidates: torch.Tensor,
        retrive_index: Optional[torch.Tensor] = None,
        retrive_next_token: Optional[torch.Tensor] = None,
        retrive_next_sibling: Optional[torch.Tensor] = None,
        uniform_samples: Optional[torch.Tensor] = None,
        uniform_samples_for_final_sampling: Optional[torch.Tensor] = None,
        target_probs: Optional[torch.Tensor] = None,
        draft_probs: Optional[torch.Tensor] = None,
        threshold_single: float = 1.0,
        threshold_acc: float = 1.0,
        deterministic: bool = True,
        *, method: str = "rsd", seed=None, offset=None,
        generator: Optional[torch.Generator] = None, backend: str = "auto",
        validate: Optional[bool] = None, retrieve_index=None, retrieve_next_token=None,
        retrieve_next_sibling=None) -> torch.Tensor:
    """The exact tree verification that uses the draft probabilities.

    Arguments and outputs as ``tree_speculative_sampling_target_only``, plus
    ``draft_probs`` [bs, n, vocab] float32 (required): row i is the draft distribution the
    children of node i were drawn from (sgl-kernel's indexing: the parent's row).
    ``method="rsd"``: the children were drawn without replacement in next-sibling order;
    ``"mss"``: i.i.d.; ``"traversal"`` / ``"traversal_iid"``: traversal verification (contract
    section 14: leaf to root, sequence-level acceptance) of children drawn without replacement
    / i.i.d.; ``"gbv"``: greedy multi-path block verification (section 15) when the tree is K
    i.i.d. chains of one length.  (Children not drawn from that row, such as EAGLE's top-k, need the
    target-only function.)  Returns ``valid`` [bs] bool.
    """
    del deterministic                 # specops is always deterministic
    retrive_index, retrive_next_token, retrive_next_sibling = _spellings(
        retrive_index, retrive_next_token, retrive_next_sibling, retrieve_index,
        retrieve_next_token, retrieve_next_sibling)
    if draft_probs is None:
        raise ValueError("tree_speculative_sampling needs draft_probs [bs, n, vocab] (row i: "
                         "the distribution the children of node i were drawn from); without "
                         "it use tree_speculative_sampling_target_only")
    if not isinstance(method, str) or method not in _contract.TREE_METHODS:
        raise ValueError(f"method must be one of {', '.join(_contract.TREE_METHODS)}, got "
                         f"{method!r}")
    _check_thresholds(threshold_single, threshold_acc)
    return _run(predicts, accept_index, accept_token_num, candidates, retrive_index,
                retrive_next_token, retrive_next_sibling, uniform_samples,
                uniform_samples_for_final_sampling, target_probs, draft_probs, method, seed,
                offset, generator, backend, validate)


# ----------------------------------------------------------------------------- section 13
def _spellings(ri, nt, ns, ri2, nt2, ns2):
    """retrive_* (current sgl-kernel) or retrieve_* (older releases), not both."""
    out = []
    for name, a, b in (("index", ri, ri2), ("next_token", nt, nt2),
                       ("next_sibling", ns, ns2)):
        if a is not None and b is not None:
            raise TypeError(f"both retrive_{name} and retrieve_{name} were given")
        if a is None and b is None:
            raise TypeError(f"retrive_{name} (or retrieve_{name}) is required")
        out.append(a if a is not None else b)
    return out


def _check_layout(predicts, accept_index, accept_token_num, candidates, retrive_index,
                  retrive_next_token, retrive_next_sibling, B, N, dev) -> int:
    for name, t, ndim in (("predicts", predicts, 1), ("accept_index", accept_index, 2),
                          ("accept_token_num", accept_token_num, 1)):
        _int_tensor(name, t, ndim)
        if t.dtype not in (torch.int32, torch.int64):   # tokens, -1 and slots must fit
            raise TypeError(f"{name} must be int32 or int64 (sgl-kernel's outputs), got "
                            f"{t.dtype}")
    for name, t in (("candidates", candidates), ("retrive_index", retrive_index),
                    ("retrive_next_token", retrive_next_token),
                    ("retrive_next_sibling", retrive_next_sibling)):
        _int_tensor(name, t, 2)
        if tuple(t.shape) != (B, N):
            raise ValueError(f"{name} must have shape [bs, n] = [{B}, {N}], got "
                             f"{tuple(t.shape)}")
    for name, t in (("predicts", predicts), ("accept_index", accept_index),
                    ("accept_token_num", accept_token_num), ("candidates", candidates),
                    ("retrive_index", retrive_index), ("retrive_next_token", retrive_next_token),
                    ("retrive_next_sibling", retrive_next_sibling)):
        if t.device != dev:
            raise ValueError(f"{name} is on {t.device}, the inputs on {dev}")
    if accept_index.shape[0] != B or accept_token_num.shape[0] != B:
        raise ValueError(f"accept_index must be [bs={B}, num_spec] and accept_token_num "
                         f"[bs={B}], got {tuple(accept_index.shape)} and "
                         f"{tuple(accept_token_num.shape)}")
    if accept_index.shape[1] < 1:
        raise ValueError("accept_index must have at least one column (num_spec >= 1)")
    return accept_index.shape[1]


def _checked_tree(nt, ns, S, N, validate):
    _args.check_validate(validate)
    tree = convert_tree(nt, ns, min(S, N) - 1)
    if _args.may_read(validate, nt) and _args.may_read(validate, ns):
        bad = tree.malformed.nonzero().flatten().tolist()
        if bad:
            raise ValueError(
                f"malformed sgl tree in request(s) {bad}: every retrive_next_token / "
                f"retrive_next_sibling entry must be -1 or in [0, n={N}), no node may be the "
                "target of two links, and no link may point at the root (node 0)")
    return tree


def _run_coins(predicts, accept_index, accept_token_num, candidates, retrive_index,
               retrive_next_token, retrive_next_sibling, uniform_samples,
               uniform_samples_for_final_sampling, target_probs, threshold_single,
               threshold_acc, validate, backend):
    """The section 13 walk (caller coins: ``specops::coin_walk`` on the resolved backend; an
    unknown name is a ValueError) and its in-place outputs."""
    if not isinstance(target_probs, torch.Tensor) or target_probs.dim() != 3:
        raise ValueError("target_probs must be a [bs, n, vocab] tensor, got "
                         f"{getattr(target_probs, 'shape', type(target_probs).__name__)}")
    if target_probs.dtype != torch.float32:
        raise TypeError(f"target_probs must be float32, got {target_probs.dtype}")
    th = check_thresholds(*(v.item() if isinstance(v, torch.Tensor) else v
                            for v in (threshold_single, threshold_acc)))
    B, N, V = target_probs.shape
    dev = target_probs.device
    S = _check_layout(predicts, accept_index, accept_token_num, candidates, retrive_index,
                      retrive_next_token, retrive_next_sibling, B, N, dev)
    for name, t, shape in (("uniform_samples", uniform_samples, (B, N)),
                           ("uniform_samples_for_final_sampling",
                            uniform_samples_for_final_sampling, (B,))):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            raise ValueError(f"{name} must be a {list(shape)} tensor (the caller's coins, "
                             f"section 13), got {getattr(t, 'shape', type(t).__name__)}")
        if not t.dtype.is_floating_point or t.device != dev:
            raise TypeError(f"{name} must be a float tensor on {dev}, got {t.dtype} on "
                            f"{t.device}")
    name = registry.resolve(backend, dev)
    tree = _checked_tree(retrive_next_token, retrive_next_sibling, S, N, validate)
    if _args.may_read(validate, candidates):
        bad = present_out_of_range(tree, candidates, V).any(1).nonzero().flatten().tolist()
        if bad:
            raise ValueError(f"candidates of request(s) {bad} hold a token outside "
                             f"[0, vocab={V}) at a node of the tree")
    D = max(0, min(S, N) - 1)
    walk = _Walked(*library.run_coin_walk(
        target_probs, candidates, retrive_next_token, retrive_next_sibling,
        uniform_samples.reshape(B, N), uniform_samples_for_final_sampling.reshape(B), D,
        th.single, th.acc, name, _args.eager_direct()))
    _write_walk(walk, retrive_index, predicts, accept_index, accept_token_num, S, N)
    return walk.valid


def _write_walk(walk, retrive_index, predicts, accept_index, accept_token_num, S, N):
    """A walk in sgl slots -> the three outputs (a malformed request, which the op emitted
    nothing for, writes 0 accepted and -1 at its root's ``predicts`` entry)."""
    B = retrive_index.shape[0]
    D = max(0, min(S, N) - 1)
    order = torch.arange(N, device=retrive_index.device).expand(B, N)
    _write_outputs(walk, order, retrive_index, predicts, accept_index, accept_token_num, D)


class _Walked(NamedTuple):
    token_ids: torch.Tensor
    num_accepted: torch.Tensor
    accepted_nodes: torch.Tensor
    valid: torch.Tensor
