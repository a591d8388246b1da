"""specops' drop-in for sgl-kernel's tree speculative sampling (``specops.integrations.sglang``).

SGLang is not installed here: the vectors are built from sgl-kernel's documented semantics
(``sgl-kernel/csrc/speculative/speculative_sampling.cuh`` and the expected outputs of
``sgl-kernel/tests/test_speculative_sampling.py``), and everything else is checked against
brute-force Python conversions and ``specops.verify_tree`` itself.
"""
import random

import numpy as np
import pytest
import torch

import specops
from specops.backends import registry
from specops._contract import ANY_TREE_METHODS
from specops.integrations import sglang as S
from specops.tree import TreeVerifyOutput
from tests._negative import verify_tree_variant

scipy_stats = pytest.importorskip("scipy.stats")

ALPHA = 1e-6


def _uniform(*shape):
    """Caller uniforms for the drop-in's signature, from a fixed seed."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def _backends():
    out = ["reference"]
    if registry.is_available("cpu") and hasattr(registry.load("cpu"), "verify_tree"):
        out.append("cpu")
    return out


BACKENDS = _backends()


def links(children, N):
    """retrive_next_token / retrive_next_sibling rows from {node: [children in try order]}."""
    nt, ns = [-1] * N, [-1] * N
    for c, kids in children.items():
        if kids:
            nt[c] = kids[0]
            for a, b in zip(kids, kids[1:]):
                ns[a] = b
    return nt, ns


def outputs(B, N, S_, fill=-1):
    return (torch.full((B * N,), fill, dtype=torch.int32),
            torch.full((B, S_), fill, dtype=torch.int32),
            torch.full((B,), fill, dtype=torch.int32))


# ----------------------------------------------------------------------------- brute force
def bf_convert(nt, ns, max_depth):
    """sgl's links -> (parent, depth, kids in try order) by walking them; None if malformed."""
    N = len(nt)
    if any(not -1 <= x < N for x in list(nt) + list(ns)):
        return None
    indeg = [0] * N
    for x in list(nt) + list(ns):
        if x >= 0:
            indeg[x] += 1
    if indeg[0] > 0 or max(indeg) > 1:
        return None
    parent, depth, kids = [-1] * N, [-1] * N, {0: []}
    depth[0] = 0
    stack = [0]
    while stack:
        c = stack.pop()
        ch = nt[c]
        while ch != -1:
            if depth[c] + 1 <= max_depth:
                parent[ch], depth[ch] = c, depth[c] + 1
                kids[c].append(ch)
                kids[ch] = []
                stack.append(ch)
            ch = ns[ch]
    return parent, depth, kids


def random_sgl_tree(rng, N):
    """A random tree on a random subset of the N slots (root slot 0), shuffled sibling order;
    the other slots are unreachable (their links -1, or one link between two of them)."""
    size = rng.randint(1, N)
    others = rng.sample(range(1, N), size - 1)
    nodes = [0] + others
    children = {n: [] for n in nodes}
    for i, n in enumerate(nodes[1:], start=1):
        children[rng.choice(nodes[:i])].append(n)
    for c in children.values():
        rng.shuffle(c)
    nt, ns = links(children, N)
    free = [s for s in range(1, N) if s not in nodes]
    if len(free) >= 2 and rng.random() < 0.5:
        a, b = rng.sample(free, 2)
        nt[a] = b
    return nt, ns


def random_probs(gen, shape, scale=2.0):
    p = torch.softmax(torch.randn(shape, generator=gen) * scale, -1).to(torch.float32)
    return p / p.sum(-1, keepdim=True)


