"""`specops audit`: all checks pass on the defaults, the JSON schema, exit statuses."""
import contextlib
import io
import json
import math
import os
import subprocess
import sys

import pytest

from specops import audit, audit_env, cli, lab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


FAST = [b for b in lab.available_backends() if b != "triton"] or ["reference"]


@pytest.fixture
def fast_backends(monkeypatch):
    """Tests of the CLI's mechanics skip the Triton interpreter (slow on CPU); the default
    audit below still runs on every available backend."""
    monkeypatch.setattr(lab, "available_backends", lambda: list(FAST))


# The full default audit (grid and every backend, the Triton interpreter included: ~40 s)
# runs once, in the full tier, on one pytest-xdist worker.
def DEFAULT_AUDIT(test):
    return pytest.mark.full(pytest.mark.xdist_group("cli-default-audit")(test))


@pytest.fixture(scope="module")
def default_json():
    """One full default audit (grid included), shared by the schema tests."""
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = cli.main(["audit", "--json"])
    return rc, buf.getvalue()


@DEFAULT_AUDIT
def test_audit_defaults_all_pass(default_json):
    rc, out = default_json
    report = json.loads(out)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert rc == 0, failed
    assert report["summary"] == {"passed": len(report["checks"]),
                                 "total": len(report["checks"]), "all_passed": True}


@DEFAULT_AUDIT
def test_json_schema(default_json):
    _, out = default_json
    assert out.count("\n") == 1                       # one JSON object on one line
    report = json.loads(out)
    checks = report["checks"]
    assert isinstance(checks, list) and len(checks) >= 20
    names = [c["name"] for c in checks]
    assert len(set(names)) == len(names)
    for c in checks:
        assert set(c) == {"name", "passed", "value"}
        assert isinstance(c["name"], str) and isinstance(c["passed"], bool)
        assert isinstance(c["value"], (int, float, str, bool))
    grid = report["grid"]
    assert grid["settings"] >= 1296
    assert grid["worst_exact_tv"] <= 1e-12
    assert grid["all_speeds_finite"] is True and grid["wrong_token_counts"] == 0
    assert set(grid["knobs"]) == {"certainty", "match", "gamma", "cost", "length", "seed"}
    assert all(len(v) > 1 for v in grid["knobs"].values())
    for section in ("knobs", "one_token", "sequence", "selfcheck", "backends", "exact_law"):
        assert section in report
    for name in lab.available_backends():
        assert f"trace_deterministic[{name}]" in names
        assert f"exactness_selfcheck[{name}]" in names
    assert {r["backend"] for r in report["selfcheck"]["backends"]} == set(report["backends"])
    one = report["one_token"]
    assert abs(one["alpha"] - (1 - one["tv_pq"])) <= 1e-12
    assert one["corrected_tv"] <= 1e-12 and one["wrong_tv"] > 0
    seq = report["sequence"]
    assert seq["length"] == lab.DEFAULT_KNOBS.length == len(seq["tokens"])
    assert math.isfinite(seq["toy_speedup"]) and math.isfinite(seq["estimated_speedup"])
    assert math.isfinite(report["elapsed_s"]) and report["elapsed_s"] > 0


# The article's figures and how close the default run must land (issue 16).
ARTICLE_TOLERANCE = {"alpha": 0.005, "wrong_fallback_tv": 0.005, "estimated_speedup": 0.1,
                     "toy_speedup": 0.15, "target_calls": 2, "draft_calls": 10}


@DEFAULT_AUDIT
def test_default_run_lands_on_the_article(default_json):
    _, out = default_json
    report = json.loads(out)
    h, a = report["headline"], report["article"]
    assert a == lab.ARTICLE
    assert set(h) >= {"alpha", "wrong_fallback_tv", "length", "gamma", "target_calls",
                      "draft_calls", "toy_speedup", "estimated_speedup", "worst_exact_tv"}
    for key, tol in ARTICLE_TOLERANCE.items():
        assert abs(h[key] - a[key]) <= tol, (key, h[key], a[key])
    assert (h["length"], h["gamma"]) == (a["length"], a["gamma"]) == (96, 5)
    assert h["corrected_tv"] <= 1e-12 and h["wrong_token_counts"] == 0
    assert h["worst_exact_tv"] <= 1e-12          # like the article's 1.95e-16: exact
    assert h["alpha"] == report["one_token"]["alpha"]
    assert h["toy_speedup"] == report["sequence"]["toy_speedup"]


