"""vLLM's flattened spec-decode layout, built the way its model runner builds it (shared by
bench/studies/vllm_cpu_bias.py, bench/studies/vllm_dropin.py and tests/integrations/).  vLLM
is imported on call, so that importing this module does not decide how vLLM is set up."""
from __future__ import annotations

import torch


def make_md(spec_tokens):
    """Real ``SpecDecodeMetadata.make_dummy``, with the row indices vLLM's model runner
    builds: request b's draft rows, then its bonus row, back to back."""
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
    md = SpecDecodeMetadata.make_dummy(spec_tokens, device=torch.device("cpu"))
    tpos, bpos, row = [], [], 0
    for ids in spec_tokens:
        tpos += range(row, row + len(ids))
        bpos.append(row + len(ids))
        row += len(ids) + 1
    md.target_logits_indices = torch.tensor(tpos, dtype=torch.int32)
    md.bonus_logits_indices = torch.tensor(bpos, dtype=torch.int32)
    md.logits_indices = torch.arange(row, dtype=torch.int32)
    return md
