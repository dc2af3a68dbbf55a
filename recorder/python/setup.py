"""Builds libdrift_recorder.so through drift's CMake and ships it inside
the drift_recorder package (pyproject.toml holds the metadata).

Environment: DRIFT_SOURCE_DIR (the drift checkout; default: two folders
up), DRIFT_RECORDER_BUILD_DIR (the CMake build folder; default: under
setuptools' build_temp), DRIFT_CMAKE_ARGS (extra configure arguments, e.g.
-DDRIFT_CUDA=OFF), DRIFT_RECORDER_PREBUILT (an existing
libdrift_recorder.so to ship instead of building)."""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "libdrift_recorder.so"


def _source_dir():
    src = os.environ.get("DRIFT_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
    if not (os.path.isfile(os.path.join(src, "CMakeLists.txt")) and
            os.path.isfile(os.path.join(src, "recorder", "recorder.h"))):
        sys.exit(f"drift-recorder: {src} is not the drift checkout (no CMakeLists.txt and recorder/recorder.h): "
                 "install from the checkout (pip install ./recorder/python) or set DRIFT_SOURCE_DIR")
    return src


def _run(cmd):
    print("drift-recorder:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    # CI=true makes drift's CMake treat warnings as errors (the project's own CI gate); a user's
    # install inside their CI job must not fail on a compiler's -O3 false positive
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    subprocess.check_call(cmd, env=env)


def build_library(build_temp):
    """The path of a freshly built libdrift_recorder.so."""
    pre = os.environ.get("DRIFT_RECORDER_PREBUILT")
    if pre:
        if not os.path.isfile(pre):
            sys.exit(f"drift-recorder: DRIFT_RECORDER_PREBUILT={pre}: no such file")
        return pre
    if shutil.which("cmake") is None:
        sys.exit("drift-recorder: cmake not found (apt-get install cmake): it builds libdrift_recorder.so")
    src = _source_dir()
    bdir = os.environ.get("DRIFT_RECORDER_BUILD_DIR") or os.path.join(os.path.abspath(build_temp), "drift-cmake")
    os.makedirs(bdir, exist_ok=True)
    # only the recorder's library: no tests, no dashboard, no NCCL, BLAS not required; CUDA when present
    _run(["cmake", "-S", src, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release", "-DDRIFT_RECORDER_ONLY=ON",
          "-DDRIFT_TESTS=OFF", "-DDRIFT_TUI=OFF", "-DDRIFT_NCCL=OFF"] +
         shlex.split(os.environ.get("DRIFT_CMAKE_ARGS", "")))
    _run(["cmake", "--build", bdir, "--target", "drift_recorder_shared", "-j", str(max(1, min(os.cpu_count() or 1, 16)))])
    out = os.path.join(bdir, LIB)
    if not os.path.isfile(out):
        sys.exit(f"drift-recorder: the build did not produce {out}")
    return out


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        build_temp = self.get_finalized_command("build").build_temp
        lib = build_library(build_temp)
        dst = os.path.join(self.build_lib, "drift_recorder", LIB)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(lib, dst)


class BinaryDistribution(Distribution):
    """A platform wheel: the package carries a shared library."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLib}, distclass=BinaryDistribution)
