"""`make gpu-check`'s measurement and its table: the inference service in bf16 at each level of the
plan, then a static batch in this process as a ceiling; BENCHMARKS.md's GPU section."""

import json
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common import env

from . import report
from .gpu_wheels import pins


@dataclass(frozen=True)
class Plan:
    device: str
    levels: tuple[int, ...]
    requests: tuple[int, ...]
    max_tokens: tuple[int, int]  # short and long answers, as the inference benchmark mixes them
    static_steps: int
    test_args: tuple[str, ...]
    tests_at_least_s: int  # the benchmark stops this long before the deadline; tests get the rest
    # The whole run, staging to section; a benchmark level that would start later is skipped.
    budget_s: int
    server_env: dict


# A GPU server keeps every stream of the top level running: 256 streams of up to about 600
# tokens need this many cache tokens (about 6 GB of bf16 keys and values for this model). Its
# decode steps compiled before it serves (`auto` compiles while serving and then times both ways
# in turns: the first levels would measure those), replayed from CUDA graphs by default.
GPU_SERVER_ENV = {"INFERENCE_DTYPE": "bfloat16", "INFERENCE_MAX_RUNNING": "256",
                  "INFERENCE_MAX_CACHED_TOKENS": "262144", "INFERENCE_COMPILE": "on"}
# The server's step counters (inference/metrics.py), read around each level: which way its steps ran.
STEP_COUNTERS = {"all": "inference_steps_total", "compiled": "inference_steps_compiled_total",
                 "replayed": "inference_steps_replayed_total"}
PLANS = {
    # Six workers of the machine's 16 cores: on 2 cores, two took 137 s for tests/inference.
    "cuda": Plan("cuda", (1, 16, 64, 256), (8, 48, 128, 512), (48, 192), 128,
                 ("tests/inference", "-n", "6", "--dist", "loadgroup", "--no-loadscope-reorder"),
                 210, 480, GPU_SERVER_ENV),
    "cpu": Plan("cpu", (1, 4), (2, 4), (8, 16), 8,
                ("tests/inference/test_scheduler.py", "tests/inference/test_kv_cache.py",
                 "tests/inference/test_model_runner.py", "tests/inference/test_cancellation.py"),
                300, 900, {**GPU_SERVER_ENV, "INFERENCE_THREADS": "2"}),
}


def bench(args) -> int:
    """The server alone at each level, then a static batch in this process (a ceiling)."""
    import asyncio
    import gc

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference.config import InferenceConfig
    from inference.engine import loader

    from . import references
    from .machine import inference_notes
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
               "machine": {**inference_notes(int(server_env.get("INFERENCE_THREADS", 0))),
                           "cuda": torch.version.cuda,
                           "pinned_torch": pins()["torch"].split("==")[1]},
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
            before = _step_counts(server)
            result = asyncio.run(run_closed_loop(server.base_url, server.model_name,
                                                 lists[level], level, "ours"))
            after = _step_counts(server)
            results["levels"].append({**result.summary(), "gpu_memory_mib": _gpu_memory_mib(),
                                      "step_ways": {way: after[way] - before[way] for way in STEP_COUNTERS}})
            print(_line(results["levels"][-1]), flush=True)
            save()
    except BaseException:
        print(f"server log tail:\n{server.log_tail()}", flush=True)
        raise
    finally:
        # The whole log beside the results: a lent machine is gone after the call, and its
        # compile, capture and fallback lines are what explain the figures.
        Path(args.json).with_name("server.log").write_text(server.log_text())
        server.close()

    dtype = getattr(torch, server_env["INFERENCE_DTYPE"])
    loader.steady_attention(torch.device(plan.device))  # the ceiling with the server's attention
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


def _step_counts(server) -> dict[str, int]:
    import httpx2

    from common.metrics import metric_values

    values = metric_values(httpx2.get(f"{server.base_url}/metrics", timeout=10).text)
    return {way: int(values.get(name, 0)) for way, name in STEP_COUNTERS.items()}


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
            f"{s['output_tokens_per_s'] or 0:.0f} tok/s, TTFT ms {report.triple(s['ttft_s'])}, "
            f"ITL ms {report.triple(s['itl_s'])}")


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
        "Steps: the server's forward passes during the level, those of them run as one compiled step, "
        "and of those the ones replayed from a captured CUDA graph (inference/metrics.py).", "",
        "| system | streams | ok/reqs | out tok/s | TTFT ms p50/p90/p99 | ITL ms p50/p90/p99 "
        "| GPU memory used | steps: all / compiled / replayed |", "|---|---|---|---|---|---|---|---|",
    ]
    for s in results.get("levels", []) + results.get("static", []):
        memory, steps = s.get("gpu_memory_mib"), s.get("step_ways")
        lines.append(
            f"| {'ours (HTTP/SSE)' if s['system'] == 'ours' else 'static batch'} "
            f"| {s['concurrency']} | {s['completed']}/{s['requests']} "
            f"| {s['output_tokens_per_s'] or 0:.1f} | {report.triple(s['ttft_s'])} "
            f"| {report.triple(s['itl_s'])} | {'-' if memory is None else f'{memory} MiB'} "
            f"| {'-' if steps is None else ' / '.join(str(steps[way]) for way in STEP_COUNTERS)} |")
    notes = results.get("skipped", []) + (
        [f"benchmark exit: {results['bench_status']}"] if results.get("bench_status") else [])
    lines += ([""] + [f"**{note}**" for note in notes]) if notes else []
    return "\n".join(lines).rstrip()
