"""llama.cpp's server, built from source once, and our model's weights as GGUF files it serves.

The `llama-cpp-python` sdist on PyPI vendors llama.cpp together with its git directory, so a
pinned release gives a pinned llama.cpp commit through the ordinary package client. Everything
lands under one folder per release (`~/.cache/chatapp/llama.cpp/<version>/` unless told
otherwise) and is reused when present:

    download/   the sdist
    src/        llama.cpp at the vendored commit (`git archive`, no work tree needed)
    build/      CMake + Ninja; build/bin/llama-server is the one target built
    build-tests/  the same, with only ggml optimised (Build.TESTS): the tests' upstream
    *.gguf      the converted model, one file per precision

Building takes about 10 minutes on 2 cores (the tests' build about 60% of it); nothing else in
the benchmark needs a compiler. `python -m benchmarks.llama_cpp` prepares it all ahead of a
run, every precision included.
"""

import argparse
import contextlib
import enum
import logging
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from common import build_lock

logger = logging.getLogger(__name__)

VERSION = "0.3.36"
DEFAULT_ROOT = Path.home() / ".cache" / "chatapp" / "llama.cpp"
# The precisions convert_hf_to_gguf.py writes that are worth comparing with ours: F32 and BF16
# are the same arithmetic as ours at float32 and bfloat16; F16 and Q8_0 are for other
# reduced-precision comparisons.
OUTTYPES = ("f32", "bf16", "f16", "q8_0")
# Native code for this CPU; no TLS (nothing is fetched) and no web UI (it would be downloaded).
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
]
_VENDORED_GIT_DIR = ".git/modules/vendor/llama.cpp"


class Build(enum.Enum):
    """How llama-server is compiled; the value names its build folder."""

    RELEASE = "build"  # as llama.cpp ships it: the benchmark's reference
    # Only ggml optimised (llama_cpp_tests.cmake): about 60% of the compile time, for the tests.
    TESTS = "build-tests"

    @property
    def cmake_flags(self) -> list[str]:
        if self is Build.TESTS:
            include = Path(__file__).with_name("llama_cpp_tests.cmake")
            return [*CMAKE_FLAGS, f"-DCMAKE_PROJECT_INCLUDE={include}"]
        return CMAKE_FLAGS


def _is_vendored_git(name: str) -> bool:
    inside = name.split("/", 1)[1] if "/" in name else ""  # below the sdist's top folder
    return inside == _VENDORED_GIT_DIR or inside.startswith(_VENDORED_GIT_DIR + "/")


