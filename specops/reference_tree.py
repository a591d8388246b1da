"""Tree verification in the reference: kept as a name so that ``specops.reference_tree.X``
goes on working.  The code lives in ``specops/reference/tree.py`` (the walk) and
``specops/reference/tree_law.py`` (the exact law); the contract is section 11 of
``specops.reference``."""
from specops.reference.tree import (METHODS, SCALE, _ratio, children_of, coin_accepts,
                                    coin_probability, draft_weights, final_weights,
                                    remove_token, residual_update, tree_depths,
                                    verify_tree_ref)
from specops.reference.tree_law import _draft_sibling_laws, exact_tree_law

__all__ = [
    "METHODS", "SCALE", "_ratio", "children_of", "coin_accepts", "coin_probability",
    "draft_weights", "final_weights", "remove_token", "residual_update", "tree_depths",
    "verify_tree_ref", "_draft_sibling_laws", "exact_tree_law"
]
