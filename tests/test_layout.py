"""The shape of the source tree: no import circle, no oversized file, and the repository
root off ``sys.path`` in the test session.  Static checks (the AST, line counts): fast."""
from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# source folder -> the module name it is imported as
PACKAGES = {"specops": "specops", "bench": "bench"}


# ----------------------------------------------------------------------------- import graph
def _modules() -> dict:
    """{module name: (path, is_package)} of every Python file under PACKAGES."""
    out = {}
    for folder, name in PACKAGES.items():
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, os.path.join(ROOT, folder))
            pkg = name if rel == "." else name + "." + rel.replace(os.sep, ".")
            for f in files:
                if f.endswith(".py"):
                    init = f == "__init__.py"
                    out[pkg if init else pkg + "." + f[:-3]] = (os.path.join(dirpath, f), init)
    return out


def _known(name: str, modules) -> str | None:
    """The longest prefix of the dotted ``name`` that is one of ``modules``."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return None


def _imports(module: str, path: str, is_package: bool, modules) -> set:
    """Modules of ``modules`` that ``module`` imports anywhere in its body (function-level
    imports included: a lazy import closes a circle as surely as an eager one).  Importing
    ``a.b`` is an edge to ``a.b`` alone: a package's ``__init__`` that imports its own
    submodules is not a circle."""
    tree = ast.parse(open(path).read(), path)
    here = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = here.split(".")
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            targets = [base + "." + a.name if base + "." + a.name in modules else base
                       for a in node.names]
        found.update(k for k in (_known(t, modules) for t in targets) if k and k != module)
    return found


def _circles(graph: dict) -> list:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@functools.lru_cache(maxsize=1)
def import_graph() -> dict:
    modules = _modules()
    return {m: _imports(m, path, pkg, modules) for m, (path, pkg) in modules.items()}


def test_the_graph_sees_the_imports_that_matter():
    """The graph is not empty-handed: relative, absolute and lazy edges."""
    g = import_graph()
    assert "specops.reference.walk" in g["specops.reference"]                # relative, package
    assert "specops.reference.draw" in g["specops.reference.walk"]           # relative
    assert "specops.reference" in g["specops.backends.reference"]            # from pkg import mod
    assert "bench.bench_tree" in g["bench.gpu_model_tree"]                   # in a function
    assert "specops.triton_kernels.split" in g["specops.triton_kernels.dispatch"]
    assert "bench._harness" in g["bench.real"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    """specops/, bench/ and triton_kernels/ import each other without a circle (issue 27):
    a circle works only through import order, and under ``python -m`` it loads a module
    twice.  (``specops/__init__``'s lazy names, ``importlib.import_module`` of a table, are
    not edges: the package imports nothing until a name is used.)"""
    assert _circles(import_graph()) == []


# ----------------------------------------------------------------------------- file sizes
PY_MAX, CPP_MAX = 700, 600
# Files over the limit today, with the most lines they may have: the list may only shrink.
# Drop a file once it is back under the limit; lower its number whenever it gets shorter.
OVERSIZED: dict = {}     # path: lines, for a file that may not grow until it is split
VENDORED = ("tests/integrations/vllm_upstream/",       # vLLM's and SGLang's own files,
            "tests/integrations/sglang_upstream/")     # kept verbatim


def _sources():
    for dirpath, dirnames, files in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in
                       ("__pycache__", "build") and not d.endswith(".egg-info")]
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
            limit = PY_MAX if f.endswith(".py") else (
                CPP_MAX if f.endswith((".cpp", ".h", ".hpp", ".cu")) else None)
            if limit and not rel.startswith(VENDORED):
                with open(os.path.join(ROOT, rel), "rb") as fh:
                    yield rel, fh.read().count(b"\n"), limit


def test_no_source_file_over_the_limit():
    sizes = {rel: (n, limit) for rel, n, limit in _sources()}
    assert len(sizes) > 50                       # the walk found the tree
    over = {rel: n for rel, (n, limit) in sizes.items()
            if n > max(limit, OVERSIZED.get(rel, 0))}
    assert not over, f"over {PY_MAX} lines of Python / {CPP_MAX} of C++: {over}"
    back = [rel for rel in OVERSIZED if rel in sizes and sizes[rel][0] <= sizes[rel][1]]
    assert not back, f"back under the limit: drop from OVERSIZED: {back}"
    gone = [rel for rel in OVERSIZED if rel not in sizes]
    assert not gone, f"no longer exist: drop from OVERSIZED: {gone}"
