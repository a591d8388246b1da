"""What every backend may assume, checked once here for every op (and by their fakes).

The public layer (``specops._args``) only ever builds arguments that pass; these checks are
for direct callers of the ops, so that no backend has to define behaviour for arguments
outside the contract (and none does: they used to disagree, e.g. on a negative width).
"""
from __future__ import annotations

from specops._contract import CHAIN_METHODS, TREE_METHODS, check_method


def check_verify(max_k, method: str = "token", forced_num_accepted=None) -> None:
    """``max_k >= 0`` (the output width is max_k + 1); a known method; the forced mode
    (``forced_num_accepted``, reference section 7) is token-wise only."""
    if max_k < 0:
        raise ValueError(f"max_k must be >= 0 (the output width is max_k + 1), got {max_k}")
    check_method(method, CHAIN_METHODS)
    if forced_num_accepted is not None and method != "token":
        raise ValueError("forced_num_accepted (the forced mode, reference section 7) is "
                         f"token-wise only; got method={method!r}")


def check_tree(max_depth, method: str) -> None:
    """``max_depth >= 0`` (the output width is max_depth + 1); method "rsd", "mss",
    "traversal" or "traversal_iid"."""
    if max_depth < 0:
        raise ValueError(f"max_depth must be >= 0 (the output width is max_depth + 1), got "
                         f"{max_depth}")
    check_method(method, TREE_METHODS)
