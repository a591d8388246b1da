"""specops: exact speculative-decoding verification.

``specops.verify_block`` is the one call an engine makes (``specops.verify_tree`` for draft
trees, ``specops.distributed.verify_block`` for vocabulary-sharded ranks);
``specops.reference`` is the executable specification every backend equals token for token.

The names below are loaded on first use (PEP 562), so ``import specops`` alone imports
neither torch nor a kernel: the command line (``specops --version``) starts at once.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = ["verify_block", "verify_block_unfused", "sampling_probs", "VerifyOutput",
           "RatedVerifyOutput", "verify_tree", "TreeVerifyOutput", "sample_without_replacement",
           "best_num_draft_tokens", "expected_tokens",
           "available_backends", "BackendUnavailable", "generate", "distributed",
           "__version__"]

_HOME = {
    "verify_block": "specops.api", "verify_block_unfused": "specops.api",
    "sampling_probs": "specops.api", "VerifyOutput": "specops.api",
    "RatedVerifyOutput": "specops.api",
    "verify_tree": "specops.tree", "TreeVerifyOutput": "specops.tree",
    "sample_without_replacement": "specops.drafting",
    "best_num_draft_tokens": "specops.planner", "expected_tokens": "specops.planner",
    "available_backends": "specops.backends.registry",
    "BackendUnavailable": "specops.backends.registry",
    "generate": "specops.integrations.hf",       # Hugging Face (needs transformers)
}
_SUBMODULES = ("distributed", "reference", "reference_tree", "api", "tree", "drafting",
               "planner", "ops", "backends", "integrations", "audit", "lab", "cli")


def _version() -> str:
    """The version written once, in pyproject.toml: from the installed metadata, or read from
    the source tree's pyproject.toml when specops runs from a checkout that was not
    installed."""
    from importlib import metadata
    try:
        return metadata.version("specops")
    except metadata.PackageNotFoundError:
        import os
        import tomllib
        path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "pyproject.toml")
        try:
            with open(path, "rb") as f:
                return tomllib.load(f)["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":
        value = _version()
    elif name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"specops.{name}")
    else:
        raise AttributeError(f"module 'specops' has no attribute {name!r}")
    if name != "generate":
        globals()[name] = value                  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


if TYPE_CHECKING:                                # what static type checkers see
    from specops import distributed  # noqa: F401
    from specops.api import (RatedVerifyOutput, VerifyOutput, sampling_probs,  # noqa: F401
                             verify_block, verify_block_unfused)
    from specops.backends.registry import BackendUnavailable, available_backends  # noqa: F401
    from specops.drafting import sample_without_replacement  # noqa: F401
    from specops.planner import best_num_draft_tokens, expected_tokens  # noqa: F401
    from specops.tree import TreeVerifyOutput, verify_tree  # noqa: F401
