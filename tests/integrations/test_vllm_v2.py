"""specops' drop-in for the rejection sampler of vLLM's Model Runner V2, on vLLM's real types.

MRV2 needs Triton, so vLLM never runs it on a CPU; its classes still import and construct here:
the real ``Sampler`` / ``SamplingStates`` / ``RequestState`` (UVA buffers fall back to vLLM's
own ``NonUvaBuffer``: this CPU has no pinned memory), the real ``RejectionSampler``, and
vLLM's own Triton kernels through Triton's interpreter (``_vllm_setup``).  Greedy cases must
equal vLLM's own ``_verify`` exactly; random cases pass per-position chi-square tests and the
accepted-length law at a false-positive rate of 1e-6, with negative controls that fail.
"""
import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (see ci/setup_vllm_env.sh)", allow_module_level=True)

from tests.integrations import _vllm_setup  # noqa: E402

_vllm_setup.prepare()

import vllm.v1.worker.gpu.buffer_utils as _buffers  # noqa: E402

from scipy import stats as scipy_stats  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.worker.gpu.input_batch import InputBatch  # noqa: E402
from vllm.v1.worker.gpu.sample.sampler import Sampler  # noqa: E402
from vllm.v1.worker.gpu.spec_decode import rejection_sampler as _mrv2  # noqa: E402
from vllm.v1.worker.gpu.states import RequestState  # noqa: E402

from specops import reference as ref  # noqa: E402
from specops.integrations import vllm as sv  # noqa: E402
from specops.integrations import vllm_v2 as sv2  # noqa: E402

ALPHA = 1e-6
CPU = torch.device("cpu")
needs_vllm_kernels = pytest.mark.skipif(not _vllm_setup.VLLM_KERNELS,
                                        reason="vLLM's Triton kernels cannot run here")


@pytest.fixture(autouse=True)
def _no_pinned_memory(monkeypatch):
    """vLLM's CPU platform claims UVA but cannot pin memory; its explicit-copy fallback
    (NonUvaBuffer) is the path a CPU takes.  Scoped to each test of this file."""
    monkeypatch.setattr(_buffers, "is_uva_available", lambda: False)


def spec_config(K, method="standard"):
    return SimpleNamespace(num_speculative_tokens=K, enable_adaptive_verification=False,
                           rejection_sample_method=method, synthetic_acceptance_rates=None)


def make_sampler(params, V, K):
    """A real MRV2 Sampler whose request state i holds params[i]."""
    R = len(params)
    states = RequestState(R, 64, 64, K, V, CPU)
    s = Sampler(VllmConfig(), R, V, CPU, states, num_speculative_tokens=K)
    for i, p in enumerate(params):
        s.add_request(i, p)
    s.apply_staged_writes()
    return s


def layout(blocks, state_of, first_pos):
    """MRV2's per-row tensors for requests whose drafts are ``blocks`` (lists of ids)."""
    rows, local, exp_idx, pos = [], [], [], []
    cu = [0]
    for b, drafts in enumerate(blocks):
        rows += [0] + list(drafts)                  # row 0's input is the last real token
        local += list(range(len(drafts) + 1))
        exp_idx += [state_of[b]] * (len(drafts) + 1)
        pos += [first_pos[b] + j for j in range(len(drafts) + 1)]
        cu.append(cu[-1] + len(drafts) + 1)
    as_t = lambda x, d=torch.int64: torch.tensor(x, dtype=d)  # noqa: E731
    return dict(draft_sampled=as_t(rows, torch.int32), pos=as_t(pos),
                cu_num_logits=as_t(cu, torch.int32), idx_mapping=as_t(state_of),
                idx_mapping_np=np.asarray(state_of, dtype=np.intp),
                expanded_idx_mapping=as_t(exp_idx), expanded_local_pos=as_t(local, torch.int32),
                seq_lens_upper_bound_np=np.asarray([p + len(d) + 1 for p, d in
                                                    zip(first_pos, blocks)], dtype=np.int32))


