"""The inference server against three in-process references, on one request mix, in one run.

Order matters on a small machine: the server runs alone (started as a child process, loaded,
driven at each concurrency level, then stopped), and only then does this process load the
model for the references, so the two never share the cores. The same request list is used by
every system at a given concurrency.
"""

import argparse
import asyncio
import gc
import logging
import time
from dataclasses import asdict, dataclass, field, replace

from . import report
from .latency import LevelResult, RequestRecord, percentile
from .machine_load import ForeignLoad
from .server_process import ServerProcess
from .sse_client import new_client, run_closed_loop, stream_chat
from .workload import BenchRequest, MixSpec, Workload

logger = logging.getLogger(__name__)

OURS = "ours"
TARGET_STATIC_SHARE = 0.9
TARGET_MANAGER_FACTOR = {16: 2.0, 64: 4.0}
TARGET_ITL_RATIO = 2.0
TARGET_PEAK_RSS_BYTES = 2.5e9
TARGET_LEVELS = (16, 64)
CANCEL_SAMPLING = {"temperature": 0.8, "top_p": 0.95}


@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...] = (1, 4, 16, 64)
    # Requests per level: a few rounds at each level for a steady state and a p99 worth the
    # name, sized so that the whole run stays under about 20 minutes on 2 cores. On such a CPU
    # transformers' manager is the slowest part by far: at 64 streams its attention spans every
    # stream's keys (about 2 s a step), so level 64 alone costs it some 7 minutes.
    requests: tuple[int, ...] = (8, 16, 48, 112)
    short_max_tokens: int = 48
    long_max_tokens: int = 192
    # The HF generate reference runs the level-1 list, capped: it is one request at a time.
    sequential_requests: int = 8
    manager_levels: tuple[int, ...] = (1, 4, 16, 64)
    static_levels: tuple[int, ...] = (1, 4, 16, 64)
    static_steps: int = 128
    cancel_streams: int = 16
    cancel_after_chunks: int = 16
    cancel_max_tokens: int = 256
    seed: int = 1234
    threads: int = 2
    quick: bool = False

    def count(self, level: int) -> int:
        return dict(zip(self.levels, self.requests))[level]


QUICK = Plan(
    levels=(1, 4, 16), requests=(2, 4, 16), short_max_tokens=8, long_max_tokens=24,
    sequential_requests=2, manager_levels=(4, 16), static_levels=(4, 16), static_steps=16,
    cancel_streams=16, cancel_after_chunks=8, cancel_max_tokens=40, quick=True,
)


