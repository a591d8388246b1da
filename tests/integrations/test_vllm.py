"""specops' drop-in for vLLM V1's RejectionSampler, tested against the real vLLM package.

Skipped as a module where vLLM is not installed (the main test environment); CI runs it in
the environment made by ``ci/setup_vllm_env.sh``.  vLLM's own RejectionSampler runs here on
the CPU (its Triton kernels through Triton's interpreter, see ``_vllm_setup``): greedy cases
must equal its output exactly; random cases pass per-position chi-square tests and the
accepted-length law at a false-positive rate of 1e-6, with a negative control that fails.
"""
import importlib.util

import numpy as np
import pytest
import torch

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (see ci/setup_vllm_env.sh)", allow_module_level=True)

from tests.integrations import _vllm_setup  # noqa: E402

_vllm_setup.prepare()

from scipy import stats as scipy_stats  # noqa: E402
from vllm.v1.sample.logits_processor import LogitsProcessors  # noqa: E402
from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID  # noqa: E402
from vllm.v1.sample.rejection_sampler import RejectionSampler as VllmRS  # noqa: E402
from vllm.v1.sample.sampler import Sampler  # noqa: E402

import specops  # noqa: E402
from bench.vllm_layout import make_md  # noqa: E402
from specops import reference as ref  # noqa: E402
from specops.integrations import vllm as sv  # noqa: E402
from tests.integrations._vllm_cases import (P, logit_bias, logits_for, make_sm,  # noqa: E402
                                            needs_vllm_kernels, ours, theirs)

ALPHA = 1e-6


# ----------------------------------------------------------------------------- greedy: vLLM's vectors
VLLM_GREEDY_CASES = [   # (spec_tokens, output_tokens incl. bonus, expected) from vLLM's tests
    ([[1, 2, 3]], [[1, 2, 3, 4]], [[1, 2, 3, 4]]),
    ([[1, 2, 3]], [[1, 5, 3, 4]], [[1, 5, P, P]]),
    ([[1, 2], [3]], [[1, 2, 5], [3, 4]], [[1, 2, 5], [3, 4, P]]),
    ([[1]], [[1, 2]], [[1, 2]]),
    ([[]], [[5]], [[5]]),
    ([[1, 2, 3], [4, 5, 6]], [[1, 2, 7, 6], [4, 8, 6, 9]], [[1, 2, 7, P], [4, 8, P, P]]),
    ([[1, 2]], [[1, 2, 3]], [[1, 2, 3]]),
    ([[1]], [[2, 3]], [[2, P]]),
    ([[1, 2], [3, 4]], [[1, 5, 6], [3, 4, 7]], [[1, 5, P], [3, 4, 7]]),
]


def test_placeholder_is_vllms():
    assert sv.PLACEHOLDER_TOKEN_ID == PLACEHOLDER_TOKEN_ID == -1


@pytest.mark.parametrize("spec,out,expected", VLLM_GREEDY_CASES)
def test_greedy_vllm_unit_vectors(spec, out, expected):
    logits = logits_for(spec, out)
    res = ours()(make_md(spec), None, logits, make_sm())
    exp = torch.tensor(expected, dtype=torch.int32)
    assert res.sampled_token_ids.dtype == torch.int32
    assert torch.equal(res.sampled_token_ids, exp)
    if _vllm_setup.VLLM_KERNELS:
        own = theirs()(make_md(spec), None, logits.clone(), make_sm())
        assert torch.equal(own.sampled_token_ids, exp)


