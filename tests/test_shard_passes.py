"""The C++ shard passes of specops.distributed (csrc/distributed/shard_passes.cpp, called by
specops/backends/cpu_shard.py) against the torch code they replace on the CPU
(_transform.py, _radix.py, _walk.py, _draw.py), bit for bit, at every ISA level (the ``isa``
fixture).  No process group: each pass is a local step, compared on its own, and the whole
sharded call is compared in a world of one with the native passes on and off.  The gloo tests
(tests/test_distributed.py, full tier) hold the native path to the single-device call."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import specops.distributed as sd
from specops import reference as R
from specops.backends import cpu_shard as _native
from specops.distributed import _radix, _transform, _walk
from tests._cpu import logit_rows, seed_of

pytestmark = pytest.mark.skipif(not _native._HAS, reason="specops._C has no shard passes")

V = 2500                    # three kDrawBlock blocks (1024) and a ragged tail
W60 = float(2 ** R.W_SCALE_BITS)


def _rows(seed, n=16, width=V):
    rng = np.random.default_rng(seed)
    x = logit_rows(rng, n, width, torch.float32)
    x[0, :7] = -0.0                          # signed zeros: one key for both (_radix)
    x[1] = torch.where(x[1] > 0, x[1], -0.0)
    return x, rng


def _inv_t(n, rng):
    t = torch.from_numpy(rng.uniform(0.3, 2.0, n).astype(np.float32))
    t[2] = 0.0                               # a greedy row: x = l * 0
    t[3] = 3e38                              # x overflows to inf: invalid unless greedy
    return t


def test_stats_equal_torch(isa):
    """Row statistics (max / lowest-index argmax / validity) and the in-place x = l inv_t,
    read in place and from a source tensor: catches a wrong argmax on ties, a -0.0 key, a
    missed NaN / +inf / all -inf flag, a greedy row flagged bad by its x, or rows read from
    the wrong source row."""
    x, rng = _rows(seed_of("stats", isa))
    x[8] = -float("inf")                     # invalid without a bad flag
    inv_t = _inv_t(x.shape[0], rng)
    greedy = inv_t == 0
    start = 777
    gidx = torch.arange(V, dtype=torch.int64) + start
    want = _transform._row_stats(x, False, inv_t, greedy, gidx)
    order = torch.from_numpy(rng.permutation(x.shape[0]))
    for src in (None, x[order.argsort()]):
        rows = x.clone()
        got = _native.stats(rows, inv_t, start, src, None if src is None else order)
        bad = want[:, 2] == 1
        assert torch.equal(got[:, 2], want[:, 2])
        # What the transform reads: a greedy row's l max / argmax and flags (its x is never
        # read: m unused, x's flag ignored, x not stored); a sampled row's x max, and each
        # row's validity (a sampled row's argmax is never read: only greedy rows' are).
        g = greedy & ~bad
        assert torch.equal(got[g][:, [0, 3]], want[g][:, [0, 3]])
        s = ~greedy & ~bad
        assert torch.equal(got[s][:, 1], want[s][:, 1])
        valid_got = (got[:, 2] == 0) & (got[:, 3] == 1) & (greedy | (got[:, 4] == 1))
        valid_want = (want[:, 2] == 0) & (want[:, 3] == 1) & (greedy | (want[:, 4] == 1))
        assert torch.equal(valid_got, valid_want)
        assert bad.any() and s.sum() > 8 and g.any()       # every kind of row present
        assert (~valid_want & ~bad).any()                  # an all -inf row
        xt = x * inv_t[:, None]
        keep = ~xt.isnan() & ~greedy[:, None]
        assert torch.equal(rows.view(torch.int32)[keep], xt.view(torch.int32)[keep])


def _hot_rows(seed, n=16):
    x, rng = _rows(seed, n)
    x = x.nan_to_num(nan=0.0, posinf=1.0)                 # hot rows are valid
    x[5] = -float("inf")
    m, _ = _radix.unpack_max(_radix.pack_max(x.amax(1), torch.zeros(n, dtype=torch.int64)))
    hot = torch.from_numpy(rng.random(n) < 0.85)
    hot[5] = False
    thr = torch.where(torch.from_numpy(rng.random(n) < 0.5),
                      x.sort(1, descending=True).values[:, 40], float("-inf"))
    min_p = torch.from_numpy(np.where(rng.random(n) < 0.5, rng.uniform(0, 0.1, n),
                                      0.0).astype(np.float32))
    return x, m, thr, hot, min_p


def test_masses_equal_torch(isa):
    """The exp pass (e = x >= thr ? pexp(x - m) : 0 on hot rows, 0 elsewhere) and both
    integer masses: catches a non-bitwise exp, a top-k threshold or min-p cut applied with
    the wrong comparison, or a cold row left holding x."""
    x, m, thr, hot, min_p = _hot_rows(seed_of("masses", isa))
    keep = (x >= thr[:, None]) & hot[:, None]
    e = torch.where(keep, _transform.pexp(x - m[:, None]), 0.0)
    E = (e * _transform.E_SCALE).to(torch.int64)
    want = torch.stack([E.sum(1), torch.where(e >= min_p[:, None], E, 0).sum(1)], 1)
    rows = x.clone()
    got = _native.masses(rows, m, thr, hot, min_p)
    assert torch.equal(rows.view(torch.int32), e.view(torch.int32))
    assert torch.equal(got, want)
    assert (want[:, 0] != want[:, 1]).any()                # min-p cut something


class _Record:
    """A world of one that keeps every histogram it is asked to sum."""

    def __init__(self):
        self.hists = []

    def all_reduce(self, t, op, what):
        self.hists.append(t.clone())
        return t


@pytest.mark.parametrize("weighted", [False, True], ids=["top_k", "top_p"])
def test_radix_rounds_equal_torch(isa, weighted):
    """Every round's [R, 256] histogram and the selected keys of the radix select, C++ vs
    torch (counts of signed keys for top-k, e masses for top-p): catches a wrong digit, a
    prefix filter that drops or adds entries (the -0.0 / +0.0 buckets next to zero, where
    the level's order_key differs from signed_key, are on purpose in the k of some rows)."""
    x, m, thr, hot, _ = _hot_rows(seed_of("radix", isa, weighted))
    n = x.shape[0]
    x[6:8] = -x[6:8].abs() - 1                             # thresholds at zero: the
    x[6, :300] = -0.0                                      # largest entries are signed
    x[6, 300:600] = 0.0                                    # zeros
    x[7, :400] = -0.0
    if weighted:
        rows = torch.where(hot[:, None], _transform.pexp(x - m[:, None]), 0.0)
        goal = torch.from_numpy(np.random.default_rng(1).uniform(0.3, 1, n)) * \
            (rows * _transform.E_SCALE).to(torch.int64).sum(1).double()

        def reached(c):
            return c.double() >= goal[:, None]

        def chunks():
            return ((0, rows.view(torch.int32), (rows * _transform.E_SCALE).to(torch.int64)),)
    else:
        rows = x
        k = torch.from_numpy(np.random.default_rng(2).integers(1, V, n))
        k[6], k[7] = 450, 200                              # inside the zero buckets

        def reached(c):
            return c >= k[:, None]

        def chunks():
            return ((0, _radix.signed_key(rows), None),)
    results = []
    for native in (False, True):
        comm = _Record()
        hist_of = (lambda s, p, h: _native.hist(rows, weighted, s, p, h)) if native else None
        key, w = _radix.radix_select(comm, n, chunks, reached, "h", "cpu", hist_of)
        results.append((comm.hists, key, w))
    (h0, k0, w0), (h1, k1, w1) = results
    assert len(h0) == len(h1) == 4
    for a, b in zip(h0, h1):
        assert torch.equal(a, b)
    assert torch.equal(k0, k1) and torch.equal(w0, w1)
    if not weighted:
        assert _radix.key_float(k0[6:8]).abs().max() == 0  # the zero buckets were hit


def test_materialize_equal_torch(isa):
    """p = float32(e 2^40 / div) where e >= cut, flushed below FLT_MIN: catches a float32
    division (not float64), a missed flush, or a cold row touched."""
    x, m, thr, hot, min_p = _hot_rows(seed_of("materialize", isa))
    e = torch.where(hot[:, None] & (x >= thr[:, None]), _transform.pexp(x - m[:, None]), 0.0)
    div = (e * _transform.E_SCALE).to(torch.int64).sum(1).clamp(min=1).double()
    div[4] = 2.0 ** 62                                     # p below FLT_MIN: flushed
    cut = torch.maximum(min_p, torch.where(torch.arange(len(hot)) % 3 == 0, 1e-3, 0.0))
    p = (e.double() * _transform.E_SCALE / div[:, None]).float()
    want = torch.where((e >= cut[:, None]) & (p >= float(R.FLT_MIN)), p, 0.0)
    want[~hot] = e[~hot]
    rows = e.clone()
    _native.materialize(rows, hot, cut, div)
    assert torch.equal(rows.view(torch.int32), want.view(torch.int32))


def _prob_rows(seed, n):
    rng = np.random.default_rng(seed)
    logits = torch.from_numpy(rng.standard_normal((n, V)).astype(np.float32) * 2)
    p = torch.softmax(logits, 1)
    p[:, rng.integers(0, V, 40)] = 0.0
    q = torch.softmax(logits + torch.from_numpy(
        rng.standard_normal((n, V)).astype(np.float32)), 1)
    q[1] = float("nan")                                    # an unusable draft row
    q[2, :100] = -0.5                                      # negative entries: max(q, 0)
    return p, q, rng


def _torch_weights(kind, p, q, y, rho):
    """[n, V] int64 weights per _walk (draw: W / Wp; block residual; beta min)."""
    n = p.shape[0]
    cols = torch.arange(V)
    oh = (cols[None, :] == y[:, None]) & (y[:, None] >= 0)
    Wp = (p * W60).to(torch.int64)
    if q is None:
        r = torch.where(oh, 0.0, p)
        bw = _walk._block_weights(p, None, oh, rho)
        mn = torch.zeros((n, V), dtype=torch.int64)
    else:
        r = torch.where(p > q, p - q.clamp(min=0.0), 0.0)
        bw = _walk._block_weights(p, q, None, rho)
        mn = (torch.where(q > 0, torch.minimum(p, q), 0.0) * W60).to(torch.int64)
    W = (r * W60).to(torch.int64)
    pick = torch.stack([Wp, W, bw, mn], 0)                 # by kind
    return pick[kind.long(), torch.arange(n)]


@pytest.mark.parametrize("point_mass", [False, True], ids=["draft_probs", "point_mass"])
def test_row_sums_and_draw_search_equal_torch(isa, point_mass):
    """Per-request weight sums of every kind (the draw's W and Wp, block residual, beta
    min) and the draw's in-shard search (searchsorted of t in the cumulative weights, right
    side), rows read through row indices: catches a residual / block formula that differs in
    float32 vs float64, the point mass's own column not excluded, a wrong block skipped by
    the search, or an off-by-one at a block boundary."""
    n = 12
    p, q, rng = _prob_rows(seed_of("sums", isa, point_mass), n)
    kind = torch.tensor([i % 4 for i in range(n)], dtype=torch.int8)
    if point_mass:
        q = None
        kind[kind == _native.MIN] = _native.BLOCK
    y = torch.from_numpy(rng.integers(-1, V, n))
    y[0], y[1] = 1023, 1024                                # next to a block boundary
    rho = torch.from_numpy(rng.uniform(0.2, 1.0, n))
    rho[3] = 1.0
    p_row = torch.from_numpy(rng.permutation(n))
    q_row = torch.from_numpy(rng.permutation(n))
    pr = p[p_row]
    qr = None if q is None else q[q_row]
    want = _torch_weights(kind, pr, qr, y, rho)
    refs = _native.Refs(p, p_row, q, None if q is None else q_row, y, kind, rho)
    got = _native.row_sums(refs, True)
    assert torch.equal(got[:, 0], want.sum(1))
    assert torch.equal(got[:, 1], (pr * W60).to(torch.int64).sum(1))
    # the search: t inside the mass (block boundaries, the last unit), and -1 (skipped)
    cum = want.cumsum(1)
    total = cum[:, -1]
    t = (torch.from_numpy(rng.random(n)) * total.double()).to(torch.int64)
    t[0] = cum[0, 1023] if total[0] > 0 else 0              # exactly a block's end
    t[4] = total[4] - 1
    t[5] = -1
    t[kind == _native.MIN] = -1                            # a draw never uses these
    got_i = _native.draw_search(refs, t)
    want_i = torch.searchsorted(cum, t.clamp(min=0)[:, None], right=True).squeeze(1)
    live = t >= 0
    assert torch.equal(got_i[live], want_i[live]) and (got_i[~live] == 0).all()
    assert (total == 0).any() or point_mass                # a row of no mass: idx = V


def _fields(out):
    """Every output tensor of a call: iterating a RatedVerifyOutput yields only the first
    three (a zip over it would never compare the rates)."""
    return [getattr(out, n) for n in ("token_ids", "num_accepted", "valid", "accept_rates")
            if hasattr(out, n)]


SETTINGS = [dict(temperature=0.0), dict(temperature=0.8),
            dict(temperature=[0.8, 0.0, 1.1, 0.8], top_p=[0.95, 1.0, 0.9, 0.8], top_k=[0, 0, 50, 7],
                 min_p=[0.0, 0.0, 0.05, 0.0])]


@pytest.mark.parametrize("setting", range(len(SETTINGS)))
@pytest.mark.parametrize("draft", ["probs", "none", "logits"])
def test_sharded_call_native_equals_torch(isa, setting, draft, monkeypatch):
    """The whole sharded call in a world of one, C++ passes vs torch passes (token-wise and
    block with rates), with chunks of two rows (as rows of a large V are): catches a native
    pass wired to the wrong rows (rows of a block past its first chunk, the draft-logits
    block, the point mass's column, the bonus / residual / block kind of the draw) or a
    buffer reused across calls that leaks a previous call's rows."""
    B, K, Vs = 4, 3, 700
    monkeypatch.setattr(_transform, "CHUNK_ELEMENTS", 2 * Vs)
    g = torch.Generator().manual_seed(seed_of("call", isa, setting, draft))
    target = torch.randn(B, K + 1, Vs, generator=g) * 2
    dl = target[:, :K] + torch.randn(B, K, Vs, generator=g)
    target[1, 2, 5] = float("nan")                         # an invalid row
    q = torch.softmax(dl, -1)
    ids = torch.multinomial(q.view(-1, Vs), 1, generator=g).view(B, K)
    ids[:, 1] = target[:, 1].argmax(-1)                    # some greedy accepts
    kw = dict(target_logits=target, draft_token_ids=ids, seed=torch.arange(B), offset=3,
              vocab_start=0)
    if draft == "probs":
        kw["draft_probs"] = q
    elif draft == "logits":
        kw["draft_logits"] = dl
    for extra in ({}, dict(method="block", return_accept_rates=True)):
        out = {}
        for native in (True, False):
            _native._ENABLED[0] = native
            try:
                out[native] = sd.verify_block(**kw, **SETTINGS[setting], **extra)
            finally:
                _native._ENABLED[0] = True
        for a, b in zip(_fields(out[True]), _fields(out[False])):
            assert torch.equal(a.view(torch.int32) if a.is_floating_point() else a,
                               b.view(torch.int32) if b.is_floating_point() else b)


def test_threads_give_the_same_tokens(isa):
    """The C++ passes run their rows on specops' thread pool (torch.get_num_threads()
    threads, per-thread scratch): three threads give the one-thread call's outputs, every
    filter and the block draw on (catches scratch shared between threads, or rows of one
    block split wrongly between workers)."""
    B, K, Vs = 6, 3, 3000
    g = torch.Generator().manual_seed(seed_of("threads", isa))
    target = torch.randn(B, K + 1, Vs, generator=g) * 2
    q = torch.softmax(target[:, :K] + torch.randn(B, K, Vs, generator=g), -1)
    ids = torch.multinomial(q.view(-1, Vs), 1, generator=g).view(B, K)
    kw = dict(target_logits=target, draft_token_ids=ids, draft_probs=q, seed=torch.arange(B),
              offset=0, vocab_start=0, temperature=[0.8, 1.0, 0.0, 0.7, 0.9, 1.2],
              top_k=[0, 40, 0, 0, 9, 0], top_p=[0.9, 1.0, 1.0, 0.8, 1.0, 0.95],
              method="block", return_accept_rates=True)
    before = torch.get_num_threads()
    out = {}
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            out[n] = sd.verify_block(**kw)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(_fields(out[1]), _fields(out[3])):
        assert torch.equal(a.view(torch.int32) if a.is_floating_point() else a,
                           b.view(torch.int32) if b.is_floating_point() else b)


def test_stream_equals_torch_philox():
    """``_native.stream`` (core/philox.h) against ``_contract.stream`` (torch int64 Philox),
    both tags, seeds and offsets using all 64 bits (negative int64 patterns included):
    catches swapped words, a 32-bit truncated seed / offset, or the tag in the wrong
    counter word (any of which moves every draw)."""
    from specops._contract import stream
    rng = np.random.default_rng(seed_of("stream"))
    seed = torch.from_numpy(rng.integers(-2 ** 63, 2 ** 63 - 1, 9, dtype=np.int64))
    offset = torch.from_numpy(rng.integers(-2 ** 63, 2 ** 63 - 1, 9, dtype=np.int64))
    seed[0], offset[0] = 0, 0
    for tag in (R.TAG_ACCEPT, R.TAG_SAMPLE):
        for a, b in zip(_native.stream(seed, offset, 5, tag), stream(seed, offset, 5, tag)):
            assert torch.equal(a, b), tag


def test_pending_rows_equal_materialized(isa):
    """The lazy renormalisation (``_transform.Pending``): p read from e at single entries
    (``p_at``) and rows finished late (``finish`` on a subset, twice) equal the rows
    ``materialize`` writes at once; rows not asked for keep e.  Catches p(y) computed with
    another rounding than the pass, a row finished twice (p renormalised again), or a row
    finished that was not asked for."""
    x, m, thr, hot, min_p = _hot_rows(seed_of("pending", isa))
    e = torch.where(hot[:, None] & (x >= thr[:, None]), _transform.pexp(x - m[:, None]), 0.0)
    div = (e * _transform.E_SCALE).to(torch.int64).sum(1).clamp(min=1).double()
    div[4] = 2.0 ** 62                                     # p below FLT_MIN: flushed
    cut = torch.maximum(min_p, torch.where(torch.arange(len(hot)) % 3 == 0, 1e-3, 0.0))
    want = e.clone()
    _native.materialize(want, hot, cut, div)
    rows = e.clone()
    pend = _transform.Pending(rows, hot.clone(), cut, div)
    n = rows.shape[0]
    r = torch.arange(n)[:, None].expand(n, 6)
    c = torch.from_numpy(np.random.default_rng(1).integers(0, V, (n, 6)))
    got = pend.p_at(r, rows[r, c])
    assert torch.equal(got.view(torch.int32), want[r, c].view(torch.int32))
    some = torch.tensor([1, 4, 5])
    pend.finish(some)
    pend.finish(torch.tensor([[4, 6]]))                    # 4 again: must stay as it was
    done = torch.zeros(n, dtype=torch.bool)
    done[[1, 4, 5, 6]] = True
    assert torch.equal(rows[done].view(torch.int32), want[done].view(torch.int32))
    assert torch.equal(rows[~done], e[~done])
    assert torch.equal(pend.left, hot & ~done)


def test_all_greedy_call_skips_the_sampling_exchanges(isa):
    """Every request greedy: the call exchanges only the row statistics (no masses, no
    p(y) / q(y), no draw) and still returns the single-device call's outputs (the reference
    backend; rates on, block and token-wise, an invalid row, a point mass and draft probs).
    Catches the greedy shortcut taking p(y) from the wrong row, accepting on an invalid row,
    or the exchanges coming back (each one a latency hop between ranks)."""
    import specops
    B, K, Vs = 4, 3, 300
    g = torch.Generator().manual_seed(seed_of("greedy", isa))
    target = torch.randn(B, K + 1, Vs, generator=g) * 2
    q = torch.softmax(target[:, :K] + torch.randn(B, K, Vs, generator=g), -1)
    ids = torch.multinomial(q.view(-1, Vs), 1, generator=g).view(B, K)
    ids[:, :2] = target[:, :2].argmax(-1)                  # accepts, then (mostly) a stop
    target[1, 1, 7] = float("nan")                         # an invalid row
    for draft in ({}, dict(draft_probs=q)):
        for extra in ({}, dict(method="block", return_accept_rates=True)):
            kw = dict(target_logits=target, draft_token_ids=ids, seed=torch.arange(B),
                      offset=0, temperature=0.0, **draft, **extra)
            with sd.record_exchange() as log:
                got = sd.verify_block(**kw, vocab_start=0, vocab_size=Vs, validate=False)
            want = specops.verify_block(**kw, backend="reference")
            assert [e.what for e in log] == ["row max / argmax / validity"]
            assert hasattr(got, "accept_rates") == bool(extra)
            for a, b in zip(_fields(got), _fields(want)):
                assert torch.equal(a.view(torch.int32) if a.is_floating_point() else a,
                                   b.view(torch.int32) if b.is_floating_point() else b)


@pytest.mark.parametrize("draft", ["probs", "none", "logits"])
def test_p_of_y_rides_on_the_masses_exchange(isa, draft):
    """Sampled logits rows on the C++ path: p_j(y_j) and q_j(y_j) travel with the masses (one
    hop fewer) unless the walk needs its own exchange anyway (beta sums of the rates with a
    draft) or p(y) does not follow from e(y) (draft logits); tokens, rates and flags equal
    the reference backend's either way (a greedy request, top-k / top-p / min-p rows, an
    invalid row, block verification).  Catches p(y) computed from e(y) with another rounding
    or cut than the renormalisation, a greedy row's one-hot missed, a block's residual sums
    read from rows still holding e, or the fold switched off (or on where it cannot be)."""
    import specops
    B, K, Vs = 4, 3, 300
    g = torch.Generator().manual_seed(seed_of("fold", isa, draft))
    target = torch.randn(B, K + 1, Vs, generator=g) * 2
    dl = target[:, :K] + torch.randn(B, K, Vs, generator=g)
    q = torch.softmax(dl, -1)
    ids = torch.multinomial(q.view(-1, Vs), 1, generator=g).view(B, K)
    ids[:, 0] = target[:, 0].argmax(-1)
    target[2, 1, 3] = float("nan")                         # an invalid row
    side = dict(probs=dict(draft_probs=q), none={}, logits=dict(draft_logits=dl))[draft]
    filters = dict(temperature=[0.8, 0.0, 1.1, 0.7], top_k=[0, 0, 20, 0],
                   top_p=[0.9, 1.0, 1.0, 0.8], min_p=[0.0, 0.0, 0.02, 0.0])
    for extra in ({}, dict(return_accept_rates=True), dict(method="block")):
        kw = dict(target_logits=target, draft_token_ids=ids, seed=torch.arange(B), offset=1,
                  **side, **filters, **extra)
        with sd.record_exchange() as log:
            got = sd.verify_block(**kw, vocab_start=0, vocab_size=Vs, validate=False)
        want = specops.verify_block(**kw, backend="reference")
        folded = draft != "logits" and not (draft == "probs" and extra.get("return_accept_rates"))
        whats = [e.what for e in log]
        assert ("masses, p(y), q(y)" in whats) == folded, whats
        assert ("p(y), q(y), beta sums" in whats) == (not folded), whats
        for a, b in zip(_fields(got), _fields(want)):
            assert torch.equal(a.view(torch.int32) if a.is_floating_point() else a,
                               b.view(torch.int32) if b.is_floating_point() else b), extra
