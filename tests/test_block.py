"""Block verification (reference section 9): known answers as exact fractions, the exact
output law by enumeration, token-for-token agreement of every backend with the reference,
and calibrated chi-square tests with negative controls that must fail."""
from __future__ import annotations

import itertools
from fractions import Fraction as Fr

import numpy as np
import pytest
import torch

import specops
from specops import reference as R
from tests._negative import verify_rows_variant
from tests.cases import KINDS, make_case, reference_output, shared_case
from tests._families import ADVERSARIAL, dyadic, tree

# ----------------------------------------------------------------------------- exact fractions
TB = [[Fr(5, 10), Fr(3, 10), Fr(2, 10)], [Fr(2, 10), Fr(6, 10), Fr(2, 10)],
      [Fr(1, 10), Fr(2, 10), Fr(7, 10)]]
TS = [[Fr(6, 10), Fr(2, 10), Fr(2, 10)], [Fr(3, 10), Fr(4, 10), Fr(3, 10)],
      [Fr(2, 10), Fr(1, 10), Fr(7, 10)]]


def markov(rows, context=0):
    return lambda prefix: rows[((context,) + tuple(prefix))[-1]]


def frac_token_law(P, Q, K, V):
    """P(num_accepted = n) of the token-wise walk, in exact fractions (an independent
    implementation of the algorithm, not of the contract's arithmetic)."""
    law = [Fr(0)] * (K + 1)

    def walk(prefix, w):
        j = len(prefix)
        if j == K:
            law[K] += w
            return
        p, q = P(prefix), Q(prefix)
        if isinstance(q, int):
            q = [Fr(int(x == q)) for x in range(V)]
        rej = Fr(0)
        for y in range(V):
            if q[y] == 0:
                continue
            a = min(Fr(1), p[y] / q[y])
            walk(prefix + (y,), w * q[y] * a)
            rej += q[y] * (1 - a)
        law[j] += w * rej

    walk((), Fr(1))
    return law


def frac_block_law(P, Q, K, V):
    """P(tau = n) of block verification (Sun et al., Algorithm 2), in exact fractions."""
    law = [Fr(0)] * (K + 1)
    for drafts in itertools.product(range(V), repeat=K):
        w = Fr(1)
        rho, h = [Fr(1)], [Fr(1)]
        for i in range(K):
            p, q = P(drafts[:i]), Q(drafts[:i])
            if isinstance(q, int):
                q = [Fr(int(x == q)) for x in range(V)]
            w *= q[drafts[i]]
            if w == 0:
                break
            if i >= 1:
                Z = sum(max(rho[i] * p[x] - q[x], Fr(0)) for x in range(V))
                den = Z + 1 - rho[i]
                h.append(Z / den if den else Fr(1))
            rho.append(min(rho[i] * p[drafts[i]] / q[drafts[i]], Fr(1)))
        if w == 0:
            continue
        h.append(rho[K])
        for t in range(K + 1):
            pt = h[t]
            for x in h[t + 1:]:
                pt *= 1 - x
            law[t] += w * pt
    return law


def mean(law):
    return sum(n * x for n, x in enumerate(law))


def survival(law):
    return [sum(law[i:]) for i in range(1, len(law))]


def test_two_token_toy():
    P = lambda prefix: [Fr(1, 3), Fr(2, 3)]
    Q = lambda prefix: [Fr(2, 3), Fr(1, 3)]
    assert mean(frac_token_law(P, Q, 2, 2)) == Fr(10, 9)
    assert mean(frac_block_law(P, Q, 2, 2)) == Fr(11, 9)


MARKOV = {1: (Fr(9, 10), Fr(9, 10)), 2: (Fr(169, 100), Fr(171, 100)),
          3: (Fr(2381, 1000), Fr(2449, 1000)), 4: (Fr(29859, 10000), Fr(15623, 5000))}