def call_verify(rs, logits, draft_logits, lay):
    return rs._verify(logits, draft_logits, lay["draft_sampled"], lay["pos"],
                      lay["cu_num_logits"], lay["idx_mapping"], lay["idx_mapping_np"],
                      lay["expanded_idx_mapping"], lay["expanded_local_pos"],
                      lay["seq_lens_upper_bound_np"], lay["draft_sampled"])


def emitted(sampled, num_sampled):
    return [sampled[b, :int(n)].tolist() for b, n in enumerate(num_sampled)]


# ----------------------------------------------------------------------------- construction
def test_constructs_like_vllms_own_and_is_a_subclass():
    s = make_sampler([SamplingParams(temperature=0.0)], V=32, K=3)
    ours = sv2.SpecopsV2RejectionSampler(s, spec_config(3), CPU)
    assert isinstance(ours, _mrv2.RejectionSampler)
    assert ours.num_speculative_steps == 3 and ours.specops_method == "token"
    assert sv2.SpecopsV2RejectionSampler(s, spec_config(3, "block"), CPU).specops_method == \
        "block"


def test_refuses_watermarking_and_unknown_methods(monkeypatch):
    s = make_sampler([SamplingParams(temperature=0.0)], V=32, K=3)
    with pytest.raises((NotImplementedError, AssertionError)):
        sv2.SpecopsV2RejectionSampler(s, spec_config(3), CPU, watermark_key=7)
    monkeypatch.setenv("SPECOPS_VLLM_METHOD", "tree")
    with pytest.raises(ValueError, match="SPECOPS_VLLM_METHOD"):
        sv2.SpecopsV2RejectionSampler(s, spec_config(3), CPU)


def test_another_vllm_verify_signature_fails_loudly(monkeypatch):
    def _verify(self, logits, draft_logits):            # what a changed vLLM could look like
        raise AssertionError
    monkeypatch.setattr(sv2.VllmV2RejectionSampler, "_verify", _verify)
    s = make_sampler([SamplingParams(temperature=0.0)], V=32, K=3)
    with pytest.raises(RuntimeError, match="Unset SPECOPS_VLLM"):
        sv2.SpecopsV2RejectionSampler(s, spec_config(3), CPU)


def test_register_patches_the_mrv2_runner_and_unregister_restores(monkeypatch):
    from vllm.v1.worker.gpu import model_runner as _mrv2_runner
    monkeypatch.setenv("SPECOPS_VLLM", "1")
    try:
        sv.register()
        assert _mrv2.RejectionSampler is sv2.SpecopsV2RejectionSampler
        assert _mrv2_runner.RejectionSampler is sv2.SpecopsV2RejectionSampler
    finally:
        sv.unregister()
    assert _mrv2.RejectionSampler is sv2.VllmV2RejectionSampler
    assert _mrv2_runner.RejectionSampler is sv2.VllmV2RejectionSampler


# ----------------------------------------------------------------------------- greedy == vLLM
def greedy_case(V=40, K=3, seed=0, probabilistic=False):
    g = torch.Generator().manual_seed(seed)
    blocks_len = [3, 1, 0, 2, 3]
    states = [4, 0, 2, 1, 3]                       # request state indices, not batch order
    n_rows = sum(k + 1 for k in blocks_len)
    logits = torch.randn(n_rows, V, generator=g) * 3
    blocks, row = [], 0
    for k in blocks_len:
        am = logits[row:row + k].argmax(-1).tolist()
        # accept a prefix, then a wrong draft (or a -1 placeholder) where the block allows
        cut = int(torch.randint(0, k + 1, (1,), generator=g)) if k else 0
        d = am[:cut] + [(a + 1) % V for a in am[cut:]]
        if k == 3 and cut < k:
            d[cut] = -1 if seed % 2 else d[cut]
        blocks.append(d)
        row += k + 1
    draft_logits = torch.randn(len(states), K, V, generator=g) if probabilistic else None
    lay = layout(blocks, states, first_pos=[10, 20, 30, 40, 50])
    return logits, draft_logits, lay


