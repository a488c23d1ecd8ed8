"""llama.cpp's source comes from the git directory the sdist vendors; a built release and a
converted model are reused; the tests' build optimises ggml alone. No test here builds
llama.cpp (minutes): the last reads the build the llama.cpp tests make (tests/llama_server.py)."""

import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from benchmarks.llama_cpp import Build, LlamaCpp

VERSION = "9.9.9"


def git(*args, cwd) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def sdist_home(tmp_path):
    """A release folder holding an sdist laid out as llama-cpp-python's: the vendored
    repository's git directory under .git/modules, its work tree only partly shipped."""
    top = tmp_path / "build-sdist" / f"llama_cpp_python-{VERSION}"
    vendored = top / "vendor" / "llama.cpp"
    vendored.mkdir(parents=True)
    (top / ".git/modules/vendor").mkdir(parents=True)
    git("init", "-q", "--separate-git-dir", str(top / ".git/modules/vendor/llama.cpp"), ".",
        cwd=vendored)
    # As a submodule's git directory does: it names its work tree by a relative path.
    git("config", "core.worktree", "../../../../vendor/llama.cpp", cwd=vendored)
    (vendored / "CMakeLists.txt").write_text("project(llama)\n")
    (vendored / "convert_hf_to_gguf.py").write_text("print('convert')\n")
    git("add", ".", cwd=vendored)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "vendored", cwd=vendored)
    (vendored / "convert_hf_to_gguf.py").unlink()  # the sdist may leave files out
    (top / "setup.py").write_text("")
    download = tmp_path / "releases" / VERSION / "download"
    download.mkdir(parents=True)
    with tarfile.open(download / f"llama_cpp_python-{VERSION}.tar.gz", "w:gz") as archive:
        archive.add(top, arcname=top.name)
    return tmp_path / "releases"


@pytest.mark.process
def test_the_source_is_the_vendored_commit_files_the_sdist_left_out_included(sdist_home):
    llama_cpp = LlamaCpp(sdist_home, VERSION)

    llama_cpp._unpack_source(llama_cpp._download_sdist())

    assert sorted(p.name for p in llama_cpp.source.iterdir()) == ["CMakeLists.txt",
                                                                  "convert_hf_to_gguf.py"]
    assert sorted(p.name for p in llama_cpp.home.iterdir()) == ["commit", "download",
                                                                "download.log", "src"]
    assert len(llama_cpp.commit) == 40


def test_a_built_server_is_reused_without_building_again(tmp_path):
    llama_cpp = LlamaCpp(tmp_path, VERSION)
    llama_cpp.server_binary.parent.mkdir(parents=True)
    llama_cpp.server_binary.write_text("#!/bin/sh\n")
    llama_cpp.server_binary.chmod(0o755)

    assert llama_cpp.build() == llama_cpp.server_binary
    assert not llama_cpp.source.exists()


def test_a_converted_model_is_reused_and_an_unknown_precision_refused(tmp_path):
    llama_cpp = LlamaCpp(tmp_path, VERSION)
    llama_cpp.home.mkdir(parents=True)
    converted = llama_cpp.home / "SmolLM2-abc.f16.gguf"
    converted.write_bytes(b"GGUF")

    assert llama_cpp.gguf(tmp_path / "SmolLM2-abc", "f16") == converted
    with pytest.raises(ValueError, match="outtype"):
        llama_cpp.gguf(tmp_path / "SmolLM2-abc", "q4_0")


@pytest.mark.llama_cpp
@pytest.mark.timeout(1500)  # it may wait for the tests' build of llama-server
def test_the_tests_build_optimises_ggml_and_nothing_else(tmp_path):
    llama_cpp = LlamaCpp(build=Build.TESTS)
    llama_cpp.build()  # its source, unpacked once
    source = llama_cpp.source
    subprocess.run(["cmake", "-S", str(source), "-B", str(tmp_path), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                    *Build.TESTS.cmake_flags], check=True, capture_output=True)

    # Each object's last -O wins; objects lie under their source folder's name in the build.
    last_level = {}
    for entry in json.loads((tmp_path / "compile_commands.json").read_text()):
        built = Path(entry["directory"], re.search(r" -o (\S+)", entry["command"])[1]).relative_to(tmp_path)
        last_level[built.as_posix()] = re.findall(r" -O(\d)", entry["command"])[-1]
    assert {level for built, level in last_level.items() if built.startswith("ggml/")} == {"3"}
    assert {level for built, level in last_level.items() if not built.startswith("ggml/")} == {"0"}
    assert any(built.startswith("tools/server/") for built in last_level)
