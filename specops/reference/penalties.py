"""Grammar masks and penalties on the target rows (contract: ``specops.reference``, section 16).

A target row is replaced by its *adjusted logits* before section 2's transform: vLLM's
penalties (repetition on tokens seen in the prompt or the output, then frequency and presence
on output counts), then the grammar mask (a forbidden token's logit becomes -inf).  The
history of a row is the request's committed output plus the drafts before the row (a chain's
row j: ``y_0..y_{j-1}``; a tree node's row: the tokens of its path from the root).  The draft
rows are never adjusted: q is the law the drafts were drawn from.

``Adjust`` holds one request's mask rows, penalties and history; ``Adjust.row(index, logits,
path)`` is the adjusted row a walk reads (``path``: the drafted tokens before that row).  The
walks take it as a hook, so every method (sections 1, 9, 11, 14, 15) verifies against the
adjusted target unchanged.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

WORD_BITS = 32


def mask_words(V: int) -> int:
    """Words of a mask row: ``ceil(V / 32)``."""
    return (V + WORD_BITS - 1) // WORD_BITS


def allowed_tokens(mask_row, V: int) -> np.ndarray:
    """bool [V] of one mask row (int32 words, two's complement): bit j of word w allows token
    ``32 w + j``; bits at or past V are ignored."""
    words = np.asarray(mask_row).astype(np.int64) & 0xFFFFFFFF
    t = np.arange(V)
    return ((words[t // WORD_BITS] >> (t % WORD_BITS)) & 1).astype(bool)


def ids_ok(ids, V: int) -> bool:
    """History ids are -1 (padding) or in [0, V)."""
    ids = np.asarray(ids).reshape(-1)
    return bool(((ids == -1) | ((ids >= 0) & (ids < V))).all())


def counts_of(ids, V: int) -> np.ndarray:
    """int64 [V]: occurrences of each token among ``ids`` (-1 ignored)."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    ids = ids[(ids >= 0) & (ids < V)]          # (another id makes the request malformed)
    return np.bincount(ids, minlength=V).astype(np.int64)


def penalties_ok(rep, pres, freq) -> bool:
    """``repetition_penalty`` finite and > 0; ``presence_penalty`` and ``frequency_penalty``
    finite (float32 values; section 8: a request with others is malformed)."""
    rep, pres, freq = np.float32(rep), np.float32(pres), np.float32(freq)
    return bool(np.isfinite(rep) and rep > 0 and np.isfinite(pres) and np.isfinite(freq))


def penalized(l, counts, seen, rep, pres, freq) -> np.ndarray:
    """vLLM's penalties on one row, float32, each operation rounded: on every token seen in
    the prompt or the output (``seen``) ``x = l / rep`` if ``l > 0`` else ``x = l * rep``; then
    ``x = x - float32(freq) * float32(count)`` and ``x = x - (pres if count > 0 else 0)``."""
    l = np.asarray(l).astype(np.float32)
    rep, pres, freq = np.float32(rep), np.float32(pres), np.float32(freq)
    x = l
    if rep != 1:
        x = np.where(seen, np.where(l > 0, l / rep, l * rep), l).astype(np.float32)
    if freq != 0:
        x = (x - freq * counts.astype(np.float32)).astype(np.float32)
    if pres != 0:
        x = (x - np.where(counts > 0, pres, np.float32(0))).astype(np.float32)
    return x


class Adjust:
    """One request's section-16 inputs as the walks use them: ``mask`` [rows, W] int32 (the
    target's rows, indexed as the target; None: no mask), the penalties (numbers) and the
    committed ``prompt`` / ``output`` ids (-1 padded; None: empty)."""

    def __init__(self, V: int, mask=None, rep=1.0, pres=0.0, freq=0.0,
                 prompt: Optional[Sequence] = None, output: Optional[Sequence] = None):
        self.V, self.mask = V, mask
        self.rep, self.pres, self.freq = np.float32(rep), np.float32(pres), np.float32(freq)
        self.penalties = self.rep != 1 or self.pres != 0 or self.freq != 0
        self.base = counts_of([] if output is None else output, V)
        prompt_seen = counts_of([] if prompt is None else prompt, V) > 0
        self.prompt_seen = prompt_seen

    def allows_some(self, index: int) -> bool:
        """Target row ``index`` allows at least one token (else the request is malformed)."""
        return self.mask is None or bool(allowed_tokens(self.mask[index], self.V).any())

    def row(self, index: int, logits, path: Sequence[int] = ()) -> np.ndarray:
        """The adjusted logits (float32 [V]) of target row ``index`` after the drafted tokens
        ``path`` (the history beyond the committed output)."""
        x = np.asarray(logits).astype(np.float32)
        if self.penalties:
            counts = self.base + counts_of(list(path), self.V)
            x = penalized(x, counts, self.prompt_seen | (counts > 0), self.rep, self.pres,
                          self.freq)
        if self.mask is not None:
            x = np.where(allowed_tokens(self.mask[index], self.V), x,
                         np.float32(-np.inf)).astype(np.float32)
        return x


def adjust_of(b: int, V: int, mask=None, row_of=None, rep=None, pres=None, freq=None,
              prompt=None, output=None) -> Optional[Adjust]:
    """Request b's ``Adjust`` from batched inputs ([B] penalties, [B, *] ids; ``mask`` indexed
    by target row), or None when nothing applies (no mask, every penalty off)."""
    def at(v, default):
        return default if v is None else v[b]
    r, p, f = at(rep, 1.0), at(pres, 0.0), at(freq, 0.0)
    if mask is None and np.float32(r) == 1 and np.float32(p) == 0 and np.float32(f) == 0:
        return None
    return Adjust(V, mask, r, p, f, None if prompt is None else prompt[b],
                  None if output is None else output[b])


def adjust_ok(adjust: Adjust, target_is_probs: bool, params, b: int, prompt, output,
              rows: Sequence[int]) -> bool:
    """Section 16's malformed request: masks or penalties with target probabilities, a
    penalty out of range, a history id outside [-1, V), or a target row the walk may read
    (``rows``) that allows no token."""
    if target_is_probs or not penalties_ok(adjust.rep, adjust.pres, adjust.freq):
        return False
    for ids in (prompt, output):
        if ids is not None and not ids_ok(ids[b], adjust.V):
            return False
    return all(adjust.allows_some(r) for r in rows)


def path_tokens(c: int, parents, node_ids) -> list:
    """The drafted tokens of the path from the root to node c (the root's own id excluded):
    a tree row's history beyond the committed output."""
    out = []
    while c > 0:
        out.append(int(node_ids[c]))
        c = int(parents[c])
    return out[::-1]


def tree_adjust(b: int, V: int, target_is_probs: bool, params, depth, mask=None, rep=None,
                pres=None, freq=None, prompt=None, output=None):
    """(ok, Adjust or None) of tree request b (``mask`` [B, N, W], rows by node): not ok when
    section 16 makes the request malformed (a present node's row that allows nothing among
    the rest)."""
    adj = adjust_of(b, V, None if mask is None else mask[b], None, rep, pres, freq, prompt,
                    output)
    if adj is None:
        return True, None
    present = [n for n in range(len(depth)) if depth[n] >= 0]
    return adjust_ok(adj, target_is_probs, params, b, prompt, output, present), adj


def adjusted_tree_walk(walk, target, target_is_probs, node_ids, parents, num_nodes, draft,
                       draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                       max_depth: int, method: str, allowed_token_bitmask=None,
                       repetition_penalty=None, presence_penalty=None, frequency_penalty=None,
                       prompt_token_ids=None, output_token_ids=None):
    """A tree walk (``verify_tree_ref``, ``verify_traversal_ref``, ``verify_gbv_ref``) with
    section 16: each present node's target row is replaced by its adjusted logits (history:
    the node's path), and a request that section 16 makes malformed is walked as one whose
    parameters are (NaN temperature: nothing read, nothing emitted).  ``allowed_token_bitmask``
    [B, N, W] int32; penalties [B]; ids [B, *]."""
    from .tree import request_depths
    extra = (allowed_token_bitmask, repetition_penalty, presence_penalty, frequency_penalty,
             prompt_token_ids, output_token_ids)
    target = np.asarray(target)
    if all(v is None for v in extra):
        return walk(target, target_is_probs, node_ids, parents, num_nodes, draft,
                    draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset, max_depth,
                    method)
    B, N, V = target.shape
    adjusted = target.astype(np.float32) if not target_is_probs else target.copy()
    inv = np.array(inv_temp, dtype=np.float32, copy=True)
    for b in range(B):
        params = (inv_temp[b], top_k[b], top_p[b], min_p[b])
        depth = request_depths(params, target_is_probs, parents[b], num_nodes[b], node_ids[b],
                               V, max(int(max_depth), 0))
        if depth is None:
            continue                                     # malformed already
        ok, adj = tree_adjust(b, V, target_is_probs, params, depth, *extra)
        if not ok:
            inv[b] = np.nan                              # malformed (section 16)
        elif adj is not None:
            for n in range(N):
                if depth[n] >= 0:
                    adjusted[b, n] = adj.row(n, target[b, n],
                                             path_tokens(n, parents[b], node_ids[b]))
    return walk(adjusted, target_is_probs, node_ids, parents, num_nodes, draft, draft_is_probs,
                inv, top_k, top_p, min_p, seed, offset, max_depth, method)
