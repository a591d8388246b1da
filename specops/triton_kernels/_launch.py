"""Host-side launch helpers shared by the launchers, and the bandwidth model (H200
constants) that chooses the verify path from the shapes."""
import os
from typing import NamedTuple

import torch
import triton

# Whether the kernels run in Triton's interpreter: decided by Triton when they are decorated
# (TRITON_INTERPRET, read through triton.knobs), just after this module is imported.
INTERPRETED = bool(triton.knobs.runtime.interpret)

GPU_BLOCK_V = 1024          # one tile size on the GPU: fewer compiled variants
INTERPRETER_MAX_BLOCK_V = 4096


def block_v(V: int, device) -> int:
    """Vocabulary tile.  Larger tiles under the interpreter (per-op overhead dominates)."""
    forced = os.environ.get("SPECOPS_TRITON_BLOCK_V")     # testing / tuning override
    if forced:
        return max(16, triton.next_power_of_2(int(forced)))
    if device.type == "cuda" and not INTERPRETED:
        return GPU_BLOCK_V
    return max(16, min(INTERPRETER_MAX_BLOCK_V, triton.next_power_of_2(max(int(V), 1))))


def launch_opts(device) -> dict:
    # enable_fp_fusion=False: no FMA contraction, so every float op rounds like the reference
    opts = {"enable_fp_fusion": False}
    if device.type == "cuda" and not INTERPRETED:
        opts["num_warps"] = 8
    return opts


def verify_outputs(B: int, max_k: int, device):
    """(token_ids [B, max_k + 1] int32, num_accepted [B] int32, valid [B] bool), unfilled."""
    return (torch.empty((B, max_k + 1), dtype=torch.int32, device=device),
            torch.empty((B,), dtype=torch.int32, device=device),
            torch.empty((B,), dtype=torch.bool, device=device))


def tree_outputs(B: int, depth: int, device):
    """(token_ids [B, depth + 1] int32, num_accepted [B] int32, accepted_nodes [B, depth]
    int32, valid [B] bool), unfilled: every tree walk's outputs."""
    tok, nacc, valid = verify_outputs(B, depth, device)
    return tok, nacc, torch.empty((B, depth), dtype=torch.int32, device=device), valid


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


class RowArgs(NamedTuple):
    """The leading arguments of every chain kernel (per-request and split), in the kernels'
    order: target rows, row starts, id counts, the draft rows (the target itself for
    point-mass drafts, never read) and the sampling parameters."""
    target: torch.Tensor
    t_stride: int
    N: int                      # target rows
    target_row_start: torch.Tensor
    draft_ids: torch.Tensor
    draft_row_start: torch.Tensor
    num_draft: torch.Tensor
    n_ids: int                  # draft ids in the id tensor
    n_draft_rows: int           # draft indices in [0, n_draft_rows) exist
    q: torch.Tensor             # draft rows (or the target: point-mass drafts)
    q_stride: int
    inv_temp: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor


def q_mode_of(draft, draft_is_probs) -> int:
    """The kernels' Q_MODE: 0 point-mass drafts (no q), 1 draft probs, 2 draft logits."""
    return 0 if draft is None else (1 if draft_is_probs else 2)


def row_args(target, target_row_start, draft_ids, draft_row_start, num_draft, draft,
             draft_is_probs, inv_temp, top_k, top_p, min_p):
    """-> (RowArgs, Q_MODE)."""
    n_ids = draft_ids.numel()
    n_draft_rows = n_ids if draft is None else min(n_ids, draft.shape[0])
    q = target if draft is None else draft
    return RowArgs(target, target.stride(0), target.shape[0], target_row_start, draft_ids,
                   draft_row_start, num_draft, n_ids, n_draft_rows, q, q.stride(0), inv_temp,
                   top_k, top_p, min_p), q_mode_of(draft, draft_is_probs)


class TreeLaunch(NamedTuple):
    """What every tree launcher derives from its arguments before allocating scratch."""
    B: int
    N: int
    V: int
    D: int              # max_depth, at least 0
    outputs: tuple      # tree_outputs(B, D), unfilled
    q: torch.Tensor     # the draft rows (the target for point-mass drafts: never read)
    q_mode: int         # q_mode_of