@needs_vllm_kernels
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_equals_vllm_random_ragged(seed, dtype):
    """Random ragged batches (k = 0 included), drafts that often match: token for token."""
    g = torch.Generator().manual_seed(seed)
    V, B = 50, 7
    ks = torch.randint(0, 5, (B,), generator=g).tolist()
    ks[0] = 0
    N = sum(ks) + B
    logits = torch.randn(N, V, generator=g).to(dtype)
    argmax = logits.float().argmax(-1)
    spec, row = [], 0
    for k in ks:
        ids = []
        for j in range(k):
            hit = torch.rand((), generator=g) < 0.7
            ids.append(int(argmax[row + j]) if hit else int(torch.randint(0, V, (), generator=g)))
        spec.append(ids)
        row += k + 1
    md = make_md(spec)
    draft_probs = torch.softmax(torch.randn(sum(ks), V, generator=g), -1)
    for dp in (None, draft_probs):
        a = ours()(md, dp, logits, make_sm()).sampled_token_ids
        b = theirs()(make_md(spec), dp, logits.clone(), make_sm()).sampled_token_ids
        assert torch.equal(a, b), (a, b)


@needs_vllm_kernels
def test_mixed_batch_greedy_rows_equal_vllm():
    g = torch.Generator().manual_seed(1)
    V, B = 40, 6
    spec = [[int(x) for x in torch.randint(0, V, (k,), generator=g)] for k in (3, 0, 2, 3, 1, 2)]
    N = sum(map(len, spec)) + B
    logits = torch.randn(N, V, generator=g)
    temp = torch.tensor([0.0, 0.8, 0.0, 1.0, 0.0, 0.5])
    sm = make_sm(temperature=temp, top_k=torch.tensor([V, 5, V, 10, V, V]),   # V: off
                 top_p=torch.tensor([1.0, 0.9, 1.0, 1.0, 1.0, 0.95]))
    a = ours()(make_md(spec), None, logits, sm).sampled_token_ids
    greedy = temp == 0
    # vLLM's own sampler on the greedy requests alone (its mixed-batch greedy kernel does not
    # run under Triton's interpreter; greedy rows do not depend on their neighbours)
    gi = torch.nonzero(greedy).flatten().tolist()
    starts = np.cumsum([0] + [len(s) + 1 for s in spec])
    sub_rows = torch.cat([logits[starts[i]:starts[i + 1]] for i in gi])
    sub_spec = [spec[i] for i in gi]
    b = theirs()(make_md(sub_spec), None, sub_rows, make_sm(B=len(gi))).sampled_token_ids
    assert torch.equal(a[greedy][:, :b.shape[1]], b)
    assert (a[greedy][:, b.shape[1]:] == P).all()
    # random rows: well formed (accepted drafts, one token, then -1)
    for i in torch.nonzero(~greedy).flatten().tolist():
        row = a[i].tolist()
        n = sum(1 for t in row if t != P)
        assert 1 <= n <= len(spec[i]) + 1
        assert row[:n - 1] == spec[i][:n - 1] and all(t == P for t in row[n:])
        assert all(0 <= t < V for t in row[:n])


def test_logits_not_copied_in_standard_layout(monkeypatch):
    """The standard layout reaches specops.verify_block as the very tensor vLLM passed."""
    seen = {}
    real = specops.verify_block

    def spy(target_logits, *a, **kw):
        seen["ptr"] = target_logits.data_ptr()
        seen["dtype"] = target_logits.dtype
        return real(target_logits, *a, **kw)

    monkeypatch.setattr(specops, "verify_block", spy)
    spec = [[1, 2], [], [3]]
    logits = logits_for(spec, [[1, 2, 3], [4], [3, 5]], dtype=torch.bfloat16)
    out = ours()(make_md(spec), None, logits, make_sm(temperature=torch.ones(3)))
    assert seen == {"ptr": logits.data_ptr(), "dtype": torch.bfloat16}
    assert out.sampled_token_ids.shape == (3, 3)


def test_non_standard_indices_are_gathered():
    """Any target/bonus index tensors are honoured (rows gathered into the standard layout)."""
    spec = [[1, 2], [3]]
    std = logits_for(spec, [[1, 2, 9], [3, 8]])
    perm = torch.tensor([4, 0, 3, 1, 2])            # logits row i = std row perm[i]
    logits = std[perm]
    inv = torch.argsort(perm)
    md = make_md(spec)
    md.target_logits_indices = inv[md.target_logits_indices.long()].to(torch.int32)
    md.bonus_logits_indices = inv[md.bonus_logits_indices.long()].to(torch.int32)
    out = ours()(md, None, logits, make_sm())
    assert out.sampled_token_ids.tolist() == [[1, 2, 9], [3, 8, P]]


