"""One table of malformed requests (reference section 8) and one of invalid rows (section 3,
and section 1's rule for draft rows that are not probability rows), run against every
backend: each table is one batch, so each backend runs it in one call per method (a
Triton interpreter launch or two).  Every backend must equal the reference token for token,
and the reference itself must show what the contract says for each row of the table.
Then the preconditions every op enforces (so that no backend defines behaviour outside
them), and the cache policy under CUDA-graph capture."""
from __future__ import annotations

import pytest
import torch

import specops
from specops import _args, _cache
from specops._contract import check_method

BACKENDS = [b for b in ("reference", "cpu", "triton") if b in specops.available_backends()]
V, K = 16, 3
NAN, INF = float("nan"), float("inf")

# (name, per-request overrides): each makes its request malformed (section 8)
MALFORMED = [
    ("temperature NaN", dict(temperature=NAN)),
    ("temperature < 0", dict(temperature=-1.0)),
    ("temperature inf", dict(temperature=INF)),
    ("top_k < 0", dict(top_k=-1)),
    ("top_p 0", dict(top_p=0.0)),
    ("top_p > 1", dict(top_p=1.5)),
    ("top_p NaN", dict(top_p=NAN)),
    ("min_p < 0", dict(min_p=-0.1)),
    ("min_p > 1", dict(min_p=1.5)),
    ("min_p NaN", dict(min_p=NAN)),
    ("num_draft < 0", dict(num_draft_tokens=-1)),
    ("num_draft > K", dict(num_draft_tokens=K + 1)),
    ("draft id >= V", dict(ids=[2, V, 1])),
    ("draft id < -1", dict(ids=[-2, 1, 1])),
    ("draft id >= V after a -1", dict(ids=[3, -1, V])),
]
CLEAN = dict(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, num_draft_tokens=K)


def _batch(table, g, **extra):
    """A batch: a clean request, each row of the table, a clean request (a request's
    neighbours are untouched: the clean ones equal the reference on every backend)."""
    rows = [("clean", {}), *table, ("clean", {})]
    B = len(rows)
    ids = torch.randint(0, V, (B, K), generator=g)
    per = {k: [] for k in CLEAN}
    for b, (_, over) in enumerate(rows):
        for k, v in CLEAN.items():
            per[k].append(over.get(k, v))
        if "ids" in over:
            ids[b] = torch.tensor(over["ids"])
    kw = dict(target_logits=torch.randn(B, K + 1, V, generator=g) * 2, draft_token_ids=ids,
              temperature=torch.tensor(per["temperature"]), top_k=torch.tensor(per["top_k"]),
              top_p=torch.tensor(per["top_p"]), min_p=torch.tensor(per["min_p"]),
              num_draft_tokens=torch.tensor(per["num_draft_tokens"]),
              seed=torch.arange(B) * 7 + 1, offset=3, validate=False, **extra)
    return [name for name, _ in rows], kw


def _equal(got, want):
    for x, y in zip(got, want):
        assert torch.equal(x, y), (x, y)
    if hasattr(want, "accept_rates"):
        assert torch.equal(got.accept_rates.nan_to_num(-7.0), want.accept_rates.nan_to_num(-7.0))


@pytest.fixture(scope="module")
def malformed():
    g = torch.Generator().manual_seed(27)
    names, kw = _batch(MALFORMED, g)
    draft = torch.randn(len(names), K, V, generator=g)
    return names, kw, draft


@pytest.mark.parametrize("draft", ["logits", "point"])
@pytest.mark.parametrize("method", ["token", "block"])
def test_malformed_requests(malformed, method, draft):
    names, kw, logits = malformed
    kw = dict(kw, draft_logits=logits if draft == "logits" else None)
    want = specops.verify_block(**kw, method=method, return_accept_rates=True,
                                backend="reference")
    for b, name in enumerate(names):
        blank = (want.token_ids[b] == -1).all() and want.num_accepted[b] == 0 \
            and not want.valid[b] and want.accept_rates[b].isnan().all()
        assert bool(blank) == (name != "clean"), (name, want.token_ids[b])
    for backend in BACKENDS[1:]:
        if backend == "triton" and draft == "point":
            continue                       # the interpreter: one launch per method
        _equal(specops.verify_block(**kw, method=method, return_accept_rates=True,
                                    backend=backend), want)


def test_malformed_requests_with_target_probs():
    """Final probabilities take temperature 0 or 1 and no filter (section 8)."""
    table = [("temperature 0.5", dict(temperature=0.5)), ("top_k 2", dict(top_k=2)),
             ("top_p 0.9", dict(top_p=0.9)), ("min_p 0.1", dict(min_p=0.1))]
    g = torch.Generator().manual_seed(28)
    names, kw = _batch(table, g)
    p = torch.softmax(kw.pop("target_logits"), -1)
    kw.update(target_probs=p, temperature=torch.where(kw["temperature"] == 0.8, 1.0,
                                                      kw["temperature"]))
    want = specops.verify_block(**kw, backend="reference")
    for b, name in enumerate(names):
        assert bool((want.token_ids[b] == -1).all()) == (name != "clean"), name
    for backend in BACKENDS[1:]:
        _equal(specops.verify_block(**kw, backend=backend), want)


