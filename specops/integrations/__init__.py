"""Integrations of specops with the engines and libraries that already do speculative decoding.

* ``specops.integrations.vllm``: ``SpecopsRejectionSampler``, a drop-in for vLLM V1's
  ``RejectionSampler``, and ``register()``, the ``vllm.general_plugins`` entry point that
  installs it into a vLLM process when asked (``SPECOPS_VLLM=1``, or ``VLLM_PLUGINS``
  naming specops).  Importing it needs vLLM.
* ``specops.integrations.hf``: ``speculative_sampling`` (the signature and returns of
  transformers' ``_speculative_sampling``, backed by specops) and ``generate`` (batched
  speculative decoding for Hugging Face causal LMs, also ``specops.generate``).  Importing
  it needs transformers only for ``generate``'s cache handling.
* ``specops.integrations.sglang``: ``tree_speculative_sampling_target_only`` (sgl-kernel's
  tree verification, same arguments, outputs written in place) and the exact variant with
  draft probabilities, ``tree_speculative_sampling``; both backed by ``specops.verify_tree``.
  Needs neither SGLang nor sgl-kernel.

Nothing here is imported by ``import specops``: each submodule is imported on first use.
"""

__all__ = ["vllm", "hf", "sglang"]