def test_parse_output_semantics():
    out = torch.tensor([[1, 2, P, P], [3, 4, 5, 6], [7, P, P, P]], dtype=torch.int32)
    a = sv.SpecopsRejectionSampler.parse_output(out, vocab_size=6, discard_req_indices=[2])
    b = VllmRS.parse_output(out, vocab_size=6, discard_req_indices=[2])
    assert a == b == ([[1, 2], [3, 4, 5], []], None)


# ----------------------------------------------------------------------------- randomness
def test_per_request_generators_are_reproducible_and_batch_invariant():
    V = 30
    g0 = torch.Generator().manual_seed(0)
    spec = [[int(x) for x in torch.randint(0, V, (3,), generator=g0)] for _ in range(4)]
    logits = torch.randn(16, V, generator=g0)
    dp = torch.softmax(torch.randn(12, V, generator=g0), -1)

    def run(seeded, perturb_default):
        gens = {i: torch.Generator().manual_seed(100 + i) for i in seeded}
        torch.manual_seed(perturb_default)
        sm = make_sm(temperature=torch.full((4,), 0.9), generators=gens)
        return ours()(make_md(spec), dp, logits, sm).sampled_token_ids

    a, b = run([0, 2], 1), run([0, 2], 2)
    assert torch.equal(a[[0, 2]], b[[0, 2]])
    # request 0 alone in a batch of one, same generator seed: same tokens
    gens = {0: torch.Generator().manual_seed(100)}
    solo = ours()(make_md(spec[:1]), dp[:3], torch.cat([logits[:4]]),
                  make_sm(temperature=torch.full((1,), 0.9), generators=gens))
    assert torch.equal(solo.sampled_token_ids[0], a[0])


def chi2_pvalue(observed, probs):
    observed = np.asarray(observed, dtype=np.float64)
    n = observed.sum()
    keep = probs > 0
    assert observed[~keep].sum() == 0, "a token of probability 0 was emitted"
    if keep.sum() < 2:
        return 1.0
    exp = probs[keep] / probs[keep].sum() * n
    return float(scipy_stats.chisquare(observed[keep], exp).pvalue)


def run_stat_case(setting, n, lie_about_q=False, seed=0):
    """n identical requests (K = 3, V = 6) in one call of the drop-in; returns p-values."""
    V, K = 6, 3
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(K + 1, V, generator=g) * 1.5
    q = torch.softmax(torch.randn(K, V, generator=g) * 2.0, -1)
    temp, top_k, top_p = setting
    drafts = torch.stack([torch.multinomial(q[j], n, replacement=True, generator=g)
                          for j in range(K)], 1)                          # [n, K]
    spec = drafts.tolist()
    logits = rows.repeat(n, 1)                                            # [n (K+1), V]
    claimed_q = torch.full((K, V), 1.0 / V) if lie_about_q else q
    draft_probs = claimed_q.repeat(n, 1).contiguous()
    sm = make_sm(temperature=torch.full((n,), temp),
                 top_k=None if top_k is None else torch.full((n,), top_k),
                 top_p=None if top_p is None else torch.full((n,), top_p))
    torch.manual_seed(seed + 1)
    out = ours()(make_md(spec), draft_probs, logits, sm).sampled_token_ids.numpy()
    p = specops.sampling_probs(rows, temperature=temp, top_k=top_k or 0,
                               top_p=1.0 if top_p is None else top_p)[0].numpy()
    ok_q = q.numpy()         # the law is the true q's, whatever the sampler was told
    nacc = (out[:, :K] == drafts.numpy()).cumprod(1).sum(1)
    pvals = {}
    for j in range(K + 1):
        reached = nacc >= j
        pvals[f"position {j}"] = chi2_pvalue(np.bincount(out[reached, j], minlength=V),
                                             p[j].astype(np.float64))
    law = ref.accepted_length_law(p.astype(np.float64), ok_q.astype(np.float64))
    pvals["length"] = chi2_pvalue(np.bincount(nacc, minlength=K + 1), np.asarray(law))
    return pvals


