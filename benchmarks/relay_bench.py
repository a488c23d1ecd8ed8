"""The relay: what daphne adds to a stream and how many tokens a second it carries.

A stand-in upstream (relay_upstream.py: fixed-width tokens 20 ms apart, the first after 30 ms)
runs in its own process, daphne processes with the real app in others, and this process is
the load generator (relay_load.py). Each measurement goes straight to the stand-in ("direct")
and through daphne, alternating round by round, so both see the same machine; the targets
compare the two within this run (targets.relay):
- added TTFT at 1 stream;
- daphne CPU per relayed token and added gap at 50 streams (1,000 tokens/s offered: a token
  every 50 ms from a second stand-in, the streams starting 20 ms apart);
- capacity: tokens/s one daphne process delivers to 500 streams offered 25,000 tokens/s;
  direct, the same load shows what the client and stand-in alone can do on this machine;
- scale-out: the same capacity through nginx with 1 and with 2 daphne processes;
- the inference service's HTTP layer alone (inference_http.py, where it exists).
"""

import argparse
import asyncio
import contextlib
import logging
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness.child_process import ChildProcess

from . import relay_table, report, targets
from .machine import web_notes
from .machine_load import family
from .relay_load import DIRECT, THROUGH, Target
from .relay_stack import (app_env, base_url, daphne, fresh_database, nginx_in_front,
                          prepare_database, stand_in, started)
from .relay_stream import summarize
from .relay_upstream import raise_open_files_limit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    ttft_rounds: int = 20
    ttft_tokens: int = 10
    steady_streams: int = 50
    steady_rounds: int = 2
    capacity_streams: int = 500
    # Answers that outlast the starts: 500 starts take 5-8 s on two cores, and with answers of
    # 100 tokens (2 s) the capacity round measured how fast starts went through, not the relay.
    answer_tokens: int = 500
    interval_ms: float = 20.0
    first_token_ms: float = 30.0
    # Steady state: 1,000 tokens/s offered to 50 streams (one token each 50 ms), the streams
    # starting 20 ms apart, so that it measures the relay's cost per token, not a burst of starts.
    steady_interval_ms: float = 50.0
    steady_stagger_ms: float = 20.0
    web_processes: tuple[int, ...] = (1, 2)
    warm_up_streams: int = 8
    quick: bool = False  # a sample: quick or resized, not published unless asked

    def offered_tok_s(self, streams: int, interval_ms: float | None = None) -> float:
        return streams * 1000 / (interval_ms or self.interval_ms)


