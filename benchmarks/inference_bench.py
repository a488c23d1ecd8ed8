"""The inference server against llama.cpp's server and three in-process references, on one
request mix, in one run; then several conversations of a few turns each.

Order matters on a small machine: each server is driven alone (a child process, loaded, warmed
up): each level by ours, then right after by llama.cpp's, started for that level (its slots are
fixed at start), ours waiting idle meanwhile, so that both meet the machine in the same phase
(server_runs.py); then the conversations; ours again with prefix reuse off for them alone; and
only then does this process load the model for the in-process references, so no two systems
ever share the cores.
The same request list is used by every system at a given concurrency.
"""

import argparse
import gc
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import inference_plot, inference_table, report, targets
from .cancel_check import CANCEL_SAMPLING
from .inference_table import LLAMA_CPP_F32, PEER_OUTTYPE, llama_cpp_system
from .latency import LevelResult
from .llama_cpp import DEFAULT_ROOT, OUTTYPES, LlamaCpp
from .machine import inference_notes
from .machine_load import ForeignLoad
from .multi_turn import MultiTurnResult
from .server_runs import Peer, ServerRuns
from .workload import BenchRequest, Conversation, MixSpec, Workload

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...] = (1, 4, 16, 64)
    # Requests per level: a few rounds at each level for a steady state and a p99 worth the
    # name, sized so that the whole run stays under about 35 minutes on 2 cores. On such a CPU
    # transformers' manager is the slowest part by far: at 64 streams its attention spans every
    # stream's keys (about 2 s a step), so level 64 alone costs it some 10 minutes; it runs only
    # where a target needs it. Four streams get 64: of 16 (8 short prompts, 8 long) the TTFT
    # p50 was the slowest short prompt's first token alone, a coin toss from run to run
    # (BF16 on one machine: 180 and 63 ms for the same tree; of 64, 37-46 ms).
    requests: tuple[int, ...] = (8, 64, 48, 112)
    short_max_tokens: int = 48
    long_max_tokens: int = 192
    # The HF generate reference runs the level-1 list, capped: it is one request at a time.
    sequential_requests: int = 8
    manager_levels: tuple[int, ...] = targets.LEVELS
    static_levels: tuple[int, ...] = (1, 4, 16, 64)
    static_steps: int = 128
    cancel_streams: int = 16
    cancel_after_chunks: int = 16
    cancel_max_tokens: int = 256
    # The multi-turn part: conversations side by side, each user message about 200 tokens.
    conversations: int = 4
    turns: int = 6
    turn_max_tokens: int = 64
    # The dtype ours is served at; llama.cpp serves the GGUF of the same arithmetic
    # (inference_table.PEER_OUTTYPE), its peer in the ratios and the targets.
    precision: str = "float32"
    # INFERENCE_COMPILE for ours; empty keeps the service's default.
    compile: str = ""
    # GGUF precisions llama.cpp serves at every level: the peer's, and any asked for besides.
    llama_cpp_outtypes: tuple[str, ...] = ("f32",)
    seed: int = 1234
    threads: int = 2
    quick: bool = False

    def count(self, level: int) -> int:
        return dict(zip(self.levels, self.requests))[level]


QUICK = Plan(
    levels=(1, 4, 16), requests=(2, 4, 16), short_max_tokens=8, long_max_tokens=24,
    sequential_requests=2, manager_levels=(16,), static_levels=(4, 16), static_steps=16,
    cancel_streams=16, cancel_after_chunks=8, cancel_max_tokens=40, conversations=2, turns=2,
    turn_max_tokens=16, quick=True,
)


@dataclass(frozen=True)
class Parts:
    """Which parts of the benchmark run; each can be left out to run the others alone."""

    ours: bool = True
    llama_cpp: bool = True
    references: bool = True
    levels: bool = True
    multi_turn: bool = True


