"""The vLLM plugin is opt-in: ``register()`` (the ``vllm.general_plugins`` entry point vLLM
calls in every process) patches vLLM's samplers only under ``SPECOPS_VLLM=1`` or
``VLLM_PLUGINS`` naming specops, and only in vLLM's own modules.  Skipped as a module where
vLLM is not installed (ci/setup_vllm_env.sh makes the venv that has it)."""
import importlib.util

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (see ci/setup_vllm_env.sh)", allow_module_level=True)

from tests.integrations import _vllm_setup  # noqa: E402

_vllm_setup.prepare()

from vllm.v1.sample.rejection_sampler import RejectionSampler as VllmRS  # noqa: E402
from vllm.v1.sample.sampler import Sampler  # noqa: E402

from specops.integrations import vllm as sv  # noqa: E402


OPT_IN_CASES = [({}, False), ({"VLLM_PLUGINS": "other"}, False), ({"VLLM_PLUGINS": ""}, False),
                ({"SPECOPS_VLLM": "1"}, True), ({"VLLM_PLUGINS": "other, specops"}, True),
                ({"SPECOPS_VLLM": "0", "VLLM_PLUGINS": "specops"}, False)]


def _plugin_env(monkeypatch, env):
    for k in ("SPECOPS_VLLM", "VLLM_PLUGINS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("env,on", OPT_IN_CASES)
def test_register_patches_only_when_requested(monkeypatch, caplog, env, on):
    """Installing specops changes nothing: register() (the entry point vLLM calls in every
    process) patches only under SPECOPS_VLLM=1 or VLLM_PLUGINS naming specops, says so at
    WARNING, patches the V1 sampler module and the model runner that binds it, and
    unregister() restores them."""
    import logging

    import vllm.v1.sample.rejection_sampler as vrs
    from vllm.v1.worker import gpu_model_runner as runner
    _plugin_env(monkeypatch, env)
    caplog.set_level(logging.DEBUG, logger=sv.__name__)
    try:
        assert sv.register() is on
        want = sv.SpecopsRejectionSampler if on else VllmRS
        assert vrs.RejectionSampler is want and runner.RejectionSampler is want
        warned = [r for r in caplog.records
                  if r.name == sv.__name__ and r.levelno >= logging.WARNING]
        assert len(warned) == (1 if on else 0)
        if on:
            assert isinstance(vrs.RejectionSampler(Sampler()), VllmRS)
            sv.register()                              # idempotent
            assert vrs.RejectionSampler is sv.SpecopsRejectionSampler
    finally:
        sv.unregister()
    assert vrs.RejectionSampler is VllmRS and runner.RejectionSampler is VllmRS


def test_register_patches_only_the_known_modules(monkeypatch):
    """A module outside vLLM's two that bound vLLM's RejectionSampler keeps it."""
    import sys
    import types
    other = types.ModuleType("some_other_engine")
    other.RejectionSampler = VllmRS
    monkeypatch.setitem(sys.modules, other.__name__, other)
    _plugin_env(monkeypatch, {"SPECOPS_VLLM": "1"})
    try:
        assert sv.register()
    finally:
        sv.unregister()
    assert other.RejectionSampler is VllmRS


def test_bad_opt_in_value_is_a_value_error(monkeypatch):
    _plugin_env(monkeypatch, {"SPECOPS_VLLM": "yes"})
    with pytest.raises(ValueError, match="SPECOPS_VLLM"):
        sv.register()


ENTRY_POINT_PROBE = """
import os, vllm.plugins, vllm.v1.sample.rejection_sampler as vrs
import specops.integrations.vllm as sv
for env in ({}, {"SPECOPS_VLLM": "1"}, {"VLLM_PLUGINS": "specops"}):
    os.environ.update(env)
    vllm.plugins.plugins_loaded = False       # vLLM loads plugins once per process
    vllm.plugins.load_general_plugins()
    print("SAMPLER", vrs.RejectionSampler.__module__ + "." + vrs.RejectionSampler.__qualname__,
          flush=True)
    sv.unregister()
    for k in env:
        del os.environ[k]
"""


@pytest.mark.full
def test_installed_entry_point_is_opt_in():
    """The installed ``vllm.general_plugins`` entry point, loaded by vLLM's own plugin
    loader in a fresh process: vLLM's sampler by default, specops' under SPECOPS_VLLM=1 or
    VLLM_PLUGINS naming specops (each with its WARNING)."""
    import os
    import subprocess
    import sys
    from importlib.metadata import entry_points
    assert [e.value for e in entry_points(group="vllm.general_plugins")
            if e.name == "specops"] == ["specops.integrations.vllm:register"]
    env = {k: v for k, v in os.environ.items() if k not in ("SPECOPS_VLLM", "VLLM_PLUGINS")}
    res = subprocess.run([sys.executable, "-c", ENTRY_POINT_PROBE], env=env,
                         capture_output=True, text=True, timeout=300)
    got = [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("SAMPLER ")]
    ours_, theirs_ = ("specops.integrations.vllm.SpecopsRejectionSampler",
                      "vllm.v1.sample.rejection_sampler.RejectionSampler")
    assert got == [theirs_, ours_, ours_], (res.stdout[-2000:], res.stderr[-4000:])
    assert res.stderr.count("specops: vLLM's RejectionSampler replaced") == 2, res.stderr[-4000:]
