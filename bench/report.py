"""The Markdown report every benchmark writes: printed as it goes, saved with the command,
date and machine that made it."""
from __future__ import annotations

import datetime
import os
import platform

import torch

from bench import _cli


class Report:
    """``emit(line)`` prints and keeps a line; ``save(path)`` writes them all.  The header:
    the title, the command (``_cli.command(prog, argv)``), the date and the machine."""

    def __init__(self, title: str, prog: str, argv=None, machine_extra: str = ""):
        self.lines = []
        self.emit(f"# {title}")
        self.emit()
        self.emit(f"- command: `{_cli.command(prog, argv)}`")
        self.emit(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
        self.emit(f"- machine: {os.cpu_count()} cores, {platform.platform()}, "
                  f"torch {torch.__version__}{machine_extra}")
        self.emit()

    def emit(self, s: str = "") -> None:
        print(s, flush=True)
        self.lines.append(s)

    def save(self, path) -> None:
        _cli.write(self.lines, path)


def print_and_write(lines, path) -> None:
    """Scripts that build the whole report first: print it, then write it."""
    print("\n".join(lines) + "\n")
    _cli.write(lines, path)
