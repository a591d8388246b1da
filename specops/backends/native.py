"""The C++ extension ``specops._C`` as a build: whether it loads and why not, its ISA levels.
What ``specops info`` / ``specops audit`` report (``specops.audit_env``); kernels are reached
through ``specops.backends.cpu`` only."""
from __future__ import annotations

from typing import Optional, Tuple

# The call convention of specops._C's entries (csrc/bindings/module.cpp kBindingVersion: every
# entry takes named fields, csrc/bindings/fields.h) that specops/backends/cpu.py and
# cpu_shard.py are written for.
BINDING_VERSION = 4


def stale(_C) -> Optional[str]:
    """Why a loaded ``specops._C`` cannot serve this Python code (built from other sources:
    an editable install whose C++ was not rebuilt), or None."""
    got = getattr(_C, "BINDING_VERSION", None)
    if got == BINDING_VERSION:
        return None
    return (f"specops._C was built from other sources than specops/backends/ (BINDING_VERSION "
            f"{got}, expected {BINDING_VERSION}): rebuild it with `pip install -e .`")


def extension() -> Tuple[Optional[object], Optional[str]]:
    """(specops._C, None), or (None, why it cannot be loaded or used)."""
    try:
        import specops._C as _C
    except ImportError as exc:
        return None, (f"the C++ extension specops._C is missing or fails to load ({exc}); "
                      "reinstall specops with a C++17 compiler and without "
                      "SPECOPS_BUILD_CPP=0 (pip install .)")
    why = stale(_C)
    return (None, why) if why else (_C, None)


def build() -> dict:
    """{"built", "error", "isa", "isa_levels", "openmp"} of the extension."""
    _C, why = extension()
    cpp = {"built": _C is not None, "error": why, "isa": None, "isa_levels": [],
           "openmp": None}
    if _C is not None:
        cpp["isa_levels"] = list(_C.available_isas())
        cpp["openmp"] = bool(getattr(_C, "has_openmp", False))
        try:
            cpp["isa"] = _C.isa()
        except ValueError as exc:          # SPECOPS_CPU_ISA names a level that cannot run
            cpp["error"] = str(exc)
    return cpp