@pytest.mark.parametrize("g", sorted(MARKOV))
def test_markov_known_answers(g):
    token, block = frac_token_law(markov(TB), markov(TS), g, 3), frac_block_law(
        markov(TB), markov(TS), g, 3)
    assert (mean(token), mean(block)) == MARKOV[g]
    # the contract's float arithmetic (float32 rows of tenths) gives the same laws
    rows = lambda r: (lambda prefix: np.array(r[((0,) + prefix)[-1]], dtype=np.float32))
    for method, exact in (("token", token), ("block", block)):
        law = R.exact_output_law(rows(TB), rows(TS), g, 3, method=method)["length_law"]
        np.testing.assert_allclose(law, [float(x) for x in exact], atol=1e-6)


def test_markov_survival_at_three():
    token, block = (f(markov(TB), markov(TS), 3, 3) for f in (frac_token_law, frac_block_law))
    assert survival(token) == [Fr(9, 10), Fr(79, 100), Fr(691, 1000)]
    assert survival(block) == [Fr(9, 10), Fr(81, 100), Fr(739, 1000)]
    assert block == [Fr(1, 10), Fr(9, 100), Fr(71, 1000), Fr(739, 1000)]


@pytest.mark.parametrize("g,expected", [(2, Fr(9, 25)), (3, Fr(183, 500)), (4, Fr(1839, 5000))])
def test_point_mass_drafts_gain_nothing(g, expected):
    """A point-mass drafter ((last + 1) mod 3): token-wise already accepts prod p(y), the
    most any verifier can, so block verification has exactly the same length law."""
    drafter = lambda prefix: (((0,) + tuple(prefix))[-1] + 1) % 3
    token = frac_token_law(markov(TB), drafter, g, 3)
    block = frac_block_law(markov(TB), drafter, g, 3)
    assert token == block and mean(block) == expected
    rows = lambda prefix: np.array(TB[((0,) + prefix)[-1]], dtype=np.float32)
    laws = [R.exact_output_law(rows, drafter, g, 3, method=m)["length_law"]
            for m in ("token", "block")]
    np.testing.assert_allclose(laws[0], laws[1], atol=1e-15)


# ----------------------------------------------------------------------------- exact law
@pytest.mark.parametrize("name", list(ADVERSARIAL))
@pytest.mark.parametrize("V,K", [(3, 1), (4, 2), (3, 3), (5, 2)])
def test_block_law_equals_target(name, V, K):
    rng = np.random.default_rng(V * 10 + K + 500)
    if name == "equal":
        make = lambda rng, V, j: (lambda p: (p, p.copy()))(dyadic(rng, V))
    else:
        make = ADVERSARIAL[name]
    rows = tree(rng, V, K, make)
    res = R.exact_output_law(lambda pre: rows(pre)[0], lambda pre: rows(pre)[1], K, V,
                             method="block")
    assert res["tv"] <= 1e-12
    assert abs(res["length_law"].sum() - 1) <= 1e-12
    token = R.exact_output_law(lambda pre: rows(pre)[0], lambda pre: rows(pre)[1], K, V)
    # never worse than token-wise in expectation (Sun et al., Theorem 2)
    n = np.arange(K + 1)
    assert (n * res["length_law"]).sum() >= (n * token["length_law"]).sum() - 1e-12


@pytest.mark.parametrize("V,K", [(4, 2), (3, 3)])
def test_block_law_point_mass_drafter(V, K):
    rng = np.random.default_rng(9)
    rows = tree(rng, V, K, lambda rng, V, j: dyadic(rng, V))
    drafter = lambda pre: (len(pre) * 2 + sum(pre)) % V
    res = R.exact_output_law(rows, drafter, K, V, method="block")
    assert res["tv"] <= 1e-12
    np.testing.assert_allclose(res["length_law"],
                               R.exact_output_law(rows, drafter, K, V)["length_law"],
                               atol=1e-15)


def test_block_wrong_fallback_is_biased():
    rng = np.random.default_rng(3)
    p = np.stack([dyadic(rng, 4) for _ in range(3)])
    q = np.stack([dyadic(rng, 4) for _ in range(2)])
    assert R.exact_output_law(p, q, 2, 4, method="block")["tv"] <= 1e-12
    assert R.exact_output_law(p, q, 2, 4, fallback="p", method="block")["tv"] > 1e-3


