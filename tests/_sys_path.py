"""What the test session imports from the repository by name: ``tests``, ``bench`` and
``specops``, never the repository root itself.

The root holds ``triton_kernels/`` (installed as ``specops.triton_kernels``).  With the root on
``sys.path`` that folder would also be importable as a top-level ``triton_kernels``, a name
another package owns: vLLM probes ``importlib.util.find_spec("triton_kernels")`` and would take
this folder for it.  ``python -m pytest`` puts the working directory (the root) first on
``sys.path``, so the session replaces every entry that is the root by a directory of links to
the three packages.  Links on ``sys.path`` rather than an import hook: the processes the tests
spawn (``torch.multiprocessing``'s spawn start method) inherit ``sys.path``, not hooks.
``specops`` is linked too so that a checkout that was not ``pip install``-ed still tests
itself, as it did with the root on ``sys.path``.  (``pyproject.toml`` runs pytest with
``--import-mode=importlib``: its default mode would put the root back while collecting.)
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

PACKAGES = ("tests", "bench", "specops")


def isolate_repo_root(root: str) -> str:
    """Replace ``root`` on ``sys.path`` by a directory of links to ``PACKAGES``; -> it."""
    links = tempfile.mkdtemp(prefix="specops-tests-path-")
    atexit.register(shutil.rmtree, links, True)
    for name in PACKAGES:
        os.symlink(os.path.join(root, name), os.path.join(links, name))
    real = os.path.realpath(root)
    sys.path[:] = [links] + [p for p in sys.path
                             if os.path.realpath(p or os.getcwd()) != real]   # '': the cwd
    return links
