"""The README's examples run as written and print what the README shows.

The convention, shared with the documentation site (tests/test_docs.py runs docs/ the same way):
every ```python block of a page is an example, announced by an HTML comment on the line before
it, ``<!-- example: NAME -->`` or ``<!-- example: NAME, FLAG, ... -->``, and followed by a
```text block holding exactly what it prints.  Fast examples run in this process (a fresh
``__main__`` namespace each).  Flags:

* ``full``: run as a script in a fresh interpreter, in the full tier (the distributed example
  spawns two gloo ranks, the model example loads SmolLM2);
* ``pytest``: the block is a test file; it is written to a temporary directory and pytest runs
  it there (it must pass; no output block);
* ``shell``: a ```bash block run by ``bash -euo pipefail`` in a temporary directory with this
  interpreter's scripts first on PATH (it must exit 0; no output block).

Catches: an example that no longer runs (a renamed argument, a fragment), an output that
changed (a different token for the same seeds), a block added without its marker or output.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from typing import List, NamedTuple, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"<!-- example: ([\w-]+)((?:, *[\w-]+)*) -->\n```(\w+)\n(.*?)```\n", re.S)
OUTPUT = re.compile(r"\n*```text\n(.*?)```", re.S)
FLAGS = {"full", "pytest", "shell"}


class Example(NamedTuple):
    page: str          # path relative to the checkout
    name: str
    flags: Tuple[str, ...]
    lang: str
    code: str
    output: str        # None: no output block (pytest, shell)


def examples_in(path: str) -> Tuple[str, List[Example]]:
    """The page's text and its announced examples, checked for the convention."""
    with open(path) as f:
        text = f.read()
    page = os.path.relpath(path, ROOT)
    found = []
    for m in MARKER.finditer(text):
        name, flags, lang, code = m.group(1), m.group(2), m.group(3), m.group(4)
        flags = tuple(f.strip() for f in flags.split(",") if f.strip())
        unknown = set(flags) - FLAGS
        assert not unknown, f"{page}: example {name}: unknown flags {sorted(unknown)}"
        want_lang = "bash" if "shell" in flags else "python"
        assert lang == want_lang, f"{page}: example {name} is a ```{lang} block, not {want_lang}"
        output = None
        if not {"pytest", "shell"} & set(flags):
            out = OUTPUT.match(text, m.end())
            assert out, f"{page}: example {name} has no ```text block of its output after it"
            output = out.group(1)
        found.append(Example(page, name, flags, lang, code, output))
    names = [e.name for e in found]
    assert len(set(names)) == len(names), f"{page}: example names repeat: {names}"
    return text, found


def params(examples: List[Example]):
    return [pytest.param(e, id=f"{e.page}::{e.name}",
                         marks=[pytest.mark.full] if "full" in e.flags else [])
            for e in examples]


def check_every_python_block_is_an_example(text: str, examples: List[Example], page: str):
    blocks = text.count("```python\n")
    python = [e for e in examples if e.lang == "python"]
    assert blocks == len(python), (
        f"{page}: {blocks} ```python blocks, {len(python)} announced by <!-- example: NAME --> "
        "(and, unless flagged pytest, followed by a ```text block of their output)")


def run_example(e: Example, tmp_path) -> None:
    """Run one example as its flags say; assert it printed its shown output (or passed)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PYTHONPATH", None)
    if "shell" in e.flags:
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", e.code], capture_output=True,
                             text=True, cwd=str(tmp_path), timeout=1200, env=env)
        assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
        return
    if "pytest" in e.flags:
        test = tmp_path / f"test_{e.name.replace('-', '_')}.py"
        test.write_text(e.code)
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-p", "no:xdist", str(test)], capture_output=True, text=True,
                             cwd=str(tmp_path), timeout=1200, env=env)
        assert run.returncode == 0 and " passed" in run.stdout, (run.stdout[-3000:],
                                                                  run.stderr[-3000:])
        return
    if "full" in e.flags:
        script = tmp_path / "example.py"
        script.write_text(e.code)
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             cwd=str(tmp_path), timeout=1200, env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        printed = run.stdout
    else:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(e.code, f"{e.page} example {e.name}", "exec"), {"__name__": "__main__"})
        printed = buf.getvalue()
    assert printed == e.output


README = os.path.join(ROOT, "README.md")
TEXT, EXAMPLES = examples_in(README)


def test_every_python_block_is_a_checked_example():
    check_every_python_block_is_an_example(TEXT, EXAMPLES, "README.md")
    assert {"quickstart", "engine"} <= {e.name for e in EXAMPLES}


@pytest.mark.parametrize("example", params(EXAMPLES))
def test_example_prints_what_the_readme_shows(example, tmp_path):
    run_example(example, tmp_path)


def test_the_engine_example_advances_the_offset():
    """The engine example is what an author copies: it must pass per-request seeds and an
    offset that changes between calls (a fixed offset reuses the same coins every step)."""
    [engine] = [e for e in EXAMPLES if e.name == "engine"]
    assert "seed=" in engine.code and "offset=" in engine.code
    assert re.search(r"offset \+= |offset = offset \+ ", engine.code), engine.code