def expected_via_verify_tree(candidates, ri, nt, ns, target, draft, S_, seed, backend,
                             method="rsd", pre=None):
    """sgl's outputs computed independently: brute-force conversion, the test's own BFS
    numbering, specops.verify_tree, and the output mapping written out in Python."""
    B, N, V = target.shape
    D = min(S_, N) - 1
    parents = torch.full((B, N), -1, dtype=torch.int64)
    tokens = torch.zeros((B, N), dtype=torch.int64)
    order = torch.zeros((B, N), dtype=torch.int64)
    for b in range(B):
        parent, depth, kids = bf_convert(nt[b].tolist(), ns[b].tolist(), D)
        bfs, i = [0], 0
        while i < len(bfs):
            bfs.extend(kids[bfs[i]])
            i += 1
        slots = bfs + [s for s in range(N) if s not in bfs]
        new = {s: m for m, s in enumerate(slots)}
        for m, s in enumerate(slots):
            order[b, m] = s
            if m > 0 and s in kids:
                parents[b, m] = new[parent[s]]
                tokens[b, m] = int(candidates[b, s])
    idx = order[:, :, None].expand(B, N, V)
    out = specops.verify_tree(None, tokens, parents,
                              None if draft is None else draft.gather(1, idx),
                              target_probs=target.gather(1, idx), max_depth=D, seed=seed,
                              method=method, backend=backend)
    predicts, accept_index, accept_num = (t.clone() for t in pre)
    for b in range(B):
        A = int(out.num_accepted[b])
        accept_num[b] = A
        path = [0] + [int(order[b, int(out.accepted_nodes[b, k])]) for k in range(A)]
        for k, s in enumerate(path):
            accept_index[b, k] = int(ri[b, s])
            predicts[int(ri[b, s])] = int(out.token_ids[b, k])
    return predicts, accept_index, accept_num, out


# ----------------------------------------------------------------------------- (a) sgl's vectors
def sgl_documented_case():
    """The tree and one-hot targets of sgl-kernel's test_speculative_sampling.py."""
    candidates = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    ri = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]])
    nt = torch.tensor([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]])
    ns = torch.tensor([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]])
    logits = torch.full((2, 6, 20), 1.0)
    logits[0, 0, 3] = logits[0, 3, 4] = logits[0, 4, 5] = 10
    logits[1, 0, 11] = logits[1, 4, 12] = 10
    for i in range(2):
        for j in range(6):
            if logits[i, j].max() < 10:
                logits[i, j, 18] = 10
    target = torch.softmax(logits / 0.01, -1)
    return candidates, ri, nt, ns, target


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_sgl_documented_vector(backend, dtype):
    candidates, ri, nt, ns, target = sgl_documented_case()
    predicts, accept_index, accept_num = outputs(2, 6, 4)
    gen = torch.Generator().manual_seed(0)
    valid = S.tree_speculative_sampling_target_only(
        predicts=predicts, accept_index=accept_index, accept_token_num=accept_num,
        candidates=candidates.to(dtype), retrive_index=ri.to(dtype),
        retrive_next_token=nt.to(dtype), retrive_next_sibling=ns.to(dtype),
        uniform_samples=torch.rand(2, 6, generator=gen),
        uniform_samples_for_final_sampling=torch.rand(2, generator=gen),
        target_probs=target, draft_probs=torch.zeros_like(target), deterministic=True,
        backend=backend)
    # sgl-kernel's expected outputs for thresholds (1, 1); request 1 tries slot 4 before
    # slot 1 (next-sibling order), the opposite of slot order
    assert predicts.tolist() == [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18]
    assert accept_index.tolist() == [[0, 3, 4, 5], [6, 10, 11, -1]]
    assert accept_num.tolist() == [3, 2]
    assert valid.tolist() == [True, True]


