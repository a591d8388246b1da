"""The SGLang drop-in's caller-coin mode (contract section 13) against the reference.

``specops::coin_walk`` on every backend (the reference backend, the C++ kernel at every ISA
level, the Triton kernel under the interpreter) must write, through the drop-in, exactly the
outputs ``reference.coins.verify_coins_ref`` implies,
token for token, on a table of random trees (shuffled sibling orders, repeated tokens,
zero-probability children, unreachable slots), random and boundary coins (0, NaN, 1, values
below the 2**-24 grid), every threshold mode, and invalid rows.  Also: ``verify_tree_greedy``
against a direct transcription of sgl-kernel's loop, the ``_rejmask`` variant, both keyword
spellings, and the renorm fallbacks.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from specops.integrations import sglang as S
from specops.backends import registry
from specops.reference import coins as RC
from tests.integrations.test_sglang import outputs, random_probs, random_sgl_tree

BACKENDS = ["reference"] + (["cpu"] if registry.is_available("cpu") else [])
THRESHOLDS = [(1.0, 1.0), (0.0, 0.0), (0.9, 0.7), (0.3, 1.0), (1.0, 0.25), (1.0, 1e-12)]


def expected(cand, ri, nt, ns, u, uf, target, S_, ts, ta, pre):
    """The reference walk written into sgl-kernel's three outputs (starting from ``pre``)."""
    acc, toks, valid = RC.verify_coins_ref(cand.tolist(), nt.tolist(), ns.tolist(),
                                           u.numpy(), uf.numpy(), target.numpy(), S_, ts, ta)
    p, a, n = (t.clone() for t in pre)
    for b in range(cand.shape[0]):
        slots = [0] + acc[b]
        n[b] = len(acc[b])
        for k, s in enumerate(slots):
            a[b, k] = int(ri[b, s])
            p[int(ri[b, s])] = toks[b][k]
    return (p, a, n), torch.tensor(valid)


def random_case(rng, gen, trial):
    N = rng.randint(1, 9)
    B = 5
    rows = [random_sgl_tree(rng, N) for _ in range(B)]
    nt = torch.tensor([r[0] for r in rows])
    ns = torch.tensor([r[1] for r in rows])
    V = rng.choice([3, 6, 17])
    cand = torch.randint(0, V, (B, N), generator=gen)
    ri = torch.randperm(B * N + 2, generator=gen)[:B * N].reshape(B, N)
    target = random_probs(gen, (B, N, V), scale=1.0 + trial % 4)
    if trial % 3 == 0:                    # exact zeros: drafts of target probability 0
        target = torch.where(target < 0.1, torch.zeros_like(target), target)
        target[..., 0] += (target.sum(-1) == 0).float()
    u, uf = torch.rand(B, N, generator=gen), torch.rand(B, generator=gen)
    if trial % 4 == 1:                    # boundary coins
        u.view(-1)[::3] = 0.0
        u.view(-1)[1::5] = float("nan")
        uf[0] = 1.0
        uf[1] = 2.0 ** -30
    if trial % 5 == 2 and N > 1:          # an invalid row somewhere
        target[0, rng.randrange(N), 0] = float("nan")
    S_ = rng.randint(1, N + 1)
    return cand, ri, nt, ns, u, uf, target, S_


def _check_walk_equals_reference(ts, ta, backend, trials=24):
    rng = random.Random(11)
    gen = torch.Generator().manual_seed(11)
    for trial in range(trials):
        cand, ri, nt, ns, u, uf, target, S_ = random_case(rng, gen, trial)
        B, N = cand.shape
        pre = (torch.randint(-9, 0, (B * N + 2,), generator=gen, dtype=torch.int32),
               torch.randint(-9, 0, (B, S_), generator=gen, dtype=torch.int32),
               torch.full((B,), -3, dtype=torch.int32))
        got = tuple(t.clone() for t in pre)
        valid = S.tree_speculative_sampling_target_only(
            *got, cand, ri, nt, ns, u, uf, target, torch.zeros_like(target), ts, ta,
            backend=backend)
        want, want_valid = expected(cand, ri, nt, ns, u, uf, target, S_, ts, ta, pre)
        for g, w in zip(got, want):
            assert torch.equal(g, w), (trial, g, w)
        assert torch.equal(valid, want_valid), trial


