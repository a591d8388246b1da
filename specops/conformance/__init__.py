"""``specops check``: an exactness conformance kit engines run against their own samplers.

Needs scipy: ``pip install "specops[check]"`` (``import specops`` does not load it).

**The chain protocol** (as simple as FlashInfer's call)::

    sampler(target_probs,      # [B, K+1, V] float32: row j = the target after the prefix
            draft_probs,       # [B, K, V] float32: row j = q the draft y_j was sampled from,
                               #   or None: point-mass drafts (n-gram style)
            draft_token_ids,   # [B, K] int64
            seeds)             # [B] int64: request b's randomness comes from seeds[b]
        -> token_ids           # [B, K+1]: accepted drafts, the emitted token, then -1

The arguments are CPU torch tensors (contiguous, fresh for every call: the sampler may move
them to its device, or modify them), passed positionally, so the parameter names are the
sampler's own.  It may return a torch tensor (any device), a numpy array or a nested list, of
any integer dtype, shaped [B, K+1]; request b's row is its accepted drafts, then the one
emitted token (the residual draw after a rejection, or the bonus token), then -1 up to K+1.
The randomness must be per request, drawn from ``seeds[b]`` alone: the same seed gives the
same row whatever the batch around it (a stream shared by the batch fails
``seeds.batch_invariant`` and ``coupling.batch``); a sampler that ignores the seeds is
reported as *unseeded*, not failed.  Each call must return within ``timeout`` seconds
(default 300; ``runner`` says how the limit works).

**The tree protocol** (the same conventions)::

    sampler(target_probs,      # [B, N, V] float32: row n = the target after the path root..n
            draft_probs,       # [B, N, V] float32: row n = q the children of n were drawn
                               #   from, or None (target_only: point-mass proposals)
            node_token_ids,    # [B, N] int64 (node 0 = the root, its id ignored)
            parent_ids,        # [B, N] int64 (-1 for the root, parent < node)
            seeds,             # [B] int64
            method)            # "rsd" | "mss" | "target_only" (a str)
        -> token_ids           # [B, D+1]: the accepted path, the emitted token, then -1

The kit drafts the inputs itself with the law each method assumes (chain: drafts from q, or a
fixed point-mass drafter; rsd: siblings without replacement from q; mss: i.i.d.; target_only:
the draft's top tokens as arbitrary proposals), runs the sampler on the designs of
``designs``, and compares what comes back with the exact laws of ``specops.reference``
(``laws``) by calibrated tests (``stats``, ``checks``).  ``check_chain`` / ``check_tree``
return a ``Report``: ``assert specops.conformance.check_chain(my_sampler).passed`` in an
engine's own pytest.  Ready adapters for engines' samplers: ``specops.conformance.adapters``;
known-bad samplers the kit must fail: ``specops.conformance.negative``.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from specops.conformance.checks import Check
from specops.conformance.designs import KIT_CHAIN_METHODS, KIT_TREE_METHODS
from specops.conformance.report import Report

__all__ = ["check_chain", "check_tree", "Report", "Check", "KIT_CHAIN_METHODS",
           "KIT_TREE_METHODS", "DEFAULT_TIMEOUT_S"]
DEFAULT_TIMEOUT_S = 300.0       # the time limit per sampler call, in seconds


def check_chain(sampler: Callable, method: str = "token", *, quick: bool = True,
                seed: int = 0, scale: Optional[float] = None,
                batch_size: Optional[int] = None, progress: Optional[Callable] = None,
                designs: Optional[List[str]] = None,
                timeout: Optional[float] = DEFAULT_TIMEOUT_S) -> Report:
    """Run the conformance kit on a chain sampler (protocol above); ``method`` is the
    verification it claims: "token" (token-wise rejection sampling) or "block" (block
    verification, arXiv 2403.10444).  ``quick``: about a minute for a fast sampler;
    ``scale`` multiplies every design's N (default: 1, or less to fit a quick run's budget);
    ``seed``: the kit's seed (inputs and seeds drawn from it); ``batch_size``: requests per
    call (default: the sampler's ``conformance_batch_size`` attribute, else 8192);
    ``progress(done, total, label)``; ``designs``: run only these designs
    (``designs.design_names("chain")``); ``timeout``: seconds per sampler call (None: no
    limit, and the sampler runs in the caller's thread).  Arguments the kit cannot run with
    raise ``runner.KitUsageError`` (a ValueError); a missing scipy raises
    ``stats.MissingDependency`` (an ImportError)."""
    from specops.conformance.runner import run_kit
    return run_kit("chain", sampler, method, quick=quick, seed=seed, scale=scale,
                   batch_size=batch_size, progress=progress, designs=designs,
                   timeout=timeout)


def check_tree(sampler: Callable, method: str = "rsd", *, quick: bool = True, seed: int = 0,
               scale: Optional[float] = None, batch_size: Optional[int] = None,
               progress: Optional[Callable] = None, designs: Optional[List[str]] = None,
               timeout: Optional[float] = DEFAULT_TIMEOUT_S) -> Report:
    """Run the kit on a tree sampler; ``method``: "rsd", "mss" or "target_only" (arguments
    as ``check_chain``)."""
    from specops.conformance.runner import run_kit
    return run_kit("tree", sampler, method, quick=quick, seed=seed, scale=scale,
                   batch_size=batch_size, progress=progress, designs=designs,
                   timeout=timeout)