@needs_vllm_kernels
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("probabilistic", [False, True])
@pytest.mark.parametrize("method", ["standard", "block"])
def test_greedy_equals_vllms_own_mrv2_sampler(seed, probabilistic, method):
    params = [SamplingParams(temperature=0.0) for _ in range(5)]
    logits, draft_logits, lay = greedy_case(seed=seed, probabilistic=probabilistic)
    s = make_sampler(params, V=logits.shape[1], K=3)
    theirs = _mrv2.RejectionSampler(s, spec_config(3, method), CPU)
    ours = sv2.SpecopsV2RejectionSampler(s, spec_config(3, method), CPU)
    _, ts, tn = call_verify(theirs, logits, draft_logits, lay)
    _, os_, on = call_verify(ours, logits, draft_logits, lay)
    assert os_.dtype == ts.dtype == torch.int64 and on.dtype == tn.dtype == torch.int32
    assert os_.shape == ts.shape == (5, 4)
    assert emitted(os_, on) == emitted(ts, tn)
    assert bool(ours.last_valid.all())


@needs_vllm_kernels
def test_processing_is_vllms_own_penalties_and_top_k_reach_the_rows():
    """A repetition penalty and top-k go through vLLM's apply_sampling_params: greedy output
    still equals vLLM's, and the processed rows are what both verify."""
    params = [SamplingParams(temperature=0.0, repetition_penalty=2.0, top_k=5)
              for _ in range(5)]
    logits, _, lay = greedy_case(seed=3)
    s = make_sampler(params, V=logits.shape[1], K=3)
    theirs = _mrv2.RejectionSampler(s, spec_config(3), CPU)
    ours = sv2.SpecopsV2RejectionSampler(s, spec_config(3), CPU)
    tp, ts, tn = call_verify(theirs, logits, None, lay)
    op, os_, on = call_verify(ours, logits, None, lay)
    assert torch.equal(tp, op)
    assert emitted(os_, on) == emitted(ts, tn)


def input_batch(blocks, state_of, first_pos, last_tokens, sampler):
    """A decode-only speculative InputBatch (every scheduled token has a logits row)."""
    n = [len(d) + 1 for d in blocks]
    cu = np.concatenate([[0], np.cumsum(n)]).astype(np.int32)
    ids = [t for last, d in zip(last_tokens, blocks) for t in [last] + list(d)]
    pos = [p + j for p, k in zip(first_pos, n) for j in range(k)]
    seq = [p + k for p, k in zip(first_pos, n)]
    exp = [s for s, k in zip(state_of, n) for _ in range(k)]
    local = [j for k in n for j in range(k)]
    B, T = len(blocks), int(cu[-1])
    prefill = sampler.req_states.prefill_len
    prefill.np[:] = 1                                   # every request is past its prefill
    prefill.copy_to_uva()
    i64 = lambda x: torch.tensor(x, dtype=torch.int64)  # noqa: E731
    i32 = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    return InputBatch(
        req_ids=[f"r{b}" for b in range(B)], num_reqs=B, num_reqs_after_padding=B,
        idx_mapping=i64(state_of), idx_mapping_np=np.asarray(state_of, dtype=np.intp),
        expanded_idx_mapping=i64(exp), expanded_local_pos=i32(local),
        num_scheduled_tokens=np.asarray(n, dtype=np.int32), num_tokens=T,
        num_tokens_after_padding=T, num_draft_tokens=T - B,
        num_draft_tokens_per_req=np.asarray([k - 1 for k in n], dtype=np.int32),
        query_start_loc=torch.from_numpy(cu), query_start_loc_np=cu, seq_lens=i32(seq),
        seq_lens_cpu_upper_bound=i32(seq), dcp_local_seq_lens=None,
        num_computed_tokens_np=np.asarray([p for p in first_pos], dtype=np.int32),
        prefill_len_np=np.ones(B, dtype=np.int32),
        num_computed_prefill_tokens_np=np.ones(B, dtype=np.int32),
        is_prefilling_np=np.zeros(B, dtype=bool), has_prefill=False,
        decode_graph_eligible=False, input_ids=i32(ids), positions=i64(pos),
        is_padding=torch.zeros(T, dtype=torch.bool), logits_indices=i64(list(range(T))),
        cu_num_logits=torch.from_numpy(cu), cu_num_logits_np=cu,
        has_structured_output_reqs=False, prompt_lens=None)