def test_text_output_shows_the_article_beside_ours(fast_backends, capsys):
    rc = cli.main(["audit", "--no-grid"])
    out = capsys.readouterr().out
    assert rc == 0
    block = out[out.index("Beside the article"):]
    for label, ours, theirs in (("trace length", "96", "96"), ("target calls", "20", "20"),
                                ("accounting estimate", "3.46", "3.46")):
        line = next(x for x in block.splitlines() if label in x)
        assert line.split()[-2:] == [ours, theirs], line
    assert "grid: worst exact TV" in block and "1.95e-16" in block
    # the figures' source is named (issue 28, item 9)
    for name in ("Rejection-Sampling Lab", "Leviathan et al. 2023", "Chen et al. 2023"):
        assert name in block


@DEFAULT_AUDIT
def test_required_checks_present(default_json):
    names = {c["name"] for c in json.loads(default_json[1])["checks"]}
    for required in ("knob_sanitation", "target_rows_normalised", "draft_rows_normalised",
                     "residual_mass_equals_1_minus_alpha", "alpha_equals_1_minus_tv",
                     "corrected_distribution_equals_target", "wrong_fallback_biased",
                     "latency_ledger_balances", "trace_token_count_exact",
                     "cross_backend_trace_agreement", "grid_worst_exact_tv",
                     "grid_speeds_finite", "grid_token_counts_exact"):
        assert required in names


