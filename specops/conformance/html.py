"""The HTML report: one self-contained page (inline SVG, no script, no network).

Per check: its verdict, statistic, N, alpha and the bias it could still miss, and for the
statistical checks a bar plot of the expected (grey outline) against the observed (filled)
frequency of each cell, the 40 largest first.
"""
from __future__ import annotations

import html as _html

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}.pass{color:#17692e}.fail{color:#b3141b;font-weight:bold}
.unseeded{color:#8a6100}h2{margin-top:1.6em;font-size:16px}.note{color:#555;font-size:13px}
svg text{font-size:9px;font-family:monospace}
"""


def _esc(x) -> str:
    return _html.escape(str(x))


def bars(plot: dict, width: int = 1000, height: int = 180) -> str:
    """Expected (outline) vs observed (filled) frequencies as an inline SVG."""
    labels, exp, obs = plot["labels"], plot["expected"], plot["observed"]
    k = len(labels)
    top = max(max(exp), max(obs), 1e-12) * 1.1
    pad_l, pad_b = 40, 70
    w = (width - pad_l) / max(k, 1)
    y = lambda v: 10 + (height - 10) * (1 - v / top)           # noqa: E731
    parts = [f'<svg width="{width}" '
             f'height="{height + pad_b}" role="img">']
    for t in (0.0, top / 2, top / 1.1):
        parts.append(f'<line x1="{pad_l}" x2="{width}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                     f'stroke="#eee"/><text x="0" y="{y(t) + 3:.1f}">{t:.3f}</text>')
    for i, (lab, e, o) in enumerate(zip(labels, exp, obs)):
        x = pad_l + i * w
        parts.append(f'<rect x="{x + w * 0.15:.1f}" y="{y(o):.1f}" width="{w * 0.7:.1f}" '
                     f'height="{height - y(o):.1f}" fill="#4a7fc1"><title>{_esc(lab)}: '
                     f'observed {o:.4f}, expected {e:.4f}</title></rect>')
        parts.append(f'<rect x="{x + w * 0.05:.1f}" y="{y(e):.1f}" width="{w * 0.9:.1f}" '
                     f'height="{height - y(e):.1f}" fill="none" stroke="#333"/>')
        parts.append(f'<text transform="translate({x + w / 2:.1f},{height + 4}) rotate(60)">'
                     f'{_esc(lab[:18])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render(report) -> str:
    verdict = "PASS" if report.passed else "FAIL"
    rows = []
    for c in report.checks:
        hide = (f"{c.detectable_kind} {c.detectable:.2g}" if c.detectable is not None else "")
        rows.append(f'<tr><td><a href="#{_esc(c.id)}">{_esc(c.id)}</a></td>'
                    f'<td class="{c.status}">{_esc(c.status)}</td><td>{c.n:,}</td>'
                    f'<td>{"" if c.pvalue is None else f"{c.pvalue:.3g}"}</td>'
                    f'<td>{hide}</td><td>{_esc(c.detail)}</td></tr>')
    sections = []
    for c in report.checks:
        stat = c.statistic + (f", X2 = {c.value:.2f}, df = {c.df}, p = {c.pvalue:.3g}, "
                              f"alpha = {c.alpha:g}" if c.alpha > 0 and c.value is not None
                              else "")
        if c.forbidden:
            stat += (f"; {c.forbidden:,} observations of outcomes of probability 0 under the "
                     "exact law (p = 0 whatever X2)")
        body = [f'<h2 id="{_esc(c.id)}">{_esc(c.id)}: <span class="{c.status}">'
                f'{_esc(c.status)}</span></h2>',
                f'<p>{_esc(c.purpose)}</p><p class="note">{_esc(stat)}; N = {c.n:,}'
                + (f"; could hide a {c.detectable_kind} of {c.detectable:.3g} (detected "
                   "with probability 0.9 above that)" if c.detectable is not None else "")
                + f"</p><p>{_esc(c.detail)}</p>"]
        if c.plot:
            body.append(bars(c.plot))
            body.append('<p class="note">grey outline: expected frequency; blue: observed '
                        f'(N = {c.plot["n"]:,})</p>')
        sections.append("\n".join(body))
    notes = "".join(f"<li>{_esc(n)}</li>" for n in report.notes)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>specops check: "
            f"{_esc(report.sampler)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>specops check: {_esc(report.sampler)} — {verdict}</h1>"
            f"<p>{_esc(report.kind)} sampler, method {_esc(report.method)}, {report.mode} run, "
            f"kit seed {report.kit_seed}; {report.requests:,} requests in "
            f"{report.elapsed_s:.1f} s; each statistical check at alpha = {report.alpha:g}, "
            f"run-wide false-failure bound {report.family_alpha:.1e} (Bonferroni).</p>"
            f"<ul class='note'>{notes}</ul>"
            + (f"<p><b>Hint:</b> {_esc(report.hint)}</p>" if report.hint else "")
            + f"<table><tr><th>check</th><th>status</th><th>N</th>"
            f"<th>p</th><th>could hide</th><th>detail</th></tr>{''.join(rows)}</table>"
            + "\n".join(sections) + "</body></html>")