SETTINGS = {"t1": (1.0, None, None), "t0.8_topp0.9": (0.8, None, 0.9),
            "t0.7_topk3": (0.7, 3, None)}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_random_sampling_statistics(name):
    pvals = run_stat_case(SETTINGS[name], n=20000)
    assert min(pvals.values()) > ALPHA, pvals


def test_negative_control_fails():
    """The same tests reject a sampler told the wrong draft distribution (biased output)."""
    pvals = run_stat_case(SETTINGS["t1"], n=20000, lie_about_q=True)
    assert min(pvals.values()) < ALPHA, pvals


def test_ragged_k0_random():
    """Bonus-only requests next to full blocks: the bonus row's law is the target's."""
    V, n = 5, 6000
    g = torch.Generator().manual_seed(3)
    row = torch.randn(V, generator=g)
    spec = [[] if i % 2 else [int(torch.randint(0, V, (), generator=g))] for i in range(n)]
    rows = []
    for ids in spec:
        rows += [row] * (len(ids) + 1)
    logits = torch.stack(rows)
    out = ours()(make_md(spec), None, logits, make_sm(temperature=torch.ones(n)))
    toks = out.sampled_token_ids.numpy()
    assert toks.shape == (n, 2)
    bonus_only = toks[1::2]
    assert (bonus_only[:, 1] == P).all()
    p = torch.softmax(row, -1).double().numpy()
    assert chi2_pvalue(np.bincount(bonus_only[:, 0], minlength=V), p) > ALPHA


# ----------------------------------------------------------------------------- processors
@needs_vllm_kernels
def test_penalties_applied_like_vllm_greedy():
    V = 20
    g = torch.Generator().manual_seed(5)
    spec = [[3, 4, 5], [6, 7]]
    logits = torch.zeros(7, V)
    logits[:, 3] = 2.0                                # token 3 wins unless penalised,
    logits[:, 9] = 1.5                                # then token 9
    logits += 0.01 * torch.randn(7, V, generator=g)
    kw = dict(output_token_ids=[[3, 3], [1]], spec_token_ids=spec,
              prompt_token_ids=torch.tensor([[3, 2], [3, 0]]),
              repetition=[1.5, 1.2], frequency=[0.5, 0.0], presence=[0.5, 0.1], B=2)
    a = ours()(make_md(spec), None, logits, make_sm(**kw)).sampled_token_ids
    b = theirs()(make_md(spec), None, logits.clone(), make_sm(**kw)).sampled_token_ids
    assert torch.equal(a, b)
    plain = ours()(make_md(spec), None, logits, make_sm(B=2)).sampled_token_ids
    assert not torch.equal(a, plain)                  # the penalties did something


def test_bad_words_and_allowed_tokens_never_emitted():
    V, n = 8, 300
    spec = [[1, 2]] * n
    logits = torch.zeros(3 * n, V)
    bad = {i: [[5]] for i in range(n)}
    allowed = torch.zeros(n, V, dtype=torch.bool)
    allowed[:, 7] = True                              # True = masked out in vLLM
    sm = make_sm(temperature=torch.ones(n), bad_words=bad, allowed_mask=allowed,
                 output_token_ids=[[] for _ in range(n)], spec_token_ids=spec)
    out = ours()(make_md(spec), None, logits, sm).sampled_token_ids
    assert not ((out == 5) | (out == 7)).any()
    assert ((out == 0) | (out == 3)).any()            # other tokens do come out


def test_logit_bias_applies_to_draft_and_bonus_rows():
    V = 10
    lb = logit_bias({0: {9: 300.0}, 1: {8: 300.0}})
    spec = [[1, 2], [3]]
    logits = logits_for(spec, [[1, 2, 4], [3, 4]], V=V)
    out = ours()(make_md(spec), None, logits,
                 make_sm(logitsprocs=LogitsProcessors([lb]), B=2)).sampled_token_ids
    assert out.tolist() == [[9, P, P], [8, P, P]]


