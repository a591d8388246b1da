"""Tree verification (reference section 11): known answers, the exact output law by
enumeration, calibrated chi-square tests with negative controls per backend, the drafting
helper, and the public call's checks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import specops
from specops import reference as R
from tests._families import ADVERSARIAL, dyadic
from tests._negative import verify_tree_variant
from tests._stats import ALPHA, chi2_pvalue

TB = np.array([[.5, .3, .2], [.2, .6, .2], [.1, .2, .7]], np.float32)   # the Markov model
TS = np.array([[.6, .2, .2], [.3, .4, .3], [.2, .1, .7]], np.float32)
NATIVE = [b for b in ("cpu", "triton") if b in specops.available_backends()
          and hasattr(specops.backends.registry.load(b), "verify_tree")]


def markov(rows, context=0):
    return lambda prefix: rows[((context,) + tuple(prefix))[-1]]


def mean(law):
    return float((np.arange(len(law)) * law).sum())


# ----------------------------------------------------------------------------- known answers
@pytest.mark.parametrize("method,parents,expected", [
    ("mss", [-1, 0], 0.70), ("rsd", [-1, 0], 0.70),
    ("mss", [-1, 0, 0], 0.76), ("rsd", [-1, 0, 0], 0.82)])
def test_one_step_two_siblings(method, parents, expected):
    p = np.array([.5, .3, .2], np.float32)
    q = np.array([.2, .3, .5], np.float32)
    res = R.exact_tree_law(lambda pre: p, lambda pre: q, parents, 3, method)
    assert abs((1 - res["length_law"][0]) - expected) < 1e-7
    assert res["tv"] <= 1e-12


@pytest.mark.parametrize("method,expected", [("rsd", 89 / 50), ("mss", 863 / 500)])
def test_markov_tree_beats_the_chain(method, expected):
    res = R.exact_tree_law(markov(TB), markov(TS), [-1, 0, 0, 1, 2], 3, method)
    assert abs(mean(res["length_law"]) - expected) < 1e-6
    assert res["tv"] <= 1e-12
    chain = R.exact_output_law(markov(TB), markov(TS), 2, 3)["length_law"]
    assert abs(mean(chain) - 1.69) < 1e-6
    tree_chain = R.exact_tree_law(markov(TB), markov(TS), [-1, 0, 1], 3, method)["length_law"]
    np.testing.assert_allclose(tree_chain, chain, atol=1e-7)   # a one-child tree is a chain
    # (to the float32 rounding of these rows: the chain does not renormalise p)


# ----------------------------------------------------------------------------- exact law
TREES = {"wide": [-1, 0, 0, 0], "deep_wide": [-1, 0, 0, 1, 1], "mixed": [-1, 0, 1, 0, 2]}


@pytest.mark.parametrize("tree", list(TREES))
@pytest.mark.parametrize("name", list(ADVERSARIAL))
@pytest.mark.parametrize("method", ["rsd", "mss"])
def test_tree_law_equals_target(method, name, tree):
    V = 3
    rng = np.random.default_rng(len(name) * 7 + len(tree))
    make = (ADVERSARIAL[name] if ADVERSARIAL[name] is not None
            else lambda rng, V, j: (lambda p: (p, p.copy()))(dyadic(rng, V)))
    rows = {}

    def row(prefix, k):
        if prefix not in rows:
            rows[prefix] = make(rng, V, len(prefix))
        return rows[prefix][k]
    if method == "rsd" and name in ("disjoint", "q_zero_where_p_positive", "topk_truncated"):
        # without replacement needs as many tokens with draft mass as there are siblings
        return
    res = R.exact_tree_law(lambda pre: row(pre, 0), lambda pre: row(pre, 1), TREES[tree], V,
                           method)
    assert res["tv"] <= 1e-12, res["tv"]
    assert abs(res["law"].sum() - 1) <= 1e-12


@pytest.mark.parametrize("tree", list(TREES))
def test_tree_law_point_mass(tree):
    V = 4
    rng = np.random.default_rng(3)
    P = {}
    target = lambda pre: P.setdefault(pre, dyadic(rng, V))
    tokens = np.array([0, 1, 2, 3, 0])[:len(TREES[tree])]
    res = R.exact_tree_law(target, None, TREES[tree], V, point_tokens=tokens)
    assert res["tv"] <= 1e-12


def test_rsd_rule_is_exact_on_iid_siblings_and_mss_rule_is_not_on_rsd_siblings():
    """With duplicates skipped, rsd's rule on i.i.d. siblings is still exact (a repeat is
    what a without-replacement draw would not have proposed); mss's rule on siblings drawn
    without replacement is biased: the negative control of the mismatch."""
    P, Q = stat_rows()
    assert R.exact_tree_law(markov(P), markov(Q), STAT_TREE, 4, "rsd", drafting="mss")["tv"] \
        <= 1e-12
    assert R.exact_tree_law(markov(P), markov(Q), STAT_TREE, 4, "mss", drafting="rsd")["tv"] \
        > 0.05
    for method in ("rsd", "mss"):
        assert R.exact_tree_law(markov(P), markov(Q), STAT_TREE, 4, method)["tv"] <= 1e-12
        assert R.exact_tree_law(markov(P), markov(Q), STAT_TREE, 4, method,
                                fallback="p")["tv"] > 0.05


# ----------------------------------------------------------------------------- statistics
STAT_TREE = [-1, 0, 0, 0, 1]          # three siblings at the root, one grandchild


def stat_rows():
    rng = np.random.default_rng(29)
    P = np.stack([dyadic(rng, 4) for _ in range(4)])
    Q = np.stack([dyadic(rng, 4) for _ in range(4)])
    return P, Q


def draft_trees(n, drafting, seed):
    """Tokens [n, 5] of STAT_TREE drafted from Q (context token 0)."""
    P, Q = stat_rows()
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(n, 5, dtype=torch.int64)
    q0 = torch.from_numpy(Q[0]).expand(n, 4)
    if drafting == "rsd":
        ids[:, 1:4] = specops.sample_without_replacement(q0, 3, seed=torch.arange(n) + seed)
    else:
        ids[:, 1:4] = q0.multinomial(3, replacement=True, generator=g)
    ids[:, 4] = torch.from_numpy(Q).index_select(0, ids[:, 1]).multinomial(1, generator=g)[:, 0]
    return ids


def tree_rows(ids):
    """target / draft rows [n, 5, 4] of every node: the rows after its last token."""
    P, Q = stat_rows()
    last = ids.clone()
    last[:, 0] = 0                                  # the context token
    return torch.from_numpy(P)[last], torch.from_numpy(Q)[last]


def completed_cells(tok, nacc, seed):
    """The outputs completed to 3 tokens by sampling the target after each (an exact method's
    completion follows the target's law), counted over the 64 cells."""
    P, _ = stat_rows()
    rng = np.random.default_rng(seed)
    full = tok.astype(np.int64).copy()
    for j in range(3):
        prev = full[:, j - 1] if j else np.zeros(len(full), np.int64)
        cum = np.cumsum(P[prev].astype(np.float64), axis=1)
        fill = (rng.random(len(full))[:, None] * cum[:, -1:] >= cum).sum(1)
        full[:, j] = np.where(j > nacc, fill, full[:, j])
    return np.bincount(full[:, 0] * 16 + full[:, 1] * 4 + full[:, 2], minlength=64)


def tree_pvalues(tok, nacc, method, drafting, seed):
    """The output completed to 3 tokens by sampling the target must follow the target's
    law (64 cells), and num_accepted its enumerated law."""
    P, Q = stat_rows()
    law = R.exact_tree_law(markov(P), markov(Q), STAT_TREE, 4, method, drafting=drafting)
    cells = completed_cells(tok, nacc, seed)
    return {"sequence": chi2_pvalue(cells, law["target_law"].reshape(-1)),
            "length": chi2_pvalue(np.bincount(nacc, minlength=3), law["length_law"])}


def run_tree(backend, ids, method, seed0, variant=None):
    """(token_ids, num_accepted) of the public call, or of the reference's walk with a
    ``variant`` (a negative control, or "exact")."""
    target, draft = tree_rows(ids)
    n = ids.shape[0]
    par = torch.tensor(STAT_TREE).expand(n, 5)
    if variant is not None:
        tok, nacc, _, _ = verify_tree_variant(
            variant, target.numpy(), True, ids.numpy(), par.numpy(), np.full(n, 5), draft.numpy(), True,
            np.ones(n, np.float32), np.zeros(n, np.int64), np.ones(n, np.float32),
            np.zeros(n, np.float32), seed0 + np.arange(n), np.zeros(n, np.int64), 2, method)
        return tok, nacc
    out = specops.verify_tree(target_probs=target.contiguous(), node_token_ids=ids,
                              parent_ids=par, draft_probs=draft.contiguous(), method=method,
                              seed=torch.arange(n) + seed0, offset=0, backend=backend)
    assert out.valid.all()
    return out.token_ids.numpy(), out.num_accepted.numpy()


# the reference's runs (N = 3,000) in the fast tier: the native walks equal it bit for bit
# (tests/test_tree_cpu.py, tests/test_tree_triton.py); their own runs in the full tier
@pytest.mark.parametrize("backend", ["reference"] + [pytest.param(b, marks=pytest.mark.full)
                                                     for b in NATIVE])
@pytest.mark.parametrize("method", ["rsd", "mss"])
def test_tree_statistics_and_negative_controls(backend, method):
    """Each backend passes at its N; at that N the wrong fallback, the residual left
    un-updated between siblings and (rsd siblings) mss's rule, run in the reference, fail."""
    n = {"reference": 3000, "cpu": 20000, "triton": 800}[backend]
    ids = draft_trees(n, method, 11)
    pv = tree_pvalues(*run_tree(backend, ids, method, 5000), method, method, seed=1)
    assert min(pv.values()) >= ALPHA, pv
    controls = [("wrong fallback", method, "wrong_fallback"),
                ("no residual update", method, "no_residual")]
    if method == "rsd":
        controls.append(("mss rule on rsd siblings", "mss", "exact"))
    for name, m, variant in controls:
        bad = tree_pvalues(*run_tree("reference", ids, m, 5000, variant), method, method, seed=1)
        assert min(bad.values()) < ALPHA, (name, n, bad)


# ----------------------------------------------------------------------------- drafting helper
def test_sample_without_replacement_philox_and_law():
    from specops.drafting import philox4x32
    g = torch.Generator().manual_seed(0)
    c = [torch.randint(0, 2 ** 32, (64,), generator=g) for _ in range(6)]
    for a, b in zip(philox4x32(*c), R.philox4x32(*[x.numpy() for x in c])):
        assert (a.numpy().astype(np.uint64) == b.astype(np.uint64)).all()
    q = torch.tensor([0.5, 0.3, 0.2, 0.0])
    n = 30000
    draws = specops.sample_without_replacement(q.expand(n, 4), 3, seed=torch.arange(n))
    assert (draws[:, :3] != 3).all()                 # a zero-probability token is never drawn
    pairs = np.bincount((draws[:, 0] * 4 + draws[:, 1]).numpy(), minlength=16)
    law = np.zeros(16)
    for a in range(3):
        for b in range(3):
            if a != b:
                law[a * 4 + b] = q[a] * q[b] / (1 - q[a])
    assert chi2_pvalue(pairs, law) >= ALPHA
    iid = np.bincount((q.expand(n, 4).multinomial(2, replacement=True, generator=g)[:, 0] * 4 +
                       q.expand(n, 4).multinomial(2, replacement=True, generator=g)[:, 1])
                      .numpy(), minlength=16)
    assert chi2_pvalue(iid, law) < ALPHA             # negative control: with replacement
    again = specops.sample_without_replacement(q.expand(n, 4), 3, seed=torch.arange(n))
    assert torch.equal(draws, again)
    short = specops.sample_without_replacement(torch.tensor([[0.0, 1.0, 0.0]]), 2, seed=3)
    assert short.tolist() == [[1, -1]]
    with pytest.raises(ValueError, match="k must be"):
        specops.sample_without_replacement(q, 5, seed=0)


# ----------------------------------------------------------------------------- the public call
def _small(B=2, N=5, V=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    par = torch.tensor([-1, 0, 0, 1, 2]).expand(B, N).contiguous()
    return dict(target_logits=torch.randn(B, N, V, generator=g),
                node_token_ids=torch.randint(0, V, (B, N), generator=g), parent_ids=par,
                draft_logits=torch.randn(B, N, V, generator=g))


def test_outputs_shapes_and_greedy_path():
    kw = _small()
    out = specops.verify_tree(**kw, seed=3, backend="reference")
    assert out.token_ids.shape == (2, 3) and out.accepted_nodes.shape == (2, 2)
    assert out.token_ids.dtype == torch.int32 and out.valid.dtype == torch.bool
    t = kw["target_logits"]
    ids = kw["node_token_ids"].clone()
    ids[:, 2] = t[:, 0].argmax(-1)                   # the second child is the argmax
    ids[:, 4] = t[:, 2].argmax(-1)
    g = specops.verify_tree(t, ids, kw["parent_ids"], temperature=0.0, backend="reference")
    assert g.num_accepted.tolist() == [2, 2]
    assert g.accepted_nodes.tolist() == [[2, 4], [2, 4]]
    assert g.token_ids[:, 2].tolist() == t[:, 4].argmax(-1).tolist()
    wide = specops.verify_tree(**kw, seed=3, max_depth=4, backend="reference")
    assert wide.token_ids.shape == (2, 5)
    assert torch.equal(wide.token_ids[:, :3], out.token_ids)


def test_seeded_and_generator_reproducible():
    kw = _small(B=4)
    a = specops.verify_tree(**kw, seed=torch.arange(4), offset=2, backend="reference")
    b = specops.verify_tree(**kw, seed=torch.arange(4), offset=2, backend="reference")
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    c = specops.verify_tree(**kw, generator=g1, backend="reference")
    d = specops.verify_tree(**kw, generator=g2, backend="reference")
    assert all(torch.equal(x, y) for x, y in zip(c, d))


@pytest.mark.parametrize("change,match", [
    (dict(method="beam"), "method must be"),
    (dict(parent_ids=torch.tensor([[-1, 0, 3, 1, 2]] * 2)), "parent_ids"),
    (dict(parent_ids=torch.tensor([[0, 0, 0, 1, 2]] * 2)), "root"),
    (dict(node_token_ids=torch.full((2, 5), 7)), "node_token_ids must be in"),
    (dict(max_depth=1), "max_depth=1 is smaller"),
    (dict(num_nodes=torch.tensor([0, 5])), "num_nodes"),
    (dict(node_token_ids=torch.zeros(2, 4, dtype=torch.int64)), "shape"),
    (dict(draft_logits=torch.zeros(2, 5, 6)), "draft_logits must have shape"),
    (dict(node_token_ids=torch.zeros(2, 5)), "dtype"),
    (dict(temperature=-1.0), "temperature"),
])
def test_bad_input_is_refused(change, match):
    kw = _small()
    kw.update(change)
    with pytest.raises((ValueError, TypeError), match=match):
        specops.verify_tree(**kw, seed=0, backend="reference")


def test_unchecked_malformed_requests_emit_nothing():
    kw = _small(B=3)
    kw["parent_ids"] = torch.tensor([[-1, 0, 0, 1, 2], [-1, 0, 4, 1, 2], [-1, 0, 0, 1, 2]])
    kw["node_token_ids"][2, 3] = 99
    out = specops.verify_tree(**kw, seed=1, max_depth=2, validate=False, backend="reference")
    assert out.valid.tolist() == [True, False, False]
    assert (out.token_ids[1:] == -1).all() and (out.accepted_nodes[1:] == -1).all()
    with pytest.raises(ValueError, match="max_depth"):
        specops.verify_tree(**kw, seed=1, validate=False, backend="reference")


def test_padding_nodes_and_ragged_trees():
    kw = _small(B=2)
    kw["parent_ids"] = torch.tensor([[-1, 0, -1, 2, 1], [-1, 0, 0, 1, 2]])
    out = specops.verify_tree(**kw, temperature=0.0, num_nodes=torch.tensor([5, 2]),
                              backend="reference")
    assert out.token_ids.shape == (2, 3)        # node 3 hangs off an absent node: depth 2
    assert int(out.num_accepted[1]) <= 1


def test_op_registration():
    from specops.ops import verify_tree_op
    kw = _small()
    B, N, V = kw["target_logits"].shape
    args = (kw["target_logits"].reshape(B * N, V), False, kw["node_token_ids"],
            kw["parent_ids"], torch.full((B,), N), kw["draft_logits"].reshape(B * N, V), False,
            torch.ones(B), torch.zeros(B, dtype=torch.int64), torch.ones(B), torch.zeros(B),
            torch.arange(B), torch.zeros(B, dtype=torch.int64), 2, "rsd", "reference")
    torch.library.opcheck(verify_tree_op, args,
                          test_utils=("test_schema", "test_faketensor"))
    fn = torch.compile(lambda *a: verify_tree_op(*a), fullgraph=True, backend="eager")
    got = fn(*args)
    want = verify_tree_op(*args)
    assert all(torch.equal(x, y) for x, y in zip(got, want))


@pytest.mark.parametrize("backend", NATIVE)
def test_validate_false_reads_nothing_on_the_host(backend):
    """With max_depth and validate=False the call reads no tensor value on the host (CUDA
    graphs, torch.compile) and gives the checked call's tokens."""
    from tests._sync import no_host_reads
    kw = _small(B=3)
    for extra in (dict(method="rsd"), dict(method="mss", temperature=torch.tensor([0.0, 1.0, 0.7])),
                  dict(draft_logits=None)):
        args = {**kw, **extra}
        want = specops.verify_tree(**args, seed=torch.arange(3), backend=backend)
        with no_host_reads() as seen:
            got = specops.verify_tree(**args, seed=torch.arange(3), max_depth=2,
                                      validate=False, backend=backend)
        assert not seen, seen
        assert all(torch.equal(x, y) for x, y in zip(want, got))
