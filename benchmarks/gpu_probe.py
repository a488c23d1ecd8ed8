"""The engine's steps on a lent GPU, by hand, no HTTP: what each kind of step costs and where the
host spends it, for the minutes left after `make gpu-check` (its wheels, installed on the lent
machine, serve here too; `make gpu-check-prepare` prints the call).

`python3 -m benchmarks.gpu_probe --json PATH [--streams 1,16,64] [--deadline EPOCH]`, with the
server's INFERENCE_* variables (gpu_bench.GPU_SERVER_ENV by default). At each count of streams
(prompts of random tokens, end-of-turn ignored) it times the steps that feed the prompts
(alongside the streams already decoding), then plain decode steps, then the steps that feed one
more prompt while all of them decode; each kind's steps run once more under cProfile, whose
heaviest functions by own time say where the host's time goes (a wait on the GPU shows as the
function that waited). The captured graphs' counters come with each count. Results are written
after each count, so a call cut short keeps what it measured.
"""

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

from . import engine_by_hand, gpu_wheels
from .gpu_bench import GPU_SERVER_ENV

PROMPT_TOKENS = 100
LATE_PROMPT_TOKENS = 300


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.gpu_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", required=True)
    parser.add_argument("--streams", default="1,16,64")
    parser.add_argument("--steps", type=int, default=30, help="timed plain decode steps a count")
    parser.add_argument("--deadline", type=float, default=float("inf"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    defaults = {**GPU_SERVER_ENV, "INFERENCE_DEVICE": "cuda", "HF_HUB_OFFLINE": "1"}
    for name, value in defaults.items():
        os.environ.setdefault(name, value)
    site = gpu_wheels.staged_site()  # what make gpu-check installed on the lent machine
    if isinstance(site, Path):
        sys.path.insert(0, str(site))

    from inference.config import InferenceConfig

    started = time.time()
    engine = engine_by_hand.loaded(InferenceConfig.from_env())
    results = {"load_s": round(time.time() - started, 1), "levels": []}
    rng = random.Random(0)
    for streams in (int(count) for count in args.streams.split(",")):
        if time.time() + 30 > args.deadline:
            results["levels"].append({"streams": streams, "skipped": "out of time"})
            break
        level = {"streams": streams}
        for index in range(streams):
            engine.add_request(f"{streams}-{index}", _prompt(rng, PROMPT_TOKENS),
                               _params(args.steps + 40))
        decoding: set[str] = set()  # a stream's first output ends its prompt

        def feeding(outputs) -> bool:
            decoding.update(output.request_id for output in outputs)
            return len(decoding) < streams
        level["feeding"] = _kind(engine, feeding)
        engine.step()
        level["decoding"] = _kind(engine, _counted(args.steps))
        engine.add_request(f"{streams}-late", _prompt(rng, LATE_PROMPT_TOKENS), _params(8))
        level["late_prompt"] = _kind(engine, lambda outputs: not any(
            output.request_id == f"{streams}-late" for output in outputs))
        level["graph"] = _graph_counters(engine)
        engine.abort_all()
        while engine.has_work():
            engine.step()
        results["levels"].append(level)
        print(json.dumps({key: (value if key in ("streams", "graph") else value["summary"])
                          for key, value in level.items()}), flush=True)
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


def _prompt(rng: random.Random, tokens: int) -> list[int]:
    return [rng.randrange(100, 30000) for _ in range(tokens)]


def _params(max_tokens: int):
    from inference.engine import SamplingParams

    return SamplingParams(max_tokens=max_tokens)


def _counted(steps: int):
    left = [steps]

    def more(_outputs) -> bool:
        left[0] -= 1
        return left[0] > 0
    return more


def _kind(engine, goes_on) -> dict:
    """Steps timed while `goes_on(outputs)` holds (at most 400); every fifth of them (and the
    first) under cProfile, its time counted apart."""
    times, profiled, profiler = [], 0, cProfile.Profile()
    while len(times) < 400:
        if (len(times) + profiled) % 5 == 0:
            outputs = profiler.runcall(engine.step)
            profiled += 1
            if goes_on(outputs):
                continue
            break
        started = time.perf_counter()
        outputs = engine.step()
        times.append((time.perf_counter() - started) * 1e3)
        if not goes_on(outputs):
            break
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    times = times or [float("nan")]
    summary = {"steps": len(times), "profiled": profiled,
               "median_ms": round(statistics.median(times), 2),
               "min_ms": round(min(times), 2), "max_ms": round(max(times), 2)}
    return {"summary": summary, "times_ms": [round(t, 2) for t in times],
            "profile": text.getvalue()}


def _graph_counters(engine) -> dict:
    graph = engine.runner.graph
    captured = getattr(graph, "captured", None)
    return {"compiled_steps": getattr(graph, "num_steps", None),
            "fallbacks": getattr(graph, "num_fallbacks", None),
            "captures": getattr(captured, "num_captures", None),
            "replays": getattr(captured, "num_replays", None),
            "buckets": [list(bucket) for bucket in getattr(captured, "buckets", [])],
            "refused": getattr(captured, "refused", None)}


if __name__ == "__main__":
    raise SystemExit(main())