@pytest.mark.parametrize("ts,ta", THRESHOLDS)
def test_reference_backend_writes_the_reference_walk(ts, ta):
    """The reference backend through the drop-in writes, token for token (all three outputs
    and ``valid``), what the reference's walk implies: the output writing, the sibling slots
    and the thresholds' path through the op."""
    _check_walk_equals_reference(ts, ta, "reference")


@pytest.mark.parametrize("ts,ta", THRESHOLDS)
def test_cpp_walk_equals_reference(ts, ta, isa):
    """The C++ kernel (csrc/verify/coins.cpp), at every ISA level, the same way.  Catches
    any difference in the integer coin threshold, the sibling order, the coin read at the
    accepted node, duplicate handling, thresholds, the final draw or invalid rows."""
    _check_walk_equals_reference(ts, ta, "cpu")


@pytest.mark.parametrize("ts,ta", [(1.0, 1.0), (0.9, 0.7)])
def test_triton_walk_equals_reference(ts, ta):
    """The Triton kernel (specops/triton_kernels/verify_coins.py, under the interpreter here) the
    same way, on the first 8 cases of the table (one launch each: ~1 s per case set)."""
    _check_walk_equals_reference(ts, ta, "triton", trials=8)


@pytest.mark.full
@pytest.mark.parametrize("ts,ta", THRESHOLDS)
def test_triton_walk_equals_reference_full(ts, ta):
    """The Triton kernel on the whole table, every threshold mode."""
    _check_walk_equals_reference(ts, ta, "triton")


def test_exact_mode_against_sglang_boundaries():
    """Coins fixed at the CDF boundaries of SGLang's test (coin 0.99 vs p = 0.9 rejects,
    the final coin lands on the only untried token), and the lower endpoint: coin 0 on a
    zero-probability draft is rejected here (sgl-kernel accepts it, #35771)."""
    cand = torch.tensor([[0, 3, 5]])
    ri = torch.tensor([[0, 1, 2]])
    nt, ns = torch.tensor([[1, 2, -1]]), torch.full((1, 3), -1)
    target = torch.zeros(1, 3, 32)
    target[0, 0, 0], target[0, 0, 3] = 0.05, 0.95
    target[0, 1, 5], target[0, 1, 31] = 0.9, 0.1
    target[0, 2, 0] = 1.0
    for backend in BACKENDS + ["triton"]:
        t = target.clone()
        p, a, n = outputs(1, 3, 3)
        S.tree_speculative_sampling_target_only(p, a, n, cand, ri, nt, ns,
                                                torch.tensor([[0.0, 0.99, 0.0]]),
                                                torch.tensor([0.5]), t, backend=backend)
        assert n.tolist() == [1] and p[:2].tolist() == [3, 31], backend
        t[0, 0, 3], t[0, 0, 0] = 0.0, 1.0          # the root's draft now has p = 0
        p, a, n = outputs(1, 3, 3)
        S.tree_speculative_sampling_target_only(p, a, n, cand, ri, nt, ns,
                                                torch.tensor([[0.0, 0.0, 0.0]]),
                                                torch.tensor([0.0]), t, backend=backend)
        assert n.tolist() == [0] and p[0].item() == 0, backend


def test_repeated_sibling_token_not_recounted():
    """Two siblings with the same token (p = 0.4) and coin 0.6: the first is rejected, the
    repeat adds no mass (C stays 0.4 < 0.6) and is rejected too, and the final draw avoids
    the token.  sgl-kernel's re-count (C = 0.8) would accept the repeat: every
    implementation must not."""
    cand = torch.tensor([[0, 1, 1]])
    ri = torch.tensor([[0, 1, 2]])
    nt, ns = torch.tensor([[1, -1, -1]]), torch.tensor([[-1, 2, -1]])
    target = torch.zeros(1, 3, 4)
    target[0, 0] = torch.tensor([0.25, 0.4, 0.25, 0.1])
    target[0, 1:, 0] = 1.0
    for backend in BACKENDS + ["triton"]:
        p, a, n = outputs(1, 3, 3)
        S.tree_speculative_sampling_target_only(p, a, n, cand, ri, nt, ns,
                                                torch.tensor([[0.6, 0.0, 0.0]]),
                                                torch.tensor([0.5]), target, backend=backend)
        assert n.tolist() == [0] and p[0].item() != 1, backend


