"""The soak: the whole stack through nginx with PostgreSQL and Redis, under steady load for a
long time, then judged on what it left behind (issue #11).

`make soak` (or `python -m reliability.soak --minutes 10 --concurrency 100 --users 50`):
`concurrency` clients, spread evenly over `users` signed-in users, each asks one short question
in a new conversation, then the next, until the time is up. 30% of answers are cancelled at a
random point (0-150 code points in), half by closing the stream, half by Stop with the length
seen. Answers are capped at CHAT_MAX_TOKENS=64 so that they turn over: 100 streams on the
64-slot engine keep about a third waiting, so many first tokens come after 10 s. A 429 from a
user's previous answer not yet ended on the server is expected: the client backs off and
retries, and those are counted apart from errors. The verdicts go into RELIABILITY.md's
`## Soak` section; the exit status is 0 only when every criterion passes.
"""

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.machine_load import ForeignLoad
from common import env
from common.percentiles import percentile

from .chat_client import Answer, ChatClient, Ending, Outcome
from .database import create_users, use_database
from .end_checks import engine_sequences, live_rows, stored_vs_seen
from .report import RELIABILITY_PATH, Criterion, render_soak, write_reliability_section
from .resources import ResourceSampler, growth
from .stack_under_test import StackConfig, stack_under_test

PASSWORD = "soak-password-not-a-secret"
# Questions whose answers run past the token cap, so that a cancel point is usually reached.
PROMPTS = [
    "Write a long story about a lighthouse keeper.",
    "Explain in detail how bread is made.",
    "Describe a walk through a forest in autumn, at length.",
    "Write a long letter to a friend about your holidays.",
    "Explain step by step how a bicycle works.",
    "Tell me a long tale about a dragon and a baker.",
    "Describe the history of the printing press in detail.",
    "Write a detailed guide to growing tomatoes.",
]
SLOW_FIRST_TOKEN_S = 10.0
BUSY_BACKOFF_S = (0.5, 1.5)


@dataclass
class SoakPlan:
    minutes: float = 10.0  # measured, after the warm-up
    # The load runs this long before the measured minutes: the engine's KV cache becomes resident
    # as the batch first fills it (RELIABILITY.md), which is start-up, not growth.
    warmup_minutes: float = 1.0
    concurrency: int = 100
    users: int = 50
    cancel_share: float = 0.30  # half of them by closing, half by Stop
    max_cancel_chars: int = 150  # a 64-token answer is about 250 code points
    max_tokens: int = 64
    seed: int = 11
    sample_interval_s: float = 5.0


@dataclass
class LoadResult:
    answers: list[Answer] = field(default_factory=list)
    busy_retries: int = 0
    setup_errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def plan_ending(rng: random.Random, plan: SoakPlan) -> Answer:
    draw = rng.random()
    if draw >= plan.cancel_share:
        return Answer(Ending.READ_ALL)
    ending = Ending.CLOSE if draw < plan.cancel_share / 2 else Ending.STOP
    return Answer(ending, cancel_after_chars=rng.randint(0, plan.max_cancel_chars))


async def run_load(base_url: str, usernames: list[str], plan: SoakPlan, result: LoadResult,
                   sampler: ResourceSampler) -> None:
    clients = [ChatClient(base_url, name, PASSWORD) for name in usernames]
    try:
        await asyncio.gather(*(client.sign_in() for client in clients))
        # Sampling covers the load only: the ramp before every client has a request open would
        # make the first window look small, the drain after the deadline the last one.
        warmup_s = plan.warmup_minutes * 60
        sampler.start(duration_s=warmup_s + plan.minutes * 60, delay_s=warmup_s + plan.sample_interval_s)
        started = time.monotonic()
        deadline = started + warmup_s + plan.minutes * 60
        await asyncio.gather(*(
            _client_loop(clients[i % len(clients)], random.Random(plan.seed * 1000 + i), deadline, plan, result)
            for i in range(plan.concurrency)))
        result.wall_s = time.monotonic() - started
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))


async def _client_loop(client: ChatClient, rng: random.Random, deadline: float, plan: SoakPlan,
                       result: LoadResult) -> None:
    """One stream's worth of load: the next question as soon as the last answer ended."""
    while time.monotonic() < deadline:
        try:
            conversation = await client.new_conversation("soak")
        except Exception as error:  # noqa: BLE001 - any failure here is a finding, not a crash
            result.setup_errors.append(f"{client.username}: new conversation: {error!r}"[:300])
            await asyncio.sleep(rng.uniform(*BUSY_BACKOFF_S))
            continue
        planned, prompt = plan_ending(rng, plan), rng.choice(PROMPTS)
        while True:
            answer = await client.ask(conversation, prompt, Answer(planned.ending, planned.cancel_after_chars))
            if answer.outcome is not Outcome.BUSY:
                break
            result.busy_retries += 1
            await asyncio.sleep(rng.uniform(*BUSY_BACKOFF_S))
        result.answers.append(answer)


def _sample_answers(answers: list[Answer]) -> dict:
    outcomes = Counter(a.outcome.value for a in answers)
    ttfts = [a.ttft_s for a in answers if a.ttft_s is not None]
    return {
        "answers": len(answers),
        "outcomes": dict(outcomes),
        "planned": dict(Counter(a.ending.value for a in answers)),
        "late_stops": sum(a.is_stop_late for a in answers),
        "ttft_s": {"p50": percentile(ttfts, 50), "p90": percentile(ttfts, 90), "max": max(ttfts, default=None)},
        "slow_first_tokens": sum(t > SLOW_FIRST_TOKEN_S for t in ttfts),
        "failures": [f"{a.status_code} {a.error}"[:200] for a in answers if a.outcome is Outcome.FAILED],
    }