def test_custom_argmax_invariant_processor_after_temperature():
    """A custom argmax-invariant processor acts after the temperature, as in vLLM's Sampler:
    doubling the logits at T = 1 gives token for token what T = 0.5 gives (both exact in
    float32), drafts and bonus alike; greedy requests are untouched."""
    class Sharpen:
        def is_argmax_invariant(self):
            return True

        def apply(self, logits):
            return logits * 2.0

    V, n = 9, 400
    g = torch.Generator().manual_seed(6)
    spec = [[int(x) for x in torch.randint(0, V, (k,), generator=g)] for k in [2, 0, 3, 1] * 100]
    logits = torch.randn(sum(map(len, spec)) + n, V, generator=g)

    def run(temp, procs):
        gens = {i: torch.Generator().manual_seed(7 + i) for i in range(n)}
        sm = make_sm(temperature=temp, generators=gens, logitsprocs=LogitsProcessors(procs))
        return ours()(make_md(spec), None, logits, sm).sampled_token_ids

    temp = torch.ones(n)
    temp[::5] = 0.0                                     # some greedy requests
    half = torch.where(temp == 0, temp, temp * 0.5)
    sharp = run(temp, [Sharpen()])
    assert torch.equal(sharp, run(half, []))
    assert not torch.equal(sharp, run(temp, []))       # the processor did something
    greedy = temp == 0
    assert torch.equal(sharp[greedy], run(torch.zeros(n), [])[greedy])


# ----------------------------------------------------------------------------- logprobs
LOGPROBS_MODES = ["raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits"]


def _lp_case(seed, V=12, hit=0.7):
    """Ragged blocks whose drafts often equal the row argmax (so later positions are reached)."""
    g = torch.Generator().manual_seed(seed)
    ks = [3, 0, 2, 1]
    logits = torch.randn(sum(ks) + len(ks), V, generator=g) * 2.0
    spec, row = [], 0
    for k in ks:
        spec.append([int(logits[row + j].argmax()) if torch.rand((), generator=g) < hit
                     else int(torch.randint(0, V, (), generator=g)) for j in range(k)])
        row += k + 1
    return spec, logits


def _dense(lp, V):
    """Full [rows, V] logprobs from a top-V LogprobsTensors (column 0 is the sampled token)."""
    out = torch.full((lp.logprobs.shape[0], V), float("nan"))
    out.scatter_(1, lp.logprob_token_ids[:, 1:].long(), lp.logprobs[:, 1:])
    return out


@needs_vllm_kernels
@pytest.mark.parametrize("mode", LOGPROBS_MODES)
def test_logprobs_equal_vllms_greedy(mode):
    """Every logprobs mode: the same LogprobsTensors as vLLM's own sampler (greedy: same
    tokens), at every position vLLM's parse_output keeps."""
    spec, logits = _lp_case(0)
    a = sv.SpecopsRejectionSampler(Sampler(logprobs_mode=mode))(
        make_md(spec), None, logits, make_sm(B=4, max_num_logprobs=3))
    b = VllmRS(Sampler(logprobs_mode=mode))(make_md(spec), None, logits.clone(),
                                            make_sm(B=4, max_num_logprobs=3))
    assert torch.equal(a.sampled_token_ids, b.sampled_token_ids)
    keep = (a.sampled_token_ids != P).reshape(-1)
    assert int(keep.sum()) > 4                       # drafts were accepted somewhere
    la, lb = a.logprobs_tensors, b.logprobs_tensors
    assert torch.equal(la.logprob_token_ids[keep], lb.logprob_token_ids[keep])
    torch.testing.assert_close(la.logprobs[keep], lb.logprobs[keep])
    assert torch.equal(la.selected_token_ranks[keep], lb.selected_token_ranks[keep])


