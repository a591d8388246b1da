"""The public call: bad input, NaN policy, layouts, reproducibility, invariance, op checks."""
from __future__ import annotations

import pytest
import torch

import specops
from specops import _args
from tests.cases import make_case

BACKENDS = [b for b in ("reference", "cpu") if b in specops.available_backends()]
ALL_BACKENDS = [b for b in ("reference", "cpu", "triton") if b in specops.available_backends()]


def base(B=2, K=3, V=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K + 1, V, generator=g)
    q = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    return dict(target_logits=logits, draft_token_ids=ids, draft_probs=q,
                seed=torch.arange(B), offset=torch.zeros(B, dtype=torch.int64))


# ----------------------------------------------------------------------------- bad input
BAD = [
    ("neither target", lambda k: k.pop("target_logits"), ValueError, "exactly one"),
    ("both targets", lambda k: k.update(target_probs=k["target_logits"]), ValueError,
     "exactly one"),
    ("target not tensor", lambda k: k.update(target_logits=k["target_logits"].numpy()),
     TypeError, "target_logits"),
    ("target int", lambda k: k.update(target_logits=k["target_logits"].long()), TypeError,
     "target_logits"),
    ("target rank 4", lambda k: k.update(target_logits=k["target_logits"][None]), ValueError,
     "target_logits"),
    ("probs float16", lambda k: k.update(target_probs=k.pop("target_logits").half()),
     TypeError, "target_probs"),
    ("ids missing", lambda k: k.update(draft_token_ids=None), ValueError, "draft_token_ids"),
    ("ids float", lambda k: k.update(draft_token_ids=k["draft_token_ids"].float()), TypeError,
     "draft_token_ids"),
    ("ids wrong K", lambda k: k.update(draft_token_ids=k["draft_token_ids"][:, :2]),
     ValueError, "draft_token_ids"),
    # the engine's most common mistake: the target without its bonus row (the message used
    # to ask for a draft fewer)
    ("target without the bonus row", lambda k: k.update(
        target_logits=k["target_logits"][:, :3]), ValueError, "needs K\\+1 = 4 rows"),
    ("ids wrong B", lambda k: k.update(draft_token_ids=k["draft_token_ids"][:1]),
     ValueError, "draft_token_ids"),
    ("ids >= V", lambda k: k["draft_token_ids"].__setitem__((0, 0), 11), ValueError,
     "draft_token_ids"),
    ("ids < -1", lambda k: k["draft_token_ids"].__setitem__((0, 0), -2), ValueError,
     "draft_token_ids"),
    ("draft probs wrong V", lambda k: k.update(draft_probs=k["draft_probs"][..., :5]),
     ValueError, "draft_probs"),
    ("draft probs bf16", lambda k: k.update(draft_probs=k["draft_probs"].bfloat16()),
     TypeError, "draft_probs"),
    ("draft both", lambda k: k.update(draft_logits=k["draft_probs"]), ValueError,
     "draft_probs and draft_logits"),
    ("temperature < 0", lambda k: k.update(temperature=-0.5), ValueError, "temperature"),
    ("temperature nan", lambda k: k.update(temperature=float("nan")), ValueError,
     "temperature"),
    ("temperature overflows float32", lambda k: k.update(temperature=1e39), ValueError,
     "temperature"),
    ("temperature tensor < 0", lambda k: k.update(temperature=torch.tensor([1.0, -1.0])),
     ValueError, "temperature"),
    ("temperature wrong B", lambda k: k.update(temperature=torch.ones(3)), ValueError,
     "temperature"),
    ("temperature str", lambda k: k.update(temperature="hot"), TypeError, "temperature"),
    ("top_p 0", lambda k: k.update(top_p=0.0), ValueError, "top_p"),
    ("top_p > 1", lambda k: k.update(top_p=1.5), ValueError, "top_p"),
    ("top_k < 0", lambda k: k.update(top_k=-1), ValueError, "top_k"),
    ("top_k float", lambda k: k.update(top_k=2.5), TypeError, "top_k"),
    ("min_p > 1", lambda k: k.update(min_p=2.0), ValueError, "min_p"),
    ("num_draft > K", lambda k: k.update(num_draft_tokens=torch.tensor([4, 1])), ValueError,
     "num_draft_tokens"),
    ("num_draft < 0", lambda k: k.update(num_draft_tokens=torch.tensor([-1, 1])), ValueError,
     "num_draft_tokens"),
    ("cu with padded", lambda k: k.update(cu_num_draft_tokens=torch.tensor([3, 6])),
     ValueError, "cu_num_draft_tokens"),
    ("seed and generator", lambda k: k.update(generator=torch.Generator()), ValueError,
     "generator"),
    ("seed float tensor", lambda k: k.update(seed=torch.tensor([0.5, 1.0])), TypeError, "seed"),
    ("generator str", lambda k: k.update(seed=None, generator="gen"), TypeError, "generator"),
    ("generator str, all greedy", lambda k: k.update(seed=None, generator="gen", temperature=0),
     TypeError, "generator"),
    ("target on meta", lambda k: k.update(target_logits=k["target_logits"].to("meta")),
     ValueError, "target_logits"),
    ("draft probs on meta", lambda k: k.update(draft_probs=k["draft_probs"].to("meta")),
     ValueError, "draft_probs"),
    ("temperature on meta", lambda k: k.update(temperature=torch.ones(2, device="meta")),
     ValueError, "temperature"),
    ("max_num_draft_tokens with padded", lambda k: k.update(max_num_draft_tokens=3), ValueError,
     "max_num_draft_tokens"),
    ("probs with temperature", lambda k: k.update(
        target_probs=torch.softmax(k.pop("target_logits"), -1), temperature=0.7), ValueError,
     "temperature"),
    ("probs with top_p", lambda k: k.update(
        target_probs=torch.softmax(k.pop("target_logits"), -1), top_p=0.9), ValueError, "top_p"),
    ("backend unknown", lambda k: k.update(backend="gpu"), ValueError, "backend"),
    ("backend type", lambda k: k.update(backend=3), TypeError, "backend"),
    # a storage freed or resized under its tensor (FSDP-style code): the C++ path read past
    # the allocation, the reference read whatever followed
    ("target storage freed", lambda k: k["target_logits"].untyped_storage().resize_(16),
     ValueError, "target_logits's storage holds 16 bytes"),
    ("draft storage freed", lambda k: k["draft_probs"].untyped_storage().resize_(0),
     ValueError, "draft_probs's storage"),
    ("ids storage freed", lambda k: k["draft_token_ids"].untyped_storage().resize_(8),
     ValueError, "draft_token_ids's storage"),
    ("seed storage freed", lambda k: k["seed"].untyped_storage().resize_(0), ValueError,
     "seed's storage"),
    ("target sparse", lambda k: k.update(target_logits=k["target_logits"].to_sparse()),
     TypeError, "target_logits must be a dense"),
    ("ids sparse", lambda k: k.update(draft_token_ids=k["draft_token_ids"].to_sparse()),
     TypeError, "draft_token_ids must be a dense"),
    ("seed sparse", lambda k: k.update(seed=k["seed"].to_sparse()), TypeError,
     "seed must be a dense"),
]


