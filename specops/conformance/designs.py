"""The kit's input designs: small enumerable cases, each built to expose one thing.

A design fixes the target and draft distributions after every prefix (prefix-dependent rows,
like a language model's) and how the kit drafts; the kit then samples drafts and seeds with
its own seed.  Rows are float32 and are fixed by the design (its own seed), never by the kit's
seed, so a failure reproduces on the same inputs.

*Chain designs*: ``target(prefix) -> p`` ([V] float32, the target after the accepted prefix),
``draft(prefix) -> q`` (drafts sampled from q, and q is passed to the sampler) or, for
point-mass drafts (n-gram style, ``draft_probs=None``), ``drafter(prefix) -> token``.
*Tree designs*: a fixed tree shape (``parents``, node 0 the root), ``target(path)`` and
``draft(path)``: the children of a node are drafted from ``draft(path to the node)`` i.i.d.
(mss) or without replacement (rsd); for ``target_only`` the children are the draft row's
top tokens (EAGLE's deterministic top-k), passed as point-mass proposals.

``role``: "law" designs get the law checks (output, length, next token); "boundary" designs
are structural (their outputs are constrained: one-hot rows, zero probabilities, p == q) and
every observation the exact law forbids fails their check; "coupling" designs feed the RNG
coupling probes; "robustness" designs have no law (a draft the draft distribution could not
have produced): only well-formed output and no zero-probability token.  The test vectors V1 to
V5 come from the frontier review (``frontier.md``: Sun et al.'s toy, the 3-token Markov
chain, point-mass drafts, one step with k drafts, the small tree); the adversarial families
are those of ``tests/test_reference.py``.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np

Row = Callable[[tuple], np.ndarray]

# The verification methods the kit has exact laws for, per protocol.  Not the contract's
# ``specops._contract.CHAIN_METHODS`` / ``TREE_METHODS`` (what ``verify_block`` /
# ``verify_tree`` accept): the kit knows ``target_only`` (point-mass tree proposals, the
# SGLang / EAGLE drafter) and has no law for traversal.
KIT_CHAIN_METHODS = ("token", "block")
KIT_TREE_METHODS = ("rsd", "mss", "target_only")
KINDS = ("chain", "tree")


def kit_methods(kind: str) -> tuple:
    """The methods a ``kind`` ("chain" or "tree") sampler may claim, the default first."""
    return KIT_CHAIN_METHODS if kind == "chain" else KIT_TREE_METHODS


def design_names(kind: str) -> list:
    """The names of the designs a ``kind`` run uses, in run order."""
    return [d.name for d in (chain_designs() if kind == "chain" else tree_designs())]


@dataclass(frozen=True)
class ChainDesign:
    name: str
    purpose: str
    V: int
    K: int
    target: Row
    draft: Optional[Row] = None                       # None: point-mass drafts
    drafter: Optional[Callable[[tuple], int]] = None  # the point-mass proposal
    role: str = "law"
    weight: float = 1.0                               # share of the run's N
    forced_draft: Optional[Callable[[tuple], int]] = None   # robustness: drafts not from q


@dataclass(frozen=True)
class TreeDesign:
    name: str
    purpose: str
    V: int
    parents: Tuple[int, ...]
    target: Row
    draft: Row
    role: str = "law"
    weight: float = 1.0


# ----------------------------------------------------------------------------- rows
def f32(*values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def dyadic(rng, V: int, zeros=(), bits: int = 20) -> np.ndarray:
    """A float32 law summing to exactly 1 (multiples of 2**-bits), zero at ``zeros``."""
    w = rng.random(V) + 0.05
    w[list(zeros)] = 0
    c = np.floor(w / w.sum() * 2 ** bits).astype(np.int64)
    c[np.argmax(c)] += 2 ** bits - c.sum()
    return (c / 2 ** bits).astype(np.float32)


def onehot(V: int, i: int) -> np.ndarray:
    p = np.zeros(V, dtype=np.float32)
    p[i] = 1
    return p


def per_prefix(tag: str, make: Callable) -> Callable[[tuple], tuple]:
    """Rows that depend on the whole prefix: ``make(rng)`` seeded by (tag, prefix), cached."""
    cache = {}

    def rows(prefix):
        if prefix not in cache:
            key = zlib.crc32(f"{tag}:{prefix}".encode())
            cache[prefix] = make(np.random.default_rng(key))
        return cache[prefix]
    return rows


def _const(row):
    return lambda prefix: row


def _positional(*rows):
    """Rows that depend only on the position (the prefix length)."""
    return lambda prefix: rows[len(prefix)]


def _last(prefix, context: int = 0) -> int:
    return prefix[-1] if prefix else context


# frontier V2: the 3-token Markov chain (context token 0), rows in tenths
TB = np.array([[.5, .3, .2], [.2, .6, .2], [.1, .2, .7]], dtype=np.float32)
TS = np.array([[.6, .2, .2], [.3, .4, .3], [.2, .1, .7]], dtype=np.float32)


def _pair(tag, make):
    """(target, draft) functions from one ``make(rng) -> (p, q)`` per prefix."""
    rows = per_prefix(tag, make)
    return (lambda pre: rows(pre)[0]), (lambda pre: rows(pre)[1])


# ----------------------------------------------------------------------------- chain
def chain_designs():
    d = []
    d.append(ChainDesign("sun_toy", "frontier V1 (Sun et al.'s toy): p = (1/3, 2/3), "
                         "q = (2/3, 1/3), K = 2", 2, 2, _const(f32(1 / 3, 2 / 3)),
                         _const(f32(2 / 3, 1 / 3))))
    d.append(ChainDesign("markov", "frontier V2: 3-token Markov target and draft, K = 3",
                         3, 3, lambda pre: TB[_last(pre)], lambda pre: TS[_last(pre)]))
    d.append(ChainDesign("markov_point_mass", "frontier V3: n-gram style drafts (last + 1) "
                         "mod 3, draft_probs=None", 3, 3, lambda pre: TB[_last(pre)],
                         drafter=lambda pre: (_last(pre) + 1) % 3))
    p, q = _pair("random", lambda g: (dyadic(g, 4), dyadic(g, 4)))
    d.append(ChainDesign("random_prefix", "random dyadic rows that depend on the whole "
                         "prefix, K = 3", 4, 3, p, q))
    p, q = _pair("disjoint", lambda g: (dyadic(g, 4, zeros=(2, 3)), dyadic(g, 4, zeros=(0, 1))))
    d.append(ChainDesign("disjoint", "p and q on disjoint supports: every draft is rejected "
                         "and the residual is p", 4, 2, p, q))
    p, q = _pair("qzero", lambda g: (dyadic(g, 5), dyadic(g, 5, zeros=(1, 3))))
    d.append(ChainDesign("q_zero_where_p_positive", "q = 0 on tokens p favours: the residual "
                         "carries them", 5, 2, p, q))
    p, q = _pair("topk", lambda g: (dyadic(g, 5, zeros=(0, 2, 4)), dyadic(g, 5)))
    d.append(ChainDesign("topk_truncated", "a target with two nonzero entries (after top-k), "
                         "a full draft", 5, 2, p, q))
    # boundary probes
    p = per_prefix("equal", lambda g: dyadic(g, 4))
    d.append(ChainDesign("equal_rows", "p == q: every draft must be accepted (vLLM 0.32's CPU "
                         "path accepted 7%)", 4, 3, p, p, role="boundary", weight=0.2))
    p, q = _pair("onehot_t", lambda g: (onehot(4, int(g.integers(4))), dyadic(g, 4)))
    d.append(ChainDesign("one_hot_target", "one-hot target rows: accept iff the draft is that "
                         "token, else emit it", 4, 3, p, q, role="boundary", weight=0.2))
    p, q = _pair("onehot_q", lambda g: (dyadic(g, 4), onehot(4, int(g.integers(4)))))
    d.append(ChainDesign("one_hot_draft", "draft rows with a single nonzero entry: accept with "
                         "p(y), never emit y after rejecting it", 4, 3, p, q, role="boundary",
                         weight=0.2))
    uniform = f32(.25, .25, .25, .25)
    d.append(ChainDesign("zero_target_draft", "the last draft always has p(y) = 0 < q(y): it "
                         "must be rejected whatever the coin (sglang #35771's coin <= p)", 4, 2,
                         _positional(uniform, f32(.5, .5, 0, 0), f32(.1, .2, .3, .4)),
                         _positional(uniform, f32(0, 0, .5, .5)),
                         role="boundary", weight=0.5))
    p, q = _pair("qzero_drafted", lambda g: (dyadic(g, 4), dyadic(g, 4, zeros=(3,))))
    d.append(ChainDesign("zero_draft_prob", "drafts with q(y) = 0 (impossible for an honest "
                         "drafter): no crash, well-formed, no p = 0 token", 4, 2, p, q,
                         role="robustness", weight=0.1, forced_draft=lambda pre: 3))
    # coupling probes
    d.append(ChainDesign("accept_residual", "K = 1, acceptance varying with y: the residual "
                         "token must not depend on the rejected draft or its coin", 6, 1,
                         _const(f32(.05, .05, .10, .20, .25, .35)),
                         _const(f32(.30, .25, .20, .10, .10, .05)), role="coupling"))
    first = f32(.125, .125, .25, .25, .125, .125)
    d.append(ChainDesign("decision_bonus", "K = 2, the last draft accepted with probability "
                         "1 .. 1/7 by token: the bonus token must not depend on it",
                         6, 2, _positional(first, f32(.30, .25, .20, .10, .10, .05),
                                           f32(.05, .10, .15, .20, .25, .25)),
                         _positional(first, f32(.05, .05, .10, .20, .25, .35)),
                         role="coupling"))
    d.append(ChainDesign("positions", "K = 3 point-mass drafts each accepted with p = 1/2: "
                         "the coins of the positions must be independent", 3, 3,
                         _const(f32(.5, .3, .2)), drafter=lambda pre: 0, role="coupling"))
    d.append(ChainDesign("batch_pairs", "pairs of identical requests with seeds s and s + 1, "
                         "side by side: their outputs must be independent", 3, 1,
                         _positional(f32(.5, .3, .2), f32(.2, .3, .5)), drafter=lambda pre: 0,
                         role="coupling"))
    return d


# ----------------------------------------------------------------------------- tree
def tree_designs():
    d = []
    d.append(TreeDesign("v4_two_children", "frontier V4: one step, p = (.5, .3, .2), "
                        "q = (.2, .3, .5), two children", 3, (-1, 0, 0),
                        _const(f32(.5, .3, .2)), _const(f32(.2, .3, .5))))
    d.append(TreeDesign("v4_three_children", "frontier V4: p = (.4, .3, .2, .1), "
                        "q = (.1, .2, .3, .4), three children", 4, (-1, 0, 0, 0),
                        _const(f32(.4, .3, .2, .1)), _const(f32(.1, .2, .3, .4))))
    d.append(TreeDesign("v5_markov_tree", "frontier V5: Markov rows, root -> 2 children -> "
                        "1 child each", 3, (-1, 0, 0, 1, 2),
                        lambda pre: TB[_last(pre)], lambda pre: TS[_last(pre)]))
    p, q = _pair("tree_random", lambda g: (dyadic(g, 4), dyadic(g, 4)))
    d.append(TreeDesign("binary_depth2", "random dyadic rows per path, a binary tree of "
                        "depth 2", 4, (-1, 0, 0, 1, 1, 2, 2), p, q))
    d.append(TreeDesign("zero_target_children", "every child has p = 0 < q: all must be "
                        "rejected whatever the coin (sglang #35771)", 4, (-1, 0, 0),
                        _const(f32(.5, .5, 0, 0)), _const(f32(0, 0, .5, .5)),
                        role="boundary", weight=0.5))
    p = per_prefix("tree_equal", lambda g: dyadic(g, 4))
    d.append(TreeDesign("equal_rows", "p == q at every node", 4, (-1, 0, 0, 1, 2), p, p,
                        role="boundary", weight=0.2))
    p, q = _pair("tree_onehot", lambda g: (onehot(4, int(g.integers(4))), dyadic(g, 4)))
    d.append(TreeDesign("one_hot_target", "one-hot target rows: the output is determined by "
                        "the tree", 4, (-1, 0, 0, 1, 2), p, q, role="boundary", weight=0.2))
    d.append(TreeDesign("siblings", "three siblings whose rejections reshape the residual: "
                        "the output law given the drafted siblings", 4, (-1, 0, 0, 0),
                        _const(f32(.4, .3, .2, .1)), _const(f32(.1, .2, .3, .4)),
                        role="coupling"))
    d.append(TreeDesign("batch_pairs", "pairs of identical trees with seeds s and s + 1, side "
                        "by side", 3, (-1, 0, 0), _const(f32(.5, .3, .2)),
                        _const(f32(.2, .3, .5)), role="coupling"))
    return d