def test_sgl_signature_forms():
    """The newest sgl-kernel (no draft_probs) positionally, the oldest (no final-sampling
    uniforms) by keyword, and leaving untouched what sgl-kernel leaves untouched."""
    candidates, ri, nt, ns, target = sgl_documented_case()
    u, uf = _uniform(2, 6), _uniform(2)
    p1, a1, n1 = outputs(2, 6, 5, fill=77)
    S.tree_speculative_sampling_target_only(p1, a1, n1, candidates, ri, nt, ns, u, uf, target,
                                            1.0, 1.0, True, backend="reference")
    assert p1.tolist() == [3, 77, 77, 4, 5, 18, 11, 77, 77, 77, 12, 18]
    assert a1.tolist() == [[0, 3, 4, 5, 77], [6, 10, 11, 77, 77]]
    assert n1.tolist() == [3, 2]
    p2, a2, n2 = outputs(2, 6, 5, fill=77)
    S.tree_speculative_sampling_target_only(
        predicts=p2, accept_index=a2, accept_token_num=n2, candidates=candidates,
        retrive_index=ri, retrive_next_token=nt, retrive_next_sibling=ns, uniform_samples=u,
        target_probs=target, draft_probs=torch.zeros_like(target), backend="reference")
    assert p2.tolist() == p1.tolist() and a2.tolist() == a1.tolist()
    # num_spec (accept_index's width) caps the accepted drafts at num_spec - 1; the next
    # token is then drawn from the last accepted node's row (sgl-kernel's bonus)
    p3, a3, n3 = outputs(2, 6, 2)
    S.tree_speculative_sampling_target_only(p3, a3, n3, candidates, ri, nt, ns, u, uf, target,
                                            backend="reference")
    assert a3.tolist() == [[0, 3], [6, 10]] and n3.tolist() == [1, 1]
    assert p3[0].item() == 3 and p3[3].item() == 4 and p3[6].item() == 11
    assert p3[10].item() == 12


def test_greedy_like_branches():
    """Root with two children (tried 2 then 1), slot 1 with child 3; one-hot targets."""
    nt, ns = links({0: [2, 1], 1: [3]}, 4)
    candidates = torch.tensor([[9, 5, 6, 7]])
    ri = torch.tensor([[10, 11, 12, 13]])
    V = 10
    for root_tok, row1_tok, row3_tok, exp_pred, exp_idx, exp_n in [
            (5, 7, 2, {10: 5, 11: 7, 13: 2}, [10, 11, 13], 2),  # 2 rejected, 1 and 3 accepted
            (6, 4, 0, {10: 6, 12: 4}, [10, 12, -1], 1),         # 2 accepted, leaf: bonus 4
            (5, 8, 0, {10: 5, 11: 8}, [10, 11, -1], 1),         # 1 accepted, 3 rejected
            (3, 0, 0, {10: 3}, [10, -1, -1], 0)]:               # both rejected: correction 3
        target = torch.zeros(1, 4, V)
        target[0, 0, root_tok] = 1
        target[0, 1, row1_tok] = 1
        target[0, 2, 4] = 1
        target[0, 3, row3_tok] = 1
        predicts = torch.full((20,), -5, dtype=torch.int32)
        accept_index = torch.full((1, 3), -1, dtype=torch.int32)
        accept_num = torch.zeros(1, dtype=torch.int32)
        S.tree_speculative_sampling_target_only(
            predicts, accept_index, accept_num, candidates, ri, torch.tensor([nt]),
            torch.tensor([ns]), _uniform(1, 4), _uniform(1), target, backend="reference")
        want = [-5] * 20
        for k, v in exp_pred.items():
            want[k] = v
        assert predicts.tolist() == want
        assert accept_index.tolist() == [exp_idx] and accept_num.tolist() == [exp_n]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sibling_try_order(backend):
    """Two siblings with the same token and a one-hot target on it: sgl-kernel accepts the
    first one it tries (coin <= p = 1), i.e. the first in next-sibling order, whatever the
    slot numbers; the other's subtree is never entered."""
    V = 10
    target = torch.zeros(2, 4, V)
    target[:, 0, 5] = 1
    target[:, 1, 7] = 1
    target[:, 2, 4] = 1
    target[:, 3, 2] = 1
    candidates = torch.tensor([[9, 5, 5, 7], [9, 5, 5, 7]])
    ri = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])
    a = links({0: [2, 1], 1: [3]}, 4)     # request 0 tries slot 2 first
    b = links({0: [1, 2], 1: [3]}, 4)     # request 1 tries slot 1 first
    nt, ns = torch.tensor([a[0], b[0]]), torch.tensor([a[1], b[1]])
    predicts, accept_index, accept_num = outputs(2, 4, 3)
    S.tree_speculative_sampling_target_only(predicts, accept_index, accept_num, candidates, ri,
                                            nt, ns, _uniform(2, 4), _uniform(2), target,
                                            backend=backend)
    assert accept_index.tolist() == [[0, 2, -1], [4, 5, 7]]
    assert accept_num.tolist() == [1, 2]
    assert predicts.tolist() == [5, -1, 4, -1, 5, 7, -1, 2]


