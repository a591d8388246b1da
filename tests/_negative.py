"""Negative controls: the reference walks with one documented primitive replaced by a
classic mistake, which the statistical tests must reject (so that they can fail).

The production oracle carries no test switch: the walks (``specops.reference.walk``,
``specops.reference.tree``) call their primitives by module-level name, and a control
substitutes one of them for the length of one call.  If a walk stopped calling a primitive
by that name, the substitution would change nothing, the control would pass the law test,
and the test that expects it to fail would fail: a control cannot silently go blind.
"""
from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np

from specops import reference as R
from specops.reference import tree as _tree
from specops.reference import walk as _walk


def _reused_uniform(seed, offset, position):
    """The draw's 64-bit uniform built from the accept uniform's own words (tag 0): the
    draw is then correlated with the test that rejected."""
    w0, w1 = R.stream_words(seed, offset, position, R.TAG_ACCEPT)[:2]
    return (int(w0) << 32) | int(w1)


# variant -> {name in the walk's module: substitute}
CHAIN = {
    "exact": {},
    # u = 0: every draft with p(y) > 0 passes its test (block: every stopping test passes)
    "always_accept": {"accept_uniform": lambda seed, offset, position: np.float64(0.0)},
    # after a rejection, draw from p instead of the residual (token and block walks)
    "wrong_fallback": {"residual_row": lambda p, q, y: np.asarray(p, dtype=np.float32),
                       "block_draw_weights": lambda p, q, y, rho: R.integer_weights(p)},
    "reused_uniform": {"sample_uniform64": _reused_uniform},
}
TREE = {
    "exact": {},
    # every child rejected: draw from p instead of the residual
    "wrong_fallback": {"final_weights": lambda p, Rw, A: R.integer_weights(p)},
    # the residual is not updated between sibling trials
    "no_residual": {"residual_update": lambda Rw, A, Qw, Q, y, point_mass: (Rw, A)},
}


def _substituted(module, substitutes: dict):
    return mock.patch.multiple(module, **substitutes) if substitutes else contextlib.nullcontext()


def verify_rows_variant(variant: str, *args, **kwargs):
    """``R.verify_rows_ref(*args, **kwargs)`` under the negative control ``variant``."""
    with _substituted(_walk, CHAIN[variant]):
        return R.verify_rows_ref(*args, **kwargs)


def verify_tree_variant(variant: str, *args, **kwargs):
    """``R.verify_tree_ref(*args, **kwargs)`` under the negative control ``variant``."""
    with _substituted(_tree, TREE[variant]):
        return R.verify_tree_ref(*args, **kwargs)