@pytest.mark.parametrize("name,mutate,exc,word", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_clear_error(name, mutate, exc, word):
    kw = base()
    mutate(kw)
    with pytest.raises(exc, match=word):
        specops.verify_block(**kw)


FLAT_BAD = [
    ("2-D without cu", lambda k: k.pop("cu_num_draft_tokens"), "cu_num_draft_tokens"),
    # the padded layout's ids with a flattened target: said "must have 1 dimensions"
    ("2-D target, padded ids, no cu", lambda k: k.update(
        draft_token_ids=k.pop("cu_num_draft_tokens") * 0 + k["draft_token_ids"][:2, None]),
     "flattened \\(vLLM\\) layout, which needs cu_num_draft_tokens"),
    ("rows != T + B", lambda k: k.update(target_logits=k["target_logits"][:-1]), "T \\+ B"),
    ("cu not ending at T", lambda k: k.update(cu_num_draft_tokens=torch.tensor([1, 2])),
     "cu_num_draft_tokens|rows"),
    ("cu decreasing", lambda k: k.update(cu_num_draft_tokens=torch.tensor([4, 3])),
     "cu_num_draft_tokens|rows"),
    ("draft rows != T", lambda k: k.update(draft_probs=k["draft_probs"][:-1]), "draft_probs"),
    ("num_draft with flat", lambda k: k.update(num_draft_tokens=torch.tensor([1, 2])),
     "num_draft_tokens"),
    ("empty cu with drafts", lambda k: k.update(  # defect E: the drafts were ignored
        cu_num_draft_tokens=torch.zeros(0, dtype=torch.long),
        target_logits=k["target_logits"][:2], draft_token_ids=k["draft_token_ids"][:2],
        draft_probs=k["draft_probs"][:2]), "cu_num_draft_tokens"),
    ("max_num_draft_tokens too small", lambda k: k.update(max_num_draft_tokens=1),
     "max_num_draft_tokens"),
    ("max_num_draft_tokens negative", lambda k: k.update(max_num_draft_tokens=-1),
     "max_num_draft_tokens"),
]


@pytest.mark.parametrize("name,mutate,word", FLAT_BAD, ids=[b[0] for b in FLAT_BAD])
def test_bad_flattened_layout(name, mutate, word):
    kw = make_case("flat", 11, 3, B=2)
    mutate(kw)
    with pytest.raises(ValueError, match=word):
        specops.verify_block(**kw)


def test_vocab_limits():
    with pytest.raises(ValueError, match="V"):
        specops.verify_block(torch.zeros(1, 1, 0), torch.zeros(1, 0, dtype=torch.long))


def test_missing_backend_error_says_how_to_get_it(monkeypatch):
    from specops.backends import registry
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(specops.BackendUnavailable, match="TRITON_INTERPRET"):
        specops.verify_block(**base(), backend="triton")
    monkeypatch.setitem(registry._cache, "cpu", None)
    registry._cache.pop("cpu")
    import sys
    monkeypatch.setitem(sys.modules, "specops._C", None)      # simulate "not built"
    monkeypatch.setitem(sys.modules, "specops.backends.cpu", None)
    with pytest.raises(specops.BackendUnavailable, match="pip install"):
        specops.verify_block(**base(), backend="cpu")


def test_triton_not_installed_says_so(monkeypatch):
    """Without Triton at all the error (and the audit's status line) blamed TRITON_INTERPRET."""
    import importlib.util
    from specops.backends import registry
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else real(name, *a))
    with pytest.raises(specops.BackendUnavailable, match="unavailable: `pip install triton`"):
        specops.verify_block(**base(), backend="triton")
    assert registry.why_unavailable("triton").startswith("Triton is not installed")