@dataclass
class DeviceRun:
    device: str
    label: str
    levels: list[LevelResult] = field(default_factory=list)
    cancel: dict = field(default_factory=dict)
    targets: list[dict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    server_peak_is_per_level: bool = True

    def find(self, system: str, concurrency: int) -> LevelResult | None:
        for level in self.levels:
            if level.system == system and level.concurrency == concurrency:
                return level
        return None


# --- the command line ---
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of a few minutes: levels 1,4,16, a few short answers")
    parser.add_argument("--levels", help="comma-separated concurrency levels (default 1,4,16,64)")
    parser.add_argument("--requests",
                        help="comma-separated requests per level, one per --levels entry")
    parser.add_argument("--max-tokens",
                        help="max_tokens of short and long answers, comma-separated (default 48,192)")
    parser.add_argument("--static-steps", type=int,
                        help="decode steps of the static batch (default 128)")
    parser.add_argument("--seed", type=int, help="seed of the request mix (default 1234)")
    parser.add_argument("--threads", type=int,
                        help="torch threads for server and references (default 2)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: CPU, then GPU as well when torch sees one")
    parser.add_argument("--skip-references", action="store_true", help="measure the server only")
    parser.add_argument("--strict", action="store_true",
                        help="exit with 1 when a target fails (otherwise verdicts are only shown)")
    report.add_publish_arguments(parser, "benchmarks/inference.png and the BENCHMARKS.md section")


def plan_from(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else Plan()
    chosen = report.levels_with_counts(args.levels, args.requests, "requests",
                                       dict(zip(plan.levels, plan.requests)), lambda level: 2 * level)
    if chosen:
        levels, requests = chosen
        # The references always run where a target needs them.
        plan = replace(plan, levels=levels, requests=requests,
                       manager_levels=tuple(x for x in levels
                                            if x in plan.manager_levels or x in TARGET_LEVELS),
                       static_levels=tuple(x for x in levels
                                           if x in plan.static_levels or x in TARGET_LEVELS))
    if args.max_tokens:
        short, long = (int(x) for x in args.max_tokens.split(","))
        plan = replace(plan, short_max_tokens=short, long_max_tokens=long)
    if args.static_steps:
        plan = replace(plan, static_steps=args.static_steps)
    if args.seed is not None:
        plan = replace(plan, seed=args.seed)
    if args.threads:
        plan = replace(plan, threads=args.threads)
    return plan


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    # The manager and the loaders chatter at INFO; the benchmark's own progress is enough.
    for name in ("transformers", "ContinuousBatchingLogger", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    plan = plan_from(args)
    publish = report.publishing(args, plan.quick)
    logger.info("command: %s", args.command)

    import torch
    from transformers import AutoTokenizer

    from inference.config import InferenceConfig
    from inference.engine import loader

    started = time.time()
    machine = report.machine_notes(plan.threads)
    cache_dir = InferenceConfig.from_env().cache_dir
    model_dir = loader.converted_gguf(loader.default_model_path(), cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    workload = Workload(tokenizer, plan.seed)
    lists = {level: workload.requests(f"level-{level}", _mix(plan, plan.count(level)))
             for level in plan.levels}
    cancel_list = workload.requests("cancel", MixSpec(
        count=plan.cancel_streams, long_max_tokens=plan.cancel_max_tokens,
        long_prompt_share=0.0, long_output_share=1.0))
    warm_up = workload.requests("warm-up", MixSpec(count=2, short_max_tokens=4, long_max_tokens=4,
                                                   long_prompt_share=0.0))

    has_cuda = torch.cuda.is_available()
    if args.device == "cuda" and not has_cuda:
        raise SystemExit("--device cuda: torch sees no CUDA device")
    devices = [("cpu", "CPU")] if args.device != "cuda" else []
    if args.device == "cuda" or (args.device == "auto" and has_cuda):
        devices.append(("cuda", "GPU"))
    elif args.device == "auto":
        logger.info("no CUDA device: the GPU run is skipped")

    runs = []
    for device, label in devices:
        device_run = DeviceRun(device, label)
        _run_server(device_run, plan, cache_dir, lists, cancel_list, warm_up)
        if not args.skip_references:
            _run_references(device_run, plan, model_dir, tokenizer, lists)
        device_run.targets = evaluate_targets(device_run)
        runs.append(device_run)

    results = report.Results(command=args.command, plan=asdict(plan), machine=machine,
                             runs=runs, started=started, finished=time.time(),
                             workload=_workload_notes(lists, cancel_list))
    report.print_results(results)
    json_path = report.write_json(results)
    print(f"results: {json_path}")
    if publish:
        print(f"plot: {report.write_plot(results)}")
        print(f"section: {report.write_markdown(results)}")
    failed = [t for run in runs for t in run.targets if t["passed"] is False]
    return 1 if failed and args.strict else 0


def _mix(plan: Plan, count: int) -> MixSpec:
    return MixSpec(count=count, short_max_tokens=plan.short_max_tokens,
                   long_max_tokens=plan.long_max_tokens)


def _workload_notes(lists: dict[int, list[BenchRequest]], cancel_list: list[BenchRequest]) -> dict:
    every = [r for requests in lists.values() for r in requests]
    prompts = [r.num_prompt_tokens for r in every]
    return {
        "requests_per_level": {level: len(requests) for level, requests in lists.items()},
        "long_prompt_share": sum(r.long_prompt for r in every) / len(every),
        "prompt_tokens_min": min(prompts), "prompt_tokens_max": max(prompts),
        "max_tokens_values": sorted({r.max_tokens for r in every}),
        "cancel_streams": len(cancel_list),
        "cancel_sampling": CANCEL_SAMPLING,
    }


# --- the server ---
def _run_server(device_run: DeviceRun, plan: Plan, cache_dir, lists, cancel_list, warm_up) -> None:
    env = {
        "INFERENCE_DEVICE": device_run.device,
        # The references run fp32 too; the server's own default on a GPU would be bf16.
        "INFERENCE_DTYPE": "float32",
        "INFERENCE_THREADS": str(plan.threads),
        "INFERENCE_CACHE_DIR": str(cache_dir),
        "INFERENCE_MAX_RUNNING": str(max(64, max(plan.levels))),
    }
    server = ServerProcess(env)
    logger.info("[%s] starting the server on port %d", device_run.label, server.port)
    try:
        server.start()
        asyncio.run(run_closed_loop(server.base_url, server.model_name, warm_up, 2, "warm-up"))
        for level in plan.levels:
            requests = lists[level]
            server.reset_peak()
            logger.info("[%s] %s at %d streams: %d requests", device_run.label, OURS, level,
                        len(requests))
            with ForeignLoad([server.pid]) as load:
                result = asyncio.run(run_closed_loop(server.base_url, server.model_name, requests,
                                                     level, OURS))
            result.extra["peak_rss_bytes"] = server.peak_rss_bytes()
            result.extra["other_cpu_cores"] = load.cores
            _log_level(device_run, result)
            device_run.levels.append(result)
        logger.info("[%s] cancel: %d streams, half cancelled mid-stream", device_run.label,
                    len(cancel_list))
        server.reset_peak()
        with ForeignLoad([server.pid]) as load:
            device_run.cancel = asyncio.run(cancel_experiment(server, cancel_list,
                                                              plan.cancel_after_chunks))
        device_run.cancel["other_cpu_cores"] = load.cores
        device_run.server_peak_is_per_level = server.peak_is_per_level
    except BaseException:
        logger.error("server log tail:\n%s", server.log_tail())
        raise
    finally:
        server.close()


async def cancel_experiment(server: ServerProcess, requests: list[BenchRequest],
                            cancel_after_chunks: int, timeout_s: float = 600.0) -> dict:
    """All streams decode together; then every other one is cancelled mid-stream.

    The survivors' gaps before the cancel (all streams decoding, no prompt in flight) are
    compared with their gaps after it, from the moment the server reports the cancelled
    streams gone until the first survivor ends, so the batch is the same throughout each
    window. If a cancelled stream kept costing a step's work, the survivors could not get
    faster; the server's own gauge and counter say whether it dropped them, and how soon.
    """
    url = f"{server.base_url}/v1/chat/completions"
    model = server.model_name
    records = [RequestRecord(r.index, r.max_tokens, r.num_prompt_tokens, sent_at=0.0)
               for r in requests]
    async with new_client(len(requests), timeout_s) as client:
        before_metrics = await server.metrics(client)
        # Sampled, not greedy: greedy answers to these prompts end early and alike, which left
        # no window after the cancel in which every survivor was still decoding.
        tasks = [asyncio.create_task(stream_chat(client, url, model, request, record,
                                                 CANCEL_SAMPLING | {"seed": request.index}))
                 for request, record in zip(requests, records)]
        deadline = time.perf_counter() + timeout_s
        while not all(t.done() or len(r.arrivals) >= cancel_after_chunks
                      for t, r in zip(tasks, records)):
            if time.perf_counter() > deadline:
                raise TimeoutError("the cancel experiment's streams did not get going")
            await asyncio.sleep(0.002)
        cancelled_at = time.perf_counter()
        victims = [i for i in range(0, len(tasks), 2) if not tasks[i].done()]
        for i in victims:
            tasks[i].cancel()
        await asyncio.gather(*(tasks[i] for i in victims), return_exceptions=True)
        survivors = [i for i in range(len(tasks)) if i not in victims]

        # Polled gently: each scrape takes the server's event loop away from the streams.
        dropped_at, running_after = None, None
        while time.perf_counter() - cancelled_at < 10.0:
            metrics = await server.metrics(client)
            running_after = metrics.get("inference_running_sequences")
            live = sum(1 for i in survivors if not tasks[i].done())
            if running_after is not None and running_after <= live:
                dropped_at = time.perf_counter()
                break
            await asyncio.sleep(0.05)
        after_metrics = await server.metrics(client)
        await asyncio.gather(*(tasks[i] for i in survivors), return_exceptions=True)

    steady_from = max(r.arrivals[0] for r in records if r.arrivals)
    live_survivors = [records[i] for i in survivors if records[i].arrivals
                      and records[i].arrivals[-1] > cancelled_at]
    after_from = max(cancelled_at, dropped_at or cancelled_at)
    after_until = min((r.arrivals[-1] for r in live_survivors), default=after_from)
    before = _gaps_within([records[i] for i in survivors], steady_from, cancelled_at)
    after = _gaps_within(live_survivors, after_from, after_until)
    cancelled_count = (after_metrics.get("inference_requests_cancelled_total", 0.0)
                       - before_metrics.get("inference_requests_cancelled_total", 0.0))
    return {
        "streams": len(requests),
        "cancelled": len(victims),
        "survivors_running_at_cancel": len(live_survivors),
        "chunks_before_cancel": cancel_after_chunks,
        "itl_before_s": _window(before),
        "itl_after_s": _window(after),
        "server_running_after": running_after,
        "server_dropped_within_s": None if dropped_at is None else dropped_at - cancelled_at,
        "server_cancelled_counter_delta": cancelled_count,
        "survivor_errors": [records[i].error for i in survivors if records[i].error],
    }


def _gaps_within(records: list[RequestRecord], start: float, end: float) -> list[float]:
    return [b - a for r in records for a, b in zip(r.arrivals, r.arrivals[1:])
            if a >= start and b <= end]


def _window(gaps: list[float]) -> dict:
    return {"p50": percentile(gaps, 50), "p90": percentile(gaps, 90), "n": len(gaps)}


def _log_level(device_run: DeviceRun, result: LevelResult) -> None:
    s = result.summary()
    itl = s["itl_s"]
    logger.info("[%s] %s @%d: %.1f tok/s, %d/%d ok, ITL p50 %s p99 %s ms, %.1fs, other CPU %s",
                device_run.label, result.system, result.concurrency, s["output_tokens_per_s"] or 0,
                s["completed"], s["requests"], report.ms(itl["p50"]), report.ms(itl["p99"]),
                s["wall_s"], report.cores(s.get("other_cpu_cores")))


# --- the references ---
def _run_references(device_run: DeviceRun, plan: Plan, model_dir, tokenizer, lists) -> None:
    import torch

    from inference.engine.llm_engine import end_of_turn_ids

    from . import references

    torch.set_num_threads(plan.threads)
    model = references.load_model(model_dir, device_run.device)
    eos = sorted(end_of_turn_ids(model, tokenizer))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    try:
        smallest = min(plan.levels)
        sequential = lists[smallest][: plan.sequential_requests]
        logger.info("[%s] hf-generate, one at a time: %d requests", device_run.label,
                    len(sequential))
        _measure(device_run, references.sequential_generate, model, sequential, eos, pad_id)
        for level in plan.levels:
            if level in plan.manager_levels:
                logger.info("[%s] hf-manager at %d streams: %d requests", device_run.label, level,
                            len(lists[level]))
                _measure(device_run, references.manager_closed_loop, model, lists[level], level,
                         eos, pad_id)
            if level in plan.static_levels:
                batch = lists[level][:level]
                if len(batch) < level:
                    logger.warning("static batch at %d: only %d requests", level, len(batch))
                logger.info("[%s] static batch of %d, %d steps", device_run.label, len(batch),
                            plan.static_steps)
                _measure(device_run, references.static_batch, model, batch, plan.static_steps,
                         pad_id)
    finally:
        del model
        gc.collect()
        if device_run.device == "cuda":
            torch.cuda.empty_cache()


def _measure(device_run: DeviceRun, reference, *args) -> None:
    """Runs one reference; a failing one is reported and the run goes on with the others."""
    try:
        with ForeignLoad() as load:
            result = reference(*args)
    except Exception as error:
        logger.exception("[%s] %s failed", device_run.label, reference.__name__)
        device_run.failures.append(f"{reference.__name__}: {type(error).__name__}: {error}")
        return
    result.extra["other_cpu_cores"] = load.cores
    _log_level(device_run, result)
    device_run.levels.append(result)


# --- the targets ---
def evaluate_targets(run: DeviceRun) -> list[dict]:
    targets = []
    for level in TARGET_LEVELS:
        ours = run.find(OURS, level)
        static = run.find("static-batch", level)
        manager = run.find("hf-manager", level)
        ours_tps = ours.summary()["output_tokens_per_s"] if ours else None
        static_tps = static.summary()["output_tokens_per_s"] if static else None
        static_target = _ratio_target(
            f"throughput @{level}: ours >= {TARGET_STATIC_SHARE} x static batch",
            ours_tps, static_tps, TARGET_STATIC_SHARE)
        if static and static.extra.get("decode_tokens_per_s") and static_target["measured"]:
            # The static figure counts its prefill, as ours does; its decode alone is shown too.
            static_target["detail"] += (f" (static decode alone, prefill excluded: "
                                        f"{static.extra['decode_tokens_per_s']:.1f} tok/s)")
        targets.append(static_target)
        targets.append(_ratio_target(
            f"throughput @{level}: ours >= {TARGET_MANAGER_FACTOR[level]:g} x transformers' "
            "manager",
            ours_tps, manager.summary()["output_tokens_per_s"] if manager else None,
            TARGET_MANAGER_FACTOR[level]))
        targets.append(_itl_target(level, ours))
    targets.append(_cancel_target(run.cancel))
    ours64 = run.find(OURS, 64)
    peak = ours64.extra.get("peak_rss_bytes") if ours64 else None
    scope = "" if run.server_peak_is_per_level else " (peak since the server started)"
    targets.append({
        "name": f"memory @64: server peak RSS < {TARGET_PEAK_RSS_BYTES / 1e9:g} GB",
        "measured": peak, "threshold": TARGET_PEAK_RSS_BYTES,
        "passed": None if peak is None else peak < TARGET_PEAK_RSS_BYTES,
        "detail": "level 64 not run" if peak is None else f"{peak / 1e9:.2f} GB{scope}",
    })
    return targets


def _ratio_target(name: str, value: float | None, reference: float | None, factor: float,
                  detail: str | None = None) -> dict:
    """Passes when value >= factor x reference."""
    if value is None or reference is None or reference <= 0:
        return {"name": name, "measured": None, "threshold": factor, "passed": None,
                "detail": detail or "not measured in this run"}
    ratio = value / reference
    return {"name": name, "measured": ratio, "threshold": factor, "passed": ratio >= factor,
            "detail": detail or f"{value:.1f} vs {reference:.1f} tok/s = {ratio:.2f}x"}


def _itl_target(level: int, ours: LevelResult | None) -> dict:
    name = f"ITL @{level} while requests keep arriving: ours p99 <= {TARGET_ITL_RATIO:g} x p50"
    itl = ours.summary()["itl_s"] if ours else {}
    if not itl.get("p50"):
        return {"name": name, "measured": None, "threshold": TARGET_ITL_RATIO, "passed": None,
                "detail": "not measured in this run"}
    ratio = itl["p99"] / itl["p50"]
    return {"name": name, "measured": ratio, "threshold": TARGET_ITL_RATIO,
            "passed": ratio <= TARGET_ITL_RATIO,
            "detail": f"p50 {report.ms(itl['p50'])} ms, p99 {report.ms(itl['p99'])} ms "
                      f"= {ratio:.2f}x"}


def _cancel_target(cancel: dict) -> dict:
    name = "cancel @16: survivors' ITL after cancelling half is no worse than before"
    before, after = cancel.get("itl_before_s", {}), cancel.get("itl_after_s", {})
    if not before.get("n") or not after.get("n"):
        return {"name": name, "measured": None, "threshold": 1.0, "passed": None,
                "detail": "a window had no gaps (streams ended too early)"}
    ratio = after["p50"] / before["p50"]
    dropped = cancel["server_dropped_within_s"]
    passed = (ratio <= 1.0 and dropped is not None
              and cancel["server_cancelled_counter_delta"] == cancel["cancelled"])
    detail = (f"ITL p50 {report.ms(before['p50'])} -> {report.ms(after['p50'])} ms "
              f"(p90 {report.ms(before['p90'])} -> {report.ms(after['p90'])} ms); server dropped "
              f"{cancel['cancelled']} of {cancel['streams']} "
              + ("never" if dropped is None else f"within {dropped * 1000:.0f} ms")
              + f", cancelled counter +{cancel['server_cancelled_counter_delta']:g}")
    return {"name": name, "measured": ratio, "threshold": 1.0, "passed": passed, "detail": detail}