def sgl_greedy(cand, ri, nt, ns, tp, S_, pre):
    """sgl-kernel's VerifyTreeGreedy loop, transcribed (one request at a time)."""
    p, a, n = (t.clone() for t in pre)
    flat = tp.reshape(-1)
    N = cand.shape[1]
    for b in range(cand.shape[0]):
        last = int(ri[b, 0])
        a[b, 0] = last
        acc, cur = 0, 0
        for _ in range(1, S_):
            cur = int(nt[b, cur])
            while cur != -1:
                if int(cand[b, cur]) == int(flat[last]):
                    p[last] = int(flat[last])
                    acc += 1
                    a[b, acc] = int(ri[b, cur])
                    last = int(ri[b, cur])
                    break
                cur = int(ns[b, cur])
            if cur == -1:
                break
        n[b] = acc
        p[last] = int(flat[last])
        assert N > 0
    return p, a, n


def test_verify_tree_greedy_equals_sgl_loop():
    """verify_tree_greedy writes what sgl-kernel's loop writes, on random trees whose
    target_predict often matches a child.  Catches: the flat read of target_predict
    through retrive_index, sibling order, the level cap."""
    rng = random.Random(5)
    gen = torch.Generator().manual_seed(5)
    for trial in range(30):
        N, B, V = rng.randint(1, 8), 4, 3
        rows = [random_sgl_tree(rng, N) for _ in range(B)]
        nt = torch.tensor([r[0] for r in rows])
        ns = torch.tensor([r[1] for r in rows])
        cand = torch.randint(0, V, (B, N), generator=gen)
        ri = torch.arange(B * N).reshape(B, N)
        tp = torch.randint(0, V, (B, N), generator=gen)
        S_ = rng.randint(1, N + 1)
        pre = outputs(B, N, S_, fill=-7)
        got = tuple(t.clone() for t in pre)
        S.verify_tree_greedy(*got, cand, ri, nt, ns, tp)
        for g, w in zip(got, sgl_greedy(cand, ri, nt, ns, tp, S_, pre)):
            assert torch.equal(g, w), (trial, g, w)


def test_rejmask_and_spellings():
    """The _rejmask variant equals the target-only call; ``retrieve_*`` keywords equal
    ``retrive_*``; giving both spellings is an error naming them."""
    rng = random.Random(8)
    gen = torch.Generator().manual_seed(8)
    cand, ri, nt, ns, u, uf, target, S_ = random_case(rng, gen, 4)
    B, N = cand.shape
    a = outputs(B, N + 2, S_)
    S.tree_speculative_sampling_target_only(*a, cand, ri, nt, ns, u, uf, target,
                                            threshold_single=0.9, threshold_acc=0.7)
    b = outputs(B, N + 2, S_)
    S.tree_speculative_sampling_target_only_rejmask(
        predicts=b[0], accept_index=b[1], accept_token_num=b[2], candidates=cand,
        retrieve_index=ri, retrieve_next_token=nt, retrieve_next_sibling=ns,
        uniform_samples=u, uniform_samples_for_final_sampling=uf, target_probs=target,
        threshold_single=0.9, threshold_acc=0.7, deterministic=False)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    draft = random_probs(gen, tuple(target.shape))
    c, d = outputs(B, N + 2, S_), outputs(B, N + 2, S_)
    S.tree_speculative_sampling(*c, cand, ri, nt, ns, u, uf, target, draft, seed=3)
    S.tree_speculative_sampling(*d, cand, retrieve_index=ri, retrieve_next_token=nt,
                                retrieve_next_sibling=ns, uniform_samples=u,
                                uniform_samples_for_final_sampling=uf, target_probs=target,
                                draft_probs=draft, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(c, d))
    with pytest.raises(TypeError, match="retrieve_index"):
        S.tree_speculative_sampling_target_only(*outputs(B, N + 2, S_), cand, ri, nt, ns, u,
                                                uf, target, retrieve_index=ri)


