import os
import sys

import torch

# Triton kernels run on the CPU through Triton's interpreter when there is no GPU; the
# variable must be set before triton is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROWS_COMPARED: dict = {}


def count_rows(key: str, n: int) -> None:
    ROWS_COMPARED[key] = ROWS_COMPARED.get(key, 0) + int(n)



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
    path = os.environ.get("SPECOPS_SKIP_ALLOWLIST")
    if not path or not _SKIPPED:
        return
    import fnmatch
    patterns = _allowed_patterns(path)
    bad = [(n, r) for n, r in _SKIPPED if not any(fnmatch.fnmatch(n, p) for p in patterns)]
    if bad:
        session.config._specops_bad_skips = bad
        session.exitstatus = 1


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