# ----------------------------------------------------------------------------- (b) conversion
def test_convert_tree_matches_brute_force():
    rng = random.Random(1)
    for trial in range(40):
        N = rng.randint(1, 12)
        B = 5
        rows = [random_sgl_tree(rng, N) for _ in range(B)]
        if trial % 4 == 3:                     # inject malformed rows
            nt, ns = rows[0]
            nt[rng.randrange(N)] = rng.choice([N, -2, N + 3])
            if N > 2:
                nt1, ns1 = rows[1]
                ns1[rng.randrange(N)] = 0      # a link to the root
        nt = torch.tensor([r[0] for r in rows])
        ns = torch.tensor([r[1] for r in rows])
        D = rng.randint(0, N - 1)
        tree = S.convert_tree(nt, ns, D)
        for b in range(B):
            bf = bf_convert(rows[b][0], rows[b][1], D)
            assert bool(tree.malformed[b]) == (bf is None)
            if bf is None:
                continue
            parent, depth, kids = bf
            order = tree.order[b].tolist()
            assert sorted(order) == list(range(N)) and order[0] == 0
            present = [order[m] for m in range(N) if tree.present[b, m]]
            assert sorted(present) == sorted(kids)
            assert all(tree.present[b, m] for m in range(len(present)))   # present first
            for m in range(N):
                s, pm = order[m], int(tree.parent_ids[b, m])
                if s in kids and m > 0:
                    assert 0 <= pm < m and order[pm] == parent[s]
                    assert int(tree.depth[b, m]) == depth[s]
                else:
                    assert pm == -1
            # children in increasing new index == sgl's try order
            for c in kids:
                mc = order.index(c)
                got = [order[m] for m in range(N) if int(tree.parent_ids[b, m]) == mc
                       and m > 0]
                assert got == kids[c]


# ----------------------------------------------------------------------------- (c) agreement
@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_equal_verify_tree(backend):
    rng = random.Random(2)
    gen = torch.Generator().manual_seed(2)
    V = 6
    for trial in range(10):
        N = rng.randint(1, 9)
        B = 6
        rows = [random_sgl_tree(rng, N) for _ in range(B)]
        nt = torch.tensor([r[0] for r in rows])
        ns = torch.tensor([r[1] for r in rows])
        candidates = torch.randint(0, V, (B, N), generator=gen)
        perm = torch.randperm(B * N + 3, generator=gen)[:B * N].reshape(B, N)
        ri = perm                                     # any distinct flat positions
        target = random_probs(gen, (B, N, V), scale=1.0 + trial % 3)
        S_ = rng.randint(1, N + 1)
        u, uf = torch.rand(B, N, generator=gen), torch.rand(B, generator=gen)
        pre = (torch.randint(-9, 0, (B * N + 3,), generator=gen, dtype=torch.int32),
               torch.randint(-9, 0, (B, S_), generator=gen, dtype=torch.int32),
               torch.full((B,), -3, dtype=torch.int32))
        got = tuple(t.clone() for t in pre)
        valid = S.tree_speculative_sampling_target_only(
            *got, candidates, ri, nt, ns, u, uf, target, torch.zeros_like(target),
            backend=backend, randomness="philox")
        seeds = S.seeds_from_uniforms(u, uf)
        want = expected_via_verify_tree(candidates, ri, nt, ns, target, None, S_, seeds,
                                        backend, pre=pre)
        for g, w in zip(got, want[:3]):
            assert torch.equal(g, w), (trial, g, w)
        assert torch.equal(valid, want[3].valid)
        # explicit seeds give the same walk as the equal derived ones
        again = tuple(t.clone() for t in pre)
        S.tree_speculative_sampling_target_only(*again, candidates, ri, nt, ns, None, None,
                                                target, seed=seeds, backend=backend)
        assert all(torch.equal(a, g) for a, g in zip(again, got))


