"""The engine's decode step alone, at a few stream counts: median step time and, on request, where it goes.

`python -m benchmarks.step_profile [--streams 1,16,64] [--profile]`. The model is loaded as
the server loads it (INFERENCE_* variables apply, INFERENCE_DTYPE included), then its engine is
stepped by hand: every stream has a prompt of random tokens and decodes to the end (end-of-turn
tokens are ignored), and only steps where every stream decodes are timed. No HTTP, no event
loop: this is the figure to compare against llama.cpp's own per-token time, and the one to
watch when changing the forward. Run one process per variant: two models in one process share
the CPU's caches and slow each other.
"""

import argparse
import random
import statistics
import sys
import time

from .latency import spread


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--streams", default="1,16,64", help="comma-separated stream counts")
    parser.add_argument("--steps", type=int, default=30, help="timed decode steps per count")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--profile", action="store_true",
                        help="also print torch.profiler's operator table for each count")


def run(args: argparse.Namespace) -> int:
    import torch

    from inference.config import InferenceConfig
    from inference.engine import SamplingParams
    from inference.service import InferenceService

    config = InferenceConfig.from_env(threads=InferenceConfig.from_env().threads or 2)
    service = InferenceService(config)
    service.load()
    service.stop()  # the engine is stepped here, by hand
    if service.engine is None:
        raise RuntimeError(f"the model did not load: {service.error!r}")
    engine = service.engine
    engine.eos_token_ids = frozenset()  # every stream decodes to its max_tokens
    print(f"{service.model_name}, {next(engine.runner.model.parameters()).dtype}, "
          f"{torch.get_num_threads()} threads")
    rng = random.Random(0)
    for streams in (int(count) for count in args.streams.split(",")):
        # Streams admitted first decode while the others' prompts are fed, at least
        # prefill_chunk_min prompt tokens a step: room for that, then for the timed steps.
        max_tokens = args.steps + 8 + streams * args.prompt_tokens // config.prefill_chunk_min
        if streams * (args.prompt_tokens + max_tokens) > config.max_cached_tokens:
            raise ValueError(f"{streams} streams need more than INFERENCE_MAX_CACHED_TOKENS")
        for index in range(streams):
            prompt = [rng.randrange(100, 30000) for _ in range(args.prompt_tokens)]
            engine.add_request(f"{streams}-{index}", prompt, SamplingParams(max_tokens=max_tokens))
        decoding: set[str] = set()  # a stream's first output ends its prompt
        while len(decoding) < streams:
            decoding.update(output.request_id for output in engine.step())
        engine.step()  # one untimed decode step
        times = []
        for _ in range(args.steps):
            started = time.perf_counter()
            engine.step()
            times.append((time.perf_counter() - started) * 1e3)
        figures = spread(times)
        print(f"streams {streams:3d}: step ms median {statistics.median(times):.1f}, "
              f"p90 {figures['p90']:.1f}, {streams / statistics.median(times) * 1e3:.0f} tok/s")
        if args.profile:
            from torch.profiler import profile

            with profile() as profiler:
                for _ in range(min(5, args.steps // 4)):
                    engine.step()
            print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
        engine.abort_all()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
