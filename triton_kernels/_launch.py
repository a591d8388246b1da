"""Host-side launch helpers shared by the launchers."""
import os

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


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))
