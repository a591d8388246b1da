"""Sampled acceptance of the verification methods on a real model:
``python -m bench.studies.methods_real`` (the exact counterpart on small vectors is
``bench.studies.methods_exact``).

Target: SmolLM2-135M-Instruct; draft: its first ``real_logits.DRAFT_LAYERS`` layers (the real
suite's draft, ``bench/real_logits.py``); both read from one forward pass.  For each of the
32 prompts (chat template, then ``PREFIX`` tokens the target sampled at T=0.8), drafts are
sampled at T=0.8 and verified at T=0.8 with the same draft budget of 4 tokens per target call:

* one chain of 4: token-wise, block and traversal (traversal is block there, token for token);
* 2 paths of 2 and 4 paths of 1 (a root with K chains): roots drawn i.i.d. (mss,
  traversal_iid) or without replacement (rsd, traversal); each path continues i.i.d. from
  the draft.  Methods that share a drafting verify the same drawn trees (paired).

Each draw resamples every tree (new draft forwards), ``--draws`` times per prompt; the table
gives the mean accepted drafts per target call with its standard error; each tree is verified
with ``--seeds`` seeds (cheap) to remove most of the verifier's own noise.  ``--record``
writes ``bench/results/methods_real.md``; ``--quick``: the first 4 prompts, one draw, one
seed.
"""
from __future__ import annotations

import datetime
import math
import os

import torch

import specops
from bench import _cli
from bench import real_logits as RL

PREFIX = 12
TEMPERATURE = 0.8
SHAPES = {"chain 4": (1, 4), "2 paths x 2": (2, 2), "4 paths x 1": (4, 1)}


@torch.no_grad()
def rows(model, seqs: torch.Tensor):
    """(target logits, draft logits) [n, L, V] of every position of the sequences [n, L]."""
    hs = model(seqs, output_hidden_states=True).hidden_states
    return (model.lm_head(hs[-1]).float(),
            model.lm_head(model.model.norm(hs[RL.DRAFT_LAYERS])).float())


def q_of(logits):
    return specops.sampling_probs(logits, temperature=TEMPERATURE)[0]


@torch.no_grad()
def draw_tree(model, ctx: torch.Tensor, K: int, L: int, wor: bool, gen: torch.Generator,
              seed: int):
    """K paths of L drafts after ctx [P] -> (target [N, V], draft [N, V], ids [N], parents
    [N]) in verify_tree's layout (node 0 the root; path k's nodes 1 + k*L .. (k+1)*L)."""
    P = ctx.numel()
    _, d0 = rows(model, ctx[None])
    q0 = q_of(d0[:, -1])
    if wor:
        first = specops.sample_without_replacement(q0, K, seed=torch.tensor([seed]))[0]
    else:
        first = torch.multinomial(q0[0], K, replacement=True, generator=gen)
    paths = torch.cat([ctx.expand(K, P), first[:, None]], 1)
    for _ in range(L - 1):
        _, d = rows(model, paths)
        nxt = torch.multinomial(q_of(d[:, -1]), 1, generator=gen)
        paths = torch.cat([paths, nxt], 1)
    t, d = rows(model, paths)                   # rows after every prefix of every path
    V = t.shape[-1]
    N = 1 + K * L
    target, draft = torch.empty(N, V), torch.empty(N, V)
    ids = torch.zeros(N, dtype=torch.int64)
    par = torch.full((N,), -1, dtype=torch.int64)
    target[0], draft[0] = t[0, P - 1], d[0, P - 1]
    for k in range(K):
        for i in range(L):
            n = 1 + k * L + i
            ids[n] = paths[k, P + i]
            par[n] = 0 if i == 0 else n - 1
            target[n], draft[n] = t[k, P + i], d[k, P + i]
    return target, draft, ids, par


def verify(trees, method, seeds: int):
    """Accepted drafts of every tree of a batch under ``method``, each tree verified with
    ``seeds`` seeds (the verifier's coins are cheap; the trees' forwards are not)."""
    return torch.stack([verify_once(trees, method, 5000 + len(trees) * s)
                        for s in range(seeds)]).mean(0)


