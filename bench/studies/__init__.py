"""One-off studies: ``python -m bench.studies.NAME``, each with the options of
``bench/_cli.py`` (``--record`` writes its file in bench/results/, ``--out PATH`` elsewhere,
``--reps N`` where it times, ``--quick`` its smallest run) plus its own.  The suites of
``python -m bench`` are the repeated measurements; these answer one question each.

``STUDIES``: name -> what it measures (and its committed report).  The ``vllm_*`` and
``engine_cpu`` studies run in the vLLM venv (``bash ci/setup_vllm_env.sh`` prints its
python); the others in the main one (``bash scripts/dev.sh bench --help`` sets it up).
"""

STUDIES = {
    "methods_exact": "exact E[accepted] of every verification method by enumeration "
                     "(results/methods.md)",
    "methods_real": "sampled E[accepted] of the methods on SmolLM2-135M (results/methods_real.md)",
    "one_thread": "block, rates, token-wise and trees on one thread, thread CPU time "
                  "(results/cpu_one_thread.md)",
    "generate": "specops.generate vs HF generate on random-weight models, fixed K vs auto "
                "(results/generate.md)",
    "generate_real": "specops.generate on SmolLM2-135M with drafts cut from it "
                     "(results/generate_smollm2.md)",
    "dist_memory": "transient memory of specops.distributed.verify_block "
                   "(results/dist_memory.md)",
    "sglang_coins": "the SGLang drop-in's caller-coin walk vs its Philox walk "
                    "(results/sglang_coins.md)",
    "sglang_thresholds": "exact TV of SGLang's relaxed thresholds (results/sglang_thresholds.md)",
    "vllm_cpu_bias": "vLLM-CPU's rejection sampler against exact values; vLLM venv "
                     "(results/vllm_cpu_bias.md)",
    "vllm_dropin": "specops' vLLM drop-in vs vLLM-CPU's sampler on vLLM's inputs; vLLM venv "
                   "(results/vllm_dropin.md)",
    "engine_cpu": "a vLLM-CPU engine on SmolLM2-135M with each sampler; vLLM venv "
                  "(results/engine_cpu.md)",
    "cpu_profile": "one verify_block call on the real-logits inputs; --dump writes them for "
                   "bench/harness/callgrind.sh",
    "real_logits": "build the real-logits cache and print what it holds; --sweep: alpha for "
                   "every draft depth",
}
