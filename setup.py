"""Build script: setuptools drives CMake to build the pybind11 module ``specops._C``.

Metadata lives in pyproject.toml; this file only declares packages and the extension.

* ``SPECOPS_BUILD_CPP=0`` skips the extension (pure Python install; ``import specops`` never
  depends on it).
* ``SPECOPS_BUILD_JOBS`` caps the parallel compile jobs (default: all cores).
* ``CXX`` picks the C++ compiler (``ci/build_wheel.sh`` sets it to ``ci/zig-c++``).
* The CMake build folder is ``build/cmake-<python tag>`` in the checkout, kept between builds
  (a build from another cmake / Python / build environment starts it afresh).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import pybind11

        out = Path(self.get_ext_fullpath(ext.name)).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        # One CMake build folder per Python in the checkout (not setuptools' temporary
        # build_temp, which editable installs delete): a re-install rebuilds only what
        # changed (ninja), and `cmake --build build/cmake-<tag>` refreshes an editable _C.
        build_dir = ROOT / "build" / f"cmake-{sys.implementation.cache_tag}"
        cmake = shutil.which("cmake")
        if cmake is None:
            raise RuntimeError("specops: building specops._C needs cmake (pip install cmake), "
                               "or set SPECOPS_BUILD_CPP=0 for a pure Python install")
        ninja = shutil.which("ninja")
        cfg = [
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DSPECOPS_OUTPUT_DIR={build_dir / 'out'}",     # copied to `out` below: the
            f"-DSPECOPS_OUTPUT_NAME={out.name}",             # cache stays valid between runs
        ]
        if ninja:
            cfg += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        # A cache made by another cmake / python / build environment (pip's isolated build
        # environments live in temporary directories) is discarded rather than reused.
        # So is one made with another CXX (CMake reads it only when it configures a fresh
        # folder; ci/build_wheel.sh sets it to ci/zig-c++); unset, the stamp is as before.
        cxx = os.environ.get("CXX", "")
        stamp = "\n".join([cmake, ninja or "", sys.executable] + cfg
                          + ([f"CXX={cxx}"] if cxx else []))
        stamp_file = build_dir / "specops_config.stamp"
        if build_dir.exists() and (not stamp_file.exists() or stamp_file.read_text() != stamp):
            shutil.rmtree(build_dir)
        build_dir.mkdir(parents=True, exist_ok=True)
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.check_call([cmake, "-S", str(ROOT), "-B", str(build_dir)] + cfg)
            stamp_file.write_text(stamp)
        jobs = os.environ.get("SPECOPS_BUILD_JOBS") or str(os.cpu_count() or 1)
        subprocess.check_call([cmake, "--build", str(build_dir), "-j", jobs])
        built = build_dir / "out" / out.name
        if not built.exists():
            raise RuntimeError(f"specops: cmake did not produce {built}")
        if built.resolve() != out:
            shutil.copy2(built, out)


build_cpp = os.environ.get("SPECOPS_BUILD_CPP", "1").strip().lower() not in ("0", "false",
                                                                                "no", "off")

if not build_cpp:  # never package a _C left in build/ by an earlier in-tree build
    for stale in ROOT.glob("build/lib*/specops/_C*"):
        stale.unlink()

setup(
    packages=find_packages(include=["specops", "specops.*"]),
    ext_modules=[CMakeExtension("specops._C")] if build_cpp else [],
    cmdclass={"build_ext": CMakeBuild} if build_cpp else {},
    zip_safe=False,
)
