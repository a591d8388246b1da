"""The residual-sample step as a view over the one verification walk (``specops::verify``).

``residual_sample_op`` draws the token at position ``j* = min(num_accepted, block length)``:
the residual ``max(p - q, 0)`` normalised after a rejection there, or the bonus token from
``p`` when the whole block was accepted (``-1`` where the row is invalid or num_accepted < 0).
It is the walk's forced mode (reference section 7), which skips the accept tests.
"""
from __future__ import annotations


from specops.ops.accept import probs_params
from specops.ops.verify import verify_op


def residual_sample_op(target_probs, target_row_start, draft_ids, draft_row_start, num_draft,
                       draft_probs, greedy, seed, offset, num_accepted, max_k, backend):
    """-> token [B] int32 (see the module docstring)."""
    tokens, j_star, _ = verify_op(target_probs, True, target_row_start, draft_ids,
                                  draft_row_start, num_draft, draft_probs, True,
                                  seed=seed, offset=offset, max_k=max_k, backend=backend,
                                  forced_num_accepted=num_accepted, **probs_params(greedy))
    return tokens.gather(1, j_star.long()[:, None])[:, 0]
