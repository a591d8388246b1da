"""How far SGLang's relaxed thresholds move the output law:
``python -m bench.studies.sglang_thresholds`` (``--record`` writes
``bench/results/sglang_thresholds.md``).

Not a timing: the exact TV (total variation, over the first D + 1 emitted tokens) between the
output law of the section 13 walk (``specops.reference.coins.exact_coin_law``: enumeration,
continuous coins, the implemented integer masses) and the target's own law, for small
EAGLE-like trees whose children are the target's most likely tokens (the drafter agrees with
the target, the case where relaxed acceptance is tempting), at several target sharpnesses.
The exact mode (1, 1) is the control: its TV must be at float64 rounding.
"""
from __future__ import annotations

import numpy as np

from bench import _cli
from specops.reference.coins import exact_coin_law

V = 8
THRESHOLDS = [(1.0, 1.0), (0.9, 1.0), (0.5, 1.0), (0.3, 1.0), (1.0, 0.9), (1.0, 0.7),
              (1.0, 0.5), (0.9, 0.7), (0.0, 0.0)]
# (name, {parent: [children]}, num_spec): a top-2 tree of depth 2 and a top-3 star
TREES = [("top-2, depth 2", {0: [1, 2], 1: [3, 4], 2: [5, 6]}, 3),
         ("top-3, depth 1", {0: [1, 2, 3]}, 2)]


def rows(scale: float, seed: int = 0):
    """target(prefix): a fixed softmax(scale * N(0, 1)) row per prefix, float32."""
    rng = np.random.default_rng(seed)
    cache = {}

    def target(prefix):
        if prefix not in cache:
            x = rng.standard_normal(V) * scale
            e = np.exp(x - x.max())
            cache[prefix] = (e / e.sum()).astype(np.float32)
        return cache[prefix]
    return target


def tree_arrays(children: dict, target):
    """Links, and candidates = the target's top tokens after each parent's path."""
    n = 1 + sum(len(k) for k in children.values())
    nt, ns, cand, path = [-1] * n, [-1] * n, [0] * n, {0: ()}
    for c in sorted(children):
        kids = children[c]
        order = np.argsort(-target(path[c]), kind="stable")
        nt[c] = kids[0]
        for i, x in enumerate(kids):
            cand[x] = int(order[i])
            path[x] = path[c] + (cand[x],)
            if i + 1 < len(kids):
                ns[x] = kids[i + 1]
    return cand, nt, ns


def table() -> str:
    lines = ["| tree | target scale | " + " | ".join(f"({s:g}, {a:g})" for s, a in THRESHOLDS)
             + " |", "|---|---|" + "---|" * len(THRESHOLDS)]
    for name, children, num_spec in TREES:
        for scale in (0.5, 1.5, 3.0):
            target = rows(scale)
            cand, nt, ns = tree_arrays(children, target)
            tvs = [exact_coin_law(target, cand, nt, ns, V, num_spec, s, a)["tv"]
                   for s, a in THRESHOLDS]
            lines.append(f"| {name} | {scale:g} | " + " | ".join(f"{t:.2e}" for t in tvs)
                         + " |")
    return "\n".join(lines)


def main(argv=None):
    prog = "python -m bench.studies.sglang_thresholds"
    args = _cli.parser(prog, __doc__).parse_args(argv)
    body = table()
    text = ("# SGLang's relaxed thresholds: TV of the output law from the target\n\n"
            f"Command: `{_cli.command(prog, argv)}` (exact enumeration, "
            f"vocabulary {V}; columns are (threshold_single, threshold_acc); rows: "
            "softmax(scale * N(0, 1)) targets, children = the target's top tokens).\n\n"
            + body + "\n\n(1, 1) is specops' exact mode (TV at float64 rounding); every other "
            "column is sgl-kernel's relaxed acceptance, which specops implements as defined "
            "(contract section 13) and marks NON-EXACT.\n")
    print(text)
    _cli.write(text.rstrip("\n").split("\n"), _cli.out_path(args, "sglang_thresholds.md"))


if __name__ == "__main__":
    main()
