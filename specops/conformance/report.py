"""The report of a conformance run: an object to assert on, a table, JSON, HTML.

The text table wraps the detail column to the terminal's width (``width``; 120 columns where
there is no terminal) and cuts nothing.  ``hint`` names the negative control
(``specops.conformance.negative``) whose failure pattern the run's failures match, if one does.
"""
from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import dataclass, field
from typing import List, Optional

from specops.conformance.checks import Check

MIN_DETAIL_WIDTH = 40


def preamble(sampler: str, kind: str, method: str, mode: str, kit_seed: int,
             notes: List[str]) -> List[str]:
    """The report's first lines: what runs, and the run's budget (``notes``).  ``specops
    check`` prints them before the run and the rest of the report after it."""
    return ([f"specops check: {sampler} ({kind}, method {method}, {mode} run, kit seed "
             f"{kit_seed})"] + [f"  {n}" for n in notes])


@dataclass
class Report:
    kind: str
    method: str
    sampler: str
    mode: str
    kit_seed: int
    scale: float
    requests: int
    elapsed_s: float
    sampler_s: float
    alpha: float
    checks: List[Check] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    hint: str = ""

    @property
    def passed(self) -> bool:
        """No check failed (unseeded samplers are reported, not failed)."""
        return not self.failed

    @property
    def failed(self) -> List[Check]:
        return [c for c in self.checks if c.failed]

    @property
    def unseeded(self) -> bool:
        return any(c.status == "unseeded" for c in self.checks)

    @property
    def statistical(self) -> List[Check]:
        return [c for c in self.checks if c.alpha > 0]

    @property
    def family_alpha(self) -> float:
        """Bonferroni bound on the run's false-failure probability: the sum of the alphas."""
        return sum(c.alpha for c in self.checks)

    def check(self, check_id: str) -> Check:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "method": self.method, "sampler": self.sampler,
                "mode": self.mode, "kit_seed": self.kit_seed, "scale": self.scale,
                "requests": self.requests, "elapsed_s": round(self.elapsed_s, 3),
                "sampler_s": round(self.sampler_s, 3), "alpha_per_check": self.alpha,
                "family_alpha": self.family_alpha, "passed": self.passed,
                "unseeded": self.unseeded, "failed": [c.id for c in self.failed],
                "notes": self.notes, "hint": self.hint,
                "checks": [c.to_dict() for c in self.checks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, default=_finite)

    def to_text(self, width: Optional[int] = None, with_preamble: bool = True) -> str:
        """The report as a table; ``width``: the line width the detail column is wrapped to
        (default: the terminal's); ``with_preamble=False`` leaves out the lines
        ``preamble`` gives (printed before the run by ``specops check``)."""
        if width is None:
            width = shutil.get_terminal_size((120, 24)).columns
        head = (preamble(self.sampler, self.kind, self.method, self.mode, self.kit_seed,
                         self.notes) if with_preamble else [])
        head.append(f"  each statistical check at alpha = {self.alpha:g}; "
                    f"{len(self.statistical)} of them: the run's false-failure probability "
                    f"is at most {self.family_alpha:.1e} (Bonferroni)")
        head.append("  'could hide' = the smallest bias detected with probability 0.9 at "
                    "that N: a total-variation distance (tv) or the rate of a forbidden "
                    "outcome (rate)")
        rows = [("check", "status", "N", "statistic", "p", "could hide", "detail")]
        for c in self.checks:
            if c.forbidden:
                stat, p = f"{c.forbidden:,} forbidden", "0"
            else:
                stat = (f"X2={c.value:.1f} df={c.df}" if c.alpha > 0 and c.value is not None
                        else (f"{c.value:.0f} found" if c.value is not None else ""))
                p = f"{c.pvalue:.2g}" if c.pvalue is not None else ""
            hide = (f"{c.detectable_kind} {c.detectable:.2g}" if c.detectable is not None
                    else "")
            rows.append((c.id, c.status.upper() if c.failed else c.status, f"{c.n:,}", stat,
                         p, hide, c.detail))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        indent = sum(widths) + 2 * 6
        wrap = max(MIN_DETAIL_WIDTH, width - indent)
        lines = []
        for r in rows:
            detail = textwrap.wrap(r[6], wrap, break_on_hyphens=False) or [""]
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(6)) + "  " + detail[0])
            lines += [" " * indent + d for d in detail[1:]]
        lines.insert(1, "  ".join("-" * w for w in widths) + "  ------")
        verdict = ("PASS" if self.passed else "FAIL") + (
            f": {len(self.checks)} checks, {len(self.failed)} failed"
            + (f" ({', '.join(c.id for c in self.failed)})" if self.failed else "")
            + (", unseeded sampler" if self.unseeded else "")
            + f"; {self.requests:,} requests in {self.elapsed_s:.1f} s "
              f"({self.sampler_s:.1f} s in the sampler)")
        tail = [verdict] + ([f"hint: {self.hint}"] if self.hint else [])
        return "\n".join(head + [""] + lines + [""] + tail)

    def to_html(self) -> str:
        from specops.conformance.html import render
        return render(self)

    def __str__(self) -> str:
        return self.to_text()


def _finite(x):
    return None if x != x else float(x)