@pytest.mark.parametrize("method", ANY_TREE_METHODS)      # (gbv takes K chains only)
def test_exact_variant_equals_verify_tree(method):
    """Every tree method of the contract through sgl-kernel's layout: catches the drop-in
    refusing a method verify_tree has, or mapping its accepted nodes back wrongly."""
    rng = random.Random(3)
    gen = torch.Generator().manual_seed(3)
    V = 5
    for backend in BACKENDS:
        for trial in range(5):
            N, B = rng.randint(2, 8), 5
            rows = [random_sgl_tree(rng, N) for _ in range(B)]
            nt = torch.tensor([r[0] for r in rows])
            ns = torch.tensor([r[1] for r in rows])
            candidates = torch.randint(0, V, (B, N), generator=gen)
            ri = torch.arange(B * N).reshape(B, N)
            target = random_probs(gen, (B, N, V))
            draft = random_probs(gen, (B, N, V))
            u, uf = torch.rand(B, N, generator=gen), torch.rand(B, generator=gen)
            pre = outputs(B, N, N)
            got = tuple(t.clone() for t in pre)
            S.tree_speculative_sampling(*got, candidates, ri, nt, ns, u, uf, target, draft,
                                        method=method, backend=backend)
            want = expected_via_verify_tree(candidates, ri, nt, ns, target, draft, N,
                                            S.seeds_from_uniforms(u, uf), backend,
                                            method=method, pre=pre)
            for g, w in zip(got, want[:3]):
                assert torch.equal(g, w)


# ----------------------------------------------------------------------------- (d) refusals
def test_thresholds_refused():
    """Thresholds other than 1 are refused where specops' own Philox walk runs (it has no
    relaxed mode); in the caller-coin mode (section 13) only values outside [0, 1] or NaN are
    refused, naming the argument.  Catches: a relaxation silently applied to the exact
    Philox walk, or a NaN threshold reaching the walk."""
    candidates, ri, nt, ns, target = sgl_documented_case()
    args = (candidates, ri, nt, ns, _uniform(2, 6), _uniform(2), target)
    for ts, ta in [(0.9, 1.0), (1.0, 0.5), (0.0, 0.0), (float("nan"), 1.0)]:
        with pytest.raises(ValueError, match="threshold"):
            S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), *args,
                                                    torch.zeros_like(target), ts, ta,
                                                    randomness="philox")
        with pytest.raises(ValueError, match="threshold"):
            S.tree_speculative_sampling(*outputs(2, 6, 4), *args, torch.zeros_like(target),
                                        threshold_single=ts, threshold_acc=ta)
    for ts, ta, name in [(float("nan"), 1.0, "threshold_single"), (1.0, -0.1, "threshold_acc"),
                         (1.5, 1.0, "threshold_single"), (1.0, float("inf"), "threshold_acc")]:
        with pytest.raises(ValueError, match=name):
            S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), *args,
                                                    torch.zeros_like(target), ts, ta)
    with pytest.raises(ValueError, match="threshold_single"):   # newest positional form
        S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), *args, 0.5,
                                                randomness="philox")
    for bad in ("0.5", None, [1.0], 1 + 0j, True):      # a string ran the relaxed mode
        for randomness in ("uniforms", "philox"):
            with pytest.raises(TypeError, match="threshold_acc must be a real number"):
                S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), *args,
                                                        torch.zeros_like(target), 1.0, bad,
                                                        randomness=randomness)
    with pytest.raises(ValueError, match="draft_probs"):
        S.tree_speculative_sampling(*outputs(2, 6, 4), *args)
    with pytest.raises(ValueError, match="method"):
        S.tree_speculative_sampling(*outputs(2, 6, 4), *args, torch.zeros_like(target),
                                    method="block")