def soak(plan: SoakPlan, database_server_url: str, redis_url: str) -> dict:
    # A closed answer waits for its page this long (CHAT_RESUME_GRACE_SECONDS) holding one of its
    # user's streams; the soak's clients never come back, so a short wait keeps the turnover.
    config = StackConfig(database_server_url=database_server_url, redis_url=redis_url,
                         settings={"CHAT_MAX_TOKENS": str(plan.max_tokens), "CHAT_RESUME_GRACE_SECONDS": "2"})
    started_at = time.time()
    with stack_under_test(config) as stack:
        use_database(stack.database_url, redis_url)
        usernames = create_users(plan.users, PASSWORD, prefix="soak")
        load = LoadResult()
        with ResourceSampler(stack, plan.sample_interval_s) as sampler, ForeignLoad(stack.all_pids()) as foreign:
            asyncio.run(run_load(stack.public_url, usernames, plan, load, sampler))
        window_s = min(60.0, (plan.minutes * 60 - plan.sample_interval_s) / 3)
        figures = {
            "answers": _sample_answers(load.answers),
            "busy_retries": load.busy_retries,
            "setup_errors": load.setup_errors[:10],
            "wall_s": load.wall_s,
            "live_rows": live_rows(timeout_s=90),
            "engine": engine_sequences(stack, timeout_s=60),
            "stored": stored_vs_seen(load.answers),
            "growth": growth(sampler.samples, window_s),
            "growth_window_s": window_s,
            "samples": len(sampler.samples),
            "sample_series": [asdict(s) for s in sampler.samples],
            "other_cpu_cores": foreign.cores,
        }
        figures["survivors"] = stack.stop()
    figures["started_at"], figures["finished_at"] = started_at, time.time()
    figures["database"] = "PostgreSQL" if database_server_url else "SQLite"
    figures["with_redis"] = bool(redis_url)
    return figures


def judge(figures: dict) -> list[Criterion]:
    answers, stored = figures["answers"], figures["stored"]
    failures = answers["failures"] + figures["setup_errors"]
    stopped_rows = sum(n for (outcome, _, _), n in stored.statuses.items() if outcome == "stopped")
    stopped_by_user = stored.statuses.get(("stopped", "stopped", "user"), 0)
    growths = figures["growth"]
    return [
        Criterion("0 unexpected errors", not failures,
                  f"{len(failures)} ({'; '.join(failures[:3]) or 'none'}); 429s retried: {figures['busy_retries']}"),
        Criterion("every stored text equals what its client saw", not stored.mismatches,
                  f"{stored.checked} answers checked, {len(stored.mismatches)} mismatches"
                  + (f" ({'; '.join(stored.mismatches[:3])})" if stored.mismatches else "")),
        Criterion("Stops attributed to the user", stopped_rows == stopped_by_user,
                  f"{stopped_by_user} of {stopped_rows} Stops answered 202 stored as stopped / user"),
        Criterion("0 rows left non-final", not any(figures["live_rows"].values()),
                  ", ".join(f"{k}: {v}" for k, v in figures["live_rows"].items())),
        Criterion("0 sequences left in the engine", not any(figures["engine"].values()),
                  ", ".join(f"{k}: {v:g}" for k, v in figures["engine"].items())),
        Criterion("no growth between the first and the last window", all(g.is_within for g in growths),
                  f"{sum(not g.is_within for g in growths)} of {len(growths)} figures over tolerance"),
        Criterion("no process outlives the stack", not figures["survivors"],
                  f"{len(figures['survivors'])} killed after stopping"),
    ]


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    defaults = SoakPlan()
    parser = argparse.ArgumentParser(prog="python -m reliability.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=defaults.minutes)
    parser.add_argument("--warmup-minutes", type=float, default=defaults.warmup_minutes,
                        help="load before the measured minutes, not sampled for growth")
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--users", type=int, default=defaults.users)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--cancel-share", type=float, default=defaults.cancel_share,
                        help="the share of answers cancelled, half by closing, half by Stop")
    parser.add_argument("--database-url", default=env.string("DATABASE_URL"),
                        help="a PostgreSQL server: the soak creates a database of its own there and "
                             "drops it after (default: $DATABASE_URL; empty: a SQLite file)")
    parser.add_argument("--redis-url", default=env.string("REDIS_URL"),
                        help="the Redis index the stack uses (default: $REDIS_URL; empty: no Redis)")
    parser.add_argument("--markdown", type=Path, default=RELIABILITY_PATH,
                        help="the file whose `## Soak` section is rewritten; '-' writes none")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    plan = SoakPlan(minutes=args.minutes, warmup_minutes=args.warmup_minutes, concurrency=args.concurrency,
                    users=args.users, seed=args.seed,
                    cancel_share=args.cancel_share)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per request drowns the report
    figures = soak(plan, args.database_url, args.redis_url)
    criteria = judge(figures)
    command = "python -m reliability.soak " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render_soak(command.strip(), plan, figures, criteria)
    print(section)
    if str(args.markdown) != "-":
        write_reliability_section("soak", section, args.markdown)
    if args.json:
        args.json.write_text(json.dumps({
            "plan": asdict(plan),
            "criteria": [asdict(c) for c in criteria],
            "figures": {k: v for k, v in figures.items() if k not in ("stored", "growth", "sample_series")},
            "samples": figures["sample_series"],
            "stored": {"checked": figures["stored"].checked, "mismatches": figures["stored"].mismatches,
                       "closed_excess_chars": figures["stored"].closed_excess_chars},
            "growth": [{"name": g.name, "first": g.first, "last": g.last, "is_within": g.is_within}
                       for g in figures["growth"]],
        }, indent=2, default=str))
    return 0 if all(c.is_passed for c in criteria) else 1


if __name__ == "__main__":
    sys.exit(main())