def tree_launch(target, node_ids, draft, draft_is_probs, max_depth) -> TreeLaunch:
    B, N = node_ids.shape
    D = max(int(max_depth), 0)
    return TreeLaunch(B, N, target.shape[1], D, tree_outputs(B, D, target.device),
                      target if draft is None else draft, q_mode_of(draft, draft_is_probs))


def tree_sizes(N: int, depth: int, V: int, device) -> dict:
    """Tile and power-of-2 sizes of a tree kernel: BLOCK_V, N_P2 (node lanes), OUT_P2."""
    return dict(BLOCK_V=block_v(V, device), N_P2=max(16, next_pow2(N)),
                OUT_P2=max(16, next_pow2(depth + 1)))


def walk_sizes(max_k: int, V: int, device) -> dict:
    """Tile and power-of-2 sizes of a per-request kernel: BLOCK_V, MAXK_P2, OUT_P2."""
    return dict(BLOCK_V=block_v(V, device), MAXK_P2=max(16, next_pow2(max_k)),
                OUT_P2=max(16, next_pow2(max_k + 1)))


# ----------------------------------------------------------------------------- pipeline
# The H200 bandwidth model: which verify path is faster is decided from shapes alone (no
# tensor value), so the choice never syncs.  bench/gpu_model.py reads these constants and
# reports what the model implies for the interpreter's counts of bytes and launches.
MODEL_HBM_BPS = 4.8e12          # HBM3e bandwidth, bytes/s
MODEL_N_SM = 132                # SMs
MODEL_SM_BPS = 50e9             # ASSUMPTION: one SM streams ~40-60 GB/s; one program per SM
MODEL_LAUNCH_S = 2.5e-6         # one eager launch
MODEL_GRAPH_LAUNCH_S = 1e-6     # one launch under CUDA-graph replay
GPU_CHUNK = 4096                # vocabulary chunk of one split program on the GPU


def chunk_size(V: int, device) -> int:
    """Vocabulary chunk of the split pipeline (a power of 2, a multiple of the tile)."""
    forced = os.environ.get("SPECOPS_TRITON_CHUNK")       # testing / tuning override
    if forced:
        return max(16, triton.next_power_of_2(int(forced)))
    if device.type == "cuda" and not INTERPRETED:
        return GPU_CHUNK
    return max(16, triton.next_power_of_2(-(-int(V) // 4)))   # ~4 chunks: the tests combine


def split_launches(has_topk: bool, has_topp: bool, logit_rows: bool) -> int:
    """Launches of one split verify: stats, [8 top-k rounds], mass, [8 top-p rounds], walk,
    draw sums, draw find."""
    n = 4 + (1 if logit_rows else 0)
    return n + 8 * (has_topk and logit_rows) + 8 * (has_topp and logit_rows)


def use_split(B: int, K: int, V: int, elem: int, q_bytes: int, has_topk: bool,
              has_topp: bool, logit_rows: bool, chunk: int) -> bool:
    """SPECOPS_TRITON_PIPELINE=split|fused forces a path; auto compares the model's times:
    the fused kernel is one launch but one program per request, the split pipeline spreads
    (row, chunk) programs over the GPU at the cost of more launches."""
    forced = os.environ.get("SPECOPS_TRITON_PIPELINE", "auto")
    if forced in ("split", "fused"):
        return forced == "split"
    if forced != "auto":
        raise ValueError("SPECOPS_TRITON_PIPELINE must be auto, split or fused, got "
                         f"{forced!r}")
    passes = (2 if logit_rows else 1) + 8 * has_topk + 8 * has_topp
    row_bytes = V * elem
    total = B * ((K + 1) * row_bytes * passes + K * V * q_bytes + 2 * row_bytes)
    t_fused = max(total / MODEL_HBM_BPS, total / max(B, 1) / MODEL_SM_BPS) + MODEL_LAUNCH_S
    programs = max(B * (K + 1) * -(-V // chunk), 1)
    t_split = (max(total / MODEL_HBM_BPS, total / programs / MODEL_SM_BPS)
               + split_launches(has_topk, has_topp, logit_rows) * MODEL_LAUNCH_S)
    return t_split < t_fused