def test_malformed_and_invalid_rows():
    candidates, ri, nt, ns, target = sgl_documented_case()
    bad_nt = nt.clone()
    bad_nt[1, 3] = 4                       # slot 4 is now the target of two links
    with pytest.raises(ValueError, match=r"malformed sgl tree in request\(s\) \[1\]"):
        S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), candidates, ri, bad_nt,
                                                ns, _uniform(2, 6), _uniform(2), target)
    # without host checks (as on CUDA) the request is refused by the walk
    p, a, n = outputs(2, 6, 4, fill=50)
    valid = S.tree_speculative_sampling_target_only(
        p, a, n, candidates, ri, bad_nt, ns, _uniform(2, 6), _uniform(2), target,
        backend="reference", validate=False)
    assert valid.tolist() == [True, False]
    assert n.tolist() == [3, 0] and a[1].tolist() == [6, 50, 50, 50]
    assert p[6].item() == -1 and p[:6].tolist() == [3, 50, 50, 4, 5, 18]
    bad_c = candidates.clone()
    bad_c[0, 4] = 20
    with pytest.raises(ValueError, match=r"candidates of request\(s\) \[0\]"):
        S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), bad_c, ri, nt, ns,
                                                _uniform(2, 6), _uniform(2), target)
    bad_c[0, 4] = 0
    bad_c[1, 3] = -4                      # slot 3 of request 1 is a leaf of the tree too
    with pytest.raises(ValueError, match=r"candidates of request\(s\) \[1\]"):
        S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), bad_c, ri, nt, ns,
                                                _uniform(2, 6), _uniform(2), target)
    # an invalid target row on the path: -1 at that position, never a made-up token
    t2 = target.clone()
    t2[0, 3, 0] = float("nan")
    p, a, n = outputs(2, 6, 4)
    valid = S.tree_speculative_sampling_target_only(
        p, a, n, candidates, ri, nt, ns, _uniform(2, 6), _uniform(2), t2,
        backend="reference")
    assert valid.tolist() == [False, True]
    assert n.tolist() == [1, 2] and p[0].item() == 3 and p[3].item() == -1


@pytest.mark.parametrize("backend", BACKENDS)
def test_unchecked_malformed_requests_are_blanked_alike(backend):
    """validate=False (the CUDA default): a link >= n (verify_tree_greedy indexed past the
    tensors: a device-side assert on a GPU) and a present node's candidate outside [0, V)
    (valid said True, and the C++ and torch paths disagreed) are the malformed-request output,
    valid False, the neighbour untouched, on every backend."""
    candidates, ri, nt, ns, target = sgl_documented_case()
    want = outputs(2, 6, 4, fill=50)
    S.tree_speculative_sampling_target_only(*want, candidates, ri, nt, ns, _uniform(2, 6),
                                            _uniform(2), target, backend="reference")
    far = nt.clone()
    far[1, 0] = 6 + 3                      # a first-child link past n
    bad_c = candidates.clone()
    bad_c[1, 3] = 40                       # a present node's token >= V
    for kind, (c, links) in {"link": (candidates, far), "candidate": (bad_c, nt)}.items():
        p, a, n = outputs(2, 6, 4, fill=50)
        valid = S.tree_speculative_sampling_target_only(
            p, a, n, c, ri, links, ns, _uniform(2, 6), _uniform(2), target, backend=backend,
            validate=False)
        assert valid.tolist() == [True, False], kind
        assert n.tolist() == [want[2][0].item(), 0], kind
        assert p[6].item() == -1 and torch.equal(p[:6], want[0][:6]), kind
    tp = torch.zeros(12, dtype=torch.int64)
    p, a, n = outputs(2, 6, 4, fill=50)
    S.verify_tree_greedy(p, a, n, candidates, ri, far, ns, tp.reshape(2, 6), validate=False)
    assert n.tolist()[1] == 0 and p[6].item() == -1