@needs_vllm_kernels
@pytest.mark.parametrize("mode", ["processed_logprobs", "processed_logits"])
def test_processed_logprobs_are_the_sampled_distribution(mode):
    """Random sampling, temperature / top-k / top-p per request: the processed distribution
    of every position equals vLLM's (its rejection sampler's on draft rows, its Sampler's
    on the bonus row), each emitted token lies inside it, and on draft rows it is the very
    distribution specops samples from (specops.sampling_probs)."""
    V, B = 12, 4
    spec, logits = _lp_case(1, V)
    temp = torch.tensor([0.8, 1.0, 0.6, 1.3])
    top_k = torch.tensor([V, 5, V, 4])
    top_p = torch.tensor([0.9, 1.0, 0.8, 1.0])

    def sm():
        return make_sm(temperature=temp, top_k=top_k, top_p=top_p, max_num_logprobs=V, B=B)

    a = sv.SpecopsRejectionSampler(Sampler(logprobs_mode=mode))(make_md(spec), None, logits, sm())
    b = VllmRS(Sampler(logprobs_mode=mode))(make_md(spec), None, logits.clone(), sm())
    both = ((a.sampled_token_ids != P) & (b.sampled_token_ids != P)).reshape(-1)
    da, db = _dense(a.logprobs_tensors, V), _dense(b.logprobs_tensors, V)
    torch.testing.assert_close(da[both], db[both])
    mine = (a.sampled_token_ids != P).reshape(-1)
    assert torch.isfinite(a.logprobs_tensors.logprobs[mine, 0]).all()
    assert (da[mine] == float("-inf")).any()         # truncation shows in the distribution
    W = a.sampled_token_ids.shape[1]
    row, req = 0, 0
    for b_, ids in enumerate(spec):
        for j in range(len(ids)):
            p, _ = specops.sampling_probs(logits[row + j], temperature=float(temp[b_]),
                                          top_k=int(top_k[b_]) % V, top_p=float(top_p[b_]))
            got = da[b_ * W + j]
            if mode == "processed_logits":
                got = torch.log_softmax(got, -1)
            assert torch.equal(torch.isfinite(got), p > 0)
            torch.testing.assert_close(got.exp(), p, atol=1e-6, rtol=1e-5)
        row += len(ids) + 1


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_logprob_token_ids_gathered_per_position(mode):
    """logprob_token_ids (vLLM's own rejection sampler fails on it with a shape error):
    every position reports the sampled token then the requested ids, from the same
    distribution as the top-V logprobs; requests without ids get -inf padding."""
    from dataclasses import replace
    V, B = 12, 4
    spec, logits = _lp_case(2, V)
    wanted = {0: [5, 6, 7], 2: [1]}

    def run(**kw):
        gens = {i: torch.Generator().manual_seed(40 + i) for i in range(B)}
        sm = replace(make_sm(temperature=torch.full((B,), 0.9), generators=gens, B=B), **kw)
        return sv.SpecopsRejectionSampler(Sampler(logprobs_mode=mode))(
            make_md(spec), None, logits, sm)

    a = run(max_num_logprobs=3, logprob_token_ids=wanted)
    full = run(max_num_logprobs=V)
    assert torch.equal(a.sampled_token_ids, full.sampled_token_ids)
    dense = _dense(full.logprobs_tensors, V)
    lp = a.logprobs_tensors
    W = a.sampled_token_ids.shape[1]
    keep = (a.sampled_token_ids != P).reshape(-1)
    for r in torch.nonzero(keep).flatten().tolist():
        b_, tok = r // W, int(a.sampled_token_ids.reshape(-1)[r])
        ids = wanted.get(b_, [])
        assert lp.logprob_token_ids[r, :1 + len(ids)].tolist() == [tok] + ids
        torch.testing.assert_close(lp.logprobs[r, :1 + len(ids)], dense[r, [tok] + ids])
        assert (lp.logprobs[r, 1 + len(ids):] == float("-inf")).all()


