"""The engine's decode step alone: its time split into the weight products and everything else,
at each precision, against the memory roofline.

`python -m benchmarks step [--streams 1,4,16] [--dtypes float32,bfloat16]`. Each precision
runs in a child process of its own (two models in one process share the CPU's caches and slow
each other): the model is loaded as the server loads it (INFERENCE_* variables apply), then its
engine is stepped by hand: every stream has a prompt of random tokens and decodes to the end
(end-of-turn tokens are ignored), and only steps where every stream decodes are timed. No HTTP,
no event loop. After each round of timed steps a few more run under torch.profiler, and the self
time of the weight products (and of attention) is read from its operator table (our own
kernels tell it of each call, through torch's dispatcher or their C entry points alike):
"the rest" is that round's median unprofiled step minus its products (the median over the
rounds), i.e. everything a faster matrix kernel would not remove.

Each precision runs three times: the fused forward alone (INFERENCE_COMPILE=off), with the
decode step compiled (on, INFERENCE_NATIVE_STEP=false; inference/engine/decode_graph.py), whose
compile, paid at load, is not timed, and as one call of our own C++ (native;
inference/engine/native_step.py), whose products and attention the profiler cannot see inside
that call: its own clock splits its steps instead (kernels/decode_step.cpp, `PhaseClock`: the
first thread's time in products, attention and the rest of its parallel region; the rest
outside the region is the step less those). The two latter also take steps in turns with the
fused forward, so that each is compared with it within one process, as
INFERENCE_COMPILE=auto's trial compares them. Where the native step screens its output matrix
(a greedy stream's step, native_step.py), its steps are also taken in turns through the screen,
whatever the number of rows, and through the whole float32 product. With
`--baseline TREE` each precision also runs another checkout's engine just before this tree's,
so that a change is compared within one run (TREE's own copy of this benchmark runs there: copy
this file and roofline.py in when TREE is older than them).
Figures on a shared machine swing with the other load (the "other CPU" column: cores' worth of
work by other processes meanwhile); the fastest step moves less than the median. The CPU time
per step counts both threads, OpenMP's spinning at the end of each product included, so it
grows with contention too.

The memory bandwidth (roofline.py) is measured in each child after each one-stream round,
and again in this process once the children are gone: the weights one token reads divided by
it is the fastest possible step for one stream, each round's median step set against its own
round's bandwidth (these machines' bandwidth moves between two levels within minutes).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from inference import huge_pages
from inference.config import InferenceConfig

from . import engine_by_hand, roofline
from .latency import spread
from .machine_load import ForeignLoad

# Operators that multiply by a weight matrix: torch's product (plain layout, both precisions)
# oneDNN's (packed layout) and our own (own_kernels.py).
PRODUCTS = frozenset({"aten::mm", "aten::addmm", "mkldnn::_linear_pointwise", "chatapp::dot_rows"})
ATTENTION = frozenset({"chatapp::decode_attention", "chatapp::decode_attention_rows",
                       "aten::_scaled_dot_product_flash_attention_for_cpu",
                       "aten::_scaled_dot_product_attention_math",
                       "aten::_scaled_dot_product_efficient_attention",
                       "aten::_scaled_dot_product_flash_attention"})
# Operators of the rest shown by name: the largest few by self time.
LARGEST_REST = 4
# The native step's phases after its products and attention (kernels/decode_step.cpp, `Phase`).
NATIVE_REST = ("norms", "activations", "greedy")
# Each child's decode step: its INFERENCE_COMPILE and INFERENCE_NATIVE_STEP.
STEP_MODES = {"off": ("off", "false"), "on": ("on", "false"), "native": ("on", "true")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--streams", default="1,4,16", help="comma-separated stream counts")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="precisions, one child each")
    parser.add_argument("--steps", type=int, default=20, help="timed decode steps per count and round")
    parser.add_argument("--profiled-steps", type=int, default=6, help="profiled steps per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of timed steps then profiled steps, taken in turns")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="each stream's sampling temperature (0: greedy, as the inference benchmark)")
    parser.add_argument("--top-p", type=float, default=1.0, help="each stream's nucleus")
    parser.add_argument("--compile", default=",".join(STEP_MODES),
                        help="decode steps, one child each: the fused forward alone (off), the "
                             "compiled graph (on) and our own C++ step (native)")
    parser.add_argument("--baseline", metavar="TREE",
                        help="also step another checkout's engine (e.g. `git archive` of the base "
                             "commit unpacked), each precision right before this tree's")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.child:
        print(json.dumps(_measure(args)))
        return 0
    modes = args.compile.split(",")
    runs = [(f"baseline, compile {mode}", args.baseline, mode) for mode in modes] if args.baseline else []
    runs += [(f"this tree, compile {mode}", None, mode) for mode in modes]
    results = [_child(args, dtype, code, tree, mode) for dtype in args.dtypes.split(",")
               for code, tree, mode in runs]
    bandwidth = roofline.bandwidth(threads=2)
    print(f"\nCommand: `{getattr(args, 'command', 'python -m benchmarks step')}`\n")
    print(_split_table(results))
    print(_roofline_table(results, bandwidth))
    return 0


def _child(args: argparse.Namespace, dtype: str, code: str, tree: str | None, compile_mode: str) -> dict:
    command = [sys.executable, "-m", "benchmarks", "step", "--child", "--streams", args.streams,
               "--steps", str(args.steps), "--profiled-steps", str(args.profiled_steps), "--rounds", str(args.rounds),
               "--prompt-tokens", str(args.prompt_tokens), "--temperature", str(args.temperature),
               "--top-p", str(args.top_p)]
    compile_setting, native = STEP_MODES[compile_mode]
    env = {**os.environ, "INFERENCE_DTYPE": dtype, "INFERENCE_COMPILE": compile_setting,
           "INFERENCE_NATIVE_STEP": native}
    if InferenceConfig.from_env().huge_pages:  # the weights in 2 MB pages, as the service has them
        env = huge_pages.environment(env) or env
    if tree:
        env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the {dtype} child ({code}) failed:\n{done.stderr[-4000:]}")
    return {"code": code, **json.loads(done.stdout.strip().splitlines()[-1])}


def _measure(args: argparse.Namespace) -> dict:
    import torch
    from torch.profiler import profile

    from inference.engine import SamplingParams
    from inference.engine.native_step import NativeStep

    config = InferenceConfig.from_env(threads=InferenceConfig.from_env().threads or 2)
    engine = engine_by_hand.loaded(config)
    dtype = next(engine.runner.model.parameters()).dtype
    native = engine.runner.graph if isinstance(engine.runner.graph, NativeStep) else None
    # One greedy stream's native step reads the output matrix through its screen, if it has one.
    screen = native.screens if native is not None and args.temperature == 0 else None
    result = {"dtype": str(dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
              "matrices": str(getattr(engine.runner.fused, "layout", "-")),
              "screen": str(screen).removeprefix("torch.") if screen else None,
              "weight_bytes": roofline.weight_bytes(engine.runner.model.config, dtype.itemsize,
                                                    screen.itemsize if screen else None),
              "levels": []}
    rng = random.Random(0)
    for streams in (int(count) for count in args.streams.split(",")):
        # Streams admitted first decode while the others' prompts are fed, at least
        # prefill_chunk_min prompt tokens a step: room for that, then for the measured steps.
        max_tokens = (args.rounds * (args.steps + args.profiled_steps) + 2 * args.steps + 8
                      + streams * args.prompt_tokens // config.prefill_chunk_min)
        if streams * (args.prompt_tokens + max_tokens) > config.max_cached_tokens:
            raise ValueError(f"{streams} streams need more than INFERENCE_MAX_CACHED_TOKENS")
        for index in range(streams):
            prompt = [rng.randrange(100, 30000) for _ in range(args.prompt_tokens)]
            engine.add_request(f"{streams}-{index}", prompt, SamplingParams(
                max_tokens=max_tokens, temperature=args.temperature, top_p=args.top_p, seed=index))
        decoding: set[str] = set()  # a stream's first output ends its prompt
        while len(decoding) < streams:
            decoding.update(output.request_id for output in engine.step())
        engine.step()  # one untimed decode step
        times, cpu_seconds, rounds = [], 0.0, []
        with ForeignLoad() as foreign:
            # Timed steps, then profiled ones, in turns: each round's products are set against
            # that round's steps, so that the machine's drift between the two (this project's
            # machines move by 20-50% within minutes) does not land in "the rest".
            for _ in range(args.rounds):
                round_times = []
                cpu_started = time.process_time()
                for _ in range(args.steps):
                    started = time.perf_counter()
                    engine.step()
                    round_times.append((time.perf_counter() - started) * 1e3)
                cpu_seconds += time.process_time() - cpu_started
                if native is not None:
                    split = _natively_split(engine, native, args.profiled_steps)
                else:
                    with profile() as profiler:
                        for _ in range(args.profiled_steps):
                            engine.step()
                    split = _attributed(profiler.key_averages(), args.profiled_steps)
                times += round_times
                # One stream's rounds are set against the roofline (`_roofline_table`).
                bandwidth = max(roofline.bandwidth(threads=config.threads).values()) if streams == 1 else None
                rounds.append({"median_ms": statistics.median(round_times), "bandwidth": bandwidth, **split})
        in_turns = _in_turns(engine, args.steps) if engine.runner.graph is not None else None
        screen_turns = _screen_in_turns(engine, native, args.steps) if screen else None
        result["levels"].append({"streams": streams, "median_ms": statistics.median(times),
                                 "fastest_ms": min(times), "p90_ms": spread(times)["p90"],
                                 "cpu_ms": cpu_seconds * 1e3 / len(times),
                                 "other_cpu": foreign.cores, "in_turns": in_turns,
                                 "screen_in_turns": screen_turns, **_split(rounds)})
        engine.abort_all()
    return result


def _in_turns(engine, steps: int) -> dict | None:
    """Median steps through the decode step (compiled or native) and the fused forward, taken in turns in
    this process as INFERENCE_COMPILE=auto's trial takes them (step_trial.py): a machine whose
    speed drifts between processes (this project's do, by 10-40%) moves both alike. None where
    the graph ran none of them (steps over several groups)."""
    from inference.engine.step_trial import StepPath, StepTrial

    runner = engine.runner
    graph, ran_before = runner.graph, runner.graph.num_steps
    trial = StepTrial(samples=steps)
    try:
        while trial.winner is None:
            path = trial.next_path()
            runner.graph = graph if path is StepPath.GRAPH else None
            started = time.perf_counter()
            engine.step()
            trial.record(path, time.perf_counter() - started)
    finally:
        runner.graph = graph
    if graph.num_steps == ran_before:
        return None
    medians = trial.medians()
    return {"graph_ms": medians[StepPath.GRAPH] * 1e3, "fused_ms": medians[StepPath.FUSED] * 1e3}


def _screen_in_turns(engine, native, steps: int) -> dict:
    """Median steps of the native step through its screen at any number of rows, and with the
    whole float32 output product, in turns in this process (two of each, then the other first):
    what native_step.py's SCREENED_ROWS is chosen by."""
    times = {True: [], False: []}
    try:
        for index in range(2 * steps):
            screened = index % 4 in (0, 3)
            native.screened = lambda rows, screened=screened: screened
            started = time.perf_counter()
            engine.step()
            times[screened].append(time.perf_counter() - started)
    finally:
        del native.screened  # the class's own again
    return {"screened_ms": statistics.median(times[True]) * 1e3, "whole_ms": statistics.median(times[False]) * 1e3}


def _split(rounds: list[dict]) -> dict:
    """The rounds' medians: the rest as each round's median step less its products, so the
    table's products and rest need not add up to its median step."""
    def median(key: str) -> float:
        return statistics.median(entry[key] for entry in rounds)

    return {"products_ms": median("products_ms"), "attention_ms": median("attention_ms"),
            "rest_ms": statistics.median(entry["median_ms"] - entry["products_ms"] for entry in rounds),
            "rounds": [{"median_ms": entry["median_ms"], "bandwidth": entry["bandwidth"]} for entry in rounds],
            "products_calls": rounds[-1]["products_calls"], "rest_largest": rounds[-1]["rest_largest"]}


def _natively_split(engine, native, steps: int) -> dict:
    """Per step (ms), as `_attributed`: the native step's products and attention by its own
    clock; of the rest, what its parallel region spent on the norms, activations and greedy
    tokens (the rest's remainder is outside the region: Python, the sampler)."""
    native.model.set_timing(True)
    try:
        for _ in range(steps):
            engine.step()
        products, attention, *rest = (seconds / steps * 1e3 for seconds in native.model.phase_seconds())
    finally:
        native.model.set_timing(False)
    fused = engine.runner.fused
    return {"products_ms": products, "attention_ms": attention,
            "products_calls": len(fused.layers) * len(fused.layers[0].MATRICES) + 1,
            "rest_largest": list(zip(NATIVE_REST, rest, strict=True))}


def _attributed(averages, steps: int) -> dict:
    """Self time per step (ms) of the products, of attention, and the rest's largest operators."""
    def total(names) -> float:
        return sum(event.self_cpu_time_total for event in averages if event.key in names) / steps / 1e3

    rest = sorted((event for event in averages if event.key not in PRODUCTS | ATTENTION),
                  key=lambda event: event.self_cpu_time_total, reverse=True)
    return {"products_ms": total(PRODUCTS), "attention_ms": total(ATTENTION),
            "products_calls": sum(event.count for event in averages if event.key in PRODUCTS) // steps,
            "rest_largest": [(event.key, event.self_cpu_time_total / steps / 1e3)
                             for event in rest[:LARGEST_REST]]}


def _split_table(results: list[dict]) -> str:
    lines = ["| code | precision (matrices) | streams | step ms median (fastest) | CPU ms per step "
             "| products ms | the rest ms (attention) | products share "
             "| largest of the rest, ms per step | decode step / fused, steps in turns "
             "| screened / whole output product, steps in turns | other CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        for level in result["levels"]:
            largest = ", ".join(f"{name.removeprefix('aten::')} {ms:.1f}" for name, ms in level["rest_largest"])
            if level["products_calls"]:
                products, rest = level["products_ms"], level["rest_ms"]
                split = (f"| {products:.1f} | {rest:.1f} ({level['attention_ms']:.1f}) "
                         f"| {products / (products + rest):.0%} ")
            else:  # a graph compiled with a C++ wrapper calls its kernels out of the profiler's sight
                split = "| (in the graph) | - | - "
            lines.append(
                f"| {result['code']} | {result['dtype']} ({result['matrices']}) | {level['streams']} "
                f"| {level['median_ms']:.1f} ({level['fastest_ms']:.1f}) | {level['cpu_ms']:.1f} "
                f"{split}| {largest} "
                f"| {_turns(level.get('in_turns'), 'graph_ms', 'fused_ms')} "
                f"| {_turns(level.get('screen_in_turns'), 'screened_ms', 'whole_ms')} "
                f"| {_cores(level['other_cpu'])} |")
    return "\n".join(lines) + "\n"


def _turns(in_turns: dict | None, tried: str, against: str) -> str:
    """Two medians of steps taken in turns: their ratio, then each."""
    if not in_turns:
        return "-"
    first, second = in_turns[tried], in_turns[against]
    return f"{first / second:.2f}x ({first:.1f} / {second:.1f})"


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _roofline_table(results: list[dict], bandwidth: dict[str, float]) -> str:
    """One stream's step against the weights' bytes over the memory bandwidth. Each round's
    median step is set against the bandwidth measured right after it, in the same child (where
    the child measured it: a baseline tree's older copy of this benchmark may not): this
    project's machines give two threads 44 and 72 GB/s minutes apart."""
    best = max(bandwidth.values())
    lines = [f"Memory bandwidth, 2 threads, after the children: " + ", ".join(f"{name} {value / 1e9:.1f} GB/s"
                                                                          for name, value in bandwidth.items()),
             "", "| code | precision | weights read per token | bandwidth (GB/s, each round) "
             "| roofline step | ours at 1 stream, median (fastest) | ours / roofline, median of the rounds |",
             "|---|---|---|---|---|---|---|"]
    for result in results:
        one = next((level for level in result["levels"] if level["streams"] == 1), None)
        if one is None:
            continue
        rounds = [entry for entry in one.get("rounds", []) if entry.get("bandwidth")]
        if not rounds:  # measured after the children only
            rounds = [{"median_ms": one["median_ms"], "bandwidth": best}]
        bandwidths = [entry["bandwidth"] for entry in rounds]
        floors = [result["weight_bytes"] / value * 1e3 for value in bandwidths]
        ratios = [entry["median_ms"] / floor for entry, floor in zip(rounds, floors)]
        screen = f", output matrix in {result['screen']}" if result.get("screen") else ""
        lines.append(f"| {result['code']} | {result['dtype']} | {result['weight_bytes'] / 1e6:.0f} MB{screen} "
                     f"| {min(bandwidths) / 1e9:.1f}-{max(bandwidths) / 1e9:.1f} "
                     f"| {min(floors):.1f}-{max(floors):.1f} ms "
                     f"| {one['median_ms']:.1f} ({one['fastest_ms']:.1f}) ms "
                     f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}x-{max(ratios):.2f}x) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