# ----------------------------------------------------------------------------- agreement
NATIVE = [b for b in ("cpu", "triton") if b in specops.available_backends()]


# Triton's fast-tier share (the interpreter runs every lane in numpy): the kinds that reach
# every branch of the block walk at (V=7, K=3); its other cases and V=32000 run in full.
TRITON_FAST = {(kind, 7, 3) for kind in ("mixed", "ragged", "probs")}


def _agreement_cases(backend):
    vocabs, lengths = ((7, 100), (1, 3)) if backend == "triton" else \
        ((1, 2, 7, 1000, 32000), (0, 1, 4, 8))
    for kind, V, K in itertools.product(KINDS, vocabs, lengths):
        full = V > 1000 or (backend == "triton" and (kind, V, K) not in TRITON_FAST)
        yield pytest.param(backend, kind, V, K, id=f"{backend}-{kind}-V{V}-K{K}",
                           marks=[pytest.mark.full] if full else [])


def _same(got, want, rates=True):
    assert torch.equal(got.token_ids, want.token_ids)
    assert torch.equal(got.num_accepted, want.num_accepted)
    assert torch.equal(got.valid, want.valid)
    if rates:
        assert torch.equal(got.accept_rates.isnan(), want.accept_rates.isnan())
        assert torch.equal(got.accept_rates.nan_to_num(), want.accept_rates.nan_to_num())


@pytest.mark.skipif(not NATIVE, reason="no native backend built (specops._C / triton)")
@pytest.mark.parametrize("backend,kind,V,K",
                         [p for b in NATIVE for p in _agreement_cases(b)])
def test_block_and_rates_equal_reference(backend, kind, V, K):
    kw = shared_case(kind, V, K, B=4)
    for method in ("block", "token"):
        want = reference_output(kind, V, K, B=4, method=method, rates=True)
        got = specops.verify_block(**kw, method=method, return_accept_rates=True,
                                   backend=backend)
        _same(got, want)
        if method == "block" and backend == "cpu":
            _same(specops.verify_block(**kw, method="block", backend=backend), want, False)
    plain = specops.verify_block(**kw, backend=backend)
    _same(plain, want, False)                   # the rates never change the tokens


@pytest.mark.skipif(not NATIVE, reason="no native backend built (specops._C / triton)")
@pytest.mark.parametrize("backend", NATIVE)
def test_block_with_unusable_rows(backend):
    """NaN target rows, unusable draft-logits rows, malformed draft probabilities and
    malformed requests: every backend emits the reference's ids, all in [-1, V)."""
    V, K, B = 30, 4, 6
    g = torch.Generator().manual_seed(4)
    t = torch.randn(B, K + 1, V, generator=g) * 2
    d = t[:, :K] + torch.randn(B, K, V, generator=g)
    t[0, 2] = float("nan")
    t[1, K, 3] = float("inf")
    d[2, 1] = float("nan")                       # an unusable draft row ends the block
    d[3, 0] = -float("inf")
    ids = torch.softmax(d.nan_to_num(0, 0, 0), -1).view(-1, V).multinomial(1, generator=g).view(B, K)
    ids[5, 1] = V + 3                            # malformed request
    kw = dict(target_logits=t, draft_token_ids=ids, draft_logits=d, temperature=0.9,
              seed=torch.arange(B) * 7 + 1, offset=5, validate=False, method="block",
              return_accept_rates=True)
    want = specops.verify_block(**kw, backend="reference")
    got = specops.verify_block(**kw, backend=backend)
    _same(got, want)
    assert ((got.token_ids >= -1) & (got.token_ids < V)).all()
    assert not got.valid[5] and (got.token_ids[5] == -1).all()
    assert not got.valid[0] and not got.valid[1] and bool(got.valid[2])
    q = torch.softmax(d, -1)
    q[4, 1] = float("nan")
    q[4, 2] = -1.0
    kw.update(draft_logits=None, draft_probs=q)
    _same(specops.verify_block(**kw, backend=backend),
          specops.verify_block(**kw, backend="reference"))