@needs_vllm_kernels
def test_synthetic_mode_is_vllms(monkeypatch):
    """Synthetic acceptance (a benchmarking mode: drafts accepted at fixed rates, nothing
    verified) is vLLM's own implementation; specops is not called."""
    from types import SimpleNamespace
    monkeypatch.setattr(specops, "verify_block", None)
    spec = [[1, 2], [3]]
    logits = logits_for(spec, [[5, 6, 4], [7, 4]])
    for rates, expected in (([1.0, 1.0], [[1, 2, 4], [3, 4, P]]),
                            ([0.0, 0.0], [[5, P, P], [7, P, P]])):
        cfg = SimpleNamespace(rejection_sample_method="synthetic",
                              synthetic_acceptance_rates=rates)
        rs = sv.SpecopsRejectionSampler(Sampler(), cfg, torch.device("cpu"))
        out = rs(make_md(spec), None, logits, make_sm(B=2))
        assert out.sampled_token_ids.tolist() == expected


def test_nan_row_yields_placeholder_not_garbage():
    spec = [[1, 2], [3]]
    logits = logits_for(spec, [[1, 2, 4], [3, 4]], V=10)
    logits[1, :] = float("nan")                       # request 0, draft position 1
    rs = ours()
    out = rs(make_md(spec), None, logits, make_sm(B=2)).sampled_token_ids
    assert out.tolist() == [[1, P, P], [3, 4, P]]
    assert rs.last_valid.tolist() == [False, True]


# ----------------------------------------------------------------------------- plugin
# ----------------------------------------------------------------------------- block verification
def test_method_from_env_and_spec_config(monkeypatch):
    from types import SimpleNamespace
    assert ours().specops_method == "token"
    block_cfg = SimpleNamespace(rejection_sample_method="block")
    assert ours(spec_config=block_cfg).specops_method == "block"     # vLLM's own setting
    monkeypatch.setenv("SPECOPS_VLLM_METHOD", "block")
    assert ours().specops_method == "block"
    monkeypatch.setenv("SPECOPS_VLLM_METHOD", "token")
    assert ours(spec_config=block_cfg).specops_method == "token"     # the environment wins
    monkeypatch.setenv("SPECOPS_VLLM_METHOD", "tree")
    with pytest.raises(ValueError, match="SPECOPS_VLLM_METHOD"):
        ours()


def _block_stat_case(n, lie_about_q):
    """n identical requests (K = 3, V = 6) through the drop-in with method="block": the
    first token must follow p_0 and num_accepted the enumerated block law."""
    V, K = 6, 3
    g = torch.Generator().manual_seed(8)
    rows = torch.randn(K + 1, V, generator=g) * 1.5
    q = torch.softmax(torch.randn(K, V, generator=g) * 2.0, -1)
    drafts = torch.stack([torch.multinomial(q[j], n, replacement=True, generator=g)
                          for j in range(K)], 1)
    claimed = torch.full((K, V), 1.0 / V) if lie_about_q else q
    sm = make_sm(temperature=torch.full((n,), 0.9))
    torch.manual_seed(9)
    out = ours(method="block")(make_md(drafts.tolist()), claimed.repeat(n, 1).contiguous(),
                               rows.repeat(n, 1), sm).sampled_token_ids.numpy()
    p = specops.sampling_probs(rows, temperature=0.9)[0].numpy()
    nacc = (out != PLACEHOLDER_TOKEN_ID).sum(1) - 1
    law = ref.exact_output_law(p, q.numpy(), K, V, method="block")["length_law"]
    return {"position 0": chi2_pvalue(np.bincount(out[:, 0], minlength=V),
                                      p[0].astype(np.float64)),
            "length": chi2_pvalue(np.bincount(nacc, minlength=K + 1), law)}


def test_block_method_statistics_and_negative_control():
    pv = _block_stat_case(20000, False)
    assert min(pv.values()) > ALPHA, pv
    bad = _block_stat_case(20000, True)
    assert min(bad.values()) < ALPHA, bad
