"""SGLang's own tests of its tree-verification kernels, run unmodified against specops' drop-in.

The files in ``sglang_upstream/`` are SGLang's test files byte for byte (see
``sglang_upstream/PROVENANCE.md``; their sha256 hashes are checked here before loading).  They
import ``sgl_kernel``, ``sglang.jit_kernel.speculative_sampling``, ``sglang.srt...`` and
``sglang.test...``; this module puts small stand-ins for those names in ``sys.modules`` while it
loads them (``sgl_kernel``'s functions are ``specops.integrations.sglang``'s; the test-harness
helpers are trivial: ``CustomTestCase = unittest.TestCase``, ``get_device() = "cpu"``), and runs
every test with the device string ``"cuda"`` mapped to the CPU (a ``TorchFunctionMode`` that
rewrites ``device=`` arguments) and ``torch.cuda.is_available()`` true (one file skips itself
without CUDA).  Nothing else is changed.  SGLang's ``torch.rand`` draws on the CPU differ from
CUDA's, which none of these tests depends on (their expectations hold for any coins).
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
import unittest
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from specops.integrations import sglang as S

HERE = Path(__file__).with_name("sglang_upstream")
SHA256 = {
    "sgl_kernel_speculative_sampling_tests_v1.py":
        "eb34c8e358d0f5af915c58e18dd821655d2c02589ea952937979359f47deee2d",
    "sgl_kernel_speculative_sampling_tests_rejmask.py":
        "226cc501224c7b249ebcf9c9194bf3ca7dfa42ad134f6b588385d85a9a89c668",
    "sgl_kernel_eagle_utils_tests.py":
        "bb6227eb5093a9ba06cc0ae496313612d4f66974d6404605e56e335398615f6d",
    "registered_tree_speculative_sampling_tests.py":
        "a18d9689cb65d2ff8ccc7a8f1e06b6da5072d25857838a6ae06289bfe033a89e",
    "jit_kernel_speculative_sampling_tests.py":
        "debb39468a9b87b5e619a3c5000f7fcf2840cf36e44e426020e300a84ef2280d",
    "LICENSE": "1495e1e757ef4d0925a2350563cf5754bb23c51701a8ec4fb3c5cdcbedae6747",
}
# file -> the prefix its tests get here, ``test_<prefix>__<name>`` (two files define a test
# of the same name)
PREFIX = {
    "sgl_kernel_speculative_sampling_tests_v1.py": "v1",
    "sgl_kernel_speculative_sampling_tests_rejmask.py": "rejmask",
    "sgl_kernel_eagle_utils_tests.py": "eagle",
    "registered_tree_speculative_sampling_tests.py": "registered",
    "jit_kernel_speculative_sampling_tests.py": "jit",
}
# the upstream tests that are expensive on the CPU interpreter of a GPU test suite: full tier
FULL = {"test_rejmask__tree_target_only_rejmask_matches_tree_random_shapes_topk_le_4"}


class _CudaOnCpu(TorchFunctionMode):
    """Every ``device="cuda"`` (string, index or torch.device) given to a torch function or
    a Tensor method becomes the CPU."""

    @staticmethod
    def _map(v):
        if isinstance(v, str) and v.startswith("cuda"):
            return "cpu"
        if isinstance(v, torch.device) and v.type == "cuda":
            return torch.device("cpu")
        return v

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = self._map(kwargs["device"])
        if getattr(func, "__name__", "") == "to":
            args = tuple(self._map(a) for a in args)
        return func(*args, **kwargs)


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__path__ = []
    m.__dict__.update(attrs)
    return m


def _stand_ins() -> dict:
    """The SGLang module names the files import, as stand-ins backed by specops."""
    kernel = dict(tree_speculative_sampling_target_only=S.tree_speculative_sampling_target_only,
                  tree_speculative_sampling_target_only_rejmask=(
                      S.tree_speculative_sampling_target_only_rejmask),
                  verify_tree_greedy=S.verify_tree_greedy)
    return {
        "sgl_kernel": _module("sgl_kernel", **kernel),
        "sglang": _module("sglang"),
        "sglang.jit_kernel": _module("sglang.jit_kernel"),
        "sglang.jit_kernel.speculative_sampling": _module(
            "sglang.jit_kernel.speculative_sampling",
            tree_speculative_sampling_target_only=S.tree_speculative_sampling_target_only),
        "sglang.srt": _module("sglang.srt"),
        "sglang.srt.speculative": _module("sglang.srt.speculative"),
        "sglang.srt.speculative.spec_utils": _module(
            "sglang.srt.speculative.spec_utils",
            top_k_renorm_prob_fallback=S.top_k_renorm_prob_fallback,
            top_p_renorm_prob_fallback=S.top_p_renorm_prob_fallback),
        "sglang.srt.utils": _module("sglang.srt.utils", get_device=lambda: "cpu"),
        "sglang.test": _module("sglang.test"),
        "sglang.test.ci": _module("sglang.test.ci"),
        "sglang.test.ci.ci_register": _module(
            "sglang.test.ci.ci_register", register_cuda_ci=lambda **kw: None,
            register_amd_ci=lambda **kw: None),
        "sglang.test.test_utils": _module("sglang.test.test_utils",
                                          CustomTestCase=unittest.TestCase),
    }


def _load_all() -> dict:
    for name, digest in SHA256.items():
        got = hashlib.sha256((HERE / name).read_bytes()).hexdigest()
        if got != digest:
            raise RuntimeError(f"{HERE / name} is not the vendored SGLang file (sha256 {got})")
    stand = STAND_INS
    saved = {n: sys.modules.get(n) for n in stand}
    sys.modules.update(stand)
    real_available = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    loaded = {}
    try:
        with _CudaOnCpu():
            for file_name, prefix in PREFIX.items():
                mod_name = f"tests.integrations.sglang_upstream_{prefix}"
                spec = importlib.util.spec_from_file_location(mod_name, HERE / file_name)
                mod = importlib.util.module_from_spec(spec)
                sys.modules[mod_name] = mod
                spec.loader.exec_module(mod)
                loaded[prefix] = mod
    finally:
        torch.cuda.is_available = real_available
        # out of sys.modules again: other tests must not find a stand-in ``sgl_kernel``;
        # the fixture below puts them back for each upstream test (its lazy imports)
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return loaded


STAND_INS = _stand_ins()
UPSTREAM = _load_all()
for _prefix, _mod in UPSTREAM.items():
    for _name, _obj in vars(_mod).items():
        if _name.startswith("test_") and callable(_obj) or (
                isinstance(_obj, type) and issubclass(_obj, unittest.TestCase)
                and _name.startswith("Test")):
            _key = (f"test_{_prefix}__{_name[5:]}" if _name.startswith("test_")
                    else f"Test_{_prefix}_{_name}")
            if _key in FULL:
                _obj = pytest.mark.full(_obj)
            globals()[_key] = _obj


@pytest.fixture(autouse=True)
def _cuda_on_cpu(monkeypatch):
    """Every test here, SGLang's included, runs with "cuda" mapped to the CPU and the
    stand-in modules importable (removed again after the test)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: None)
    for name, mod in STAND_INS.items():
        monkeypatch.setitem(sys.modules, name, mod)
    with _CudaOnCpu():
        yield


def test_stand_ins_are_specops():
    """The names SGLang's tests call are specops' drop-in (not a copy, not a stub)."""
    k = sys.modules["sgl_kernel"]
    assert k.tree_speculative_sampling_target_only is S.tree_speculative_sampling_target_only
    assert k.verify_tree_greedy is S.verify_tree_greedy
    assert UPSTREAM["rejmask"].tree_speculative_sampling_target_only_rejmask is \
        S.tree_speculative_sampling_target_only_rejmask
    assert torch.zeros(1, device="cuda").device.type == "cpu"


def test_all_upstream_tests_collected(request):
    """Every test of the five files is collected here (checked when run unfiltered)."""
    mine = [i for i in request.session.items if i.module is sys.modules[__name__]
            and i.name != request.node.name and "stand_ins" not in i.name]
    if not (request.config.option.keyword or request.config.option.markexpr):
        assert len(mine) == EXPECTED_COUNT, len(mine)


# v1: 2, rejmask: 2 + 96 + 1 + 6 + 8 + 1, eagle: 1, registered: 2 + 4, jit: 4 + 5 + 2 + 2
EXPECTED_COUNT = 2 + 114 + 1 + 6 + 13
