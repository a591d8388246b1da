"""The report of a conformance run: an object to assert on, a table, JSON, HTML."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List

from specops.conformance.checks import Check


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
                "notes": self.notes, "checks": [c.to_dict() for c in self.checks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, default=_finite)

    def to_text(self) -> str:
        head = [f"specops check: {self.sampler} ({self.kind}, method {self.method}, "
                f"{self.mode} run, kit seed {self.kit_seed})"]
        head += [f"  {n}" for n in self.notes]
        head.append(f"  each statistical check at alpha = {self.alpha:g}; "
                    f"{len(self.statistical)} of them: the run's false-failure probability "
                    f"is at most {self.family_alpha:.1e} (Bonferroni)")
        head.append("  'could hide' = the smallest bias detected with probability 0.9 at "
                    "that N: a total-variation distance (tv) or the rate of a forbidden "
                    "outcome (rate)")
        rows = [("check", "status", "N", "statistic", "p", "could hide", "detail")]
        for c in self.checks:
            stat = (f"X2={c.value:.1f} df={c.df}" if c.alpha > 0 and c.value is not None
                    else (f"{c.value:.0f} found" if c.value is not None else ""))
            hide = (f"{c.detectable_kind} {c.detectable:.2g}" if c.detectable is not None
                    else "")
            rows.append((c.id, c.status.upper() if c.failed else c.status, f"{c.n:,}", stat,
                         f"{c.pvalue:.2g}" if c.pvalue is not None else "", hide,
                         c.detail[:100]))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines = ["  ".join(r[i].ljust(widths[i]) for i in range(6)) + "  " + r[6]
                 for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths) + "  ------")
        verdict = ("PASS" if self.passed else "FAIL") + (
            f": {len(self.checks)} checks, {len(self.failed)} failed"
            + (f" ({', '.join(c.id for c in self.failed)})" if self.failed else "")
            + (", unseeded sampler" if self.unseeded else "")
            + f"; {self.requests:,} requests in {self.elapsed_s:.1f} s "
              f"({self.sampler_s:.1f} s in the sampler)")
        return "\n".join(head + [""] + lines + ["", verdict])

    def to_html(self) -> str:
        from specops.conformance.html import render
        return render(self)

    def __str__(self) -> str:
        return self.to_text()


def _finite(x):
    return None if x != x else float(x)