def test_renorm_fallbacks():
    """SGLang's top-k / top-p renorm fallbacks: the kept set and the renormalisation.
    Catches: ties dropped, k per row ignored, top-p keeping one token too many or few."""
    probs = torch.tensor([[0.1, 0.3, 0.05, 0.4, 0.15], [0.5, 0.2, 0.1, 0.1, 0.1]])
    r = S.top_k_renorm_prob_fallback(probs, top_k=torch.tensor([2, 3]))
    assert (r[0] > 0).tolist() == [False, True, False, True, False]
    assert (r[1] > 0).sum().item() == 5                     # the ties at the 3rd value kept
    assert torch.allclose(r.sum(1), torch.ones(2))
    assert torch.allclose(S.top_k_renorm_prob_fallback(probs, 0), probs / probs.sum(1, True))
    r = S.top_p_renorm_prob_fallback(probs, top_p=torch.tensor([0.8, 0.6]))
    assert (r[0] > 0).tolist() == [False, True, False, True, True]  # 0.4+0.3+0.15 >= 0.8
    assert (r[1] > 0).tolist() == [True, True, False, False, False]
    assert torch.allclose(r.sum(1), torch.ones(2))
    np.testing.assert_allclose(S.top_p_renorm_prob_fallback(probs, 1.0).numpy(),
                               (probs / probs.sum(1, True)).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="tensor"):
        S.top_k_renorm_prob_fallback(probs, torch.tensor([1, 2, 3]))



def test_coin_walk_statistics_and_negative_control(monkeypatch):
    """The first emitted token of the caller-coin walk follows the target (chi-square on
    fresh torch.rand coins, test_sglang's stat_case: acceptance, rejection and the residual
    all occur), and the same test fails when the final draw forgets the tried tokens (the
    classic wrong fallback), so it can fail."""
    from tests.integrations.test_sglang import ALPHA, first_token_pvalue, stat_case
    B = 20000
    case = stat_case(B, 9)
    for backend in BACKENDS:
        p, a, n = outputs(B, 4, 3)
        S.tree_speculative_sampling_target_only(p, a, n, *case, backend=backend)
        assert first_token_pvalue(p, case[1], B) > ALPHA, backend
        assert set(n.tolist()) == {0, 1, 2}
    monkeypatch.setattr(RC, "final_weights", lambda w, tried: w)
    p, a, n = outputs(B, 4, 3)
    S.tree_speculative_sampling_target_only(p, a, n, *case, backend="reference")
    assert first_token_pvalue(p, case[1], B) < ALPHA


def test_device_walks_read_no_host_values():
    """With validate=False (the default for CUDA tensors) the Triton launcher (its kernel's
    reads under the interpreter are Triton's own), the tree
    conversion and the output writes read no tensor value on the host (no device sync, so
    CUDA-graph capture is possible), and give the validated call's outputs.  Catches an
    ``.item()`` / ``bool(tensor)`` / ``.tolist()`` slipping into the device path."""
    from tests._sync import no_host_reads
    rng = random.Random(12)
    gen = torch.Generator().manual_seed(12)
    cand, ri, nt, ns, u, uf, target, S_ = random_case(rng, gen, 3)
    B, N = cand.shape
    want = outputs(B, N + 2, S_)
    S.tree_speculative_sampling_target_only(*want, cand, ri, nt, ns, u, uf, target, 0.9, 0.7,
                                            backend="reference")
    for backend in ("triton",):
        got = outputs(B, N + 2, S_)
        with no_host_reads() as seen:
            S.tree_speculative_sampling_target_only(*got, cand, ri, nt, ns, u, uf, target, 0.9,
                                                    0.7, backend=backend, validate=False)
        assert not seen, (backend, seen)
        assert all(torch.equal(g, w) for g, w in zip(got, want)), backend


# ----------------------------------------------------------------------------- malformed links
def _present(nt, ns, max_depth):
    """{slot: tree depth} of the present slots of one well-linked request (reachable from the
    root through links, depth <= max_depth; a child link adds 1, a sibling link 0), written
    out here independently of specops._sgl_tree."""
    seen, todo = {0: 0}, [0]
    while todo:
        n = todo.pop()
        d = seen[n]
        for t, dt in ((nt[n], d + 1), (ns[n], d)):
            if t >= 0 and t not in seen and dt <= max_depth:
                seen[t] = dt
                todo.append(t)
    return seen


