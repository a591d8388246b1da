"""The C++ CPU backend's verification walk (specops.backends.cpu) against the numpy reference,
token for token at every ISA level of the native passes this CPU supports (scalar, and SSE2 /
AVX2 / AVX-512 on x86), switched in-process with ``_C.set_isa``; ``SPECOPS_CPU_ISA`` (the same
switch from the environment) is tested in a subprocess.  The primitives and the transform are
in tests/test_cpu_transform.py."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests._cpu import DTYPES, EXOTIC, ISAS, SETTINGS, _C, count, sampling_params, seed_of

from specops import reference as R  # noqa: E402
from specops.backends import cpu  # noqa: E402
from specops.backends import reference as ref  # noqa: E402

# min_p > 1 masks every token: the reference divides by a zero kept mass (and warns) before
# zeroing the row; that is the documented behaviour being compared, not a test problem.
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")


# ----------------------------------------------------------------------------- verify
def _canonical(B, K, V, nd, layout, rng):
    """Row starts for the padded ([B, K+1] / [B, K]) or the packed (vLLM) layout."""
    if layout == "padded":
        trs = torch.arange(B, dtype=torch.int64) * (K + 1)
        drs = torch.arange(B, dtype=torch.int64) * K
        N, T = B * (K + 1), B * K
    else:
        kb = torch.clamp(nd, min=0)
        trs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(kb + 1, 0)[:-1]])
        drs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(kb, 0)[:-1]])
        N, T = int((kb + 1).sum()), int(kb.sum())
    return trs, drs, N, T


def _random_batch(rng, B, K, V, dtype, draft_kind, target_kind, greedy_mode, layout,
                  specials=True):
    nd = torch.from_numpy(rng.integers(0, K + 1, size=B)).to(torch.int64)
    if rng.random() < 0.5:
        nd[0] = K
    trs, drs, N, T = _canonical(B, K, V, nd, layout, rng)
    names = [n for n in SETTINGS if n != "greedy" and (specials or n not in EXOTIC)]
    if greedy_mode == "all":
        names = ["greedy"]
    elif greedy_mode == "mixed":
        names = names + ["greedy", "greedy"]
    pick = rng.permutation(B) % len(names)
    params = sampling_params([names[i] for i in pick], B)
    base = torch.from_numpy(rng.standard_normal((1, V)).astype(np.float32) * 2.5)
    tl = base + 0.7 * torch.from_numpy(rng.standard_normal((N, V)).astype(np.float32))
    dl = base + 0.7 * torch.from_numpy(rng.standard_normal((max(T, 0), V)).astype(np.float32))
    if specials:
        for M in (tl, dl):
            for i in range(M.shape[0]):
                r = rng.random()
                if r < 0.03:
                    M[i, int(rng.integers(V))] = float("nan")
                elif r < 0.05:
                    M[i] = -float("inf")
                elif r < 0.07:
                    M[i, int(rng.integers(V))] = float("inf")
                elif r < 0.10 and V > 2:
                    M[i, torch.from_numpy(rng.random(V) < 0.5)] = -float("inf")
                    M[i, 0] = 0.0
    # draft ids: mostly sampled from the draft's own distribution (so many get accepted)
    qp, _ = ref.sampling_probs(dl, torch.ones(T), torch.zeros(T, dtype=torch.int64),
                               torch.ones(T), torch.zeros(T))
    ids = torch.zeros(T, dtype=torch.int64)
    for t in range(T):
        row = qp[t].double().numpy()
        ids[t] = int(rng.choice(V, p=row / row.sum())) if row.sum() > 0 else int(rng.integers(V))
        if specials and rng.random() < 0.04:
            ids[t] = -1 if rng.random() < 0.7 else V + int(rng.integers(3))
    if target_kind == "probs":
        it = torch.from_numpy(R.inv_temperature(np.full(N, 0.9, dtype=np.float32)))
        target, _ = ref.sampling_probs(tl, it, torch.zeros(N, dtype=torch.int64),
                                       torch.full((N,), 0.97), torch.zeros(N))
        if specials:
            for i in range(N):
                r = rng.random()
                if r < 0.03:
                    target[i, int(rng.integers(V))] = float("nan")
                elif r < 0.05:
                    target[i, int(rng.integers(V))] = -0.25
                elif r < 0.07:
                    target[i] = 0.0
                elif r < 0.09:
                    target[i] = 1.0 if V <= 4 else 0.9
        target_is_probs = True
    else:
        target, target_is_probs = tl.to(dtype), False
    draft, draft_is_probs = None, False
    if draft_kind == "probs":
        itd = torch.from_numpy(R.inv_temperature(np.full(T, 1.0, dtype=np.float32)))
        draft, _ = ref.sampling_probs(dl, itd, torch.zeros(T, dtype=torch.int64),
                                      torch.ones(T), torch.zeros(T))
        if specials and T:
            draft[int(rng.integers(T)), int(rng.integers(V))] = float("nan")
        draft_is_probs = True
    elif draft_kind == "logits":
        draft = dl.to(dtype)
    seed = torch.from_numpy(rng.integers(-2 ** 63, 2 ** 63 - 1, size=B, dtype=np.int64))
    offset = torch.from_numpy(rng.integers(-2 ** 40, 2 ** 40, size=B, dtype=np.int64))
    return (target, target_is_probs, trs, ids, drs, nd, draft, draft_is_probs, *params,
            seed, offset, K)


# The reference's answers, memoised across ISA levels: a test that rebuilds the same inputs
# from the same seed at every level passes ``key`` and the oracle runs once per input.
_REF_OUT: dict = {}


def _check_verify(args, key=None):
    a = cpu.verify(*args)
    b = _REF_OUT.get(key) if key is not None else None
    if b is None:
        b = ref.verify(*args)
        if key is not None:
            _REF_OUT[key] = b
    for x, y, name in zip(a, b, ("token_ids", "num_accepted", "valid")):
        assert x.dtype == y.dtype, name
        if not torch.equal(x, y):
            bad = (x != y).reshape(x.shape[0], -1).any(1).nonzero().flatten().tolist()
            raise AssertionError(f"{name} differs for requests {bad[:8]}: cpu={x[bad[:4]]} "
                                 f"ref={y[bad[:4]]}")
    tok, nacc, valid = a
    V = args[0].shape[1]
    assert int(tok.min()) >= -1 and int(tok.max()) < V
    count("verify_requests", tok.shape[0])
    count("verify_target_rows_read", int((nacc + 1).sum()))
    return a


VERIFY_CASES = [
    # (V, B, K, dtype, draft_kind, target_kind, greedy_mode, layout)
    (7, 24, 4, torch.float32, "probs", "logits", "none", "padded"),
    (7, 24, 4, torch.float32, "none", "logits", "mixed", "packed"),
    (2, 24, 3, torch.float16, "logits", "logits", "mixed", "padded"),
    (1, 8, 2, torch.float32, "probs", "logits", "mixed", "padded"),
    (50, 24, 5, torch.bfloat16, "logits", "logits", "mixed", "packed"),
    (50, 24, 5, torch.float16, "probs", "logits", "none", "padded"),
    (50, 24, 5, torch.float32, "none", "probs", "mixed", "packed"),
    (50, 24, 5, torch.float32, "probs", "probs", "none", "padded"),
    (50, 24, 5, torch.float32, "logits", "probs", "mixed", "padded"),
    (1000, 16, 4, torch.float32, "logits", "logits", "mixed", "padded"),
    (1000, 16, 4, torch.bfloat16, "none", "logits", "none", "packed"),
    (1000, 16, 4, torch.float32, "probs", "probs", "mixed", "padded"),
    (1000, 12, 3, torch.float32, "none", "logits", "all", "padded"),
    (1000, 12, 3, torch.float16, "logits", "logits", "all", "packed"),
    (32000, 4, 3, torch.float32, "logits", "logits", "mixed", "padded"),
    (32000, 4, 3, torch.bfloat16, "probs", "logits", "none", "packed"),
]


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.full] if c[0] > 1000 else [])
                                  for c in VERIFY_CASES], ids=lambda c: "-".join(
    str(x).split(".")[-1] for x in c))
def test_verify_bitwise(case, isa):
    V, B, K, dtype, draft_kind, target_kind, greedy_mode, layout = case
    rng = np.random.default_rng(seed_of(*map(str, case)))
    reps = 6 if V <= 1000 else 2
    for rep in range(reps):
        _check_verify(_random_batch(rng, B, K, V, dtype, draft_kind, target_kind, greedy_mode,
                                    layout), key=("verify_bitwise", str(case), rep))


def test_verify_random_mix(isa):
    """Many small random batches over every combination of layout, dtype, draft kind,
    target kind and greedy mix."""
    rng = np.random.default_rng(99)
    for _ in range(120):
        V = int(rng.choice([1, 2, 3, 17, 256]))
        K = int(rng.integers(0, 6))
        _check_verify(_random_batch(
            rng, int(rng.integers(1, 12)), K, V, DTYPES[int(rng.integers(3))],
            str(rng.choice(["none", "probs", "logits"])), str(rng.choice(["logits", "probs"])),
            str(rng.choice(["none", "mixed", "all"])), str(rng.choice(["padded", "packed"]))))


def test_verify_point_mass_acceptance_is_exercised(isa):
    """Drafts equal to the argmax of a peaked target: most positions accept, some reject."""
    rng = np.random.default_rng(11)
    B, K, V = 32, 6, 100
    args = list(_random_batch(rng, B, K, V, torch.float32, "none", "logits", "mixed",
                              "padded", specials=False))
    target = args[0].view(B, K + 1, V)
    target.mul_(4.0)
    ids = target[:, :K].argmax(-1)
    flip = torch.from_numpy(rng.random((B, K)) < 0.1)
    ids[flip] = torch.from_numpy(rng.integers(0, V, size=int(flip.sum())))
    args[3] = ids.reshape(-1).to(torch.int64)
    tok, nacc, valid = _check_verify(tuple(args))
    assert int(nacc.sum()) > B  # acceptance really happened
    assert bool(valid.all())


def test_verify_strided_target_and_batch_invariance(isa):
    rng = np.random.default_rng(12)
    B, K, V = 6, 3, 200
    args = list(_random_batch(rng, B, K, V, torch.float32, "logits", "logits", "none",
                              "padded", specials=False))
    big = torch.zeros(args[0].shape[0], V + 37)
    big[:, 5:5 + V] = args[0]
    args[0] = big[:, 5:5 + V]              # row stride V + 37
    full = _check_verify(tuple(args))
    # request 2 alone (its own seed/offset, same rows) gives the same output row
    one = list(args)
    for i in (2, 4, 5, 8, 9, 10, 11, 12, 13):  # per-request [B] arrays
        one[i] = args[i][2:3]
    tok, nacc, valid = cpu.verify(*one)[:3]
    assert torch.equal(tok[0], full[0][2]) and int(nacc[0]) == int(full[1][2])


# ----------------------------------------------------------------------------- forced mode
def _reference_forced(args, forced):
    """The reference's forced mode (specops.reference, section 7)."""
    return ref.verify(*args, forced_num_accepted=forced)


