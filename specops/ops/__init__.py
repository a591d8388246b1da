"""The torch ops of specops: ``library`` defines every op (schemas, kernels, fakes); ``views``
composes the single-purpose accept and residual-sample steps from ``specops::verify``."""
from specops.ops.library import coin_walk_op, sampling_probs_op, verify_op, verify_tree_op
from specops.ops.views import accept_op, residual_sample_op

__all__ = ["verify_op", "verify_tree_op", "sampling_probs_op", "coin_walk_op", "accept_op",
           "residual_sample_op"]
