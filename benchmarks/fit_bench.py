"""The plan's extra time before the first token: fitting an answer's prompt to the model's
context with the upstream's exact count, at one stream (chatapp/streaming/prompt_fit.py).

Starts the inference service with the default model and its whole context (8,192 tokens), then
plans `--conversations` conversations of `--turns` turns, each question about 2,500 characters
of meeting notes (issue 27's conversation) and each answer a fixed 300 characters, and times
`prompt_fit.fit` for every answer: the choice from what earlier counts taught, and its one
`POST /tokenize` (of only the new messages once the conversation has a count). No answer is generated: only the fit is timed, one at a time. For scale, the
`/tokenize` round trip alone for the longest prompt.
"""

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx2

from . import report
from .server_process import ServerProcess
from .workload import meeting_notes

SECTION = "fit"
TARGET_MS = 5  # "a few milliseconds" before the first token (issue 27)
ANSWER = "Summary: " + "the team agreed on the points above and will meet again. " * 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conversations", type=int, default=20, help="conversations planned (default 20)")
    parser.add_argument("--turns", type=int, default=8, help="answers per conversation (default 8)")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


def run(args: argparse.Namespace) -> int:
    # Counts, not timings: the decode step's background compile would only cost a minute of CPU.
    server = ServerProcess({"INFERENCE_MAX_MODEL_LEN": "8192", "INFERENCE_MAX_RUNNING": "1",
                            "INFERENCE_COMPILE": "off"})
    try:
        server.start()
        with tempfile.TemporaryDirectory() as scratch:
            figures = _measure(server.base_url, server.model_name, Path(scratch), args)
    finally:
        server.close()
    return _report(args, figures)


def _measure(url: str, model: str, scratch: Path, args) -> dict:
    os.environ.update({"DATABASE_URL": f"sqlite:///{scratch / 'db.sqlite3'}",
                       "DJANGO_SETTINGS_MODULE": "chatapp.settings",
                       "DJANGO_SECRET_KEY": "fit-benchmark-only-not-a-secret", "DJANGO_DEBUG": "0",
                       "DJANGO_LOG_LEVEL": "WARNING", "REDIS_URL": "", "INFERENCE_URL": url,
                       "CHAT_MODEL": model, "CHAT_CONTEXT_TOKENS": "0"})
    import django

    django.setup()
    from chatapp import services
    from chatapp.models import Conversation, Message
    from chatapp.streaming import prompt_fit

    def plan(conversation: Conversation, said: list[Message]) -> services.AnswerPlan:
        return services.AnswerPlan(None, conversation, [], said, [], {"max_tokens": 512})

    ids = iter(range(1, 1_000_000))

    async def fit_all() -> dict[str, list[float]]:
        """Each conversation twice, in turns: as it goes (only the new messages counted), and
        with every answer planned as if its conversation had never been counted (the whole)."""
        times: dict[str, list[float]] = {"new": [], "whole": []}
        for number in range(args.conversations):
            for way in times:
                conversation, said = Conversation(pk=next(ids)), []
                for turn in range(args.turns):
                    said.append(Message(pk=len(said) + 1, role="user", content=meeting_notes(turn + number)))
                    if way == "whole":
                        conversation = Conversation(pk=next(ids))
                    planned = plan(conversation, list(said))
                    began = time.perf_counter()
                    await prompt_fit.fit(planned)
                    if turn:  # a first answer's prompt is one question either way
                        times[way].append((time.perf_counter() - began) * 1000)
                    assert len(planned.prompt) == len(said)  # all of it fits in 8,192 tokens
                    said.append(Message(pk=len(said) + 1, role="assistant", content=ANSWER))
        return times

    times = asyncio.run(fit_all())
    longest = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": meeting_notes(i) if i % 2 == 0 else ANSWER} for i in range(2 * args.turns - 1)]
    with httpx2.Client(timeout=30) as client:
        count = client.post(f"{url}/tokenize", json={"messages": longest}).json()["count"]
        round_trips = [_timed(lambda: client.post(f"{url}/tokenize", json={"messages": longest}))
                       for _ in range(args.conversations)]
    return {"fit_ms": times["new"], "whole_fit_ms": times["whole"], "longest_tokens": count,
            "tokenize_ms": round_trips}


def _timed(call) -> float:
    began = time.perf_counter()
    call()
    return (time.perf_counter() - began) * 1000


def _spread(times: list[float]) -> str:
    ordered = sorted(times)
    return (f"p50 {statistics.median(ordered):.2f} ms, p90 {ordered[int(0.9 * (len(ordered) - 1))]:.2f} ms, "
            f"max {ordered[-1]:.2f} ms")


def _report(args, figures: dict) -> int:
    fits = figures["fit_ms"]
    p50 = statistics.median(fits)
    rows = {
        f"fit, answers 2 to {args.turns} (prompts of 3 to {2 * args.turns - 1} messages): only the new "
        "answer and question counted": _spread(fits),
        "the same answers, each prompt counted whole (a conversation never counted before)":
            _spread(figures["whole_fit_ms"]),
        f"/tokenize alone, the longest prompt whole ({figures['longest_tokens']} tokens)": _spread(figures["tokenize_ms"]),
    }
    ok = p50 < TARGET_MS
    lines = [f"| {name} | {value} |" for name, value in rows.items()]
    verdict = f"- **{'PASS' if ok else 'FAIL'}** the fit's median under {TARGET_MS} ms: {p50:.2f} ms"
    print("\n".join(lines + [verdict]))
    print(f"command: {args.command}")
    if report.publishing(args, args.conversations < 20 or args.turns != 8):
        report.write_section(SECTION, "\n".join([
            "## The plan's exact count at one stream", "",
            f"Command: `{args.command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).", "",
            "The time `prompt_fit.fit` adds before the first token: the prompt chosen from what earlier "
            "counts taught, and one `POST /tokenize` to the inference service (default model, "
            "8,192-token context) of only the messages new since the conversation's last count (of "
            "the whole prompt for a conversation's first answer in a process, and once per upstream "
            "six short counts that learn its template's own tokens); conversations of 8 questions of "
            "about 2,500 characters, one fit at a time; client and service share the machine's "
            f"cores, with other work on them (load average {os.getloadavg()[0]:.1f} on "
            f"{os.cpu_count()} cores at the end of the run).", "",
            "| measure | value |", "|---|---|", *lines, "", verdict,
        ]))
    print(json.dumps(figures))
    return 0 if ok else 1
