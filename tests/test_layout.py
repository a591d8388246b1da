"""The layering of the package, as import-linter contracts (``[tool.importlinter]`` in
pyproject.toml): the reference imports nothing else of specops, the argument layer and the
contract no backend, kernel or integration, everything above the ops reaches the kernels only
through the op library or the backend registry, and every module imports only from the
layers below its own (which also rules out import circles between layers).  File sizes are
reported by ``scripts/sizes.py``, not capped here."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_contracts_hold():
    out = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import "
                          "lint_imports; sys.exit(lint_imports(no_cache=True))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    kept = re.search(r"Contracts: (\d+) kept, (\d+) broken", out.stdout)
    assert kept and int(kept.group(1)) >= 5 and kept.group(2) == "0", out.stdout[-2000:]


def test_no_module_loads_the_extension_by_name():
    """A string import (``importlib.import_module("specops._C")``) is an edge the contracts
    cannot see: only specops/backends/ may load the kernels, and not by name."""
    hits = []
    for dirpath, dirnames, files in os.walk(os.path.join(ROOT, "specops")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                text = open(path, encoding="utf-8").read()
                if re.search(r"import_module\(\s*[\"']specops\.(_C|triton_kernels)", text):
                    hits.append(os.path.relpath(path, ROOT))
    assert hits == []
