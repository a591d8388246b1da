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


def pytest_terminal_summary(terminalreporter):
    if ROWS_COMPARED:
        terminalreporter.write_line("bitwise agreement with specops.reference (requests / rows "
                                    "compared):")
        for k in sorted(ROWS_COMPARED):
            terminalreporter.write_line(f"  {k}: {ROWS_COMPARED[k]}")