def verify_once(trees, method, seed0):
    target = torch.stack([t[0] for t in trees])
    draft = torch.stack([t[1] for t in trees])
    ids = torch.stack([t[2] for t in trees])
    par = torch.stack([t[3] for t in trees])
    if method in ("token", "block"):
        out = specops.verify_block(target, ids[:, 1:], draft_logits=draft[:, :-1],
                                   temperature=TEMPERATURE, method=method,
                                   seed=torch.arange(len(trees)) + seed0, offset=0,
                                   backend="cpu")
    else:
        out = specops.verify_tree(target, ids, par, draft_logits=draft, method=method,
                                  temperature=TEMPERATURE, seed=torch.arange(len(trees)) + seed0,
                                  offset=0, backend="cpu")
    assert bool(out.valid.all())
    return out.num_accepted.double()


def contexts(tok, model, log, prompts=None):
    out = []
    for i, prompt in enumerate(RL.PROMPTS[:prompts]):
        ids = RL.prompt_ids(tok, prompt)
        torch.manual_seed(RL.SEED_BASE + i)
        full = model.generate(ids, do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0,
                              max_new_tokens=PREFIX)
        out.append(full[0])
    log(f"  {len(out)} contexts of {min(c.numel() for c in out)}-{max(c.numel() for c in out)}"
        " tokens")
    return out


def run(draws: int, seeds: int, log=print, prompts=None):
    tok, model = RL.load_model(RL.model_path())
    ctxs = contexts(tok, model, log, prompts)
    results = {}
    groups = [("chain 4", False, ("token", "block", "traversal")),
              ("2 paths x 2", False, ("mss", "traversal_iid")),
              ("2 paths x 2", True, ("rsd", "traversal")),
              ("4 paths x 1", False, ("mss", "traversal_iid")),
              ("4 paths x 1", True, ("rsd", "traversal"))]
    for shape, wor, methods in groups:
        K, L = SHAPES[shape]
        gen = torch.Generator().manual_seed(7 + K * 10 + L + wor)
        trees = [draw_tree(model, c, K, L, wor, gen, seed=1000 * d + i)
                 for d in range(draws) for i, c in enumerate(ctxs)]
        for m in methods:
            acc = verify(trees, m, seeds)
            results[(shape, m)] = (float(acc.mean()), float(acc.std() / math.sqrt(len(acc))),
                                   len(acc))
            log(f"  {shape:12s} {m:14s} {results[(shape, m)][0]:.3f}")
    return results


def main(argv=None):
    prog = "python -m bench.studies.methods_real"
    ap = _cli.parser(prog, __doc__, quick="the first 4 prompts, one draw, one seed")
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=16, help="verifier seeds per drawn tree")
    args = ap.parse_args(argv)
    if args.quick:
        args.draws, args.seeds = 1, 1
    prompts = 4 if args.quick else None
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        res = run(args.draws, args.seeds, prompts=prompts)
    except RL.ModelMissing as e:
        raise SystemExit(str(e))
    n_prompts = len(RL.PROMPTS[:prompts])
    lines = ["# Sampled E[accepted drafts per target call] on SmolLM2-135M-Instruct", "",
             f"- command: `{_cli.command(prog, argv)}`",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- target: SmolLM2-135M-Instruct ({RL.MODEL_FILE}, float32); draft: its first "
             f"{RL.DRAFT_LAYERS} layers (bench/real_logits.py); T = {TEMPERATURE} for "
             f"drafting and verification; {n_prompts} prompts (chat template + "
             f"{PREFIX} sampled tokens); {args.draws} independent tree draws per prompt; "
             "draft budget 4 tokens per target call.",
             f"- each drawn tree is verified with {args.seeds} seeds (its row is their mean); "
             "methods in the same drafting group verify the same trees with the same seeds "
             "(paired).  `se`: standard error over the drawn trees (the tree draw dominates).",
             "",
             "| shape | method | E[accepted] | se | draws |", "|---|---|---|---|---|"]
    for (shape, m), (mu, se, n) in res.items():
        lines.append(f"| {shape} | {m} | {mu:.3f} | {se:.3f} | {n} |")
    print("\n".join(lines))
    _cli.write(lines, _cli.out_path(args, "methods_real.md"))


if __name__ == "__main__":
    main()
