"""The vocabulary-split verify pipeline: the launch sequence of its three stages.

1. ``split_transform``: statistics, [8 top-k radix rounds], masses, [8 top-p radix rounds],
   each a launch over (slot, vocabulary chunk);
2. ``split_accept``: the walk, one program per request;
3. ``split_draw``: the draw's weight sums, then the find, over (request, chunk).

The filter rounds are launched only when a filter can be on: a Python-number ``top_k`` of 0
or ``top_p`` of 1 (or final probabilities without draft logits) leaves them out; a tensor
brings them in (its values are not read: the rounds' programs of unfiltered rows return at
once).  No allocation or grid depends on a tensor value, so the sequence can be captured in
a CUDA graph.  Tokens equal the fused kernel's (``verify.py``) and the reference's.
"""
import dataclasses

import torch
import triton

from ._launch import block_v, chunk_size, launch_opts, next_pow2, row_args, verify_outputs
from ._split_common import DRAW_AT_WIDTH, DRAW_MASS_WIDTH, N_ROUNDS, STATS_WIDTH
from .split_accept import _walk_kernel
from .split_draw import _draw_find_kernel, _draw_sums_kernel
from .split_transform import _mass_kernel, _select_kernel, _stats_kernel

ROUNDS = int(N_ROUNDS)          # radix rounds per select (launches per filter)
PART_COUNTS = 3                 # per (slot, chunk): the counts of _split_common.summary
DRAW_SUMS = 4                   # per (request, chunk): sum W_r, sum W_p, bad, probs mass
RADIX_BINS = 16                 # _common.RADIX
SELECTS = 2                     # top-k, top-p


@dataclasses.dataclass
class SplitScratch:
    """Every buffer the pipeline's launches pass on, allocated in one place (``allocate``):
    S slots (rows), C vocabulary chunks, B requests (slots and chunks: ``_split_common``)."""
    part_max: torch.Tensor      # [S, C] float32: chunk max of x (greedy: of l)
    part_argmax: torch.Tensor   # [S, C] int32: its lowest index
    part_count: torch.Tensor    # [S, C, PART_COUNTS] int64: validity counts
    kept_mass: torch.Tensor     # [S, C] int64: mass top-k keeps, in 2**-40 units
    minp_mass: torch.Tensor     # [S, C] int64: mass top-k and min-p keep
    radix_hist: torch.Tensor    # [S or 1, SELECTS, N_ROUNDS, RADIX_BINS] int64 (atomics)
    radix_prefix: torch.Tensor  # [S or 1, SELECTS, N_ROUNDS] int64: key fixed before a round
    draw_at: torch.Tensor       # [B, DRAW_AT_WIDTH] int64: j*, y, draw, q_ok
    draw_stats: torch.Tensor    # [B, 2 * STATS_WIDTH] float32: target, draft row statistics
    draw_mass: torch.Tensor     # [B, DRAW_MASS_WIDTH] int64: their kept masses
    draw_sums: torch.Tensor     # [B, C, DRAW_SUMS] int64: chunk sums of the draw

    @classmethod
    def allocate(cls, B: int, S: int, C: int, filters: bool, device) -> "SplitScratch":
        i64 = dict(dtype=torch.int64, device=device)
        sel = S if filters else 1               # the radix buffers only when a filter runs
        return cls(part_max=torch.empty((S, C), dtype=torch.float32, device=device),
                   part_argmax=torch.empty((S, C), dtype=torch.int32, device=device),
                   part_count=torch.empty((S, C, PART_COUNTS), **i64),
                   kept_mass=torch.empty((S, C), **i64),
                   minp_mass=torch.empty((S, C), **i64),
                   radix_hist=torch.empty((sel, SELECTS, ROUNDS, RADIX_BINS), **i64),
                   radix_prefix=torch.empty((sel, SELECTS, ROUNDS), **i64),
                   draw_at=torch.empty((B, int(DRAW_AT_WIDTH)), **i64),
                   draw_stats=torch.empty((B, 2 * int(STATS_WIDTH)), dtype=torch.float32,
                                          device=device),
                   draw_mass=torch.empty((B, int(DRAW_MASS_WIDTH)), **i64),
                   draw_sums=torch.empty((B, C, DRAW_SUMS), **i64))

    def partials(self):
        """The stage-1 partials, in the kernels' argument order."""
        return (self.part_max, self.part_argmax, self.part_count, self.kept_mass,
                self.minp_mass, self.radix_hist, self.radix_prefix)

    def draw(self):
        """Each request's draw record, in the kernels' argument order."""
        return self.draw_at, self.draw_stats, self.draw_mass


