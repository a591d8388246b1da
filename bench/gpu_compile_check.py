"""Compile every Triton kernel variant of specops for a GPU target without a GPU (Triton's
bundled ptxas) and check the PTX for what would break bitwise agreement with the reference:
no fused multiply-add on floats, no approximate division / reciprocal / exp, no flush to zero.

    python bench/gpu_compile_check.py [--arch 90] [--only fused|split|block|tree|coins]
                                                     (a few minutes on 2 cores)
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
                    d_start_ptr="*i64", n_draft_ptr="*i64", n_ids="i64", n_draft_rows="i64",
                    q_ptr=qdt,
                    q_stride="i64", inv_t_ptr="*fp32", top_k_ptr="*i64", top_p_ptr="*fp32",
                    min_p_ptr="*fp32", seed_ptr="*i64", offset_ptr="*i64",
                    forced_ptr="*i64" if forced else "constexpr", tok_ptr="*i32",
                    nacc_ptr="*i32", valid_ptr="*i1", V="i32", MAXK="i32", T_PROBS="constexpr",
                    Q_MODE="constexpr", FORCED="constexpr", BLOCK_V="constexpr",
                    MAXK_P2="constexpr", OUT_P2="constexpr"), \
                    dict(T_PROBS=tp, Q_MODE=qm, FORCED=forced, BLOCK_V=1024, MAXK_P2=16,
                         OUT_P2=16, **({} if forced else {"forced_ptr": None}))


def split_variants():
    """The vocabulary-split pipeline's kernels (split_transform, split_accept, split_draw)."""
    K = TB._K.__name__
    st = importlib.import_module(K + ".split_transform")
    sa = importlib.import_module(K + ".split_accept")
    sd = importlib.import_module(K + ".split_draw")
    ws = dict(part_max_ptr="*fp32", part_argmax_ptr="*i32", part_count_ptr="*i64",
              kept_mass_ptr="*i64", minp_mass_ptr="*i64", radix_hist_ptr="*i64",
              radix_prefix_ptr="*i64", draw_at_ptr="*i64", draw_stats_ptr="*fp32",
              draw_mass_ptr="*i64", draw_sums_ptr="*i64", tok_ptr="*i32",
              nacc_ptr="*i32", valid_ptr="*i1", seed_ptr="*i64", offset_ptr="*i64",
              V="i32", MAXK="i32", R="i32", C="i32", CHUNK="i32", rnd="i32")
    for tp, tdt in ((False, "*bf16"), (False, "*fp32"), (True, "*fp32")):
        for qm, qdt in ((0, "*fp32"), (1, "*fp32"), (2, tdt)):
            if tp and qm == 2:
                continue
            rows = dict(t_ptr=tdt, t_stride="i64", N="i64", t_start_ptr="*i64",
                        ids_ptr="*i64", d_start_ptr="*i64", n_draft_ptr="*i64", n_ids="i64",
                        n_draft_rows="i64", q_ptr=qdt, q_stride="i64", inv_t_ptr="*fp32",
                        top_k_ptr="*i64", top_p_ptr="*fp32", min_p_ptr="*fp32", **ws)
            sizes = dict(BLOCK_V=1024, MAXK_P2=16)
            yield st._stats_kernel, rows, dict(T_PROBS=tp, FILTERS=True, **sizes)
            for top_p in (False, True):
                yield st._select_kernel, rows, dict(T_PROBS=tp, TOP_P=top_p, HAS_TOPK=True,
                                                    CP2=32, **sizes)
            yield st._mass_kernel, rows, dict(T_PROBS=tp, HAS_TOPK=True, CP2=32, **sizes)
            for forced in (False, True):
                walk = dict(rows, forced_ptr="*i64" if forced else "constexpr")
                yield sa._walk_kernel, walk, dict(
                    T_PROBS=tp, Q_MODE=qm, FORCED=forced, HAS_TOPK=True, HAS_TOPP=True,
                    MAXK_P2=16, OUT_P2=16, CP2=32, **({} if forced else {"forced_ptr": None}))
            yield sd._draw_sums_kernel, rows, dict(T_PROBS=tp, Q_MODE=qm, BLOCK_V=1024)
            yield sd._draw_find_kernel, rows, dict(T_PROBS=tp, Q_MODE=qm, BLOCK_V=1024,
                                                   OUT_P2=16, CP2=32)