QUICK = Plan(ttft_rounds=5, ttft_tokens=5, steady_streams=10, steady_rounds=1,
             capacity_streams=50, answer_tokens=20, warm_up_streams=2, quick=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of about a minute: 10 and 50 streams, short answers")
    for name, help_text in (("ttft-rounds", "rounds of 1 stream each path (default 20)"),
                            ("steady-streams", "streams of the steady-state rounds (default 50)"),
                            ("capacity-streams", "streams of the capacity rounds (default 500)"),
                            ("answer-tokens", "tokens per answer, steady and capacity "
                                              "(default 500)")):
        parser.add_argument(f"--{name}", type=int, help=help_text)
    parser.add_argument("--web-processes", help="daphne processes behind nginx, comma-separated "
                                                "(default 1,2)")
    parser.add_argument("--database-url",
                        help="a PostgreSQL server (postgres://user@host:port/db): the benchmark "
                             "creates a database of its own there and drops it after (default: "
                             "SQLite in a temporary directory)")
    parser.add_argument("--strict", action="store_true",
                        help="exit with 1 when a target fails (otherwise verdicts are only shown)")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


class Bench:
    def __init__(self, plan: Plan, upstreams: dict[float, ChildProcess], database_url: str,
                 scratch: Path):
        self.plan, self.upstreams = plan, upstreams  # stand-ins by their interval in ms
        self.database_url, self.scratch = database_url, scratch
        self.figures: dict[str, dict] = {}

    async def alternate(self, name: str, interval_ms: float, web: ChildProcess, streams: int,
                        rounds: int, tokens: int, stagger_s: float = 0.0) -> None:
        """Direct and through one daphne, round by round, each kept under its own key."""
        upstream = self.upstreams[interval_ms]
        direct, through = Target(DIRECT, base_url(upstream)), await self.web(web, tokens)
        pids = {DIRECT: {"stand-in": [upstream.pid]},
                THROUGH: {"stand-in": [upstream.pid], "daphne": [web.pid]}}
        parts = {DIRECT: [], THROUGH: []}
        for _ in range(rounds):
            for path, target in ((DIRECT, direct), (THROUGH, through)):
                parts[path].append(await target.round(streams, tokens, pids[path], stagger_s))
        for path, done in parts.items():
            self.figures[f"{name} {path}"] = summarize(f"{name} {path}", done)
        await direct.aclose()
        await through.aclose()

    async def once(self, key: str, target: Target, webs: list[ChildProcess],
                   front: ChildProcess | None = None) -> None:
        """One capacity round: every stream at once, full answers from the 20 ms stand-in."""
        upstream = self.upstreams[self.plan.interval_ms]
        pids = {"stand-in": [upstream.pid]}
        if webs:
            pids["daphne"] = [web.pid for web in webs]
        if front is not None:
            pids["nginx"] = family(front.pid)  # the master and its worker
        done = await target.round(self.plan.capacity_streams, self.plan.answer_tokens, pids)
        logger.info("  %s: %d/%d ok", key, sum(s.ok for s in done.streams), len(done.streams))
        self.figures[key] = summarize(key, [done])
        await target.aclose()

    async def web(self, entry: ChildProcess, tokens: int) -> Target:
        """A signed-in target on the app behind `entry` (nginx or a daphne), warmed up."""
        target = Target(THROUGH, base_url(entry))
        await target.sign_in()
        await target.round(self.plan.warm_up_streams, tokens, {})
        return target

    def daphne(self, interval_ms: float, tokens: int) -> ChildProcess:
        """A daphne process on the stand-in of `interval_ms`, answers `tokens` tokens long."""
        return daphne(app_env(self.database_url, base_url(self.upstreams[interval_ms]), tokens))

    async def run(self) -> None:
        plan, fast, tokens = self.plan, self.plan.interval_ms, self.plan.answer_tokens
        with started(self.daphne(fast, plan.ttft_tokens)) as web:
            logger.info("added TTFT at 1 stream, %d rounds", plan.ttft_rounds)
            await self.alternate("ttft", fast, web, 1, plan.ttft_rounds, plan.ttft_tokens)
        with started(self.daphne(plan.steady_interval_ms, tokens)) as web:
            logger.info("steady state at %d streams", plan.steady_streams)
            await self.alternate("steady", plan.steady_interval_ms, web, plan.steady_streams,
                                 plan.steady_rounds, tokens, plan.steady_stagger_ms / 1000)
        with contextlib.ExitStack() as stack:
            webs = [stack.enter_context(started(self.daphne(fast, tokens)))]
            logger.info("capacity at %d streams", plan.capacity_streams)
            await self.once("capacity direct", Target(DIRECT, base_url(self.upstreams[fast])),
                            [])
            await self.once("capacity through", await self.web(webs[0], tokens), webs)
            for count in plan.web_processes:
                while len(webs) < count:
                    webs.append(stack.enter_context(started(self.daphne(fast, tokens))))
                with started(nginx_in_front(webs, self.scratch)) as front:
                    logger.info("capacity through nginx and %d daphne process(es)", count)
                    await self.once(f"capacity nginx {count}", await self.web(front, tokens),
                                    webs, front)


def inference_http() -> dict | None:
    """The inference service's HTTP layer alone, where benchmarks/inference_http.py exists."""
    try:
        from .inference_http import measure
    except ImportError:
        return None
    logger.info("the inference service's HTTP layer alone")
    try:
        figures = measure(streams=64, step_ms=2.0)
        return asyncio.run(figures) if asyncio.iscoroutine(figures) else figures
    except Exception as error:  # the relay's figures are kept whatever happens here
        logger.exception("inference_http.measure failed")
        return {"error": f"{type(error).__name__}: {error}"}


def plan_from(args: argparse.Namespace) -> Plan:
    """The plan, and whether it is a sample (quick, or resized): one not to publish unasked."""
    plan = QUICK if args.quick else Plan()
    sizes = {name: getattr(args, name) for name in ("ttft_rounds", "steady_streams",
                                                    "capacity_streams", "answer_tokens")}
    changes = {name: value for name, value in sizes.items() if value is not None}
    if args.web_processes:
        changes["web_processes"] = tuple(int(n) for n in args.web_processes.split(","))
    if any(value < 1 for value in sizes.values() if value is not None):
        raise SystemExit("every size must be at least 1")
    return replace(plan, **changes, quick=plan.quick or bool(changes))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    plan = plan_from(args)
    publish = report.publishing(args, plan.quick)
    raise_open_files_limit()
    began = time.time()
    machine = web_notes()
    with tempfile.TemporaryDirectory(prefix="relay-bench-") as scratch, \
            fresh_database(args.database_url, Path(scratch)) as database_url, \
            started(stand_in(plan.interval_ms, plan.first_token_ms)) as fast, \
            started(stand_in(plan.steady_interval_ms, plan.first_token_ms)) as steady:
        prepare_database(app_env(database_url, base_url(fast), plan.answer_tokens))
        bench = Bench(plan, {plan.interval_ms: fast, plan.steady_interval_ms: steady},
                      database_url, Path(scratch))
        asyncio.run(bench.run())
    results = {"benchmark": "relay", "command": args.command, "started": report.stamp(began),
               "plan": asdict(plan), "machine": machine, "figures": bench.figures,
               "offered_tok_s": plan.offered_tok_s(plan.capacity_streams),
               "steady_offered_tok_s": plan.offered_tok_s(plan.steady_streams,
                                                          plan.steady_interval_ms),
               "inference_http": inference_http()}
    results["duration_s"] = round(time.time() - began, 1)
    results["targets"] = targets.relay(results)
    print("\n".join(relay_table.terminal_lines(results)))
    print(f"results: {report.write_results('relay', results, began)}")
    if publish:
        print(f"section: {report.write_section('relay', relay_table.section(results))}")
    failed = [t for t in results["targets"] if t["passed"] is False]
    return 1 if failed and args.strict else 0
