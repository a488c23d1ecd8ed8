"""`python -m benchmarks [NAME [options]]`: one benchmark, or every one in turn with its defaults.

Each benchmark is a module with `add_arguments(parser)` and `run(args) -> int`; it prints its
figures and the command that reproduces them. A module keeps its heavy imports (torch) inside
`run`, so listing the options of every benchmark stays quick.
"""

import argparse
import importlib
import shlex
import sys
from pathlib import Path

# name -> (module, one-line help); a later benchmark (the relay) is one more entry here.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "inference": ("benchmarks.inference_bench",
                  "the inference server against llama.cpp's server, HF generate, transformers' "
                  "continuous batching and a static batch; then multi-turn conversations"),
    "step": ("benchmarks.step_profile",
             "the engine's decode step alone at 1-16 streams and each precision: the weight "
             "products against the rest, and the memory roofline"),
    "browser": ("benchmarks.browser_bench",
                "the chat page in headless Chromium under a 20,000-token flood"),
    "relay": ("benchmarks.relay_bench",
              "the relay: added TTFT, CPU per token, capacity of daphne processes behind nginx"),
    "fit": ("benchmarks.fit_bench",
            "the plan's exact count: fitting a long conversation's prompt before the first token"),
    "watch": ("benchmarks.watch_bench",
              "watchers of an answer (1, 100, 1,000) and resumed answers: how live, how soon"),
    "audit": ("benchmarks.audit_bench",
              "the staff audit page over 1,000,000 generations on PostgreSQL (daily rollups)"),
    "prompts": ("benchmarks.prompt_lanes",
                "a short question beside long prompts being encoded, against the question alone"),
    "stops": ("benchmarks.stop_bench",
              "stop strings on the step thread: a token's cost as the answer grows, against a "
              "plain search"),
}


def _command_line(argv: list[str]) -> str:
    """The exact command, with the interpreter as the user would type it from the repo root."""
    python = Path(sys.executable)
    try:
        python = python.relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.join([str(python), "-m", "benchmarks", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="benchmark", metavar="NAME")
    modules = {}
    for name, (module_name, help_text) in BENCHMARKS.items():
        sub = subparsers.add_parser(name, help=help_text)
        modules[name] = (module_name, sub)
        importlib.import_module(module_name).add_arguments(sub)
    args = parser.parse_args(argv)
    command = _command_line(argv)

    chosen = [args.benchmark] if args.benchmark else list(BENCHMARKS)
    status = 0
    for name in chosen:
        module_name, sub = modules[name]
        own_args = args if args.benchmark else sub.parse_args([])
        own_args.command = command
        print(f"--- benchmark: {name} ---", flush=True)
        status = max(status, importlib.import_module(module_name).run(own_args))
    return status


if __name__ == "__main__":
    sys.exit(main())