def _invalid_rows():
    """(name, position j the row is at, kind) and the batch: greedy requests whose drafts
    are the argmax (every draft accepted up to the bad row), and sampled requests whose draft
    is the target itself (q = p: every draft accepted) up to an unusable draft row."""
    g = torch.Generator().manual_seed(29)
    table = [("NaN logit", 0, "target"), ("+inf logit", 1, "target"),
             ("all -inf", 2, "target"), ("NaN in the bonus row", K, "target"),
             ("NaN draft row", 1, "draft"), ("-inf draft row", 0, "draft"),
             ("clean", None, None)]
    B = len(table)
    t = torch.randn(B, K + 1, V, generator=g)
    greedy = torch.tensor([kind != "draft" for _, _, kind in table])
    ids = t[:, :K].argmax(-1)
    d = t[:, :K].clone()
    for b, (name, j, kind) in enumerate(table):
        row = t[b, j] if kind == "target" else d[b, j] if kind == "draft" else None
        if row is None:
            continue
        if name.startswith("NaN"):
            row[V // 2] = NAN
        elif name == "+inf logit":
            row[3] = INF
        else:
            row.fill_(-INF)
    kw = dict(target_logits=t, draft_token_ids=ids, draft_logits=d,
              temperature=torch.where(greedy, 0.0, 1.0), seed=torch.arange(B) + 5, offset=0,
              validate=False)
    return table, kw


@pytest.mark.parametrize("method", ["token", "block"])
def test_invalid_rows(method):
    table, kw = _invalid_rows()
    want = specops.verify_block(**kw, method=method, backend="reference")
    ids = kw["draft_token_ids"]
    for b, (name, j, kind) in enumerate(table):
        tok, n = want.token_ids[b], int(want.num_accepted[b])
        if kind is None:
            assert want.valid[b] and n == K and (tok[:K] == ids[b]).all(), name
            continue
        assert n == j and (tok[:j] == ids[b, :j]).all(), (name, tok)
        if kind == "target":                  # -1 from the invalid row on, valid False
            assert not want.valid[b] and (tok[j:] == -1).all(), (name, tok)
        else:                                 # rejected, sampled from the target's row j
            assert want.valid[b] and 0 <= tok[j] < V and (tok[j + 1:] == -1).all(), name
    for backend in BACKENDS[1:]:
        if backend == "triton" and method == "block":
            continue                       # the interpreter: one launch per test
        _equal(specops.verify_block(**kw, method=method, backend=backend), want)


@pytest.mark.parametrize("method", ["token", "block"])
def test_invalid_probability_rows_and_unchecked_draft_probs(method):
    """Probability rows outside the contract (an entry above 1, a negative one, mass above
    4) are invalid where they are checked in full (greedy: every row); a draft_probs row
    that is not a probability row (negative at a token the target gives probability 0, NaN,
    huge) never gets such a token accepted (section 1)."""
    g = torch.Generator().manual_seed(30)
    B = 6
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g) * 2, -1)
    p[:, :, 0] = 0.0                                  # token 0: probability 0 everywhere
    p = p / p.sum(-1, keepdim=True)
    p[0, 1, 5] = 1.5                                  # an entry above 1
    p[1, 0, 5] = -0.1                                 # a negative entry
    p[2, 2] = 0.9                                     # mass 0.9 V > 4
    q = torch.full((B, K, V), 1.0 / V)
    q[3:, :, 0] = -1.0                                # request 3..5 draft token 0 ...
    q[4, :, 1:] = NAN                                 # ... with NaN elsewhere
    q[5, :, 1:] = 1e30                                # ... with huge entries elsewhere
    ids = p[:, :K].argmax(-1)
    ids[3:] = 0
    temperature = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    kw = dict(target_probs=p, draft_token_ids=ids, draft_probs=q, temperature=temperature,
              seed=torch.arange(B), offset=0, validate=False, method=method)
    want = specops.verify_block(**kw, backend="reference")
    for b, j in ((0, 1), (1, 0), (2, 2)):
        assert int(want.num_accepted[b]) == j and not want.valid[b]
        assert (want.token_ids[b, j:] == -1).all()
    assert (want.num_accepted[3:] == 0).all() and (want.token_ids[3:, 0] != 0).all()
    for backend in BACKENDS[1:]:
        if backend == "triton" and method == "block":
            continue                       # the interpreter: one launch per test
        _equal(specops.verify_block(**kw, backend=backend), want)


