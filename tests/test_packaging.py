"""What pip installs: the vLLM plugin entry point, the package layout, the version."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.metadata import entry_points

import pytest

import specops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pyproject():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_vllm_entry_point_declared_and_installed():
    """vLLM finds the plugin through the vllm.general_plugins entry point: declared in
    pyproject.toml, visible in the installed metadata, naming a function that exists (read
    from the source: importing the module needs vLLM, tested in its own venv)."""
    declared = _pyproject()["project"]["entry-points"]["vllm.general_plugins"]
    assert declared == {"specops": "specops.integrations.vllm:register"}
    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "specops"]
    assert [e.value for e in eps] == ["specops.integrations.vllm:register"]
    module, func = eps[0].value.split(":")
    path = os.path.join(os.path.dirname(specops.__file__), *module.split(".")[1:]) + ".py"
    tree = ast.parse(open(path).read())
    assert func in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_triton_kernels_ship_inside_specops():
    """The kernels are the subpackage specops.triton_kernels (specops/triton_kernels/ in the
    checkout): nothing top-level named `triton_kernels` (another package's name)."""
    import importlib.util
    spec = importlib.util.find_spec("specops.triton_kernels")
    assert spec is not None and spec.origin == os.path.join(
        os.path.dirname(specops.__file__), "triton_kernels", "__init__.py")
    assert not os.path.exists(os.path.join(ROOT, "triton_kernels"))


_PLAIN_CHECKOUT = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.append(SITE)                  # torch, triton, numpy; no .pth: no editable finder
import torch, specops
from specops.backends import triton as TB
print("KERNELS", TB._K.__name__, TB._K.__file__)
print("BACKENDS", specops.available_backends())
kw = dict(target_logits=torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0)),
          draft_token_ids=torch.tensor([[3, 1], [0, 4]]), seed=torch.tensor([1, 2]))
same = [torch.equal(a, b) for a, b in zip(specops.verify_block(**kw, backend="triton"),
                                          specops.verify_block(**kw, backend="reference"))]
print("SAME", all(same))
"""


@pytest.mark.full
def test_triton_backend_in_a_plain_checkout(tmp_path):
    """specops/ copied alone, never pip-installed (no editable finder, no compiled _C),
    imported by a fresh interpreter: the Triton backend is there and emits the reference's
    tokens."""
    shutil.copytree(os.path.join(ROOT, "specops"), tmp_path / "specops",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    code = _PLAIN_CHECKOUT.replace("SITE", repr(sysconfig.get_paths()["purelib"]))
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    kernels = str(tmp_path / "specops" / "triton_kernels" / "__init__.py")
    assert f"KERNELS specops.triton_kernels {kernels}" in out.stdout, out.stdout
    assert "'triton'" in out.stdout.split("BACKENDS")[1].splitlines()[0], out.stdout
    assert "SAME True" in out.stdout, out.stdout


def test_version_matches_pyproject():
    assert specops.__version__ == _pyproject()["project"]["version"]