def test_block_draws_from_the_scaled_residual():
    """With every stopping test forced to tau = 0 the token is drawn from max(p - q, 0), and
    at tau = g from p_g: the reference's draw equals the contract's weights exactly."""
    p = np.array([0.5, 0.25, 0.25], np.float32)
    q = np.array([0.25, 0.5, 0.25], np.float32)
    W = R.block_weights(p, q, 1, 1.0)
    assert W.tolist() == [2 ** 58, 0, 0]
    W = R.block_weights(p, q, 1, 0.5)            # 0.5 * p - q: only token 0 stays positive
    assert W.tolist() == [0, 0, 0]
    W = R.block_weights(p, None, 1, 0.5)         # point mass at 1: 0.5 * p with 1 zeroed
    assert W.tolist() == [2 ** 58, 0, 2 ** 57]
    assert R.block_stop_probability(0, 1.0) == 1.0
    assert R.block_stop_probability(2 ** 59, 0.5) == 0.5
    assert R.block_next_rho(1.0, 0.25, 0.5) == 0.5
    assert R.block_next_rho(0.5, 0.5, 0.25) == 1.0
    assert R.block_next_rho(1.0, 0.0, 0.0) == 0.0
    assert R.block_next_rho(1.0, 0.5, float("nan")) == 0.0


# ----------------------------------------------------------------------------- statistics
# the token-wise statistics' rows, level and test (P_ROWS: K + 1 = 4 rows over V = 6)
from tests._stats import ALPHA, N, P_ROWS, Q_ROWS, draft_ids  # noqa: E402
from tests._stats import chi2_pvalue as _pvalue  # noqa: E402


def block_pvalues(tok, nacc, seed):
    """Block verification changes which prefix is kept, so the law is tested on the
    completed sequence (the output continued by sampling the target, as in
    exact_output_law): every adjacent pair of positions must follow p_j x p_{j+1}, and
    num_accepted its enumerated law."""
    K1, V = P_ROWS.shape
    rng = np.random.default_rng(seed)
    full = tok.astype(np.int64).copy()
    for j in range(K1):
        p = P_ROWS[j].astype(np.float64)
        fill = rng.choice(V, size=len(full), p=p / p.sum())
        full[:, j] = np.where(np.arange(K1)[j] > nacc, fill, full[:, j])
    pv = {}
    for j in range(K1 - 1):
        cells = np.bincount(full[:, j] * V + full[:, j + 1], minlength=V * V)
        pv[f"pair {j}"] = _pvalue(cells, np.outer(P_ROWS[j], P_ROWS[j + 1]).reshape(-1))
    law = R.exact_output_law(P_ROWS, Q_ROWS, K1 - 1, V, method="block")["length_law"]
    pv["length"] = _pvalue(np.bincount(nacc, minlength=K1), law)
    return pv


def _drafts(n, seed):
    return draft_ids(np.random.default_rng(seed), Q_ROWS, n)


def _run(backend, ids, q_rows, seed0, variant="exact"):
    n, K = ids.shape
    if backend == "reference" and variant != "exact":
        ar = np.arange(n)
        tok, nacc, _ = verify_rows_variant(
            variant, np.broadcast_to(P_ROWS, (n, K + 1, 6)).reshape(-1, 6), True, ar * (K + 1),
            ids.reshape(-1), ar * K, np.full(n, K),
            np.broadcast_to(q_rows, (n, K, 6)).reshape(-1, 6), True, np.ones(n, np.float32),
            np.zeros(n, np.int64), np.ones(n, np.float32), np.zeros(n, np.float32),
            seed0 + ar, np.zeros(n, np.int64), K, method="block")
        return tok, nacc
    out = specops.verify_block(
        target_probs=torch.from_numpy(np.ascontiguousarray(np.broadcast_to(P_ROWS, (n, K + 1, 6)))),
        draft_token_ids=torch.from_numpy(ids),
        draft_probs=torch.from_numpy(np.ascontiguousarray(np.broadcast_to(q_rows, (n, K, 6)))),
        seed=torch.arange(n) + seed0, offset=0, method="block", backend=backend)
    assert out.valid.all()
    return out.token_ids.numpy(), out.num_accepted.numpy()