# kind: (what is done to a well-formed request, malformed afterwards?)
MALFORMED_KINDS = {
    "none": False,
    "link_out_of_range": True,       # a link < -1 or >= N, at any slot (present or not)
    "double_target": True,           # two links into one node
    "link_to_root": True,
    "cycle_through_tree": True,      # a present node linked back to an ancestor
    "cycle_among_absent": False,     # two unreachable slots linked to each other
    "candidate_present": True,       # a present node's candidate outside [0, V)
    "candidate_absent": False,       # an unreachable slot's candidate outside [0, V)
    "candidate_too_deep": False,     # a node below max_depth: absent
    "candidate_root": False,         # the root's candidate is never read
    "candidate_root_sibling": True,  # the root's sibling is present (depth 0)
}


def _malformed_request(rng, kind, N, V):
    """(nt, ns, cand, max_depth) of one request with the defect ``kind``, or None where this
    N has no room for it."""
    for _ in range(50):
        nt, ns = random_sgl_tree(rng, N)
        D = rng.randrange(N)
        cand = [rng.randrange(V) for _ in range(N)]
        present = _present(nt, ns, D)
        absent = [s for s in range(1, N) if s not in _present(nt, ns, N)]
        targets = {t for t in nt + ns if t >= 0}
        links = [(row, s) for row in (nt, ns) for s in range(N)]
        big = rng.choice([-2, -7, N, N + 5, 2 ** 40, -2 ** 62])
        if kind == "none":
            pass
        elif kind == "link_out_of_range":
            row, s = rng.choice(links)
            row[s] = big
        elif kind == "double_target":
            free = [(row, s) for row, s in links if row[s] < 0]
            used = sorted(targets)
            if not (free and used):
                continue
            row, s = rng.choice(free)
            row[s] = rng.choice(used)
        elif kind == "link_to_root":
            row, s = rng.choice(links)
            row[s] = 0
        elif kind == "cycle_through_tree":
            deep = [s for s in present if s != 0]
            if not deep:
                continue
            s = rng.choice(deep)
            row = rng.choice((nt, ns))
            if row[s] >= 0:
                continue
            row[s] = rng.choice([t for t in present if t != 0])  # already a target
        elif kind == "cycle_among_absent":
            free = [s for s in absent if nt[s] < 0 and ns[s] < 0 and s not in targets]
            if len(free) < 2:
                continue
            a, b = rng.sample(free, 2)
            nt[a], ns[b] = b, a
        elif kind == "candidate_present":
            deep = [s for s in present if s != 0]
            if not deep:
                continue
            cand[rng.choice(deep)] = rng.choice([-1, V, V + 9, -2 ** 40])
        elif kind == "candidate_absent":
            if not absent:
                continue
            cand[rng.choice(absent)] = rng.choice([-1, V, 2 ** 40])
        elif kind == "candidate_too_deep":
            deep = [s for s, d in _present(nt, ns, N).items() if d > D]
            if not deep:
                continue
            cand[rng.choice(deep)] = rng.choice([-1, V])
        elif kind == "candidate_root":
            cand[0] = rng.choice([-1, V, 2 ** 40])
        elif kind == "candidate_root_sibling":
            free = [s for s in absent if s not in targets]
            if ns[0] >= 0 or not free:
                continue
            s = rng.choice(free)
            ns[0] = s
            cand[s] = rng.choice([-1, V])
        return nt, ns, cand, D
    return None


def _walk(backend, target, cand, nt, ns, u, uf, D, ts, ta):
    from specops.ops import library
    return library.run_coin_walk(target, cand, nt, ns, u, uf, D, ts, ta, backend, True)


