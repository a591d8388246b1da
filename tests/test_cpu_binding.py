"""The C++ backend's boundary and its threads: every field of a native call by keyword (a
missing, unknown, positional or malformed one is a ValueError naming it), and the requests on
specops' own thread pool (csrc/core/parallel.cpp): any thread count emits what one thread
emits, concurrent callers and many short jobs lose or repeat no item, the pool under
ThreadSanitizer, and after fork.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

_C = pytest.importorskip("specops._C", reason="specops._C (the C++ CPU backend) is not built")

from specops.backends import cpu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _canonical(seed, B, K=4, V=300):
    """The canonical backend arguments (specops/backends/__init__.py) of B requests: ragged
    blocks of drafts sampled from their probabilities, greedy, filtered and plain rows."""
    g = torch.Generator().manual_seed(seed)
    target = 2 * torch.randn(B * (K + 1), V, generator=g)
    q = torch.softmax(target.view(B, K + 1, V)[:, :K] + 0.5 * torch.randn(B, K, V, generator=g),
                      -1).reshape(B * K, V)
    ids = torch.multinomial(q, 1, generator=g).view(-1)
    pick = torch.arange(B) % 4
    inv_temp = torch.tensor([0.0, 1.25, 1.0, 2.0])[pick]           # 0: greedy
    top_k = torch.tensor([0, 0, 20, 0])[pick]
    top_p = torch.tensor([1.0, 0.9, 1.0, 1.0])[pick]
    return (target, False, torch.arange(B) * (K + 1), ids, torch.arange(B) * K,
            torch.randint(0, K + 1, (B,), generator=g), q, True, inv_temp, top_k, top_p,
            torch.zeros(B), torch.arange(B) + seed, torch.zeros(B, dtype=torch.int64), K)


# ----------------------------------------------------------------------------- fields
def test_bad_fields_are_value_errors():
    """The binding reads every field by keyword and checks it before the kernels run: a
    missing, unknown, positional or malformed field is a ValueError naming it."""
    e = torch.zeros(1, dtype=torch.int64)
    col = (e.data_ptr(), 1, 4)
    fcol = (torch.ones(1).data_ptr(), 1, 0)
    t = torch.zeros(2, 5)
    mat = (t.data_ptr(), 0, 2, 5, 5)
    out = torch.zeros(8, dtype=torch.int32)
    good = dict(target=mat, target_is_probs=False, draft=None, draft_is_probs=False,
                draft_ids=col, num_ids=1, target_row_start=col, draft_row_start=col,
                num_draft=col, inv_temp=fcol, top_k=col, top_p=fcol, min_p=fcol, seed=col,
                offset=col, forced_num_accepted=None, B=1, max_k=1, block=False,
                out_tokens=out.data_ptr(), out_num_accepted=out.data_ptr() + 8,
                out_valid=out.data_ptr() + 12, out_rates=0, out_draft_bad=0, threads=1)
    _C.verify(**good)
    for key, bad, says in (
            ("target", (t.data_ptr(), 7, 2, 5, 5), "target: bad dtype code"),
            ("target", (t.data_ptr(), 0, 2, 1 << 23, 5), "target: V exceeds MAX_VOCAB"),
            ("inv_temp", col, "inv_temp: must be float32"),
            ("top_p", (1, 2), "top_p must be a tuple of 3 ints"),
            ("top_k", None, "top_k: missing"),
            ("draft_ids", (0, 1, 4), "draft_ids: null address"),
            ("out_valid", 0, "out_valid: null address"),
            ("block", 1, "block must be a bool"),
            ("threads", 0, "threads must be >= 1"),
            ("B", -1, "B must be >= 0")):
        with pytest.raises(ValueError, match=re.escape(says)):
            _C.verify(**{**good, key: bad})
    with pytest.raises(ValueError, match="probabilities must be float32"):
        _C.verify(**{**good, "target_is_probs": True, "target": (t.data_ptr(), 1, 2, 5, 5)})
    missing = dict(good)
    del missing["seed"]
    with pytest.raises(ValueError, match="verify: missing field 'seed'"):
        _C.verify(**missing)
    with pytest.raises(ValueError, match="verify: unknown field 'temperature'"):
        _C.verify(**good, temperature=fcol)
    with pytest.raises(ValueError, match="verify: takes its fields by name only"):
        _C.verify(*good.values())
    with pytest.raises(ValueError, match="sampling_probs: missing field 'out_probs'"):
        _C.sampling_probs(logits=mat, inv_temp=1.0, top_k=0, top_p=1.0, min_p=0.0,
                          out_valid=out.data_ptr(), threads=1)
    with pytest.raises(ValueError, match="verify_tree: unknown field 'method'"):
        _C.verify_tree(target=mat, target_is_probs=False, draft=None, draft_is_probs=False,
                       node_ids=col, parents=col, num_nodes=1, inv_temp=1.0, top_k=0,
                       top_p=1.0, min_p=0.0, seed=0, offset=0, B=1, N=2, max_depth=1,
                       mss=False, out_tokens=out.data_ptr(), out_num_accepted=out.data_ptr(),
                       out_nodes=out.data_ptr(), out_valid=out.data_ptr(), threads=1,
                       method="rsd")


KERNEL_ENTRIES = ("verify", "verify_tree", "verify_traversal", "sampling_probs", "coin_walk",
                  "shard_stats", "shard_masses", "shard_hist", "shard_materialize",
                  "shard_row_sums", "shard_draw_search", "shard_stream")


@pytest.mark.parametrize("name", KERNEL_ENTRIES)
def test_every_kernel_entry_takes_named_fields_only(name):
    """One convention for every kernel entry (csrc/bindings/fields.h): a positional argument,
    a missing field or an unknown one is a ValueError naming the entry and the field, raised
    before any kernel runs (a binding with pybind11 arguments or positional addresses would
    accept the positional call or raise a TypeError)."""
    fn = getattr(_C, name)
    with pytest.raises(ValueError, match=rf"{name}: takes its fields by name only"):
        fn(0)
    with pytest.raises(ValueError, match=rf"{name}: missing field '"):
        fn(bogus=0)


def test_coin_walk_fields_are_checked():
    """The coin walk's sizes and addresses by name: N, V >= 1 and max_depth < N, a null
    address for a non-empty batch, an unknown field: ValueErrors naming them."""
    B, N, V = 1, 3, 4
    t = torch.full((B, N, V), 0.25)
    i64 = torch.full((B, N), -1, dtype=torch.int64)
    f32 = torch.zeros(B, N)
    out = torch.zeros(16, dtype=torch.int32)
    good = dict(B=B, N=N, V=V, max_depth=2, target=t.data_ptr(), candidates=i64.data_ptr(),
                next_token=i64.data_ptr(), next_sibling=i64.data_ptr(), coins=f32.data_ptr(),
                final_coins=f32.data_ptr(), relaxed=False, single=1.0, acc_scale=1.0,
                out_tokens=out.data_ptr(), out_num_accepted=out.data_ptr() + 16,
                out_nodes=out.data_ptr() + 24, out_valid=out.data_ptr() + 40, threads=1)
    _C.coin_walk(**good)
    assert out[:3].tolist() == [0, -1, -1] and out[4] == 0   # the root's draw: token 0
    for key, bad, says in (("max_depth", 3, "max_depth < N"), ("V", 0, "V >= 1"),
                           ("target", 0, "target: null address"),
                           ("relaxed", 1, "relaxed must be a bool"),
                           ("single", "1", "single must be a float")):
        with pytest.raises(ValueError, match=re.escape(says)):
            _C.coin_walk(**{**good, key: bad})
    with pytest.raises(ValueError, match="coin_walk: unknown field 'threshold'"):
        _C.coin_walk(**good, threshold=1.0)


def test_one_binding_version_and_no_probs_summary():
    """One BINDING_VERSION for the module, the one cpu.py and cpu_shard.py are written for
    (specops.backends.native); a module of another version is refused with the rebuild hint;
    probs_summary (no Python caller since the walk checks draft_probs) is gone."""
    from types import SimpleNamespace

    from specops.backends import native
    assert _C.BINDING_VERSION == native.BINDING_VERSION
    assert native.stale(_C) is None
    for old in (SimpleNamespace(BINDING_VERSION=2), SimpleNamespace()):
        assert "rebuild it with `pip install -e .`" in native.stale(old)
    assert not hasattr(_C, "probs_summary")


# ----------------------------------------------------------------------------- threads
def _with_threads(n, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def test_threads_give_the_same_outputs():
    """Requests (rows) run on torch.get_num_threads() threads of specops' pool: 2, 3 and 7
    threads (more than this machine's cores) emit what one thread emits, for verify (token
    and block), sampling_probs and verify_tree; and two Python threads calling at once (the
    GIL is released: one gets the pool, the other runs alone) both get them too."""
    import threading
    args = _canonical(5, 40)
    logits = 2 * torch.randn(37, 300, generator=torch.Generator().manual_seed(6))
    rows = (torch.full((37,), 1.25), torch.full((37,), 20, dtype=torch.int64),
            torch.full((37,), 0.9), torch.zeros(37))
    from tests.tree_cases import make_tree_case
    tree = make_tree_case("logits_rsd", 300, 8, B=24, seed=3)

    def run():
        return (cpu.verify(*args), cpu.verify(*args, method="block", want_rates=True),
                cpu.sampling_probs(logits, *rows), cpu.verify_tree(**tree))

    def same(a, b):  # bitwise (the rates of an invalid request are NaN)
        bits = [t.view(torch.int32) if t.dtype == torch.float32 else t for t in a + b]
        return all(torch.equal(x, y) for x, y in zip(bits[:len(a)], bits[len(a):]))

    want = _with_threads(1, run)
    for n in (2, 3, 7):
        got = _with_threads(n, run)
        assert all(same(w, g) for w, g in zip(want, got)), n
    results = [None, None]

    def caller(i):
        results[i] = run()

    def both():
        ts = [threading.Thread(target=caller, args=(i,)) for i in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    _with_threads(2, both)
    for got in results:
        assert all(same(w, g) for w, g in zip(want, got))


def test_pool_many_short_calls_from_several_threads():
    """Many short calls, each with its own thread count, from three Python threads at once
    (one holds the pool, the others run alone): the pool hands jobs over without losing,
    repeating or misrouting an item (a worker that wakes after its job has ended must not
    claim an item of the next one), every output equal to the one-thread run."""
    import threading
    batches = [_canonical(b, b, K=3, V=64) for b in (2, 3, 5, 8, 13, 21, 33)]
    calls = [cpu.verify(*args, native=dict) for args in batches]  # (fields, keep, outputs)
    want = []
    for fields, _, outs in calls:
        _C.verify(**{**fields, "threads": 1})
        want.append([t.clone() for t in outs])
    bad = []

    def caller(seed):
        r = np.random.default_rng(seed)
        for _ in range(150):
            i = int(r.integers(len(calls)))
            fields, _, outs = calls[i]
            own = [torch.empty_like(t) for t in outs]  # this thread's outputs
            _C.verify(**{**fields, "threads": int(r.integers(2, 7)),
                         "out_tokens": own[0].data_ptr(), "out_num_accepted": own[1].data_ptr(),
                         "out_valid": own[2].data_ptr()})
            if not all(torch.equal(a, b) for a, b in zip(own, want[i])):
                bad.append(i)

    ts = [threading.Thread(target=caller, args=(s,)) for s in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad, bad


@pytest.mark.full  # compiles a C++ driver with ThreadSanitizer (~15 s)
def test_pool_stress_under_thread_sanitizer(tmp_path):
    """bench/harness/pool_stress.cpp under -fsanitize=thread: concurrent callers, thousands
    of short jobs, nested calls, exceptions; no data race, every item once, no hang.  (A pool
    whose late worker could claim through an ended job's word raced and hung here.)"""
    import shutil
    exe = tmp_path / "pool_stress"
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "a C++ compiler (it built specops._C)"
    subprocess.run([cxx, "-O1", "-g", "-std=c++17", "-pthread", "-fsanitize=thread",
                    "-I" + os.path.join(ROOT, "csrc"),
                    os.path.join(ROOT, "bench", "harness", "pool_stress.cpp"),
                    os.path.join(ROOT, "csrc", "core", "parallel.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=600)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TSAN_OPTIONS": "halt_on_error=1"})
    assert r.returncode == 0 and "failures 0" in r.stdout, (r.stdout, r.stderr[-3000:])
    assert "ThreadSanitizer" not in r.stderr, r.stderr[-3000:]


_FORK_SCRIPT = r"""
import os, sys, torch
from specops.backends import cpu
torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
B, K, V = 16, 3, 500
zero = torch.zeros(B, dtype=torch.int64)
args = (torch.randn(B * (K + 1), V, generator=g), False, torch.arange(B) * (K + 1),
        torch.randint(0, V, (B * K,), generator=g), torch.arange(B) * K, torch.full((B,), K),
        None, False, 1.25, 0, 1.0, 0.0, 0, 0, K)
want = cpu.verify(*args)          # the parent's pool has started its worker
pid = os.fork()
if pid == 0:                      # the child: a new pool (the parent's worker is not here)
    tasks = len(os.listdir("/proc/self/task"))
    got = cpu.verify(*args)
    same = all(torch.equal(a, b) for a, b in zip(got, want))
    os._exit(0 if same and len(os.listdir("/proc/self/task")) > tasks else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.full  # a subprocess that imports torch and forks
def test_pool_works_after_fork():
    """A forked child (engines fork their workers) runs parallel calls on a pool of its own
    (it starts a worker thread: the parent's are not in the child), with the same tokens."""
    r = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "child 0", (r.stdout, r.stderr)
