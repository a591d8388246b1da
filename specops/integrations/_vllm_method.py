"""The chain method of the vLLM drop-ins (V1 and Model Runner V2): the argument, else
``SPECOPS_VLLM_METHOD``, else vLLM's own speculative config; checked against the contract's
method names (``specops._contract.CHAIN_METHODS``).  Imports nothing of vLLM."""
from __future__ import annotations

import os

from specops._contract import CHAIN_METHODS


def resolve_method(method, block_by_default: bool) -> str:
    if method is None:
        method = os.environ.get("SPECOPS_VLLM_METHOD", "").strip().lower() or (
            "block" if block_by_default else "token")
    if method not in CHAIN_METHODS:
        raise ValueError(f"specops' rejection sampler: method (or SPECOPS_VLLM_METHOD) "
                         f"must be one of {', '.join(map(repr, CHAIN_METHODS))}, got "
                         f"{method!r}")
    return method