@needs_vllm_kernels
@pytest.mark.parametrize("probabilistic", [False, True])
def test_whole_call_greedy_equals_vllms_own(probabilistic):
    """Through vLLM's own __call__ (its draft gather, logprob-free output and
    num_sampled/num_rejected bookkeeping kernels), only _verify being specops'."""
    logits, draft_logits, lay = greedy_case(seed=1, probabilistic=probabilistic)
    cu = lay["cu_num_logits"].tolist()
    rows = lay["draft_sampled"].tolist()
    blocks = [rows[cu[b] + 1:cu[b + 1]] for b in range(len(cu) - 1)]
    states = lay["idx_mapping"].tolist()
    params = [SamplingParams(temperature=0.0) for _ in range(5)]
    s = make_sampler(params, V=logits.shape[1], K=3)
    batch = input_batch(blocks, states, [10, 20, 30, 40, 50], [5, 6, 7, 8, 9], s)
    theirs = _mrv2.RejectionSampler(s, spec_config(3), CPU)(logits, batch, draft_logits)
    ours = sv2.SpecopsV2RejectionSampler(s, spec_config(3), CPU)(logits, batch, draft_logits)
    assert torch.equal(ours.num_sampled, theirs.num_sampled)
    assert torch.equal(ours.num_rejected, theirs.num_rejected)
    assert emitted(ours.sampled_token_ids, ours.num_sampled) == \
        emitted(theirs.sampled_token_ids, theirs.num_sampled)
    assert int(ours.num_sampled.sum()) > len(blocks)      # some drafts were accepted


# ----------------------------------------------------------------------------- random: the law
def chi2_pvalue(observed, probs):
    observed = np.asarray(observed, dtype=np.float64)
    keep = probs > 0
    assert observed[~keep].sum() == 0, "a token of probability 0 was emitted"
    if keep.sum() < 2 or observed.sum() == 0:           # nothing reached this position
        return 1.0
    exp = probs[keep] / probs[keep].sum() * observed.sum()
    return float(scipy_stats.chisquare(observed[keep], exp).pvalue)


def run_law_case(n, temp, method="token", probabilistic=True, wrong_draft_law=False, seed=0):
    """n identical requests (K = 3, V = 6) in one verify_rows call; returns p-values."""
    V, K = 6, 3
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(K + 1, V, generator=g) * 1.5
    dl = torch.randn(K, V, generator=g) * 2.0            # the draft's pre-temperature logits
    q = torch.softmax(dl / temp, -1)
    sample_from = torch.softmax(dl, -1) if wrong_draft_law else q
    if not probabilistic:
        sample_from = torch.zeros(K, V)
        sample_from[torch.arange(K), torch.tensor([1, 4, 2])] = 1.0
    drafts = torch.stack([torch.multinomial(sample_from[j], n, replacement=True, generator=g)
                          for j in range(K)], 1)
    params = [SamplingParams(temperature=temp, seed=1000 + i) for i in range(n)]
    s = make_sampler(params, V, K)
    rs = sv2.SpecopsV2RejectionSampler(s, spec_config(K, "block" if method == "block"
                                                      else "standard"), CPU)
    lay = layout(drafts.tolist(), list(range(n)), first_pos=[7] * n)
    processed = (rows / temp).repeat(n, 1)               # vLLM's temperature kernel's rows
    draft_logits = dl.expand(n, K, V).contiguous() if probabilistic else None
    sampled, num = rs.verify_rows(processed, draft_logits, lay["draft_sampled"], lay["pos"],
                                  lay["cu_num_logits"], lay["idx_mapping"])
    out, num = sampled.numpy(), num.numpy()
    assert (num >= 1).all() and (num <= K + 1).all()
    p = torch.softmax(rows / temp, -1).numpy().astype(np.float64)
    nacc = num - 1
    pvals = {}
    for j in range(K + 1):
        reached = nacc >= j
        pvals[f"position {j}"] = chi2_pvalue(np.bincount(out[reached, j], minlength=V), p[j])
    if method == "token":
        law = ref.accepted_length_law(p, sample_from.numpy().astype(np.float64))
        pvals["length"] = chi2_pvalue(np.bincount(nacc, minlength=K + 1), np.asarray(law))
    return pvals