def test_coin_shapes_and_output_dtypes_refused():
    """uniform_samples of bs * n elements in another shape used to be read row-major (a
    transposed tensor reassigned one request's coins to another); an int8 / uint8 output
    truncated tokens (299 read back 43, -1 read back 255)."""
    candidates, ri, nt, ns, target = sgl_documented_case()
    u = _uniform(2, 6)
    for bad in (u.t().contiguous(), u.reshape(-1), u[..., None]):
        with pytest.raises(ValueError, match="uniform_samples must be a \\[2, 6\\] tensor"):
            S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), candidates, ri, nt, ns,
                                                    bad, _uniform(2), target)
    with pytest.raises(ValueError, match="uniform_samples_for_final_sampling"):
        S.tree_speculative_sampling_target_only(*outputs(2, 6, 4), candidates, ri, nt, ns, u,
                                                _uniform(2)[:, None], target)
    for dtype in (torch.int8, torch.uint8, torch.int16):
        for i, name in enumerate(("predicts", "accept_index", "accept_token_num")):
            outs = list(outputs(2, 6, 4))
            outs[i] = outs[i].to(dtype)
            with pytest.raises(TypeError, match=f"{name} must be int32 or int64"):
                S.tree_speculative_sampling_target_only(*outs, candidates, ri, nt, ns, u,
                                                        _uniform(2), target)


@pytest.mark.skipif("cpu" not in BACKENDS, reason="needs the C++ backend's verify_tree (the "
                    "reference backend reads values on the host by design)")
def test_no_host_reads_without_validation():
    """With validate=False (the default for CUDA tensors) neither the conversion, the seed
    derivation, verify_tree nor the output writes read a tensor value on the host: every
    such read from specops code is patched to be recorded (tests/test_sync_free.py's check)."""
    from tests._sync import no_host_reads
    candidates, ri, nt, ns, target = sgl_documented_case()
    u, uf = _uniform(2, 6), _uniform(2)
    want = outputs(2, 6, 4)
    S.tree_speculative_sampling_target_only(*want, candidates, ri, nt, ns, u, uf, target,
                                            backend="cpu")
    got = outputs(2, 6, 4)
    with no_host_reads() as seen:
        S.tree_speculative_sampling_target_only(*got, candidates, ri, nt, ns, u, uf, target,
                                                backend="cpu", validate=False)
        S.tree_speculative_sampling(*outputs(2, 6, 4), candidates, ri, nt, ns, u, uf, target,
                                    torch.softmax(target, -1), backend="cpu", validate=False)
    assert not seen, seen
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_seed_derivation():
    gen = torch.Generator().manual_seed(4)
    u, uf = torch.rand(20000, 8, generator=gen), torch.rand(20000, generator=gen)
    s1 = S.seeds_from_uniforms(u, uf)
    assert s1.dtype == torch.int64 and s1.shape == (20000,)
    assert torch.equal(s1, S.seeds_from_uniforms(u.clone(), uf.clone()))
    assert torch.unique(s1).numel() == 20000
    u2 = u.clone()
    u2[:, 5] = torch.rand(20000, generator=gen)
    assert (S.seeds_from_uniforms(u2, uf) != s1).all()
    uf2 = torch.rand(20000, generator=gen)
    assert (S.seeds_from_uniforms(u, uf2) != s1).all()
    # both 32-bit halves are spread out
    hi, lo = (s1 >> 32) & 0xFFFFFFFF, s1 & 0xFFFFFFFF
    for half in (hi, lo):
        counts = torch.bincount((half >> 28).long(), minlength=16).numpy()
        assert scipy_stats.chisquare(counts).pvalue > ALPHA