@dataclass
class DeviceRun:
    device: str
    label: str
    levels: list[LevelResult] = field(default_factory=list)
    multi_turn: list[MultiTurnResult] = field(default_factory=list)
    cancel: dict = field(default_factory=dict)
    targets: list[dict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    server_peak_is_per_level: bool = True
    peer: str = LLAMA_CPP_F32  # llama.cpp at ours' precision

    def find(self, system: str, concurrency: int) -> LevelResult | None:
        for level in self.levels:
            if level.system == system and level.concurrency == concurrency:
                return level
        return None

    def find_multi_turn(self, system: str) -> MultiTurnResult | None:
        return next((result for result in self.multi_turn if result.system == system), None)


# --- the command line ---
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of a few minutes: levels 1,4,16, a few short answers, "
                             "2 conversations of 2 turns")
    parser.add_argument("--levels", help="comma-separated concurrency levels (default 1,4,16,64)")
    parser.add_argument("--requests",
                        help="comma-separated requests per level, one per --levels entry")
    parser.add_argument("--max-tokens",
                        help="max_tokens of short and long answers, comma-separated (default 48,192)")
    parser.add_argument("--static-steps", type=int,
                        help="decode steps of the static batch (default 128)")
    parser.add_argument("--conversations", type=int,
                        help="multi-turn: conversations side by side (default 4)")
    parser.add_argument("--turns", type=int, help="multi-turn: turns per conversation (default 6)")
    parser.add_argument("--seed", type=int, help="seed of the request mix (default 1234)")
    parser.add_argument("--threads", type=int,
                        help="torch threads for server and references (default 2)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: CPU, then GPU as well when torch sees one")
    parser.add_argument("--skip-ours", action="store_true", help="leave our server out")
    parser.add_argument("--skip-llama-cpp", action="store_true",
                        help="leave llama.cpp's server out (it is built once on first use)")
    parser.add_argument("--skip-references", action="store_true",
                        help="leave the in-process references out (HF generate, transformers' "
                             "manager, the static batch)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--multi-turn-only", action="store_true",
                      help="only the conversations: no concurrency levels, cancel check or "
                           "in-process references")
    only.add_argument("--skip-multi-turn", action="store_true", help="leave the conversations out")
    parser.add_argument("--llama-cpp-dir", type=Path, default=DEFAULT_ROOT,
                        help=f"where llama.cpp is built and the GGUF files kept (default "
                             f"{DEFAULT_ROOT})")
    parser.add_argument("--precision", choices=tuple(PEER_OUTTYPE), default="float32",
                        help="the dtype ours is served at; llama.cpp serves the same precision's "
                             "GGUF, the peer of the ratios and targets (default float32)")
    parser.add_argument("--compile", choices=("off", "auto", "on"),
                        help="INFERENCE_COMPILE for ours (default: the service's default)")
    parser.add_argument("--llama-cpp-precisions", default="",
                        help=f"GGUF precisions llama.cpp serves at every level besides the peer's, "
                             f"comma-separated, of {','.join(OUTTYPES)}")
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
                                            if x in plan.manager_levels or x in targets.LEVELS),
                       static_levels=tuple(x for x in levels
                                           if x in plan.static_levels or x in targets.LEVELS))
    if args.max_tokens:
        short, long = (int(x) for x in args.max_tokens.split(","))
        plan = replace(plan, short_max_tokens=short, long_max_tokens=long)
    outtypes = tuple(x.strip().lower() for x in args.llama_cpp_precisions.split(",") if x.strip())
    if not set(outtypes) <= set(OUTTYPES):
        raise SystemExit(f"--llama-cpp-precisions: each of {', '.join(OUTTYPES)}")
    peer = PEER_OUTTYPE[args.precision]
    plan = replace(plan, precision=args.precision, compile=args.compile or "",
                   llama_cpp_outtypes=(peer, *(x for x in dict.fromkeys(outtypes) if x != peer)))
    for name in ("static_steps", "conversations", "turns", "seed", "threads"):
        if getattr(args, name) is not None:
            plan = replace(plan, **{name: getattr(args, name)})
    return plan


