import json
import os
import random
import zlib

import numpy as np
import pytest
import torch

# Triton kernels run on the CPU through Triton's interpreter when there is no GPU; the
# variable must be set before triton is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tests._rows import ROWS_COMPARED

# Under pytest-xdist each worker is one process on one core: torch's intra-op pool (and the C++
# path's thread pool, which follows torch.get_num_threads()) would otherwise start a thread
# per core in every worker and oversubscribe the machine (scripts/dev.sh also sets
# OMP_NUM_THREADS=1).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


# ----------------------------------------------------------------------------- seeding
@pytest.fixture(autouse=True)
def _seed_global_generators(request):
    """Every test starts from generators seeded by its own node id (crc32: stable across
    processes and runs), so a test that draws from torch's / numpy's / Python's global
    generator is reproducible on its own, in any order and on any xdist worker."""
    seed = zlib.crc32(request.node.nodeid.split("@")[0].encode())   # without the xdist group
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


# ----------------------------------------------------------------------------- ISA levels
try:
    from specops import _C as _NATIVE
    ISAS = list(_NATIVE.available_isas())
except ImportError:                     # the tests that need it skip, saying why
    _NATIVE, ISAS = None, []


@pytest.fixture(params=ISAS or ["none"])
def isa(request):
    """Runs the test at each ISA level of the C++ passes this CPU and build have (scalar,
    SSE2 / AVX2 / AVX-512 on x86; the build's levels are checked against the CPU's flags by
    tests/test_cpu_native.py::test_build_has_every_level_this_cpu_runs), then restores the
    default."""
    _C = pytest.importorskip("specops._C", reason="specops._C (the C++ CPU backend) is not built")
    before = _C.isa()
    _C.set_isa(request.param)
    yield request.param
    _C.set_isa(before)


# ----------------------------------------------------------------------------- skip allow-list
# With SPECOPS_SKIP_ALLOWLIST=<file> (scripts/dev.sh sets it), every skipped test must match a
# line "<nodeid glob>  # why" of that file, or the run fails: no silent skips in CI.
_SKIPPED: list = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append((report.nodeid, reason))


def _allowed_patterns(path):
    with open(path) as f:
        return [line.split("#", 1)[0].strip() for line in f
                if line.split("#", 1)[0].strip()]


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:           # an xdist worker: hand its counts to the controller
        workeroutput["specops_rows"] = json.dumps(ROWS_COMPARED)
        return
    path = os.environ.get("SPECOPS_SKIP_ALLOWLIST")
    if not path or not _SKIPPED:
        return
    import fnmatch
    patterns = _allowed_patterns(path)
    bad = [(n, r) for n, r in _SKIPPED if not any(fnmatch.fnmatch(n, p) for p in patterns)]
    if bad:
        session.config._specops_bad_skips = bad
        session.exitstatus = 1


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: add a finished worker's row counts to the run's summary."""
    rows = getattr(node, "workeroutput", {}).get("specops_rows")
    for k, v in json.loads(rows or "{}").items():
        ROWS_COMPARED[k] = ROWS_COMPARED.get(k, 0) + v


def pytest_terminal_summary(terminalreporter):
    if ROWS_COMPARED:
        terminalreporter.write_line("bitwise agreement with specops.reference (requests / rows "
                                    "compared):")
        for k in sorted(ROWS_COMPARED):
            terminalreporter.write_line(f"  {k}: {ROWS_COMPARED[k]}")
    bad = getattr(terminalreporter.config, "_specops_bad_skips", None)
    if bad:
        terminalreporter.write_line(f"{len(bad)} skipped test(s) not on the allow-list "
                                    f"{os.environ.get('SPECOPS_SKIP_ALLOWLIST')}:", red=True)
        for nodeid, reason in bad:
            terminalreporter.write_line(f"  {nodeid}: {reason}", red=True)


def pytest_collection_modifyitems(config, items):
    """pytest-xdist's ``--dist loadgroup`` keeps an ``xdist_group`` on one worker by a suffix
    ``@group`` of each test's node id, which it sets through ``item._nodeid``; pytest 9 keeps
    the id in ``item._id``, so that assignment is lost and a group's tests spread over both
    workers (its module fixtures then run once per worker).  Add the suffix here where
    xdist's did not take; a no-op without loadgroup and where xdist's works."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id
    for item in items:
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                 for m in item.iter_markers("xdist_group")}
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(sorted(names))}")
