"""sgl-kernel's tree speculative sampling functions as tree samplers.

``tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates,
retrive_index, retrive_next_token, retrive_next_sibling, uniform_samples,
uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single,
threshold_acc, deterministic)`` (the layout is described in ``specops.integrations.sglang``):
the adapter converts the kit's parents to first-child / next-sibling links (children tried in
node order), draws SGLang's uniforms from a ``torch.Generator`` seeded with the request's
seed (so a request's tokens depend on its seed only), and reads the output back from
``predicts`` at ``accept_index``.  For rsd / mss it calls ``tree_fn`` (specops' exact variant
``tree_speculative_sampling(..., draft_probs, method=)``; sgl-kernel has none).

``specops_target_only`` / ``specops_tree``: specops' drop-ins
(``specops.integrations.sglang``); ``sgl_kernel_target_only``: the real sgl-kernel on CUDA
(imported on the first call; it does not install on this CPU).
"""
from __future__ import annotations

import torch


def links(parent_ids: torch.Tensor):
    """[B, N] parents -> (retrive_next_token, retrive_next_sibling), children in node order."""
    B, N = parent_ids.shape
    first = torch.full((B, N), -1, dtype=torch.int64)
    sibling = torch.full((B, N), -1, dtype=torch.int64)
    last = torch.full((B, N), -1, dtype=torch.int64)
    rows = torch.arange(B)
    for n in range(1, N):
        c = parent_ids[:, n].clamp(min=0)
        present = parent_ids[:, n] >= 0
        none_yet = present & (first[rows, c] < 0)
        first[rows[none_yet], c[none_yet]] = n
        more = present & ~none_yet
        sibling[rows[more], last[rows[more], c[more]]] = n
        last[rows[present], c[present]] = n
    return first, sibling


def tree(target_only_fn=None, tree_fn=None, device="cpu", name="sgl_kernel_tree"):
    state = {"target_only": target_only_fn}

    def sampler(target_probs, draft_probs, node_token_ids, parent_ids, seeds, method):
        B, N, V = target_probs.shape
        depth = torch.zeros(B, N, dtype=torch.int64)
        for n in range(1, N):
            depth[:, n] = depth.gather(1, parent_ids[:, n:n + 1].clamp(min=0))[:, 0] + 1
        D = int(depth.max())
        nxt, sib = links(parent_ids)
        uni = torch.empty(B, N, dtype=torch.float32)
        final = torch.empty(B, dtype=torch.float32)
        for b in range(B):
            g = torch.Generator().manual_seed(int(seeds[b]) & (2 ** 63 - 1))
            uni[b] = torch.rand(N, generator=g)
            final[b] = torch.rand((), generator=g)
        predicts = torch.full((B * N,), -1, dtype=torch.int32)
        accept_index = torch.full((B, D + 1), -1, dtype=torch.int32)
        accept_num = torch.zeros(B, dtype=torch.int32)
        index = torch.arange(B * N, dtype=torch.int64).view(B, N)
        dev = lambda t: t.to(device)                              # noqa: E731
        args = [dev(predicts), dev(accept_index), dev(accept_num), dev(node_token_ids),
                dev(index), dev(nxt), dev(sib), dev(uni), dev(final), dev(target_probs)]
        if method == "target_only":
            f = state["target_only"]
            if f is None:
                from sgl_kernel import tree_speculative_sampling_target_only as f
                state["target_only"] = f
            f(*args, torch.zeros_like(args[-1]), 1.0, 1.0, True)
        else:
            if tree_fn is None:
                raise NotImplementedError("sgl-kernel verifies target-only trees only; "
                                          "rsd / mss need tree_fn (specops' exact variant)")
            tree_fn(*args, dev(draft_probs), 1.0, 1.0, True, method=method)
        predicts, accept_index, accept_num = (t.cpu() for t in args[:3])
        out = torch.full((B, D + 1), -1, dtype=torch.int64)
        for k in range(D + 1):
            live = accept_num >= k
            out[live, k] = predicts[accept_index[live, k].long()].long()
        return out
    sampler.__name__ = sampler.__qualname__ = name
    return sampler


def _specops(fn_name):
    def call(*args, **kwargs):
        from specops.integrations import sglang
        return getattr(sglang, fn_name)(*args, **kwargs)
    return call


specops_target_only = tree(_specops("tree_speculative_sampling_target_only"),
                           name="specops_target_only")
specops_tree = tree(_specops("tree_speculative_sampling_target_only"),
                    _specops("tree_speculative_sampling"), name="specops_tree")
sgl_kernel_target_only = tree(device="cuda", name="sgl_kernel_target_only")