def parts_from(args: argparse.Namespace) -> Parts:
    return Parts(ours=not args.skip_ours, llama_cpp=not args.skip_llama_cpp,
                 references=not (args.skip_references or args.multi_turn_only),
                 levels=not args.multi_turn_only, multi_turn=not args.skip_multi_turn)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    # The manager and the loaders chatter at INFO; the benchmark's own progress is enough.
    for name in ("transformers", "ContinuousBatchingLogger", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    plan, parts = plan_from(args), parts_from(args)
    # A partial run would replace the published section with fewer systems: only when asked.
    publish = report.publishing(args, plan.quick or parts != Parts())
    logger.info("command: %s", args.command)

    import torch
    from transformers import AutoTokenizer

    from inference.config import InferenceConfig
    from inference.engine import loader

    started = time.time()
    machine = inference_notes(plan.threads)
    cache_dir = InferenceConfig.from_env().cache_dir
    model_dir = loader.converted_gguf(loader.default_model_path(), cache_dir)
    # Built and converted before anything is measured: a compiler must not share the cores.
    # llama.cpp is built for this CPU only: on a GPU it would be no like-for-like peer.
    llama_cpp = None
    if parts.llama_cpp and args.device != "cuda":
        llama_cpp = LlamaCpp(args.llama_cpp_dir)
        llama_cpp.build()
        ggufs = {outtype: llama_cpp.gguf(model_dir, outtype) for outtype in plan.llama_cpp_outtypes}
        machine["llama_cpp"] = (f"llama-cpp-python {llama_cpp.version} (llama.cpp commit "
                                f"{llama_cpp.commit[:10]})")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    workload = Workload(tokenizer, plan.seed)
    lists = ({level: workload.requests(f"level-{level}", _mix(plan, plan.count(level)))
              for level in plan.levels} if parts.levels else {})
    cancel_list = workload.requests("cancel", MixSpec(
        count=plan.cancel_streams, long_max_tokens=plan.cancel_max_tokens,
        long_prompt_share=0.0, long_output_share=1.0))
    warm_up = workload.requests("warm-up", MixSpec(count=2, short_max_tokens=4, long_max_tokens=4,
                                                   long_prompt_share=0.0))
    conversations = (workload.conversations("multi-turn", plan.conversations, plan.turns)
                     if parts.multi_turn else [])
    servers = ServerRuns(plan, parts, workload, lists, cancel_list, warm_up, conversations)

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
        device_run = DeviceRun(device, label, peer=llama_cpp_system(PEER_OUTTYPE[plan.precision]))
        peers = ([Peer(llama_cpp.server_binary, gguf, outtype) for outtype, gguf in ggufs.items()]
                 if llama_cpp and device == "cpu" else [])
        servers.run(device_run, cache_dir, peers)
        if parts.references:
            _run_references(device_run, plan, model_dir, tokenizer, lists)
        device_run.targets = targets.evaluate(device_run)
        runs.append(device_run)

    results = inference_table.Results(command=args.command, plan=asdict(plan), machine=machine,
                             runs=runs, started=started, finished=time.time(),
                             workload=_workload_notes(lists, cancel_list, conversations, workload))
    inference_table.print_results(results)
    json_path = inference_table.write_json(results)
    print(f"results: {json_path}")
    if publish:
        print(f"plot: {inference_plot.write_plot(results)}")
        print(f"section: {inference_table.write_markdown(results)}")
    failed = [t for run in runs for t in run.targets if t["passed"] is False]
    return 1 if failed and args.strict else 0


def _mix(plan: Plan, count: int) -> MixSpec:
    return MixSpec(count=count, short_max_tokens=plan.short_max_tokens,
                   long_max_tokens=plan.long_max_tokens)


def _workload_notes(lists: dict[int, list[BenchRequest]], cancel_list: list[BenchRequest],
                    conversations: list[Conversation], workload: Workload) -> dict:
    notes: dict = {}
    every = [r for requests in lists.values() for r in requests]
    if every:
        prompts = [r.num_prompt_tokens for r in every]
        notes |= {
            "requests_per_level": {level: len(requests) for level, requests in lists.items()},
            "long_prompt_share": sum(r.long_prompt for r in every) / len(every),
            "prompt_tokens_min": min(prompts), "prompt_tokens_max": max(prompts),
            "max_tokens_values": sorted({r.max_tokens for r in every}),
            "cancel_streams": len(cancel_list),
            "cancel_sampling": CANCEL_SAMPLING,
        }
    if conversations:
        sizes = [workload.message_size(m) for c in conversations for m in c.user_messages]
        notes["multi_turn"] = {"conversations": len(conversations),
                               "turns": len(conversations[0].user_messages),
                               "user_message_tokens_min": min(sizes),
                               "user_message_tokens_max": max(sizes)}
    return notes


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
    logger.info("[%s] %s", device_run.label, inference_table.level_line(result))
    device_run.levels.append(result)