@pytest.mark.parametrize("ts,ta", [(1.0, 1.0), (0.9, 0.7)])
def test_cpp_walk_guards_malformed_requests(ts, ta, isa):
    """The C++ walk finds the malformed requests itself (``specops::coin_walk``: links
    outside [-1, N), a node the target of two links, a link to the root, a present node's
    candidate outside [0, V)) and emits nothing for them, with no out-of-bounds read and no
    endless loop on cycles; every other request is walked as usual.  Random and targeted
    defects, at present and absent nodes, against the reference backend, at every ISA level.
    Catches a guard that misses a defect, refuses a legal tree (a cycle among unreachable
    slots, a bad candidate below max_depth, at the root or at an unreachable slot), or skips
    the root's own sibling link."""
    rng = random.Random(21)
    gen = torch.Generator().manual_seed(21)
    seen = {kind: 0 for kind in MALFORMED_KINDS}
    for trial in range(40):
        N, V = rng.randint(1, 9), rng.choice([3, 17])
        reqs = []
        for kind in rng.sample(list(MALFORMED_KINDS), 6):
            r = _malformed_request(rng, kind, N, V)
            if r is not None:
                reqs.append((kind, r))
                seen[kind] += 1
        if not reqs:
            continue
        B = len(reqs)
        nt = torch.tensor([r[0] for _, r in reqs])
        ns = torch.tensor([r[1] for _, r in reqs])
        cand = torch.tensor([r[2] for _, r in reqs])
        D = min(r[3] for _, r in reqs)
        target = random_probs(gen, (B, N, V), scale=1.0 + trial % 3)
        u, uf = torch.rand(B, N, generator=gen), torch.rand(B, generator=gen)
        want = _walk("reference", target, cand, nt, ns, u, uf, D, ts, ta)
        got = _walk("cpu", target, cand, nt, ns, u, uf, D, ts, ta)
        for g, w, name in zip(got, want, ("tokens", "num_accepted", "nodes", "valid")):
            assert g.dtype == w.dtype and torch.equal(g, w), (trial, name, g, w)
        for b, (kind, r) in enumerate(reqs):
            if MALFORMED_KINDS[kind] and r[3] == D:
                # (a smaller max_depth of the batch can make a present node absent)
                assert not bool(want[3][b]) and int(want[1][b]) == 0, (trial, kind)
                assert bool((want[0][b] == -1).all()), (trial, kind)
    assert min(seen.values()) >= 3, seen


def test_cpp_walk_targeted_malformed_links(isa):
    """Hand-made requests (N = 4, V = 5): each defect alone, next to well-formed ones,
    exactly as the reference backend decides them."""
    N, V = 4, 5
    base_nt, base_ns = [1, 3, -1, -1], [-1, 2, -1, -1]   # 0 -> (1, 2), 1 -> 3
    cases = {   # name: (nt, ns, cand, malformed)
        "ok": (base_nt, base_ns, [0, 1, 2, 3], False),
        "self_loop": ([1, 1, -1, -1], base_ns, [0, 1, 2, 3], True),
        "sibling_cycle": (base_nt, [-1, 2, 1, -1], [0, 1, 2, 3], True),
        "to_root": (base_nt, [-1, 2, 0, -1], [0, 1, 2, 3], True),
        "link_N": ([1, 3, -1, N], base_ns, [0, 1, 2, 3], True),
        "link_minus_2": (base_nt, [-1, 2, -2, -1], [0, 1, 2, 3], True),
        "absent_cycle": ([1, -1, -1, 2], [-1, -1, 3, -1], [0, 1, 2, 3], False),
        "bad_present": (base_nt, base_ns, [0, 1, 2, V], True),
        "bad_root": (base_nt, base_ns, [-1, 1, 2, 3], False),
        "bad_absent": ([1, -1, -1, -1], base_ns, [0, 1, 2, -7], False),
    }
    names = list(cases)
    nt = torch.tensor([cases[n][0] for n in names])
    ns = torch.tensor([cases[n][1] for n in names])
    cand = torch.tensor([cases[n][2] for n in names])
    B = len(names)
    gen = torch.Generator().manual_seed(4)
    target = random_probs(gen, (B, N, V))
    u, uf = torch.rand(B, N, generator=gen), torch.rand(B, generator=gen)
    for D in (1, 2, 3):
        want = _walk("reference", target, cand, nt, ns, u, uf, D, 1.0, 1.0)
        got = _walk("cpu", target, cand, nt, ns, u, uf, D, 1.0, 1.0)
        for g, w in zip(got, want):
            assert torch.equal(g, w), (D, names, g, w)
        for b, name in enumerate(names):
            # (node 3 of "bad_present" is at depth 2: absent, and legal, at max_depth 1)
            malformed = cases[name][3] and not (name == "bad_present" and D < 2)
            assert bool(want[3][b]) != malformed, (D, name)
