"""What pip installs: the vLLM plugin entry point, the package layout, the version."""
from __future__ import annotations

import ast
import os
import sys
from importlib.metadata import entry_points

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
    """triton_kernels/ is top-level in the repository and installed as specops.triton_kernels
    (never as a top-level `triton_kernels`, a name another package owns)."""
    import importlib.util
    spec = importlib.util.find_spec("specops.triton_kernels")
    assert spec is not None and spec.origin.endswith(os.path.join("triton_kernels",
                                                                  "__init__.py"))
    assert "triton_kernels" not in sys.modules or \
        sys.modules["triton_kernels"].__name__ != "specops.triton_kernels"


def test_version_matches_pyproject():
    assert specops.__version__ == _pyproject()["project"]["version"]