class LlamaCpp:
    """One llama.cpp release's source, server binary and GGUF files, under `root/<version>`."""

    def __init__(self, root: Path = DEFAULT_ROOT, version: str = VERSION, jobs: int = 2,
                 build: Build = Build.RELEASE):
        self.home = Path(root).expanduser() / version
        self.version, self.jobs, self.flavour = version, jobs, build
        self.source = self.home / "src"
        self.build_dir = self.home / build.value
        self.server_binary = self.build_dir / "bin" / "llama-server"

    # --- the server binary ---
    @property
    def commit(self) -> str:
        """The llama.cpp commit the sdist vendors (llama-server itself says "unknown")."""
        path = self.home / "commit"
        return path.read_text().strip() if path.exists() else "unknown"

    @property
    def is_built(self) -> bool:
        return os.access(self.server_binary, os.X_OK)

    def build(self) -> Path:
        """The llama-server binary, fetched and compiled the first time.

        One build at a time per release folder: a second caller (the tests' background build and
        a test that needs the binary, say) waits for the first and then finds the binary."""
        # The source is unpacked once, too.
        build_lock.build_once(self.home / "build.lock", lambda: self.is_built, self._build)
        return self.server_binary

    def build_in_background(self) -> subprocess.Popen | None:
        """`build()` in a child process at the lowest CPU priority, so that it takes what other
        work leaves (the tests, the installs before them); None when the binary is built."""
        if self.is_built:
            return None
        self.home.mkdir(parents=True, exist_ok=True)
        flavour = ["--for-tests"] if self.flavour is Build.TESTS else ["--server-only"]
        with (self.home / "background-build.log").open("ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.llama_cpp", "--dir", str(self.home.parent), *flavour],
                cwd=Path(__file__).resolve().parent.parent, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=lambda: os.nice(19))
        # With autogroups (Linux's default) the CPU is shared between sessions first, so a nice
        # value alone would still give the build a session's share: its group is niced too.
        # Where that is not allowed, the build just competes.
        with contextlib.suppress(OSError):
            Path(f"/proc/{child.pid}/autogroup").write_text("19")
        return child

    def _build(self) -> None:
        if not (self.source / "CMakeLists.txt").exists():
            self._unpack_source(self._download_sdist())
        log = f"{self.flavour.value}.log"
        logger.info("building llama-server %s in %s (%s on 2 cores; log: %s)", self.version,
                    self.build_dir, "about 10 minutes" if self.flavour is Build.RELEASE else "minutes",
                    self.home / log)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        self._run(["cmake", "-S", str(self.source), "-B", str(self.build_dir), *generator,
                   *self.flavour.cmake_flags], log)
        self._run(["cmake", "--build", str(self.build_dir), "--target", "llama-server",
                   f"-j{self.jobs}"], log)
        if not self.is_built:
            raise RuntimeError(f"the build finished without {self.server_binary}")

    def _download_sdist(self) -> Path:
        download = self.home / "download"
        sdist = download / f"llama_cpp_python-{self.version}.tar.gz"
        if not sdist.exists():
            logger.info("downloading the llama-cpp-python %s sdist", self.version)
            self._run([sys.executable, "-m", "pip", "download", "--no-deps",
                       # The sdist itself; its build tools may come as wheels (from source, they
                       # took minutes to prepare only the sdist's metadata).
                       "--no-binary", "llama-cpp-python",
                       f"llama-cpp-python=={self.version}", "-d", str(download)], "download.log")
        return sdist

    def _unpack_source(self, sdist: Path) -> None:
        """Only the vendored repository's git directory is taken from the sdist; `git archive`
        then writes llama.cpp's tree at that commit, files the sdist itself may leave out included."""
        unpacked = self.home / "sdist"
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if _is_vendored_git(m.name)]
            archive.extractall(unpacked, members=members, filter="data")
        [git_dir] = unpacked.glob(f"*/{_VENDORED_GIT_DIR}")
        # The git directory names a work tree the sdist does not ship; nothing here needs one.
        git = ["git", f"--git-dir={git_dir}", f"--work-tree={unpacked}"]
        tree = self.home / "src.tar"
        self._run([*git, "archive", "--format=tar", f"--output={tree}", "HEAD"], "download.log")
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        (self.home / "commit").write_text(commit + "\n")
        partial = self.source.with_name("src.partial")
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(tree) as archive:
            archive.extractall(partial, filter="data")
        partial.rename(self.source)
        tree.unlink()
        shutil.rmtree(unpacked)

    # --- the weights ---
    def gguf(self, model_dir: Path, outtype: str = "f32") -> Path:
        """`model_dir` (a Hugging Face directory) as a GGUF file, converted the first time.

        The file is named after the directory, which our loader names after its source file
        and a hash of it, so a different model never picks up a stale conversion."""
        if outtype not in OUTTYPES:
            raise ValueError(f"outtype must be one of {OUTTYPES}, got {outtype!r}")
        target = self.home / f"{Path(model_dir).name}.{outtype}.gguf"
        if target.exists():
            return target
        if not (self.source / "convert_hf_to_gguf.py").exists():
            self._unpack_source(self._download_sdist())
        logger.info("converting %s to %s", model_dir, target.name)
        partial = target.with_name(target.name + f".partial-{os.getpid()}")
        # The vendored gguf-py goes first: it matches the converter, the installed one may not.
        env = {**os.environ, "PYTHONPATH": str(self.source / "gguf-py")}
        self._run([sys.executable, str(self.source / "convert_hf_to_gguf.py"), str(model_dir),
                   "--outtype", outtype, "--outfile", str(partial)], "convert.log", env=env)
        partial.rename(target)  # atomic: an interrupted conversion leaves no half file behind
        return target

    def _run(self, command: list[str], log_name: str, env: dict | None = None) -> None:
        log_path = self.home / log_name
        with log_path.open("a") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        if result.returncode != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"{command[0]} failed with {result.returncode}:\n{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.llama_cpp",
                                     description="Build llama-server and convert the default "
                                                 "model to every GGUF precision, ahead of a run.")
    parser.add_argument("--dir", type=Path, default=DEFAULT_ROOT,
                        help=f"where releases are kept (default {DEFAULT_ROOT})")
    parser.add_argument("--server-only", action="store_true", help="only build llama-server")
    parser.add_argument("--for-tests", action="store_true",
                        help="only build the tests' llama-server (Build.TESTS: only ggml optimised)")
    parser.add_argument("--in-background", action="store_true",
                        help="start that build at the lowest CPU priority and return (.ci/run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    only_server = LlamaCpp(args.dir, build=Build.TESTS if args.for_tests else Build.RELEASE)
    if args.in_background:
        child = only_server.build_in_background()
        print(f"building in process {child.pid}" if child else f"built: {only_server.server_binary}")
        return 0
    if args.for_tests or args.server_only:
        print(only_server.build())
        return 0

    from inference.config import InferenceConfig
    from inference.engine import loader

    llama_cpp = LlamaCpp(args.dir)
    print(llama_cpp.build())
    model_dir = loader.converted_gguf(loader.default_model_path(),
                                      InferenceConfig.from_env().cache_dir)
    for outtype in OUTTYPES:
        print(llama_cpp.gguf(model_dir, outtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