# ----------------------------------------------------------------------------- NaN policy
@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_rows_give_minus_one_and_leave_neighbours_alone(backend):
    kw = base(B=4, K=3, V=9)
    t = kw["target_logits"]
    kw["draft_token_ids"] = t[:, :3].argmax(-1)          # greedy-accepted prefix
    kw["temperature"] = torch.tensor([0.0, 0.0, 0.0, 0.0])
    clean = specops.verify_block(**kw, backend=backend)
    assert clean.valid.all() and (clean.num_accepted == 3).all()
    t = t.clone()
    t[0, 2] = float("nan")
    t[1, 0] = -float("inf")
    t[2, 3, 4] = float("inf")
    kw["target_logits"] = t
    out = specops.verify_block(**kw, backend=backend)
    assert out.valid.tolist() == [False, False, False, True]
    assert out.num_accepted.tolist() == [2, 0, 3, 3]
    assert out.token_ids[0].tolist()[2:] == [-1, -1]
    assert out.token_ids[1].tolist() == [-1] * 4
    assert out.token_ids[2, 3] == -1
    assert torch.equal(out.token_ids[3], clean.token_ids[3])
    assert ((out.token_ids >= -1) & (out.token_ids < 9)).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_draft_row_is_rejected_and_sampled_from_target(backend):
    kw = base(B=1, K=1, V=5)
    kw.pop("draft_probs")
    kw["draft_logits"] = torch.full((1, 1, 5), float("nan"))
    for s in range(20):
        kw["seed"] = torch.tensor([s])
        out = specops.verify_block(**kw, backend=backend)
        assert out.num_accepted.item() == 0 and out.valid.item()
        assert 0 <= out.token_ids[0, 0] < 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_probability_rows(backend):
    kw = base(B=3, K=2, V=6)
    p = torch.softmax(kw.pop("target_logits"), -1)
    p[0, 0] = float("nan")
    p[1, :, :] = 0.0
    out = specops.verify_block(target_probs=p, **kw, backend=backend)
    assert out.valid.tolist()[:2] == [False, False]
    assert out.token_ids[0, 0] == -1 and out.token_ids[1].tolist() == [-1, -1, -1]
    assert out.valid[2]


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("backend", BACKENDS)
def test_flattened_layout_equals_padded(backend):
    kw = make_case("flat", 50, 4, B=4)
    flat = specops.verify_block(**kw, backend=backend)
    cu = kw["cu_num_draft_tokens"]
    counts = torch.diff(cu, prepend=torch.zeros(1, dtype=cu.dtype))
    B, K, V = 4, int(counts.max()), 50
    t = torch.zeros(B, K + 1, V)
    ids = torch.full((B, K), -1, dtype=torch.long)
    q = torch.zeros(B, K, V)
    r = d = 0
    for b in range(B):
        n = int(counts[b])
        t[b, :n + 1] = kw["target_logits"][r:r + n + 1]
        ids[b, :n] = kw["draft_token_ids"][d:d + n]
        q[b, :n] = kw["draft_probs"][d:d + n]
        r, d = r + n + 1, d + n
    padded = specops.verify_block(t, ids, q, num_draft_tokens=counts, temperature=0.7, top_k=20,
                                  seed=kw["seed"], offset=kw["offset"], backend=backend)
    assert torch.equal(flat.token_ids, padded.token_ids[:, :K + 1])
    assert torch.equal(flat.num_accepted, padded.num_accepted)


