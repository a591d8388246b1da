"""torch custom ops of specops, one per module.

Every op takes a ``backend`` string ("reference", "cpu" or "triton", already resolved by
``specops.api``) and dispatches to ``specops.backends.<backend>``; the CPU kernel serves CPU
tensors (C++ ``_C``, the numpy reference, or Triton's interpreter) and the CUDA kernel serves
CUDA tensors (Triton).  ``register_fake`` gives every output shape from input shapes alone,
so the ops trace under ``torch.compile(fullgraph=True)`` and CUDA graphs.
"""
from specops.ops.sampling_probs import sampling_probs_op
from specops.ops.accept import accept_op
from specops.ops.residual_sample import residual_sample_op
from specops.ops.verify import verify_op
from specops.ops.verify_method import verify_method_op
from specops.ops.verify_tree import verify_tree_op

__all__ = ["sampling_probs_op", "accept_op", "residual_sample_op", "verify_op",
           "verify_method_op", "verify_tree_op"]
