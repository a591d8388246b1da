"""The vocabulary-split Triton pipeline (``triton_kernels/split*.py``) == numpy reference,
token for token, with several vocabulary chunks per row (so every combination of chunk
partials, every radix round's histogram atomics and the draw's owner chunk are exercised).

The Triton tests of ``tests/test_triton.py`` run the path the shapes select (at their small
V, the one-program-per-request kernel); here the split path is forced
(``SPECOPS_TRITON_PIPELINE=split``) and the chunk made small (``SPECOPS_TRITON_CHUNK``), and
the same checks run again: every layout and draft kind, filters, invalid rows, rows outside the
tensors, the forced mode (the residual-sample view) and low-precision logits.  Kept to small
V and few rows: the interpreter runs each of the pipeline's programs separately (the whole of
``tests/test_triton.py`` passes with the split path forced too: 83 tests, about 30 minutes
under the interpreter, too long for every CI run).
"""
from __future__ import annotations

import pytest

T = pytest.importorskip("tests.test_triton")      # skips with its reason if Triton is absent

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(autouse=True)
def split_path(monkeypatch):
    monkeypatch.setenv("SPECOPS_TRITON_PIPELINE", "split")
    monkeypatch.setenv("SPECOPS_TRITON_CHUNK", "16")


@pytest.mark.parametrize("case", list(T.VERIFY_CASES))
def test_split_matches_reference(case):
    spec = dict(T.VERIFY_CASES[case])
    T.check_verify(T.make_block(137, 5, 2, 37, **spec))   # 3 chunks, the last one partial


@pytest.mark.parametrize("name", [
    "test_verify_invalid_rows", "test_verify_padding_and_zero_drafts",
    "test_verify_max_k_zero_bonus_only", "test_verify_out_of_range_ids_end_block",
    "test_verify_vocab_one", "test_target_rows_outside_the_tensor_invalidate_the_request",
    "test_draft_rows_outside_the_tensor_invalidate_the_request",
    "test_per_request_scalars_expanded"])
def test_split_passes_the_triton_checks(name):
    getattr(T, name)()


def test_split_last_chunk_of_one_lane(monkeypatch):
    """V = 8193 in chunks of 2048: the winner and the residual's only mass sit in the last
    chunk, which holds one lane."""
    monkeypatch.setenv("SPECOPS_TRITON_CHUNK", "2048")
    T.test_forced_mode_last_tile_and_fallback()


@pytest.mark.parametrize("kind", ["full", "point", "draft_logits", "probs", "probs_point"])
def test_split_forced_mode(kind):
    T.test_forced_mode_every_kind(kind)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_split_low_precision_logits(dtype, monkeypatch):
    monkeypatch.setenv("SPECOPS_TRITON_CHUNK", "256")      # V = 1000: 4 chunks
    T.test_verify_low_precision_logits(dtype)


def test_split_really_runs(monkeypatch):
    """Negative control: the override reaches the launcher (a bad value is refused)."""
    monkeypatch.setenv("SPECOPS_TRITON_PIPELINE", "nonsense")
    with pytest.raises(ValueError, match="SPECOPS_TRITON_PIPELINE"):
        T.check_verify(T.make_block(3, 2, 2, 37, kind="full", temp=1.0))
