"""What this installation runs: each backend with why it is unavailable, and the build.

``specops audit`` prints both in its header (and under ``"backend_status"`` / ``"build"`` in
``--json``); ``specops info`` prints them alone.  A missing C++ extension, a bad
``SPECOPS_CPU_ISA`` or a Triton that cannot run here silently leaves the slow ``reference``
backend in charge of ``backend="auto"``, so the audit names the reason rather than only
listing what is left.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import platform
from typing import List, Optional, Tuple

from specops.backends import native


def _cpu_status() -> Tuple[Optional[str], str]:
    """(why the cpu backend cannot run, or None; what it runs)."""
    cpp = native.build()
    if not cpp["built"] or cpp["error"]:   # not built, or SPECOPS_CPU_ISA is bad
        return cpp["error"], ""
    level = cpp["isa"]
    from specops.backends import registry
    try:
        registry.load("cpu")
    except Exception as exc:               # a backend module that fails on this _C
        return f"{type(exc).__name__}: {exc}", ""
    return None, f"C++ {level}"


def _triton_status() -> Tuple[Optional[str], str]:
    if importlib.util.find_spec("triton") is None:
        return ("Triton is not installed (pip install triton; on a machine without a GPU "
                "its interpreter runs the kernels with TRITON_INTERPRET=1)"), ""
    import torch
    cuda = torch.cuda.is_available()
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        return ("no CUDA device, and TRITON_INTERPRET=1 (Triton's interpreter on the CPU, set "
                "before triton is imported) is not set"), ""
    from specops.backends import registry
    try:
        registry.load("triton")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", ""
    return None, "CUDA" if cuda else "Triton interpreter on the CPU"


def backend_status(in_use: Optional[List[str]] = None) -> List[dict]:
    """``[{"name", "available", "detail"}]`` for reference, cpu and triton: ``detail`` says
    what runs, or why the backend cannot.  ``in_use``: the backends this run checks (the
    audit's ``lab.available_backends()``); one that works but is not among them is marked
    as left out of this run."""
    out = [{"name": "reference", "available": True, "detail": "numpy oracle"}]
    for name, probe in (("cpu", _cpu_status), ("triton", _triton_status)):
        why, what = probe()
        if why is None and in_use is not None and name not in in_use:
            why = "available, but left out of this run"
        out.append({"name": name, "available": why is None, "detail": why or what})
    return out


def _openmp_threads() -> Tuple[int, str]:
    """What OpenMP's default team size will be: OMP_NUM_THREADS, else one thread per core
    this process may run on (libgomp's rule)."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env), "OMP_NUM_THREADS"
    try:
        return len(os.sched_getaffinity(0)), "one per available core"
    except AttributeError:                 # pragma: no cover - not Linux
        return os.cpu_count() or 1, "one per core"


def build_info() -> dict:
    """The build: version, C++ ISA levels (built and runnable here, and the one selected),
    OpenMP and its thread count, Triton, torch, numpy and Python versions."""
    import numpy as np
    import torch
    import specops
    cpp = native.build()
    threads, source = _openmp_threads()
    triton = None
    if importlib.util.find_spec("triton") is not None:
        try:
            triton = importlib.import_module("triton").__version__
        except Exception as exc:           # installed but broken
            triton = f"fails to import ({type(exc).__name__}: {exc})"
    return {"version": specops.__version__, "python": platform.python_version(),
            "torch": torch.__version__, "numpy": np.__version__, "triton": triton,
            "cuda": bool(torch.cuda.is_available()), "cpp": cpp,
            "openmp_threads": threads if cpp["openmp"] else None,
            "openmp_threads_from": source if cpp["openmp"] else None,
            "torch_threads": torch.get_num_threads(),
            "SPECOPS_CPU_ISA": os.environ.get("SPECOPS_CPU_ISA")}


def build_lines(build: dict) -> List[str]:
    """The build, for people (``specops info`` and the audit's header)."""
    c = build["cpp"]
    if not c["built"]:
        cpp = f"C++ extension: not loaded: {c['error']}"
    else:
        why = (f"SPECOPS_CPU_ISA={build['SPECOPS_CPU_ISA']}" if build["SPECOPS_CPU_ISA"]
               else "the best this CPU runs")
        chosen = f"{c['isa']} ({why})" if c["isa"] else f"none: {c['error']}"
        cpp = (f"C++ extension: ISA {chosen} of {', '.join(c['isa_levels'])}; "
               + (f"OpenMP, {build['openmp_threads']} threads ({build['openmp_threads_from']})"
                  if c["openmp"] else f"requests on up to {build['torch_threads']} threads "
                  "(its own pool, as many as torch.get_num_threads())"))
    return [f"specops {build['version']} (Python {build['python']}, torch {build['torch']} "
            f"with {build['torch_threads']} threads, numpy {build['numpy']}, Triton "
            f"{build['triton'] or 'not installed'}, CUDA {'yes' if build['cuda'] else 'no'})",
            cpp]


def status_lines(status: List[dict]) -> List[str]:
    """One line per backend: available with what it runs, or unavailable with why."""
    width = max(len(s["name"]) for s in status)
    return [f"{s['name'].ljust(width)}  {'available  ' if s['available'] else 'UNAVAILABLE'}"
            f"  {s['detail']}" for s in status]