def test_strided_and_half_inputs_are_read_in_place():
    kw = base(B=2, K=2, V=13)
    big = torch.randn(2, 3, 40)
    kw["target_logits"] = big[:, :, 5:18]            # row stride 40, last dim contiguous
    assert not kw["target_logits"].is_contiguous()
    a = specops.verify_block(**kw, backend="reference")
    kw["target_logits"] = kw["target_logits"].contiguous()
    b = specops.verify_block(**kw, backend="reference")
    assert torch.equal(a.token_ids, b.token_ids)


def test_padding_id_ends_block_like_num_draft_tokens():
    kw = base(B=1, K=4, V=9)
    kw["draft_token_ids"][0, 2:] = -1
    a = specops.verify_block(**kw)
    kw["draft_token_ids"][0, 2:] = 0
    b = specops.verify_block(**kw, num_draft_tokens=torch.tensor([2]))
    assert torch.equal(a.token_ids, b.token_ids)
    assert a.num_accepted.item() <= 2


# ----------------------------------------------------------------------------- randomness
@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_invariance(backend):
    kw = make_case("mixed", 300, 4, B=6)
    full = specops.verify_block(**kw, backend=backend)
    for b in range(6):
        one = {k: (v[b:b + 1] if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        alone = specops.verify_block(**one, backend=backend)
        assert torch.equal(alone.token_ids[0], full.token_ids[b])


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_offset_reproducibility(backend):
    kw = base(B=8, K=4, V=20)
    a = specops.verify_block(**kw, backend=backend)
    b = specops.verify_block(**kw, backend=backend)
    assert torch.equal(a.token_ids, b.token_ids)
    outs = set()
    for off in range(12):
        kw["offset"] = torch.full((8,), off)
        outs.add(tuple(specops.verify_block(**kw, backend=backend).token_ids.flatten().tolist()))
    assert len(outs) > 6           # the offset moves the stream


def test_generator_reproducible_and_greedy_consumes_nothing():
    kw = base(B=3, K=2, V=10)
    kw.pop("seed"), kw.pop("offset")
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = specops.verify_block(**kw, generator=g1)
    b = specops.verify_block(**kw, generator=g2)
    assert torch.equal(a.token_ids, b.token_ids)
    g = torch.Generator().manual_seed(9)
    state = g.get_state()
    specops.verify_block(**kw, generator=g, temperature=0.0)
    assert torch.equal(g.get_state(), state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_ignores_seed(backend):
    kw = make_case("greedy", 100, 4, B=5)
    a = specops.verify_block(**kw, backend=backend)
    kw["seed"] = kw["seed"] + 12345
    kw["offset"] = kw["offset"] + 3
    b = specops.verify_block(**kw, backend=backend)
    assert torch.equal(a.token_ids, b.token_ids)
    t = kw["target_logits"].float()
    for bb in range(5):
        n = int(a.num_accepted[bb])
        assert a.token_ids[bb, n] == t[bb, n].argmax()


# ----------------------------------------------------------------------------- op checks
def _canonical(kind="full", V=23, K=3):
    return _args.prepare(**make_case(kind, V, K)).to_op_tensors()


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_opcheck_every_op(backend):
    """The registered ops, the walk's forced mode and its draft check included; accept and
    residual_sample are views over verify (specops/ops/), not ops of their own."""
    from specops.ops import sampling_probs_op, verify_op
    # opcheck calls the op about ten times: the interpreter gets a case without filters
    a = _canonical("full" if backend == "triton" else "mixed")
    torch.library.opcheck(verify_op, (*a.op_args(), "token", False, True, None, backend))
    B = a.num_draft.shape[0]
    forced = torch.tensor([0, 1, 3, -1, 2][:B], dtype=torch.int32)
    torch.library.opcheck(verify_op, (*a.op_args(), "token", False, False, forced, backend))
    rows = _args.rows_to_request(a.target_row_start, a.target.shape[0], torch.device("cpu"))
    params = [t[rows] for t in (a.inv_temp, a.top_k, a.top_p, a.min_p)]
    torch.library.opcheck(sampling_probs_op, (a.target, *params, backend))


def test_torch_compile_fullgraph():
    kw = base(B=3, K=2, V=17)

    def step(logits, ids, q, seed, offset):
        out = specops.verify_block(logits, ids, q, temperature=0.8, top_p=0.9, seed=seed,
                                   offset=offset)
        return out.token_ids, out.num_accepted

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = (kw["target_logits"], kw["draft_token_ids"], kw["draft_probs"], kw["seed"],
            kw["offset"])
    got, want = compiled(*args), step(*args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("kind", ["full", "point", "draft_logits", "greedy", "mixed", "ragged",
                                  "probs", "flat", "invalid"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_equals_composed_ops(kind, backend):
    kw = make_case(kind, 64, 4, B=5)
    a = specops.verify_block(**kw, backend=backend)
    b = specops.verify_block_unfused(**kw, backend=backend)
    assert torch.equal(a.token_ids, b.token_ids)
    assert torch.equal(a.num_accepted, b.num_accepted)
    assert torch.equal(a.valid, b.valid)


def test_sampling_probs_public():
    x = torch.randn(2, 3, 50)
    p, valid = specops.sampling_probs(x, temperature=0.5, top_k=10)
    assert p.shape == x.shape and valid.all()
    assert ((p > 0).sum(-1) <= 10).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(2, 3))


def test_eager_calls_skip_the_dispatcher_only_when_nothing_watches():
    """Eager calls run the backend directly; a dispatch mode or the profiler sees the op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    kw = base()
    plain = specops.verify_block(**kw, backend="reference")
    with Record() as rec:
        seen = specops.verify_block(**kw, backend="reference")
    assert any("specops.verify" in op for op in rec.ops), rec.ops
    with torch.profiler.profile() as prof:
        profiled = specops.verify_block(**kw, backend="reference")
    assert any("specops::verify" in e.name for e in prof.events())
    for out in (seen, profiled):
        assert torch.equal(out.token_ids, plain.token_ids)
        assert torch.equal(out.valid, plain.valid)


# ----------------------------------------------------------------------------- users
def test_auto_warns_once_when_it_falls_back_to_the_reference(monkeypatch):
    """Issue 28 item 4: backend="auto" on CPU tensors runs the numpy reference when the C++
    backend cannot run (not built, failed to load, a bad SPECOPS_CPU_ISA): exact but tens of
    times slower, so it says so, once per process, with the reason."""
    import sys
    import warnings
    from specops.backends import registry
    monkeypatch.setattr(registry, "_warned", [])
    monkeypatch.delitem(registry._cache, "cpu", raising=False)
    monkeypatch.setitem(sys.modules, "specops.backends.cpu", None)    # as if not built
    kw = base()
    with pytest.warns(RuntimeWarning, match="numpy reference.*C\\+\\+ backend cannot run"):
        out = specops.verify_block(**kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = specops.verify_block(**kw)
    assert torch.equal(out.token_ids, again.token_ids)
    assert torch.equal(out.token_ids, specops.verify_block(**kw, backend="reference").token_ids)
    assert "cpu" not in specops.available_backends()
    assert "specops.backends.cpu" in registry.why_unavailable("cpu")


def test_public_names_load_on_first_use():
    """``import specops`` imports no torch (PEP 562 attributes); every public name and
    ``specops.distributed`` resolve from the package; the version is pyproject's."""
    import importlib.metadata
    import specops.distributed as sd
    assert specops.distributed is sd
    assert specops.distributed.verify_block is sd.verify_block
    for name in specops.__all__:
        if name != "generate":
            assert getattr(specops, name) is not None, name
    assert specops.__version__ == importlib.metadata.version("specops")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        specops.nope
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(specops))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all("torch" not in ast.dump(n) and "specops" not in ast.dump(n) for n in top)


@pytest.mark.full
def test_import_specops_does_not_import_torch():
    """Issue 28 item 5, in a fresh interpreter: ``import specops`` and ``specops.cli``
    import no torch; the first public call imports torch but not torch._dynamo."""
    import subprocess
    import sys
    code = ("import sys, specops, specops.cli; assert 'torch' not in sys.modules, 'torch'; "
            "specops.__version__; assert 'torch' not in sys.modules, 'version'; "
            "specops.verify_block; assert 'torch._dynamo' not in sys.modules, 'dynamo'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_signatures_are_typed():
    import typing
    hints = typing.get_type_hints(specops.verify_block)
    assert hints["method"] == typing.Literal["token", "block"]
    assert hints["backend"] == typing.Literal["auto", "reference", "cpu", "triton"]
    assert torch.Tensor in typing.get_args(hints["temperature"])
    assert float in typing.get_args(hints["temperature"])
    tree_hints = typing.get_type_hints(specops.verify_tree)
    # the annotation lists exactly the contract's tree methods (sections 11, 14)
    from specops._contract import TREE_METHODS
    assert typing.get_args(tree_hints["method"]) == TREE_METHODS
    import os
    assert os.path.exists(os.path.join(os.path.dirname(specops.__file__), "py.typed"))