@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("probabilistic", [True, False])
def test_random_requests_follow_the_target_law(method, probabilistic):
    pvals = run_law_case(3000, temp=0.7, method=method, probabilistic=probabilistic)
    assert all(p > ALPHA for p in pvals.values()), pvals


def test_negative_control_drafts_not_drawn_from_the_q_vllm_reports_fail():
    """Drafts drawn from softmax(logits) while the cache says softmax(logits / T): the
    verifier is told the wrong q, and the law test must notice."""
    pvals = run_law_case(3000, temp=0.4, wrong_draft_law=True)
    assert any(p < ALPHA for p in pvals.values()), pvals


def test_seeded_requests_repeat_and_are_batch_invariant():
    V, K = 16, 3
    g = torch.Generator().manual_seed(5)
    n = 6
    rows = torch.randn(n * (K + 1), V, generator=g)
    dl = torch.randn(n, K, V, generator=g)
    drafts = torch.randint(0, V, (n, K), generator=g).tolist()
    params = [SamplingParams(temperature=0.9, seed=77 + i) for i in range(n)]
    s = make_sampler(params, V, K)
    rs = sv2.SpecopsV2RejectionSampler(s, spec_config(K), CPU)
    lay = layout(drafts, list(range(n)), first_pos=[5] * n)
    a = rs.verify_rows(rows, dl, lay["draft_sampled"], lay["pos"], lay["cu_num_logits"],
                       lay["idx_mapping"])
    b = rs.verify_rows(rows, dl, lay["draft_sampled"], lay["pos"], lay["cu_num_logits"],
                       lay["idx_mapping"])
    assert emitted(*a) == emitted(*b)
    solo = layout(drafts[2:3], [2], first_pos=[5])
    c = rs.verify_rows(rows[2 * (K + 1):3 * (K + 1)], dl, solo["draft_sampled"], solo["pos"],
                       solo["cu_num_logits"], solo["idx_mapping"])
    assert emitted(*c)[0] == emitted(*a)[2]
    # the step's position is the offset: another step of the same request draws afresh
    later = layout(drafts, list(range(n)), first_pos=[6] * n)
    d = rs.verify_rows(rows, dl, later["draft_sampled"], later["pos"], later["cu_num_logits"],
                       later["idx_mapping"])
    assert emitted(*d) != emitted(*a)


def test_nan_rows_emit_nothing_for_that_request_only():
    V, K = 16, 2
    g = torch.Generator().manual_seed(2)
    rows = torch.randn(3 * (K + 1), V, generator=g)
    rows[K + 1] = float("nan")                             # request 1's first row
    params = [SamplingParams(temperature=0.0) for _ in range(3)]
    s = make_sampler(params, V, K)
    rs = sv2.SpecopsV2RejectionSampler(s, spec_config(K), CPU)
    lay = layout([[1, 2]] * 3, [0, 1, 2], first_pos=[4] * 3)
    sampled, num = rs.verify_rows(rows, None, lay["draft_sampled"], lay["pos"],
                                  lay["cu_num_logits"], lay["idx_mapping"])
    assert num.tolist()[1] == 0 and num.tolist()[0] >= 1 and num.tolist()[2] >= 1
    assert rs.last_valid.tolist() == [True, False, True]
