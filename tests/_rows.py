"""The end-of-run summary of rows compared bitwise with specops.reference: tests add to it
with ``count_rows``; ``tests/conftest.py`` prints it (and, under pytest-xdist, collects the
workers' counts on the controller)."""
from __future__ import annotations

ROWS_COMPARED: dict = {}


def count_rows(key: str, n: int) -> None:
    ROWS_COMPARED[key] = ROWS_COMPARED.get(key, 0) + int(n)