FORCED_CASES = [
    # (V, draft_kind, target_kind, greedy_mode, layout)
    (7, "probs", "probs", "mixed", "packed"),
    (7, "none", "probs", "mixed", "padded"),
    (300, "probs", "probs", "none", "packed"),
    (300, "none", "logits", "mixed", "padded"),
    (300, "logits", "logits", "mixed", "packed"),
    (32000, "probs", "probs", "mixed", "padded"),
    (32000, "logits", "logits", "none", "padded"),
]


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.full] if c[0] > 1000 else [])
                                  for c in FORCED_CASES], ids=lambda c: "-".join(map(str, c)))
def test_verify_forced_mode_bitwise(case, isa):
    """verify(..., forced_num_accepted=a): the walk's forced mode (the residual_sample view)
    against the reference, with a = the plain walk's own num_accepted (the composed ops),
    random values past the block, and negative values (invalid requests); int32 and int64
    and an expanded (stride 0) column all read the same."""
    V, draft_kind, target_kind, greedy_mode, layout = case
    rng = np.random.default_rng(seed_of(*case))
    B, K = (24, 4) if V < 32000 else (4, 3)
    for _ in range(2 if V < 32000 else 1):
        args = _random_batch(rng, B, K, V, torch.float32, draft_kind, target_kind, greedy_mode,
                             layout)
        plain = cpu.verify(*args)
        random_a = torch.from_numpy(rng.integers(-2, K + 3, size=B))
        for a in (plain[1], random_a, random_a.to(torch.int32)):
            got = cpu.verify(*args, forced_num_accepted=a)
            want = _reference_forced(args, a)
            for x, y, name in zip(got, want, ("token_ids", "num_accepted", "valid")):
                assert x.dtype == y.dtype and torch.equal(x, y), (name, x, y)
        # forcing the plain walk's own num_accepted reproduces the plain walk
        again = cpu.verify(*args, forced_num_accepted=plain[1])
        assert torch.equal(again[0], plain[0]) and torch.equal(again[1], plain[1])
        one = cpu.verify(*args, forced_num_accepted=torch.tensor([1]).expand(B))
        assert torch.equal(one[0], cpu.verify(*args, forced_num_accepted=torch.ones(B,
                                                  dtype=torch.int64))[0])
        count("forced_requests", 4 * B)