# ----------------------------------------------------------------------------- the op layer
def _op_args(max_k):
    a = _args.prepare(**dict(_invalid_rows()[1], validate=None)).to_op_tensors()
    return a._replace(max_k=max_k).op_args()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_refuse_what_no_backend_defines(backend):
    """max_k < 0 (the C++ path gave width 1, the reference and Triton width 0),
    max_depth < 0, an unknown method, and the forced mode with block verification (C++
    raised, the reference ran the token-wise forced walk, Triton dropped the argument):
    refused by every op and every fake, before any backend runs."""
    from specops.ops.library import check_verify, verify_op, verify_tree_op
    args = _op_args(-1)
    opts = ("token", False, False, None, backend)
    with pytest.raises(ValueError, match="max_k must be >= 0"):
        verify_op(*args, *opts)
    with pytest.raises(ValueError, match="max_k must be >= 0"):
        verify_op(*args, "block", True, False, None, backend)
    with pytest.raises(ValueError, match="method must be 'token' or 'block'"):
        verify_op(*_op_args(K), "tree", False, False, None, backend)
    with pytest.raises(ValueError, match="token-wise only"):
        check_verify(K, "block", torch.zeros(2, dtype=torch.int64))
    tree = specops._args.prepare_tree(
        target_logits=torch.randn(2, 3, V), node_token_ids=torch.zeros(2, 3, dtype=torch.long),
        parent_ids=torch.tensor([[-1, 0, 0]] * 2)).to_op_tensors()
    with pytest.raises(ValueError, match="max_depth must be >= 0"):
        verify_tree_op(*tree._replace(max_depth=-1).op_args(), backend)
    with pytest.raises(ValueError, match="method must be"):
        verify_tree_op(*tree._replace(method="block").op_args(), backend)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in args]
        with pytest.raises(ValueError, match="max_k must be >= 0"):
            verify_op(*fake, *opts)
        with pytest.raises(ValueError, match="max_k must be >= 0"):
            verify_op(*fake, "block", True, True, None, backend)


def test_method_names_come_from_one_place():
    check_method("token")
    check_method("mss", ("rsd", "mss"))
    for bad in ("Token", None, "rsd"):
        with pytest.raises(ValueError, match="method must be 'token' or 'block'"):
            check_method(bad)
    with pytest.raises(ValueError, match="method must be 'rsd' or 'mss'"):
        specops.verify_tree(torch.randn(1, 2, V), torch.zeros(1, 2, dtype=torch.long),
                            torch.tensor([[-1, 0]]), method="token")


# ----------------------------------------------------------------------------- caches
def test_caches_are_bypassed_under_capture(monkeypatch):
    """A tensor made while a CUDA graph is captured holds its values only after replay, and
    a cached one may be freed by an eviction while the graph reads it: under capture
    (simulated here) no cache is read or written, so the graph owns every constant; eager
    calls reuse them again after."""
    kw = dict(target_logits=torch.randn(3, 3, V), draft_token_ids=torch.zeros(3, 2,
                                                                              dtype=torch.long),
              temperature=0.7, top_p=0.9, seed=11, offset=2)
    eager = specops.verify_block(**kw, backend="reference")
    held = _cache.const_vec(0.7, 3, torch.float32, torch.device("cpu"))
    assert held is _cache.const_vec(0.7, 3, torch.float32, torch.device("cpu"))
    sizes = [len(c.entries) for c in _cache.CACHES]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for c in _cache.CACHES:
        monkeypatch.setattr(c, "entries", _Watched(c.entries))
    assert _cache.building_graph() and not _args.may_read(None)
    fresh = _cache.const_vec(0.7, 3, torch.float32, torch.device("cpu"))
    assert fresh is not held and torch.equal(fresh, held)
    captured = specops.verify_block(**kw, validate=False, backend="reference")
    for x, y in zip(captured, eager):
        assert torch.equal(x, y)
    if "triton" in BACKENDS:
        from specops.backends import triton as tb
        assert tb._fill(1.0, 3, torch.float32, None) is not tb._fill(1.0, 3, torch.float32,
                                                                      None)
    assert [len(c.entries) for c in _cache.CACHES] == sizes


class _Watched(dict):
    """A cache's dict that fails the test when read or written."""

    def get(self, *a):
        raise AssertionError("cache read under capture")

    def __setitem__(self, *a):
        raise AssertionError("cache written under capture")


def test_the_backend_choice_is_constant_under_compile():
    """``_resolve`` is marked as torch.compiler.assume_constant_result marks a function, but
    without importing torch._dynamo at ``import specops``: the marking must stay the same
    as torch's."""
    from specops.backends import registry

    def probe():
        return None
    before = dict(vars(probe))
    torch.compiler.assume_constant_result(probe)
    added = {k: v for k, v in vars(probe).items() if k not in before}
    assert added == {"_dynamo_marked_constant": True}
    assert all(getattr(registry._resolve, k) == v for k, v in added.items())
