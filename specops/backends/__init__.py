"""Backends: one module per backend, each exposing the same two functions on torch tensors.

This is the internal interface between the torch custom ops (``specops/ops/``) and the
kernels.  The argument layer (``specops._args``) has already checked every argument and
turned both public layouts into this canonical flattened one, so a backend never sees a wrong
shape or dtype; the ops (``specops/ops/_preconditions.py``) guarantee ``max_k >= 0`` and
``max_depth >= 0``, a known ``method``, and the forced mode only with ``method="token"``, so no
backend defines behaviour outside those.  Values may be unchecked (``validate=False``, CUDA tensors, tracing): every backend
applies the reference's guards (section 8: a malformed request emits nothing) and never reads
out of bounds (it checks every row index against N / T, section 7).

Canonical arguments (B requests, V vocabulary):

* ``target``  [N, V] float32/bfloat16/float16 logits, or float32 probabilities when
  ``target_is_probs``; ``target.stride(1) == 1``, any row stride.  Request b's row j is
  ``target[target_row_start[b] + j]``.
* ``draft_ids`` [T] int64; request b's id j is ``draft_ids[draft_row_start[b] + j]``.
* ``draft`` [T, V] (same row indexing as draft_ids) float32 probs (``draft_is_probs``) or
  logits of any float dtype, or None (point-mass drafts); ``stride(1) == 1``.
* ``target_row_start``, ``draft_row_start``, ``num_draft``: [B] int64.
* ``inv_temp`` [B] float32 (0 = greedy), ``top_k`` [B] int64 (0 = off), ``top_p`` [B]
  float32 (1 = off), ``min_p`` [B] float32 (0 = off), ``seed`` [B] int64, ``offset`` [B]
  int64; ``max_k`` int (output width is max_k + 1).

Functions (all return new tensors on the input's device):

* ``verify(target, target_is_probs, target_row_start, draft_ids, draft_row_start, num_draft,
  draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_k,
  forced_num_accepted=None) -> (token_ids [B, max_k+1] int32, num_accepted [B] int32,
  valid [B] bool)`` == ``reference.verify_rows_ref``: the backend's one verification walk.
  ``forced_num_accepted`` [B] int (or None) is the forced mode of the reference's section 7.
  Keyword ``method`` ("token" or "block": section 9) and ``want_rates`` (append
  ``accept_rates`` [B, max_k] float32, section 10) are passed by ``specops::verify_method``.
* ``sampling_probs(logits [N, V], inv_temp [N], top_k [N], top_p [N], min_p [N])
  -> (probs [N, V] float32 contiguous, valid [N] bool)`` == ``reference.sampling_probs_ref``.

* ``verify_tree(target [B*N, V], target_is_probs, node_ids [B, N] int64, parents [B, N]
  int64, num_nodes [B] int64, draft [B*N, V] or None, draft_is_probs, inv_temp, top_k,
  top_p, min_p, seed, offset, max_depth: int, method: "rsd" | "mss" | "traversal" |
  "traversal_iid") -> (token_ids
  [B, max_depth+1] int32, num_accepted [B] int32, accepted_nodes [B, max_depth] int32,
  valid [B] bool)`` == ``reference.verify_tree_ref`` (section 11), or
  ``reference.verify_traversal_ref`` (section 14) for the traversal methods (a backend without
  them raises ValueError naming the method): node n of request b reads
  target / draft row ``b * N + n``.

The single-purpose accept and residual-sample steps are views over ``verify`` (see
``specops/ops/accept.py`` and ``specops/ops/residual_sample.py``), not separate walks.
Per-request [B] tensors may have any stride along B, including 0 (an expanded scalar).
``inv_temp``, ``top_k``, ``top_p``, ``min_p``, ``seed`` and ``offset`` may also be Python
numbers (float / int, float32-rounded; range-checked unless ``validate=False``) shared by
every request: eager
public calls pass scalar parameters this way; the registered op always passes tensors.
"""
