"""Compile every Triton kernel variant of specops for a GPU target without a GPU (Triton's
bundled ptxas) and check the PTX for what would break bitwise agreement with the reference:
no fused multiply-add on floats, no approximate division / reciprocal / exp, no flush to zero.

    python bench/gpu_compile_check.py [--arch 90]       (about 2 minutes on 2 cores)
"""
from __future__ import annotations

import argparse
import collections
import importlib
import os
import re
import sys

os.environ.pop("TRITON_INTERPRET", None)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import specops.backends.triton as TB  # noqa: E402

BAD = re.compile(r"\b(fma\.rn\.f32|fma\.rn\.f64|mad\.f32|div\.approx|div\.full|rcp\.approx|"
                 r"ex2\.approx|[a-z]+\.ftz\.f32|[a-z]+\.[a-z]+\.ftz\.f32)")


def variants():
    K = TB._K.__name__
    sp = importlib.import_module(K + ".sampling_probs")
    vf = importlib.import_module(K + ".verify")
    for dt in ("*fp32", "*bf16", "*fp16"):
        yield sp._sampling_probs_kernel, dict(
            l_ptr=dt, l_stride="i64", out_ptr="*fp32", valid_ptr="*i1",
            inv_t_ptr="*fp32", top_k_ptr="*i64", top_p_ptr="*fp32", min_p_ptr="*fp32",
            V="i32", BLOCK_V="constexpr"), dict(BLOCK_V=1024)
    for tp, tdt in ((False, "*bf16"), (False, "*fp16"), (False, "*fp32"), (True, "*fp32")):
        for qm, qdt in ((0, "*fp32"), (1, "*fp32"), (2, tdt)):
            if tp and qm == 2:
                continue
            for forced in (False, True):
                yield vf._verify_kernel, dict(
                    t_ptr=tdt, t_stride="i64", N="i64", t_start_ptr="*i64", ids_ptr="*i64",
                    d_start_ptr="*i64", n_draft_ptr="*i64", n_draft_rows="i64", q_ptr=qdt,
                    q_stride="i64", inv_t_ptr="*fp32", top_k_ptr="*i64", top_p_ptr="*fp32",
                    min_p_ptr="*fp32", seed_ptr="*i64", offset_ptr="*i64",
                    forced_ptr="*i64" if forced else "constexpr", tok_ptr="*i32",
                    nacc_ptr="*i32", valid_ptr="*i1", V="i32", MAXK="i32", T_PROBS="constexpr",
                    Q_MODE="constexpr", FORCED="constexpr", BLOCK_V="constexpr",
                    MAXK_P2="constexpr", OUT_P2="constexpr"), \
                    dict(T_PROBS=tp, Q_MODE=qm, FORCED=forced, BLOCK_V=1024, MAXK_P2=16,
                         OUT_P2=16, **({} if forced else {"forced_ptr": None}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    args = ap.parse_args()
    target = GPUTarget("cuda", args.arch, 32)
    failures = 0
    for fn, sig, consts in variants():
        order = fn.arg_names
        sig = {name: sig[name] for name in order}
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target,
                           options={"enable_fp_fusion": False, "num_warps": 8})
        ptx = k.asm["ptx"]
        bad = collections.Counter(BAD.findall(ptx))
        status = "ok" if not bad else f"SUSPICIOUS {dict(bad)}"
        failures += bool(bad)
        shown = {k: v for k, v in consts.items() if k != "forced_ptr"}
        print(f"{fn.__name__:26s} {str(shown):90s} {status}", flush=True)
    print("all variants compiled for sm_%d; %s" % (args.arch, "PTX clean" if not failures
                                                    else f"{failures} suspicious"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
