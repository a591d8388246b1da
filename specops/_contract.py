"""Rules of the contract (``specops.reference``) written once on the torch side.

The numpy reference, the C++ path and the Triton kernels each spell these rules in their own
language; every torch module of specops (the argument layer, the unfused composition, the
sharded walk of ``specops.distributed``, the drafting helper, the ops) uses this module:

* the method names (sections 1, 9, 11, 14);
* the malformed-parameter predicate (section 8), evaluated on the device;
* the accept test and the clamp of the acceptance rates (sections 1, 10);
* Philox4x32-10 and the streams (section 4), and the exact 128-bit product of the integer
  draw (section 5), in torch int64 arithmetic on any device.
"""
from __future__ import annotations

import torch

from specops.reference import (PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1,
                               W_SCALE_BITS)

CHAIN_METHODS = ("token", "block")        # verify_block: section 1 / section 9
TREE_METHODS = ("rsd", "mss", "traversal", "traversal_iid", "gbv")  # sections 11, 14, 15
TRAVERSAL_METHODS = ("traversal", "traversal_iid")          # section 14
IID_METHODS = ("mss", "traversal_iid", "gbv")   # tree methods whose siblings are i.i.d.
ANY_TREE_METHODS = ("rsd", "mss", "traversal", "traversal_iid")   # any shape; gbv: K chains
M32 = 0xFFFFFFFF


def check_method(method, methods=CHAIN_METHODS) -> str:
    """``method`` if it is one of ``methods``, else ValueError naming the argument."""
    if not isinstance(method, str) or method not in methods:
        raise ValueError(f"method must be {' or '.join(map(repr, methods))}, got {method!r}")
    return method


# ----------------------------------------------------------------------------- section 8
def malformed_params(inv_temp, top_k, top_p, min_p, target_is_probs: bool) -> torch.Tensor:
    """[B] bool: the request's sampling parameters are malformed (reference section 8: inv_t
    NaN, negative or +inf; top_k < 0; top_p outside (0, 1]; min_p outside [0, 1]; with target
    probabilities, inv_t not 0 or 1 or a filter on).  Computed on the tensors' device."""
    ok = ((inv_temp >= 0) & (inv_temp < float("inf")) & (top_k >= 0) & (top_p > 0)
          & (top_p <= 1) & (min_p >= 0) & (min_p <= 1))
    if target_is_probs:
        ok &= ((inv_temp == 0) | (inv_temp == 1)) & (top_k == 0) & (top_p == 1) & (min_p == 0)
    return ~ok


# ----------------------------------------------------------------------------- sections 1, 10
def accepts(u: torch.Tensor, q_y: torch.Tensor, p_y: torch.Tensor) -> torch.Tensor:
    """The accept test of section 1 in float64: ``p(y) > 0 and u * q(y) < p(y)`` (a token
    the target cannot emit is never accepted, whatever an unchecked draft row holds)."""
    return (p_y > 0) & (u * q_y < p_y)


def rate_of_sum(S: torch.Tensor) -> torch.Tensor:
    """beta of section 10 from its integer sum at scale 2**60: float32, at most 1."""
    return (S.double() * 2.0 ** -W_SCALE_BITS).float().clamp(max=1.0)


# ----------------------------------------------------------------------------- sections 4, 5
def _mul32(a: torch.Tensor, b):
    """(hi, lo) 32-bit words of a * b for a, b in [0, 2**32), in int64 without overflow."""
    t_lo = (a & 0xFFFF) * b                    # < 2**48
    t_hi = (a >> 16) * b                       # < 2**48
    lo = (((t_hi & 0xFFFF) << 16) + t_lo) & M32
    hi = (t_hi + (t_lo >> 16)) >> 16
    return hi, lo


def philox4x32(c0, c1, c2, c3, k0, k1, rounds: int = PHILOX_ROUNDS):
    """Philox4x32-R on int64 tensors holding uint32 values (broadcast); four int64 words,
    equal to ``specops.reference.philox4x32`` word for word."""
    c0, c1, c2, c3, k0, k1 = torch.broadcast_tensors(c0, c1, c2, c3, k0, k1)
    for r in range(rounds):
        if r:
            k0 = (k0 + PHILOX_W0) & M32
            k1 = (k1 + PHILOX_W1) & M32
        hi0, lo0 = _mul32(c0, PHILOX_M0)
        hi1, lo1 = _mul32(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def words(v: torch.Tensor):
    """int64 (two's complement) -> (low, high) uint32 words as int64."""
    return v & M32, (v >> 32) & M32


def stream(seed: torch.Tensor, offset: torch.Tensor, positions: int, tag: int):
    """Philox words (w0, w1) [B, positions] of every request's stream at (j, tag)."""
    j = torch.arange(positions, device=seed.device, dtype=torch.int64)[None, :]
    s0, s1 = words(seed)
    o0, o1 = words(offset)
    w0, w1, _, _ = philox4x32(j, torch.full_like(j, tag), o0[:, None], o1[:, None],
                              s0[:, None], s1[:, None])
    return w0, w1


def mulhi64(U: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """floor(U * S / 2**64) for U a 64-bit pattern held in int64 and 0 <= S < 2**63: the
    exact 128-bit product in 32-bit limbs."""
    u0, u1 = words(U)
    s0, s1 = words(S)
    h00, _ = _mul32(u0, s0)
    h01, l01 = _mul32(u0, s1)
    h10, l10 = _mul32(u1, s0)
    h11, l11 = _mul32(u1, s1)
    w1 = h00 + l01 + l10                               # < 3 * 2**32
    w2 = h01 + h10 + l11 + (w1 >> 32)
    return ((h11 + (w2 >> 32)) << 32) | (w2 & M32)     # < 2**63 since S < 2**63
