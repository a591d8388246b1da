"""specops' own backends and methods in the kit's protocols.

``specops check specops.conformance.adapters.native:chain_cpu`` and so on: ``chain_<backend>``
(token-wise), ``chain_<backend>_block`` (block verification: run with ``--method block``),
``chain_unfused`` (``verify_block_unfused``), ``tree_<backend>`` (``verify_tree``; the kit
passes rsd / mss / target_only, the last as point-mass drafts).  Backends: ``reference`` (the
numpy oracle: slow, about 2 ms a request), ``cpu`` (C++), ``triton`` (compiled on a GPU, or
Triton's interpreter on the CPU with ``TRITON_INTERPRET=1``: very slow there).  Seeds go to
specops' Philox streams with offset 0.
"""
from __future__ import annotations

import specops


def _chain(backend: str, method: str = "token", unfused: bool = False):
    verify = specops.verify_block_unfused if unfused else specops.verify_block
    extra = {} if unfused else {"method": method}

    def sampler(target_probs, draft_probs, draft_token_ids, seeds):
        return verify(target_probs=target_probs, draft_token_ids=draft_token_ids,
                      draft_probs=draft_probs, seed=seeds, offset=0, backend=backend,
                      **extra).token_ids
    sampler.__name__ = sampler.__qualname__ = (
        "chain_unfused" if unfused else f"chain_{backend}" + ("_block" if method == "block"
                                                              else ""))
    sampler.conformance_batch_size = 256 if backend in ("reference", "triton") else 8192
    return sampler


def _tree(backend: str):
    def sampler(target_probs, draft_probs, node_token_ids, parent_ids, seeds, method):
        if method == "target_only":
            draft_probs, method = None, "rsd"
        return specops.verify_tree(target_probs=target_probs, node_token_ids=node_token_ids,
                                   parent_ids=parent_ids, draft_probs=draft_probs,
                                   method=method, seed=seeds, offset=0,
                                   backend=backend).token_ids
    sampler.__name__ = sampler.__qualname__ = f"tree_{backend}"
    sampler.conformance_batch_size = 256 if backend in ("reference", "triton") else 8192
    return sampler


chain_reference = _chain("reference")
chain_reference_block = _chain("reference", "block")
chain_cpu = _chain("cpu")
chain_cpu_block = _chain("cpu", "block")
chain_triton = _chain("triton")
chain_triton_block = _chain("triton", "block")
chain_unfused = _chain("cpu", unfused=True)
tree_reference = _tree("reference")
tree_cpu = _tree("cpu")
tree_triton = _tree("triton")