def block_variants():
    """Block verification (verify_block.py) and the acceptance rates (accept_rates.py)."""
    K = TB._K.__name__
    vb = importlib.import_module(K + ".verify_block")
    ar = importlib.import_module(K + ".accept_rates")
    for tp, tdt in ((False, "*bf16"), (False, "*fp32"), (True, "*fp32")):
        for qm, qdt in ((0, "*fp32"), (1, "*fp32"), (2, tdt)):
            if tp and qm == 2:
                continue
            rows = dict(t_ptr=tdt, t_stride="i64", N="i64", t_start_ptr="*i64", ids_ptr="*i64",
                        d_start_ptr="*i64", n_draft_ptr="*i64", n_ids="i64",
                        n_draft_rows="i64", q_ptr=qdt, q_stride="i64", inv_t_ptr="*fp32",
                        top_k_ptr="*i64", top_p_ptr="*fp32", min_p_ptr="*fp32", V="i32",
                        MAXK="i32")
            yield vb._verify_block_kernel, dict(
                rows, seed_ptr="*i64", offset_ptr="*i64", tok_ptr="*i32", nacc_ptr="*i32",
                valid_ptr="*i1"), dict(T_PROBS=tp, Q_MODE=qm, BLOCK_V=1024, MAXK_P2=16,
                                       OUT_P2=16)
            for block in (False, True):
                yield ar._accept_rates_kernel, dict(rows, nacc_ptr="*i32", rates_ptr="*fp32"), \
                    dict(BLOCK=block, T_PROBS=tp, Q_MODE=qm, BLOCK_V=1024, MAXK_P2=16)


def tree_variants():
    """Tree verification (verify_tree.py): target dtype x draft mode x method."""
    K = TB._K.__name__
    vt = importlib.import_module(K + ".verify_tree")
    for tp, tdt in ((False, "*bf16"), (False, "*fp32"), (True, "*fp32")):
        for qm, qdt in ((0, "*fp32"), (1, "*fp32"), (2, tdt)):
            if tp and qm == 2:
                continue
            for rsd in (False, True):
                yield vt._verify_tree_kernel, dict(
                    t_ptr=tdt, t_stride="i64", ids_ptr="*i64", par_ptr="*i64",
                    n_nodes_ptr="*i64", q_ptr=qdt, q_stride="i64", inv_t_ptr="*fp32",
                    top_k_ptr="*i64", top_p_ptr="*fp32", min_p_ptr="*fp32", seed_ptr="*i64",
                    offset_ptr="*i64", r_ptr="*i64", qw_ptr="*i64", tok_ptr="*i32",
                    nacc_ptr="*i32", nodes_ptr="*i32", valid_ptr="*i1", N="i32", V="i32",
                    D="i32"), dict(T_PROBS=tp, Q_MODE=qm, RSD=rsd, BLOCK_V=1024, N_P2=16,
                                   OUT_P2=16)


def coins_variants():
    """The caller-coin walk (verify_coins.py, reference section 13): exact and relaxed."""
    vc = importlib.import_module(TB._K.__name__ + ".verify_coins")
    for relaxed, acc1 in ((False, True), (True, True), (True, False)):
        yield vc._coin_kernel, dict(
            t_ptr="*fp32", order_ptr="*i64", par_ptr="*i64", present_ptr="*i8",
            cand_ptr="*i64", m_ptr="*i64", mf_ptr="*i64", acc_ptr="*fp64", tok_ptr="*i32",
            nacc_ptr="*i32", nodes_ptr="*i32", valid_ptr="*i1", N="i32", V="i32", D="i32",
            single="fp32"), dict(RELAXED=relaxed, ACC1=acc1, BLOCK_V=1024, N_P2=16, OUT_P2=16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--only", choices=("fused", "split", "block", "tree", "coins"),
                    default=None)
    args = ap.parse_args()
    target = GPUTarget("cuda", args.arch, 32)
    failures = 0
    todo = {"fused": variants, "split": split_variants, "block": block_variants,
            "tree": tree_variants, "coins": coins_variants}
    for fn, sig, consts in (v for name, gen in todo.items() if args.only in (None, name)
                            for v in gen()):
        order = fn.arg_names
        sig = {name: ("constexpr" if name in consts else sig[name]) for name in order}
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target,
                           options={"enable_fp_fusion": False, "num_warps": 8})
        ptx = k.asm["ptx"]
        bad = collections.Counter(BAD.findall(ptx))
        status = "ok" if not bad else f"SUSPICIOUS {dict(bad)}"
        failures += bool(bad)
        shown = {k: v for k, v in consts.items() if k not in ("forced_ptr", "BLOCK_V",
                                                              "MAXK_P2", "OUT_P2", "CP2",
                                                              "N_P2")}
        print(f"{fn.__name__:26s} {str(shown):90s} {status}", flush=True)
    print("all variants compiled for sm_%d; %s" % (args.arch, "PTX clean" if not failures
                                                    else f"{failures} suspicious"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
