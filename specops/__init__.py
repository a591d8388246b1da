"""specops: exact speculative-decoding verification.

``specops.verify_block`` is the one call an engine makes (``specops.verify_tree`` for draft
trees); ``specops.reference`` is the
executable specification every backend equals token for token.
"""
from specops.api import (RatedVerifyOutput, VerifyOutput, sampling_probs, verify_block,
                         verify_block_unfused)
from specops.backends.registry import BackendUnavailable, available_backends
from specops.planner import best_num_draft_tokens, expected_tokens
from specops.tree import TreeVerifyOutput, verify_tree
from specops.drafting import sample_without_replacement

__version__ = "0.1.0"

__all__ = ["verify_block", "verify_block_unfused", "sampling_probs", "VerifyOutput",
           "RatedVerifyOutput", "verify_tree", "TreeVerifyOutput", "sample_without_replacement",
           "best_num_draft_tokens", "expected_tokens",
           "available_backends", "BackendUnavailable", "generate", "__version__"]


def __getattr__(name):
    if name == "generate":          # Hugging Face integration, imported only when asked for
        from specops.integrations.hf import generate
        return generate
    raise AttributeError(f"module 'specops' has no attribute {name!r}")
