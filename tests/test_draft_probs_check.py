"""The value checks of ``draft_probs`` (reference section 8): what each ``validate`` mode
proves, and that every backend, ISA level and memory layout decides the same.

* ``validate=True``: every row the walk may read is a probability row (padding rows are not
  checked);
* default (``validate=None``, CPU tensors): the walk checks what it reads anyway -- ``q(y)`` at
  every accepted position and the whole row the token was drawn from -- and raises after it;
  a greedy request reads no q and checks nothing;
* ``validate=False``: nothing.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import specops
from specops.reference.checks import draft_row_ok
from tests.cases import make_case

BACKENDS = specops.available_backends()
V = 7


@pytest.fixture
def chain():
    return make_case("full", 13, 3, B=3)


@pytest.mark.parametrize("mistake,words", [
    ("logits", "did you pass logits"),
    ("nan", "NaN or inf"),
    ("doubled", "sums to 2"),
    ("negative", "did you pass logits"),
])
def test_validate_true_checks_every_row_the_walk_may_read(chain, mistake, words):
    q = chain["draft_probs"].clone()
    if mistake == "logits":
        q = torch.randn(q.shape, generator=torch.Generator().manual_seed(0))
    elif mistake == "nan":
        q[1, 2, 5] = float("nan")
    elif mistake == "doubled":
        q[2, 0] = 2.0 / q.shape[-1]
    else:
        q[0, 1, 3] = -0.01
    with pytest.raises(ValueError, match=words) as err:
        specops.verify_block(**dict(chain, draft_probs=q), validate=True, backend="reference")
    assert "draft_probs row" in str(err.value)
    specops.verify_block(**dict(chain, draft_probs=q, validate=False), backend="reference")


def test_validate_true_skips_padding_rows(chain):
    """Rows past num_draft_tokens or after a -1 id are padding (often zeros)."""
    q = chain["draft_probs"].clone()
    q[0, 2] = 0.0
    q[1, 1:] = float("nan")
    ids = chain["draft_token_ids"].clone()
    ids[1, 1] = -1
    specops.verify_block(**dict(chain, draft_probs=q, draft_token_ids=ids,
                                num_draft_tokens=torch.tensor([2, 3, 3])), validate=True,
                         backend="reference")
    with pytest.raises(ValueError, match=r"row 2 \(request 0, draft position 2\)"):
        specops.verify_block(**dict(chain, draft_probs=q), validate=True, backend="reference")


def _rejecting(bad_row: int, mistake: str):
    """One request, K = 2: p_0(y_0) = 0, so position 0 always rejects and its whole draft row
    is read by the residual draw; row 1 is never read.  ``mistake`` goes into ``bad_row``."""
    t = torch.zeros(1, 3, V)
    t[0, 0, 2] = -float("inf")
    ids = torch.tensor([[2, 4]])
    q = torch.full((1, 2, V), 1.0 / V)
    if mistake == "nan":
        q[0, bad_row, 5] = float("nan")
    elif mistake == "sum":
        q[0, bad_row] *= 1.5
    else:
        q[0, bad_row, 6] = -0.25
    return dict(target_logits=t, draft_token_ids=ids, draft_probs=q, seed=3, offset=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mistake,words", [("nan", "NaN or inf"), ("sum", "sums to 1.5"),
                                           ("range", "did you pass logits")])
def test_default_checks_the_row_it_draws_from(backend, mistake, words):
    """The rejection draw reads row 0: a bad row 0 raises on every backend; a bad row 1 (never
    read: the walk stopped at 0) passes by default, and validate=True still refuses it.
    Catches a default path that checks nothing, or checks what it does not read."""
    with pytest.raises(ValueError, match=rf"row 0 \(request 0, draft position 0\).*{words}"):
        specops.verify_block(**_rejecting(0, mistake), backend=backend)
    out = specops.verify_block(**_rejecting(1, mistake), backend=backend)
    assert out.num_accepted.tolist() == [0] and out.valid.all()
    with pytest.raises(ValueError, match=r"row 1 \(request 0, draft position 1\)"):
        specops.verify_block(**_rejecting(1, mistake), validate=True, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_default_checks_q_of_accepted_drafts_and_skips_greedy(backend):
    """A negative q(y) is always accepted (u * q < p): the accept test's value is checked.
    The same rows with a greedy request (q never read) pass by default."""
    t = torch.zeros(1, 3, V)
    q = torch.full((1, 2, V), 1.0 / V)
    q[0, 0, 2] = -0.5
    kw = dict(target_logits=t, draft_token_ids=torch.tensor([[2, 4]]), draft_probs=q, seed=1,
              offset=0)
    with pytest.raises(ValueError, match=r"row 0 .*outside \[0, 1\]"):
        specops.verify_block(**kw, backend=backend)
    for method in ("token", "block"):
        with pytest.raises(ValueError, match="row 0"):
            specops.verify_block(**kw, method=method, backend=backend)
    specops.verify_block(**kw, temperature=0.0, backend=backend)
    with pytest.raises(ValueError, match="row 0"):
        specops.verify_block(**kw, temperature=0.0, validate=True, backend=backend)


def _edge_rows(B: int, seed: int) -> torch.Tensor:
    """Draft rows whose integer masses sit within a few units of the tolerance's two edges."""
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(torch.randn(B, 50, generator=g) * 2, -1)
    scale = 1 + torch.tensor([0.01, -0.01] * (B // 2)) * (1 + torch.randn(B, generator=g)
                                                         * 1e-6)
    return (q * scale[:, None]).to(torch.float32)


def test_the_tolerance_edge_decides_alike_everywhere(isa):
    """Rows at the 1e-2 edge decide by the exact integer mass on every path: the reference's
    rule, validate=True, the default walk check, at this ISA level, contiguous or strided.
    (The float32 lane sums of an earlier version decided by SIMD level and layout.)"""
    rows = _edge_rows(40, 7)
    want = [draft_row_ok(r.numpy()) for r in rows]
    assert 5 < sum(want) < 35                       # both sides of the edge occur
    B, Vq = rows.shape
    t = torch.zeros(B, 2, Vq)
    t[:, 0, 0] = -float("inf")                      # p_0(0) = 0: always rejected, row read
    ids = torch.zeros(B, 1, dtype=torch.long)
    wide = torch.zeros(B, 1, 2 * Vq)
    wide[..., ::2] = rows[:, None]
    for q in (rows[:, None].contiguous(), wide[..., ::2]):
        for b in range(B):
            kw = dict(target_logits=t[b:b + 1], draft_token_ids=ids[b:b + 1],
                      draft_probs=q[b:b + 1], seed=b, offset=0, backend="cpu")
            for validate in (None, True):
                if want[b]:
                    specops.verify_block(**kw, validate=validate)
                else:
                    with pytest.raises(ValueError, match="sums to"):
                        specops.verify_block(**kw, validate=validate)
    assert np.asarray(want).dtype == bool


def test_cpu_walk_reports_draft_bad_itself(monkeypatch):
    """On the cpu backend the default call's check comes from the C++ walk (``draft_bad``
    of ``specops::verify``): the Python fallback that recomputes it from the outputs is never
    called, token-wise, block and with the rates, and the bad rows still raise."""
    if "cpu" not in BACKENDS:
        pytest.skip("the C++ backend is not built")
    import specops.api
    import specops.ops.library

    def fallback(*args, **kwargs):
        raise AssertionError("draft_bad_after called on the cpu backend")

    monkeypatch.setattr(specops.api, "draft_bad_after", fallback)
    monkeypatch.setattr(specops.ops.library, "draft_bad_after", fallback)
    for method, rates in (("token", False), ("block", False), ("token", True)):
        kw = dict(method=method, return_accept_rates=rates, backend="cpu")
        out = specops.verify_block(**_rejecting(1, "nan"), **kw)
        assert out.num_accepted.tolist() == [0]
        with pytest.raises(ValueError, match=r"row 0 \(request 0, draft position 0\)"):
            specops.verify_block(**_rejecting(0, "sum"), **kw)