def verify_split(target, target_is_probs, target_row_start, draft_ids, draft_row_start,
                 num_draft, draft, draft_is_probs, inv_temp, top_k, top_p, min_p, seed, offset,
                 max_k, forced_num_accepted, has_topk, has_topp):
    """Same arguments and results as ``verify.verify_fused`` (contiguous [B] tensors), and
    ``has_topk`` / ``has_topp``: whether a filter can be on (``dispatch.filters_on``)."""
    B = num_draft.shape[0]
    dev = target.device
    max_k = int(max_k)
    tok, nacc, valid = verify_outputs(B, max_k, dev)
    if B == 0:
        return tok, nacc, valid
    V = target.shape[1]
    rows, q_mode = row_args(target, target_row_start, draft_ids, draft_row_start, num_draft,
                            draft, draft_is_probs, inv_temp, top_k, top_p, min_p)
    logit_rows = (not target_is_probs) or q_mode == 2
    has_topk, has_topp = has_topk and logit_rows, has_topp and logit_rows
    n_target_slots = B * (max_k + 1)
    n_slots = n_target_slots + (B * max_k if q_mode == 2 else 0)
    chunk = chunk_size(V, dev)
    n_chunks = triton.cdiv(V, chunk)
    tile = min(block_v(V, dev), chunk)
    filters = has_topk or has_topp
    sc = SplitScratch.allocate(B, n_slots, n_chunks, filters, dev)
    opts = launch_opts(dev)
    sizes = dict(BLOCK_V=tile, MAXK_P2=max(16, next_pow2(max_k)))
    cp2 = next_pow2(n_chunks)
    tp = bool(target_is_probs)
    grid = (n_slots, n_chunks)
    dims = (V, max_k, n_target_slots, n_chunks)       # the kernels' V, MAXK, R, C
    _stats_kernel[grid](*rows, sc.part_max, sc.part_argmax, sc.part_count, sc.radix_hist,
                        *dims, chunk, T_PROBS=tp, FILTERS=filters, **sizes, **opts)
    for rnd in range(ROUNDS if has_topk else 0):
        _select_kernel[grid](*rows, sc.part_max, sc.part_argmax, sc.part_count, sc.kept_mass,
                             sc.radix_hist, sc.radix_prefix, *dims, chunk, rnd, T_PROBS=tp,
                             TOP_P=False, HAS_TOPK=True, **sizes, CP2=cp2, **opts)
    if logit_rows:
        _mass_kernel[grid](*rows, sc.part_max, sc.part_argmax, sc.part_count, sc.radix_hist,
                           sc.radix_prefix, sc.kept_mass, sc.minp_mass, *dims, chunk,
                           T_PROBS=tp, HAS_TOPK=has_topk, **sizes, CP2=cp2, **opts)
    for rnd in range(ROUNDS if has_topp else 0):
        _select_kernel[grid](*rows, sc.part_max, sc.part_argmax, sc.part_count, sc.kept_mass,
                             sc.radix_hist, sc.radix_prefix, *dims, chunk, rnd, T_PROBS=tp,
                             TOP_P=True, HAS_TOPK=has_topk, **sizes, CP2=cp2, **opts)
    forced = forced_num_accepted
    out_p2 = max(16, next_pow2(max_k + 1))
    _walk_kernel[(B,)](*rows, seed, offset, forced, *sc.partials(), *sc.draw(), tok, nacc,
                       valid, *dims, T_PROBS=tp, Q_MODE=q_mode, FORCED=forced is not None,
                       HAS_TOPK=has_topk, HAS_TOPP=has_topp, MAXK_P2=sizes["MAXK_P2"],
                       OUT_P2=out_p2, CP2=cp2, **opts)
    draw_rows = (target, target.stride(0), target_row_start, rows.q, rows.q_stride,
                 draft_row_start, inv_temp)
    _draw_sums_kernel[(B, n_chunks)](*draw_rows, *sc.draw(), sc.draw_sums, V, n_chunks, chunk,
                                     T_PROBS=tp, Q_MODE=q_mode, BLOCK_V=tile, **opts)
    _draw_find_kernel[(B, n_chunks)](*draw_rows, draft_ids, seed, offset, *sc.draw(),
                                     sc.draw_sums, tok, nacc, valid, V, max_k, n_chunks, chunk,
                                     T_PROBS=tp, Q_MODE=q_mode, BLOCK_V=tile, OUT_P2=out_p2,
                                     CP2=cp2, **opts)
    return tok, nacc, valid
