"""The README's Python examples run as written and print what the README shows.

Every ```python block of README.md is an example, announced by an HTML comment on the line
before it, ``<!-- example: NAME -->`` or ``<!-- example: NAME, full -->``, and followed by a
```text block holding exactly what it prints.  Fast examples run in this process (a fresh
``__main__`` namespace each); ``full`` ones run as scripts in a fresh interpreter (the
distributed example spawns two gloo ranks, the model example loads SmolLM2) in the full
tier.  Catches: an example that no longer runs (a renamed argument, a fragment), an output
that changed (a different token for the same seeds), a block added without its output.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = re.compile(r"<!-- example: ([\w-]+)(, full)? -->\n```python\n(.*?)```\n+```text\n"
                     r"(.*?)```", re.S)


def _examples():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    found = EXAMPLE.findall(text)
    return text, [pytest.param(code, out, id=name,
                               marks=[pytest.mark.full] if full else [])
                  for name, full, code, out in found]


TEXT, EXAMPLES = _examples()


def test_every_python_block_is_a_checked_example():
    blocks = TEXT.count("```python\n")
    assert blocks == len(EXAMPLES) >= 4, (
        f"{blocks} ```python blocks, {len(EXAMPLES)} announced by <!-- example: NAME --> and "
        "followed by a ```text block of their output")
    names = [p.id for p in EXAMPLES]
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize("code,output", EXAMPLES)
def test_example_prints_what_the_readme_shows(code, output, tmp_path, request):
    if request.node.get_closest_marker("full"):
        script = tmp_path / "example.py"
        script.write_text(code)
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             cwd=str(tmp_path), timeout=1200,
                             env=dict(os.environ, PYTHONWARNINGS="ignore"))
        assert run.returncode == 0, run.stderr[-3000:]
        printed = run.stdout
    else:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "README.md example", "exec"), {"__name__": "__main__"})
        printed = buf.getvalue()
    assert printed == output