# ----------------------------------------------------------------------------- (e) statistics
P_ROOT = np.array([0.1, 0.3, 0.25, 0.15, 0.2], dtype=np.float32)


def stat_case(B, seed):
    """Root children tried 3 (token 1) then 1 (token 2); slot 1 has child 2 (token 0)."""
    nt, ns = links({0: [3, 1], 1: [2]}, 4)
    gen = torch.Generator().manual_seed(seed)
    target = random_probs(gen, (1, 4, 5)).expand(B, 4, 5).clone()
    target[:, 0] = torch.from_numpy(P_ROOT)
    candidates = torch.tensor([[4, 2, 0, 1]]).expand(B, 4)
    ri = torch.arange(B * 4).reshape(B, 4)
    return (candidates, ri, torch.tensor([nt]).expand(B, 4), torch.tensor([ns]).expand(B, 4),
            torch.rand(B, 4, generator=gen), torch.rand(B, generator=gen), target)


def first_token_pvalue(predicts, ri, B):
    first = predicts[ri[:, 0]].numpy()
    assert (first >= 0).all()
    counts = np.bincount(first, minlength=5)
    expected = P_ROOT.astype(np.float64) / P_ROOT.astype(np.float64).sum() * counts.sum()
    return float(scipy_stats.chisquare(counts, expected).pvalue)


def test_first_token_follows_target():
    backend = "cpu" if "cpu" in BACKENDS else "reference"
    B = 20000 if backend == "cpu" else 3000
    case = stat_case(B, 5)
    p, a, n = outputs(B, 4, 3)
    S.tree_speculative_sampling_target_only(p, a, n, *case, backend=backend)
    assert first_token_pvalue(p, case[1], B) > ALPHA
    # every depth is reached (the test exercises acceptance, rejection and the residual)
    assert set(n.tolist()) == {0, 1, 2}


def test_negative_control_ignoring_residual_fails():
    """The same pipeline with the walk's residual replaced by p after rejections (reference
    negative control "wrong_fallback") must fail the same test."""
    B = 3000
    case = stat_case(B, 6)

    def wrong(_, tokens, parents, draft, *, target_probs, method, max_depth, seed, offset,
              generator, backend, validate):
        Bn, N = tokens.shape
        one, zero = np.ones(Bn), np.zeros(Bn)
        out = verify_tree_variant("wrong_fallback", target_probs.numpy(), True,
                                  tokens.numpy(), parents.numpy(), np.full(Bn, N), None, True,
                                  one.astype(np.float32), zero.astype(np.int64), one, zero,
                                  seed.numpy(), np.zeros(Bn, np.int64), max_depth, method)
        return TreeVerifyOutput(*(torch.from_numpy(t) for t in out))

    p, a, n = outputs(B, 4, 3)
    (candidates, ri, nt, ns, u, uf, target) = case
    S._run(p, a, n, candidates, ri, nt, ns, u, uf, target, None, "rsd", None, None, None,
           "reference", None, _verify=wrong)
    assert first_token_pvalue(p, ri, B) < ALPHA
    # and the honest pipeline passes on the very same inputs
    p2, a2, n2 = outputs(B, 4, 3)
    S.tree_speculative_sampling_target_only(p2, a2, n2, *case, backend="reference")
    assert first_token_pvalue(p2, ri, B) > ALPHA