# the reference's run in the fast tier (the native walks equal it bit for bit above)
@pytest.mark.parametrize("backend", ["reference"] + [pytest.param(b, marks=pytest.mark.full)
                                                     for b in NATIVE])
def test_block_statistics_and_negative_controls(backend):
    """Each backend passes at its N; at that N the reference's wrong fallback and always-
    accept variants, and the draft reported as the target, fail."""
    n = {"reference": 6000, "cpu": N, "triton": 600}[backend]
    ids = _drafts(n, 21)
    pv = block_pvalues(*_run(backend, ids, Q_ROWS, 9000), seed=1)
    assert min(pv.values()) >= ALPHA, pv
    for name, run in (("wrong fallback", lambda: _run("reference", ids, Q_ROWS, 9000,
                                                      "wrong_fallback")),
                      ("always accept", lambda: _run("reference", ids, Q_ROWS, 9000,
                                                     "always_accept")),
                      # the interpreter runs this control through the reference (equal
                      # tokens, tested above): a second Triton run would double the time
                      ("q reported as p", lambda: _run(
                          "reference" if backend == "triton" else backend, ids, P_ROWS[:3],
                          9000))):
        bad = block_pvalues(*run(), seed=1)
        assert min(bad.values()) < ALPHA, (name, n, bad)


@pytest.mark.skipif("cpu" not in specops.available_backends(), reason="C++ backend not built")
def test_every_isa_level_gives_the_reference_block_and_rates():
    """The float64 block mass and the rates' min mass are per-ISA passes: every level the
    CPU runs emits the reference's tokens and rates."""
    from specops import _C
    before = _C.isa()
    try:
        for level in _C.available_isas():
            _C.set_isa(level)
            for kind, V, K in (("full", 1000, 4), ("draft_logits", 517, 3), ("point", 33, 4),
                               ("mixed", 1000, 4), ("probs", 250, 2)):
                kw = make_case(kind, V, K, B=5, seed=11)
                for method in ("block", "token"):
                    want = specops.verify_block(**kw, method=method, return_accept_rates=True,
                                                backend="reference")
                    _same(specops.verify_block(**kw, method=method, return_accept_rates=True,
                                               backend="cpu"), want)
    finally:
        _C.set_isa(before)


@pytest.mark.skipif("cpu" not in specops.available_backends(), reason="C++ backend not built")
def test_every_isa_level_block_scan_stop_equals_reference():
    """Without the rates the C++ block walk transforms every row first (one slot per
    position) and runs the stop tests from the end back, stopping at the first that passes
    (tau is the last passing j), and decides a test from part of its mass: it skips the mass
    where rho_j = 1 (h_j = 1) and stops a row's chunked scan (16 draw blocks a chunk) once
    the partial mass guarantees u < h_j, summing the drawn row in full at the end.
    V = 40000 is three chunks, so a stop bound that is too low (a test decided wrong), a
    partial mass or block sums taken for complete, a chunk's offsets off by a block, a walk
    that takes the first passing test or a row read from another position's slot changes
    tokens; 24 requests per kind reach both outcomes of the tests."""
    from specops import _C
    before = _C.isa()
    cases = [make_case(kind, 40000, 4, B=24, seed=s) for kind, s in
             (("full", 21), ("draft_logits", 22), ("mixed", 23))]
    wants = [specops.verify_block(**kw, method="block", backend="reference") for kw in cases]
    try:
        for level in _C.available_isas():
            _C.set_isa(level)
            for kw, want in zip(cases, wants):
                _same(specops.verify_block(**kw, method="block", backend="cpu"), want, False)
    finally:
        _C.set_isa(before)
