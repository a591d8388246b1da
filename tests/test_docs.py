"""The documentation site (docs/, mkdocs.yml): every example runs and prints what the page
shows, the site builds strictly, and the pages that restate the code stay current.

* Examples: the README's convention (tests/test_readme.py), on every page of docs/.  Slow ones
  (the model, the process groups, the kit's quick runs) carry ``full``.
* ``mkdocs build --strict`` (full tier; needs the ``docs`` extra): a broken link, anchor or
  API reference fails.
* The README's links into the site point at pages and headings that exist.
* The kit page lists exactly the kit's designs; the API reference names every public call;
  the audit output shown on the lab page has the checks a fresh ``specops audit`` runs.
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import unicodedata

import pytest

from tests.test_readme import (ROOT, check_every_python_block_is_an_example, examples_in,
                               params, run_example)

DOCS = os.path.join(ROOT, "docs")
PAGES = sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
PARSED = {os.path.relpath(p, ROOT): examples_in(p) for p in PAGES}
EXAMPLES = [e for _, found in PARSED.values() for e in found]


def test_every_python_block_on_every_page_is_a_checked_example():
    assert len(PAGES) >= 10, PAGES
    for page, (text, found) in PARSED.items():
        check_every_python_block_is_an_example(text, found, page)
    assert len(EXAMPLES) >= 15, [e.name for e in EXAMPLES]


@pytest.mark.parametrize("example", params(EXAMPLES))
def test_example_prints_what_the_page_shows(example, tmp_path):
    run_example(example, tmp_path)


@pytest.mark.full
def test_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: every link, anchor and API reference resolves (the docs
    extra: ``pip install -e ".[docs]"``; scripts/dev.sh installs it for the tests)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                          "-f", os.path.join(ROOT, "mkdocs.yml"), "-d", str(tmp_path / "site")],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])
    site = tmp_path / "site"
    contract = (site / "contract.html").read_text()
    for n in range(1, 16):                   # the reference's sections, one heading each
        assert f'id="section-{n}"' in contract, n
    api = (site / "api.html").read_text()
    assert "advances" in api and "offset" in api      # verify_block's docstring rendered
    assert (site / "results" / "cpu.html").exists()


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug (the anchors mkdocs gives headings)."""
    value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _anchors(path: str) -> set:
    with open(path) as f:
        text = re.sub(r"^(`{3,})[^`\n]*\n.*?^\1[ \t]*$", "", f.read(), flags=re.S | re.M)  # fences
    out = set()
    for h in re.findall(r"^#{1,6} (.+?)\s*$", text, re.M):
        explicit = re.search(r"\{ *#([\w-]+) *\}$", h)
        out.add(explicit.group(1) if explicit else _slug(h))
    return out


def test_readme_links_point_at_pages_and_headings_that_exist():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10, local
    for link in local:
        path, _, anchor = link.partition("#")
        target = os.path.join(ROOT, path) if path else os.path.join(ROOT, "README.md")
        assert os.path.exists(target), link
        if anchor:
            assert anchor in _anchors(target), (link, sorted(_anchors(target)))


def test_the_kit_page_lists_every_design():
    from specops.conformance import designs
    with open(os.path.join(DOCS, "kit.md")) as f:
        text = f.read()
    chain, tree = text.split("Tree designs:")
    chain = chain.split("Chain designs:")[1]
    for kind, part in (("chain", chain), ("tree", tree.split("## Checks")[0])):
        listed = re.findall(r"^\| `(\w+)` \|", part, re.M)
        assert listed == designs.design_names(kind), (kind, listed)


def test_the_api_reference_names_every_public_call():
    import specops
    with open(os.path.join(DOCS, "api.md")) as f:
        text = f.read()
    missing = [n for n in specops.__all__ if n not in ("__version__", "generate")
               and not re.search(rf"heading: specops\.{n}\b", text)]
    assert not missing, missing
    assert "specops.integrations.hf" in text                # generate lives there


@pytest.mark.full
def test_the_audit_output_on_the_lab_page_is_current():
    """The checks listed in docs/lab.md's audit output are a fresh run's (up to the backends
    this machine has: ``name[backend]`` rows are compared by name), and its total line
    counts its own rows."""
    with open(os.path.join(DOCS, "lab.md")) as f:
        text = f.read()
    shown = re.search(r"<!-- audit-output -->\n```text\n(.*?)```", text, re.S).group(1)
    rows = re.findall(r"^PASS  (\S+)", shown, re.M)
    total = re.search(r"^(\d+)/(\d+) checks passed", shown, re.M)
    assert total and int(total.group(1)) == int(total.group(2)) == len(rows), (total, len(rows))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-m", "specops", "audit", "--json"],
                         capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    fresh = [c["name"] for c in json.loads(run.stdout)["checks"]]

    def base(names):
        return sorted({re.sub(r"\[\w+\]$", "", n) for n in names})
    assert base(rows) == base(fresh)
