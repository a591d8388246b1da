"""The Markdown report every benchmark writes: printed as it goes, saved with the command,
date and machine that made it."""
from __future__ import annotations

import datetime
import os
import platform
import sys

import torch


class Report:
    """``emit(line)`` prints and keeps a line; ``save(path)`` writes them all."""

    def __init__(self, title: str, prog: str, argv=None, machine_extra: str = ""):
        self.lines = []
        cmd = " ".join([prog] + list(argv if argv is not None else sys.argv[1:]))
        self.emit(f"# {title}")
        self.emit()
        self.emit(f"- command: `{cmd}`")
        self.emit(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
        self.emit(f"- machine: {os.cpu_count()} cores, {platform.platform()}, "
                  f"torch {torch.__version__}{machine_extra}")
        self.emit()

    def emit(self, s: str = "") -> None:
        print(s, flush=True)
        self.lines.append(s)

    def save(self, path) -> None:
        write(self.lines, path)
        if path:
            print(f"wrote {path}")


def write(lines, path) -> None:
    """The report's lines to ``path`` (nothing when ``path`` is empty)."""
    if path:
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")


def print_and_write(lines, path) -> None:
    """Scripts that build the whole report first: print it, then write it."""
    print("\n".join(lines) + "\n")
    write(lines, path)