def test_per_request_columns_read_with_their_strides(isa):
    """Per-request [B] columns with stride 0 (``.expand(B)``), stride 2 and int32 dtype are
    read in place and give what contiguous int64 / float32 columns give."""
    rng = np.random.default_rng(31)
    B, K, V = 6, 3, 40
    args = list(_random_batch(rng, B, K, V, torch.float32, "logits", "logits", "none",
                              "padded", specials=False))
    for i, v in ((8, 0.9), (9, 5), (10, 0.8), (11, 0.0), (14 - 1, 7)):  # scalars, expanded
        args[i] = torch.tensor([v], dtype=args[i].dtype).expand(B)
    want = _check_verify(tuple(args))
    strided = list(args)
    for i in (2, 4, 5, 12):
        strided[i] = torch.stack([args[i], args[i] + 99], 1).reshape(-1)[::2]  # stride 2
        assert strided[i].stride(0) == 2
    strided[5] = strided[5].to(torch.int32)
    strided[2] = args[2].to(torch.int32)
    got = cpu.verify(*strided)
    for x, y in zip(got, want):
        assert torch.equal(x, y)


# ----------------------------------------------------------------------------- fuzz safety
def test_fuzz_garbage_indices_never_crash(isa):
    rng = np.random.default_rng(13)
    big = [2 ** 62, -2 ** 62, 2 ** 63 - 1, -2 ** 63, 10 ** 9, -10 ** 9, -1, 0]
    for it_ in range(60):
        V = int(rng.choice([1, 3, 64]))
        N, T, B = int(rng.integers(0, 6)), int(rng.integers(0, 6)), int(rng.integers(1, 6))
        target = torch.randn(max(N, 0), V)
        if it_ % 3 == 0:
            target = torch.rand(N, V)
        draft_kind = ["none", "probs", "logits"][it_ % 3]
        draft = None if draft_kind == "none" else torch.rand(T, V)

        def garbage(n, lo, hi):
            v = rng.integers(lo, hi, size=n).astype(np.int64)
            m = rng.random(n) < 0.4
            v[m] = rng.choice(big, size=int(m.sum()))
            return torch.from_numpy(v)

        trs, drs = garbage(B, -3, N + 3), garbage(B, -3, T + 3)
        nd = garbage(B, -3, 10)
        ids = garbage(T, -3, V + 3)
        max_k = int(rng.integers(0, 8))
        it = torch.from_numpy(rng.choice([0.0, 1.0, 1.7], size=B).astype(np.float32))
        tk = garbage(B, -2, V + 2)
        tp = torch.from_numpy(rng.choice([1.0, 0.5, 0.0, -1.0, np.nan], size=B)
                              .astype(np.float32))
        mp = torch.from_numpy(rng.choice([0.0, 0.5, 2.0, np.nan], size=B).astype(np.float32))
        seed, offset = garbage(B, -5, 5), garbage(B, -5, 5)
        for is_probs in (False, True):
            tok, nacc, valid = cpu.verify(target, is_probs, trs, ids, drs, nd, draft,
                                          draft_kind == "probs", it, tk, tp, mp, seed, offset,
                                          max_k)[:3]
            assert tok.shape == (B, max_k + 1)
            assert int(tok.min()) >= -1 and int(tok.max()) < V
            assert int(nacc.min()) >= 0 and int(nacc.max()) <= max_k
            forced = garbage(B, -3, 10)
            tok, nacc, valid = cpu.verify(target.abs(), is_probs, trs, ids, drs, nd, draft,
                                          draft_kind == "probs", it, tk, tp, mp, seed, offset,
                                          max_k, forced_num_accepted=forced)[:3]
            assert int(tok.min()) >= -1 and int(tok.max()) < V
            assert int(nacc.min()) >= 0 and int(nacc.max()) <= max_k
        Nr = target.shape[0]
        rows = lambda t: t.repeat(Nr // B + 1)[:Nr]  # noqa: E731
        p, v = cpu.sampling_probs(target, rows(it), rows(tk), rows(tp), rows(mp))
        assert p.shape == target.shape
        assert not bool(torch.isnan(p).any()) and bool(((p >= 0) & (p <= 1)).all())
    count("fuzz_calls", 60)


def test_empty_batch_and_zero_k(isa):
    V = 10
    target = torch.randn(3, V)
    e = torch.zeros(0, dtype=torch.int64)
    tok, nacc, valid = cpu.verify(target, False, e, e, e, e, None, False,
                                  torch.zeros(0), e, torch.zeros(0), torch.zeros(0), e, e, 0)[:3]
    assert tok.shape == (0, 1) and nacc.shape == (0,) and valid.shape == (0,)
    one = torch.zeros(1, dtype=torch.int64)
    args = (target, False, one, e, one, one, None, False, torch.ones(1), one, torch.ones(1),
            torch.zeros(1), one, one, 0)
    _check_verify(args)


def test_negative_draft_probs_bitwise(isa):
    """Draft 'probabilities' with negative entries (outside the public API): the residual
    r = p - max(q, 0) stays in [0, p], so the draw is the usual exact one, plain and forced."""
    rng = np.random.default_rng(14)
    for V in (5, 3000):
        B, K = 16, 3
        args = list(_random_batch(rng, B, K, V, torch.float32, "probs", "logits", "none",
                                  "padded", specials=False))
        draft = args[6].clone()
        for t in range(draft.shape[0]):
            draft[t, int(rng.integers(V))] = -3.0 if rng.random() < 0.5 else -0.5
        args[6] = draft
        _check_verify(tuple(args))
        forced = torch.from_numpy(rng.integers(0, K + 1, size=B))
        got = cpu.verify(*args, forced_num_accepted=forced)
        want = _reference_forced(tuple(args), forced)
        for x, y in zip(got, want):
            assert torch.equal(x, y)
        count("forced_requests", B)


# ----------------------------------------------------------------------------- draft_probs check
def _spoil_draft(rng, draft, ids, V):
    """Draft probability rows, some made not probabilities where the walk reads them: NaN,
    +-inf, a negative or > 1 entry at the draft's own token (the accept test's value: a
    negative q(y) is always accepted) or elsewhere (the residual row), masses just inside and
    just outside the 1e-2 tolerance (the exact integer edge: the walk's rescan), clearly
    inside or outside it (decided from the pass's own sums), a doubled row, and a -0.0 entry
    (a probability: it has the sign bit that sends the row to the rescan)."""
    q = draft.clone()
    for t in range(q.shape[0]):
        y = int(ids[t]) if 0 <= int(ids[t]) < V else 0
        x = int(rng.integers(V))
        r = rng.random()
        if r < 0.06:
            q[t, x] = float("nan")
        elif r < 0.09:
            q[t, x] = float("inf") if rng.random() < 0.5 else -float("inf")
        elif r < 0.20:
            q[t, y] = -float(rng.choice([0.5, 1e-3, 1e-30]))
        elif r < 0.25:
            q[t, y] = float(rng.choice([1.5, 1.0 + 2 ** -23]))
        elif r < 0.31:
            q[t, x] = -float(rng.choice([0.25, 1e-7]))
        elif r < 0.35:
            q[t, x] = 1.25
        elif r < 0.50:                   # within a few parts in 1e6 of the tolerance edge
            edge = 1 + float(rng.choice([0.01, -0.01])) * (1 + float(rng.normal()) * 3e-6)
            q[t] = (q[t].double() * edge).float()
        elif r < 0.56:                   # clearly inside or outside it
            q[t] = q[t] * float(rng.choice([0.995, 1.005, 0.98, 1.02]))
        elif r < 0.58:
            q[t] = q[t] * 2
        elif r < 0.60:
            q[t, x] = -0.0
    return q


def _draft_bad_cases(rng, V, B, K, target_kind, dtype, layout):
    """A random batch (_random_batch, sampled rows only or mixed with greedy ones) whose
    draft probabilities are spoiled (_spoil_draft)."""
    args = list(_random_batch(rng, B, K, V, dtype, "probs", target_kind,
                              str(rng.choice(["none", "mixed"])), layout))
    if target_kind == "probs":           # target probabilities take no transform (section 8)
        args[8] = torch.where(args[8] == 0, 0.0, 1.0)
        args[9], args[10], args[11] = (torch.zeros_like(args[9]), torch.ones_like(args[10]),
                                       torch.zeros_like(args[11]))
    if args[6].shape[0]:
        args[6] = _spoil_draft(rng, args[6], args[3], V)
    return args


def _check_draft_bad(args, method, want_rates, seen, key=None):
    """cpu == reference for every output with check_draft (bitwise, NaN rates included),
    and the walk's outputs unchanged by the check (``key``: the reference memoised across
    ISA levels)."""
    got = cpu.verify(*args, method=method, want_rates=want_rates, check_draft=True)
    key = None if key is None else ("draft_bad", key, method, want_rates)
    want = _REF_OUT.get(key) if key is not None else None
    if want is None:
        want = ref.verify(*args, method=method, want_rates=want_rates, check_draft=True)
        if key is not None:
            _REF_OUT[key] = want
    plain = cpu.verify(*args, method=method, want_rates=want_rates)
    names = ("token_ids", "num_accepted", "valid") + (("rates",) if want_rates else ()) + (
        "draft_bad",)
    assert len(got) == len(want) == len(names)
    for x, y, name in zip(got, want, names):
        assert x.dtype == y.dtype, name
        bits = (lambda t: t.view(torch.int32)) if x.dtype == torch.float32 else (lambda t: t)
        if not torch.equal(bits(x), bits(y)):
            bad = (bits(x) != bits(y)).reshape(x.shape[0], -1).any(1).nonzero().flatten()
            raise AssertionError(f"{name} differs ({method}, rates={want_rates}) for requests "
                                 f"{bad[:8].tolist()}: cpu={x[bad[:4]]} ref={y[bad[:4]]}")
    for x, y in zip(plain, got):
        assert torch.equal(x.view(torch.int32) if x.dtype == torch.float32 else x,
                           y.view(torch.int32) if y.dtype == torch.float32 else y)
    bad, nacc = got[-1], got[1]
    seen["value"] += int(((bad >= 0) & (bad < nacc)).sum())
    seen["row"] += int(((bad >= 0) & (bad == nacc)).sum())
    seen["clean"] += int((bad < 0).sum())
    count("draft_bad_requests", int(bad.numel()))


DRAFT_BAD_CASES = [
    # (V, B, K, target_kind, dtype, layout)
    (7, 24, 4, "logits", torch.float32, "padded"),
    (7, 24, 4, "probs", torch.float32, "packed"),
    (50, 24, 5, "logits", torch.bfloat16, "packed"),
    (50, 24, 5, "probs", torch.float32, "padded"),
    (1000, 16, 4, "logits", torch.float32, "padded"),
    (3001, 16, 3, "logits", torch.float16, "packed"),
    (3001, 16, 3, "probs", torch.float32, "padded"),
]


@pytest.mark.parametrize("case", DRAFT_BAD_CASES, ids=lambda c: "-".join(
    str(x).split(".")[-1] for x in c))
def test_draft_bad_equals_reference(case, isa):
    """The default draft_probs check inside the C++ walk (``draft_bad``, reference
    ``walk.draft_check``): the same first bad position as the reference for every request,
    token-wise and block, with and without the rates (each a different pass over the drawn
    row), at this ISA level; the walk's own outputs are the unchecked call's.  Spoiled rows:
    NaN, inf, negative and > 1 entries at the draft's token and elsewhere, masses at the
    tolerance edge; sparse (top-k / top-p / min-p) and greedy requests mixed in."""
    V, B, K, target_kind, dtype, layout = case
    rng = np.random.default_rng(seed_of("draft_bad", *map(str, case)))
    seen = {"value": 0, "row": 0, "clean": 0}
    for rep in range(4 if V <= 1000 else 3):
        args = _draft_bad_cases(rng, V, B, K, target_kind, dtype, layout)
        for method in ("token", "block"):
            for want_rates in (False, True):
                _check_draft_bad(args, method, want_rates, seen, (str(case), rep))
    assert min(seen.values()) > 0, seen       # every kind of answer occurs


def test_draft_bad_layouts_and_edges(isa):
    """The check reads the row where it is: a draft matrix with a row stride (read in
    place), one with a column stride (copied), and rows at the tolerance's two edges within
    a few units of 2**32 * 1e-2 (V = 20000: block verification's chunked scan too), decided
    by the exact integer mass on every layout; the forced mode reports -1.  Also the
    compiled tolerance is the reference's."""
    from specops.reference.constants import DRAFT_MASS_TOLERANCE
    assert _C.constants()["DRAFT_MASS_TOLERANCE"] == DRAFT_MASS_TOLERANCE
    rng = np.random.default_rng(41)
    seen = {"value": 0, "row": 0, "clean": 0}
    for V, B, K in ((200, 12, 3), (20000, 4, 2)):
        args = list(_random_batch(rng, B, K, V, torch.float32, "probs", "logits", "none",
                                  "padded", specials=False))
        q = args[6]
        for t in range(q.shape[0]):      # masses within ~1e-7 of each edge
            edge = 1 + (0.01 if t % 2 else -0.01) * (1 + float(rng.normal()) * 1e-6)
            q[t] = (q[t].double() * edge).float()
        wide = torch.full((q.shape[0], 2 * V + 3), float("nan"))
        wide[:, 3:3 + V] = q
        strided = torch.full((q.shape[0], 2 * V), float("nan"))
        strided[:, ::2] = q
        for draft in (q, wide[:, 3:3 + V], strided[:, ::2]):
            args[6] = draft
            for method in ("token", "block"):
                _check_draft_bad(tuple(args), method, False, seen)
        forced = torch.from_numpy(rng.integers(0, K + 1, size=B))
        out = cpu.verify(*args, check_draft=True, forced_num_accepted=forced)
        assert out[-1].tolist() == [-1] * B
    assert seen["row"] > 0 and seen["clean"] > 0, seen


_ISA_SCRIPT = r"""
import torch, specops
from specops import _C
try:
    print("isa", _C.isa())
except ValueError as exc:
    print("isa ValueError", exc)
logits = torch.randn(2, 3, 11)
ids = torch.zeros(2, 2, dtype=torch.int64)
for backend in ("cpu", "auto", "reference"):
    try:
        specops.verify_block(logits, ids, None, seed=1, backend=backend)
        print(backend, "ok")
    except ValueError as exc:
        print(backend, type(exc).__name__, exc)
print("available", ",".join(specops.available_backends()))
from specops import cli
try:
    cli.main(["--version"])
except SystemExit as exc:
    print("cli_version_exit", exc.code)
"""


def _run_with_isa(value):
    env = {**os.environ, "SPECOPS_CPU_ISA": value}
    r = subprocess.run([sys.executable, "-c", _ISA_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return dict(ln.split(" ", 1) for ln in r.stdout.splitlines() if " " in ln)


@pytest.mark.full                       # a fresh interpreter per level
def test_isa_env_var_is_honoured():
    """SPECOPS_CPU_ISA=scalar (not the default on x86) is the active level in a new process."""
    out = _run_with_isa("scalar")
    assert {k: out[k] for k in ("isa", "cpu", "auto", "reference")} == {
        "isa": "scalar", "cpu": "ok", "auto": "ok", "reference": "ok"}
    assert "cpu" in out["available"].split(",")


@pytest.mark.full                       # a fresh interpreter
def test_isa_env_var_unknown_value_fails_only_where_the_cpu_backend_is_used():
    """An unknown level (issue 27, defect 8): `import specops` works; backend="cpu" raises a
    ValueError naming SPECOPS_CPU_ISA (CpuIsaError, also a BackendUnavailable), as _C does;
    backend="auto" runs the reference with a warning that names the variable (issue 28 item
    4; tests/test_api.py checks the warning); backend="reference", available_backends()
    (without "cpu") and the CLI work."""
    out = _run_with_isa("avx9000")
    # (the script catches ValueError and prints the type's name)
    for key, kind in (("isa", "ValueError"), ("cpu", "CpuIsaError")):
        assert out[key].startswith(kind) and "SPECOPS_CPU_ISA='avx9000'" in out[key], out
    assert out["auto"] == "ok" and out["reference"] == "ok", out
    avail = out["available"].split(",")
    assert "cpu" not in avail and "reference" in avail, out
    assert out["cli_version_exit"] == "0", out


def _cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.skipif(not _cpu_flags(), reason="no /proc/cpuinfo flags to compare with")
def test_build_has_every_level_this_cpu_runs():
    """A level the CPU has (x86 flags as Linux reports them) is in the build and available:
    a compiler check or CPU probe that silently dropped one would fail here."""
    flags = _cpu_flags()
    want = {"sse2": {"sse2"}, "avx2": {"avx2", "popcnt"}, "avx512": {"avx512f", "avx512dq"}}
    for level, needs in want.items():
        if needs <= flags:
            assert level in ISAS, (level, ISAS)


def test_set_isa():
    before = _C.isa()
    assert before == ISAS[-1]  # the default is the best level this CPU runs
    with pytest.raises(ValueError, match="scalar, sse2, avx2, avx512"):
        _C.set_isa("neon")
    for level in ISAS:
        _C.set_isa(level)
        assert _C.isa() == level
    _C.set_isa(before)