def test_human_output(capsys, fast_backends):
    rc = cli.main(["audit", "--no-grid", "--length", "20", "--gamma", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    n = len(audit.run_audit(lab.Knobs(length=20, gamma=3), grid=False)["checks"])
    assert f"{n}/{n} checks passed" in out.splitlines()[-1]
    for text in ("alpha = sum min(p, q)", "wrong fallback", "target calls", "toy speedup",
                 "best gamma", "Exactness self-check", "PASS"):
        assert text in out
    assert "FAIL" not in out


def test_exit_status_1_when_a_check_fails(monkeypatch, capsys, fast_backends):
    monkeypatch.setattr(lab, "estimated_speedup", lambda *a, **k: float("inf"))
    rc = cli.main(["audit", "--no-grid"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL  speeds_finite" in out
    last = out.strip().splitlines()[-1]
    passed, total = last.split()[0].split("/")
    assert int(passed) < int(total)


def test_exit_status_1_json(monkeypatch, capsys, fast_backends):
    bad = lab.one_token_view

    def broken(model, state=None):
        v = bad(model, state)
        v["corrected_tv"] = 1e-3
        return v
    monkeypatch.setattr(lab, "one_token_view", broken)
    rc = cli.main(["audit", "--no-grid", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["summary"]["all_passed"] is False
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    assert failed == ["corrected_distribution_equals_target"]


@pytest.mark.parametrize("args,knob", [(["--gamma", "0"], "gamma"),
                                       (["--certainty", "nan"], "certainty"),
                                       (["--match", "1.5"], "match"),
                                       (["--cost", "-1"], "cost"),
                                       (["--length", "2.5"], "length"),
                                       (["--seed", "x"], "seed")])
def test_bad_knobs_exit_2(args, knob, capsys):
    rc = cli.main(["audit", *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"knob '{knob}'" in err and "must be" in err


def test_unavailable_backend_exit_2(capsys, monkeypatch):
    monkeypatch.setattr(lab, "available_backends", lambda: ["reference"])
    rc = cli.main(["audit", "--backend", "cpu"])
    assert rc == 2
    assert "not available" in capsys.readouterr().err


def test_no_subcommand_prints_help(capsys):
    assert cli.main([]) == 2
    assert "audit" in capsys.readouterr().err


def test_plot(tmp_path, capsys, fast_backends):
    pytest.importorskip("matplotlib")
    path = tmp_path / "audit.png"
    rc = cli.main(["audit", "--no-grid", "--length", "12", "--plot", str(path)])
    assert rc == 0
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("bad", ["out.txt", "noext", "", "DIR", "missing/dir/x.png"])
def test_plot_path_checked_before_the_audit(bad, tmp_path, capsys, monkeypatch):
    """H: a path that cannot take the PNG is a usage error (exit 2) before the audit runs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    ran = []
    monkeypatch.setattr(audit, "run_audit", lambda *a, **k: ran.append(1))
    rc = cli.main(["audit", "--no-grid", "--plot", bad])
    assert rc == 2 and not ran
    assert "--plot" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["DIR"]            # nothing written


def test_plot_reports_the_real_path(tmp_path, capsys, monkeypatch, fast_backends):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["audit", "--no-grid", "--length", "8", "--plot", "rel.png"])
    assert rc == 0
    out = capsys.readouterr().out
    assert f"plot written to {tmp_path / 'rel.png'}" in out
    assert (tmp_path / "rel.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib(monkeypatch, capsys, tmp_path, fast_backends):
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # import raises ImportError
    rc = cli.main(["audit", "--no-grid", "--plot", str(tmp_path / "x.png")])
    assert rc == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="matplotlib"):
        audit.plot_report({}, str(tmp_path / "y.png"))


@pytest.mark.full                       # a fresh interpreter
def test_python_dash_m(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRITON_INTERPRET", None)          # keep it fast: no interpreted Triton
    p = subprocess.run([sys.executable, "-m", "specops", "audit", "--no-grid", "--length", "8",
                        "--json"], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["summary"]["all_passed"] is True


def test_selfcheck_catches_a_wrong_backend(monkeypatch, fast_backends):
    """Negative control: a backend whose tokens differ from the oracle fails its row."""
    real = audit._public

    def off_by_one(x, case, backend):
        tok, nacc, valid = real(x, case, backend)
        if backend == "reference" and case == "logits":
            tok = tok.copy()
            tok[0, nacc[0]] = (tok[0, nacc[0]] + 1) % audit.SELF_V
        return tok, nacc, valid
    monkeypatch.setattr(audit, "_public", off_by_one)
    law = audit.selfcheck_law()
    assert law["tv"] <= 1e-12 and law["wrong_fallback_tv"] > 1e-3
    rows, checks = audit.selfcheck(["reference"], {}, law)
    assert rows[0]["logits"] == f"{audit.SELF_B - 1}/{audit.SELF_B}"
    assert rows[0]["probs"] == rows[0]["flat"] == f"{audit.SELF_B}/{audit.SELF_B}"
    assert not checks[0]["passed"] and checks[0]["name"] == "exactness_selfcheck[reference]"


def test_selfcheck_batch_exercises_the_policies():
    """The fixed batch reaches accepts, rejections, bonus tokens and an invalid row."""
    x = audit._selfcheck_inputs()
    for case in ("probs", "logits", "point_mass"):
        tok, nacc, valid = audit._oracle(x, case)
        assert (nacc > 0).any() and (nacc == 0).any()
    tok, nacc, valid = audit._oracle(x, "logits")
    assert not valid.all() and (tok[~valid] == -1).all()
    tok, nacc, valid = audit._oracle(x, "probs")
    assert (nacc == x["num_draft"]).any()                 # a bonus token somewhere


# ----------------------------------------------------------------------------- issue 27, defect 4
@pytest.mark.parametrize("args", [["--match", "1"], ["--certainty", "0.99", "--match", "1"],
                                  ["--certainty", "1", "--match", "1", "--gamma", "16"]])
def test_exact_draft_settings_pass(args, capsys, fast_backends):
    """--match 1 died with a traceback (a rate of 1 + 2**-52); --certainty 0.99 --match 1
    failed tree_rsd_law_tv with 0.5 (two rsd siblings from a one-point draft row)."""
    rc = cli.main(["audit", "--no-grid", "--backend", "reference", "--length", "16", *args])
    out = capsys.readouterr().out
    assert rc == 0, [x for x in out.splitlines() if x.startswith("FAIL")]
    assert "PASS  tree_rsd_law_tv" in out


class _ClosedPipe(io.StringIO):
    """stdout of `specops audit | head` once head has exited."""
    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_closed_pipe_is_not_a_failed_check(extra, monkeypatch, fast_backends):
    """`specops audit | head`: no BrokenPipeError traceback, and the exit status stays the
    audit's (0: every check passed), not 1 ("a check failed")."""
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert cli.main(["audit", "--no-grid", "--backend", "reference", "--length", "8",
                     "--gamma", "2", *extra]) == 0


@pytest.mark.full
def test_closed_pipe_subprocess(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRITON_INTERPRET", None)
    p = subprocess.Popen([sys.executable, "-m", "specops", "audit", "--no-grid", "--backend",
                          "reference", "--length", "8"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    p.stdout.close()                                  # the reader is gone before any output
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


# ----------------------------------------------------------------------------- issue 28, item 4
def test_info_prints_the_build_and_the_backends(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    import specops
    assert f"specops {specops.__version__}" in out and "torch " in out
    for name in ("reference", "cpu", "triton"):
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name
    assert cli.main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["build"]["version"] == specops.__version__
    assert [b["name"] for b in info["backends"]] == ["reference", "cpu", "triton"]
    if "cpu" in specops.available_backends():
        c = info["build"]["cpp"]
        assert c["built"] and c["isa"] in c["isa_levels"] and c["error"] is None
        assert info["build"]["openmp_threads"] >= 1 if c["openmp"] else True


class _BadIsa:
    """A _C whose ISA selection refuses the environment's SPECOPS_CPU_ISA."""
    has_openmp = True

    @staticmethod
    def available_isas():
        return ["scalar", "sse2"]

    @staticmethod
    def isa():
        raise ValueError("SPECOPS_CPU_ISA='bogus' must be one of scalar, sse2, avx2, avx512")


@pytest.mark.parametrize("cpp,why", [
    ((None, "the C++ extension specops._C is missing or fails to load (boom)"), "(boom)"),
    ((_BadIsa, None), "SPECOPS_CPU_ISA='bogus'")])
def test_audit_says_why_cpu_is_unavailable(cpp, why, monkeypatch, capsys):
    """A missing or unloadable _C, or a bad SPECOPS_CPU_ISA, leaves only the (40x slower)
    reference; the audit must say so, not only list what is left."""
    from specops.backends import native
    monkeypatch.setattr(native, "extension", lambda: cpp)
    monkeypatch.setattr(lab, "available_backends", lambda: ["reference"])
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    rc = cli.main(["audit", "--no-grid", "--length", "8", "--gamma", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    cpu = next(x for x in out.splitlines() if x.split()[:2] == ["cpu", "UNAVAILABLE"])
    assert why in cpu
    status = {s["name"]: s for s in audit_env.backend_status(["reference"])}
    assert not status["cpu"]["available"] and why in status["cpu"]["detail"]
    if "triton" not in __import__("specops").available_backends("cuda"):
        assert "TRITON_INTERPRET=1" in status["triton"]["detail"]


# ----------------------------------------------------------------------------- issue 28, item 5
def test_cli_parser_imports_no_torch(monkeypatch):
    """Building the parser and answering --version / --help runs no `import torch` (cli.py
    and the modules it reads for the knobs import torch-dependent code lazily)."""
    import builtins
    seen = []
    real = builtins.__import__

    def spy(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            seen.append(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", spy)
    for argv in (["--version"], ["--help"], ["audit", "--help"], ["lab", "--help"],
                 ["info", "--help"], ["check", "--help"]):
        with pytest.raises(SystemExit) as info, contextlib.redirect_stdout(io.StringIO()):
            cli.main(argv)
        assert info.value.code == 0
    assert not seen, seen


@pytest.mark.full
def test_version_and_help_without_torch(tmp_path):
    """In a fresh interpreter, with the package's __init__ kept out of the way (it is not the
    CLI's to make lazy), `specops --version` and `--help` load no torch module."""
    where = os.path.join(ROOT, "specops")
    code = ("import sys, types, contextlib, io\n"
            f"pkg = types.ModuleType('specops'); pkg.__path__ = [{where!r}]\n"
            "pkg.__version__ = '0'; sys.modules['specops'] = pkg\n"
            "from specops import cli\n"
            "for argv in (['--version'], ['--help'], ['audit', '--help'], ['lab', '--help'],\n"
            "             ['check', '--help']):\n"
            "    try:\n"
            "        with contextlib.redirect_stdout(io.StringIO()): cli.main(argv)\n"
            "    except SystemExit as e: assert e.code == 0, argv\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout
