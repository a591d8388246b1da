"""What the contract accepts: valid rows (section 3) and well-formed requests (section 8)."""
from __future__ import annotations

import numpy as np

from .constants import DRAFT_MASS_TOLERANCE, P_CHECK_BITS


def params_ok(inv_t, top_k, top_p, min_p) -> bool:
    """The sampling parameters of one request are inside the contract (section 8)."""
    inv_t, top_p, min_p = np.float32(inv_t), np.float32(top_p), np.float32(min_p)
    return bool(0 <= inv_t < np.inf and int(top_k) >= 0 and 0 < top_p <= 1
                and 0 <= min_p <= 1)


def request_ok(inv_t, top_k, top_p, min_p, target_is_probs, num_draft, max_k, draft_ids,
               d0, V) -> bool:
    """Request b is not malformed (section 8)."""
    if not params_ok(inv_t, top_k, top_p, min_p):
        return False
    if target_is_probs and not (np.float32(inv_t) in (0, 1) and int(top_k) == 0
                                and np.float32(top_p) == 1 and np.float32(min_p) == 0):
        return False
    nd = int(num_draft)
    if not 0 <= nd <= max_k:
        return False
    for j in range(nd):
        if 0 <= d0 + j < draft_ids.size and not -1 <= int(draft_ids[d0 + j]) < V:
            return False
    return True


def logits_row_valid(x: np.ndarray) -> bool:
    x = np.asarray(x, dtype=np.float32)
    return bool(not np.isnan(x).any() and not np.isposinf(x).any()
                and x.size > 0 and not np.isneginf(x).all())


def probs_row_valid(p: np.ndarray) -> bool:
    p = np.asarray(p, dtype=np.float32)
    if not ((p >= 0) & (p <= 1)).all():
        return False
    mass = int(np.trunc(p.astype(np.float64) * 2.0 ** P_CHECK_BITS).astype(np.int64).sum())
    return 0 < mass <= (1 << (P_CHECK_BITS + 2))


def draft_value_ok(v) -> bool:
    """A draft_probs value the accept test read is a probability: finite, in [0, 1]."""
    return bool(0 <= np.float32(v) <= 1)


def draft_row_ok(q: np.ndarray) -> bool:
    """A draft_probs row is a probability row (section 8's check): every entry in [0, 1]
    (NaN fails) and ``|sum trunc(q * 2**32) - 2**32| <= DRAFT_MASS_TOLERANCE``."""
    q = np.asarray(q, dtype=np.float32)
    if not ((q >= 0) & (q <= 1)).all():
        return False
    mass = int(np.trunc(q.astype(np.float64) * 2.0 ** P_CHECK_BITS).astype(np.int64).sum())
    return abs(mass - (1 << P_CHECK_BITS)) <= DRAFT_MASS_TOLERANCE
