"""MkDocs hooks of the documentation site (mkdocs.yml: ``hooks``).

* The committed benchmark reports, ``bench/results/*.md`` (and their figures), become pages
  ``results/NAME.md`` of the site, outside the navigation: the docs link them where they cite a
  number, and they stay where ``python -m bench --record`` writes them.
* The contract page renders the package docstring of ``specops/reference/__init__.py``, the
  specification every backend equals, word for word: where ``docs/contract.md`` holds the marker
  line ``<!-- contract: specops/reference/__init__.py -->``, each numbered section of the
  docstring becomes a heading (anchor ``#section-N``) over its text, verbatim (the docstring is
  plain text with reST-style ``code``, not Markdown: rendered as Markdown, ``2**60`` would turn
  bold).
"""
from __future__ import annotations

import ast
import os
import re

from mkdocs.structure.files import File, InclusionLevel

CONTRACT_MARKER = "<!-- contract: specops/reference/__init__.py -->"
_SECTION = re.compile(r"^(\d+)\. (.+)\n-{5,}$", re.M)


def _root(config) -> str:
    return os.path.dirname(os.path.abspath(config.config_file_path))


def on_files(files, config):
    results = os.path.join(_root(config), "bench", "results")
    for name in sorted(os.listdir(results)):
        if name.endswith((".md", ".png")):
            files.append(File.generated(config, f"results/{name}",
                                        abs_src_path=os.path.join(results, name),
                                        inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def contract_markdown(root: str) -> str:
    """The reference's docstring as Markdown: the preamble, then one ``## N. Title`` heading
    per section over its text in a plain code block."""
    path = os.path.join(root, "specops", "reference", "__init__.py")
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read()), clean=True)
    heads = list(_SECTION.finditer(doc))
    if not heads:
        raise ValueError(f"{path}: no numbered sections ('1. Title' over a line of dashes)")
    parts = [_block(doc[:heads[0].start()])]
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(doc)
        parts.append(f"## {m.group(1)}. {m.group(2)} {{ #section-{m.group(1)} }}\n\n"
                     + _block(doc[m.end():end]))
    return "\n".join(parts)


def _block(text: str) -> str:
    text = text.strip("\n")
    fence = "````" if "```" in text else "```"
    return f"{fence}{{.text .spec}}\n{text}\n{fence}\n"     # .spec: wrapped (extra.css)


def on_page_markdown(markdown, page, config, files):
    if CONTRACT_MARKER in markdown:
        markdown = markdown.replace(CONTRACT_MARKER, contract_markdown(_root(config)))
    return markdown
