"""The faults: what a user sees and what is stored when a part of the stack fails mid-answer
(issue #11), under `make run` (`python -m stack`) on PostgreSQL and a Redis of the suite's own.

`make faults` (`python -m reliability.faults`): one stack, one signed-in user; each fault is
injected the moment the first delta of an answer arrives (or while idle), then the suite
records what the client saw, reads the stored rows, checks that the part came back, and asks
one more question that must be answered in full. The verdicts go into RELIABILITY.md's
`## Faults` section; the exit status is 0 only when every fault passes.

Timings are shortened so that the run takes minutes: the relay's heartbeat every 5 s, the
reaper's round every 2 s, the relay gives up on a silent upstream after 10 s, and it pings the
browser every 2 s. An answer without a heartbeat is reaped only after 120 s: one whose web
process died is ended because its process is gone (chatapp/runtime/web_process.py), and one
whose web process was only paused must not be.
"""

import asyncio
import os
import signal
import sys
import time

from benchmarks import report
from benchmarks.machine import inference_notes
from common import env
from harness.waiting import healthy

from .chat_client import Answer, Outcome
from .database import create_users, use_database
from .database_faults import DatabaseFaults
from .end_checks import engine_sequences
from .fault_client import FaultClient, FaultResult, final_row, row_of, saw, same_text, stored, until
from .redis_server import RedisServer
from .report import write_reliability_section
from .stack_under_test import Role, StackConfig, StackUnderTest, stack_under_test

PASSWORD = "faults-password-not-a-secret"
SETTINGS = {
    "CHAT_MAX_TOKENS": "96",
    "CHAT_RELAY_HEARTBEAT_SECONDS": "5",
    "CHAT_STALE_STREAM_SECONDS": "120",
    "CHAT_REAP_INTERVAL_SECONDS": "2",
    "INFERENCE_READ_TIMEOUT_SECONDS": "15",  # beyond the web process's pause (WEB_PAUSE_S)
    "CHAT_HEARTBEAT_SECONDS": "2",
}
REDIS_OUTAGE_S = 30
# A Redis that answers nothing (its connections open): the channel layer's connections have no
# socket timeout (chatapp/settings.py), so only the app's own bounds limit what waits on it.
REDIS_PAUSE_S = 20
# A Stop's answer while Redis is down or paused: it waits on no message to the channel layer
# (chatapp/streaming/relay_inbox.py), so this is a loaded machine's margin.
STOP_ANSWERED_WITHIN_S = 2
WEB_PAUSE_S = 12  # longer than a web process's key lives (CHAT_WEB_PROCESS_TTL_SECONDS, 10 s)
COMEBACK_TIMEOUT_S = 300  # a restarted inference service loads the model again


class Faults:
    def __init__(self, stack: StackUnderTest, redis: RedisServer, client: FaultClient):
        self.stack, self.redis, self.client = stack, redis, client

    async def comes_back(self, role: Role, old_pid: int) -> bool:
        return await until(lambda: self.stack.pids().get(role) not in (None, old_pid), COMEBACK_TIMEOUT_S)

    async def kill(self, role: Role) -> FaultResult:
        old = self.stack.pids()[role]
        killed_at = []

        async def kill_it(_):
            os.kill(old, signal.SIGKILL)
            killed_at.append(time.monotonic())

        answer = await self.client.answer(kill_it)
        row = await final_row(answer, timeout_s=90)
        shown = stored(row)
        if role is Role.WEB and row is not None:
            shown += f", ended {time.monotonic() - killed_at[0]:.0f} s after the kill"
            # What the relay sent after its last partial save died with it: the client hands it back.
            handed = await self.client.hand_back(answer)
            row = await asyncio.to_thread(row_of, answer.generation_id)
            shown += f"; handed back ({handed}): {len(row['text'])} code points"
        back = await self.comes_back(role, old)
        if role is Role.INFERENCE:
            back = back and await until(lambda: healthy(f"{self.stack.inference_url}/health"), COMEBACK_TIMEOUT_S)
        if role is Role.WEB:
            back = back and await until(lambda: healthy(f"{self.stack.public_url}/healthz"), 60)
        after = await self.client.answer()
        expected = {
            Role.INFERENCE: lambda: (answer.done or {}).get("status") == "failed" and bool(answer.error)
            and row["status"] == "failed" and same_text(answer, row),
            # The relay died with the process: nobody is left to send an event; the reaper ends
            # the row once the process's key is gone, keeping the text saved last, and the
            # client hands back the rest of what it saw.
            Role.WEB: lambda: answer.done is None and row["status"] == "failed"
            and row["error_code"] == "interrupted" and same_text(answer, row),
            Role.WORKER: lambda: answer.outcome is Outcome.FINISHED and same_text(answer, row),
        }[role]
        return FaultResult(
            f"kill -9 of {role.value} mid-answer", saw(answer), shown,
            f"{role.value} back under a new pid: {'yes' if back else 'NO'}; next answer: {saw(after)}",
            row is not None and expected() and back and after.outcome is Outcome.FINISHED)

    async def killed_nginx(self) -> FaultResult:
        """nginx killed at an answer's first delta: the connection ends, the relay carries the
        answer on for a reader to come back, and the client resumes it as the page does once
        nginx is back (the supervisor's restart), reading it to its end."""
        old = self.stack.pids()[Role.NGINX]
        killed_at = []

        async def kill_it(_):
            os.kill(old, signal.SIGKILL)
            killed_at.append(time.monotonic())

        answer = await self.client.answer(kill_it)
        broken = saw(answer)
        back = (await self.comes_back(Role.NGINX, old)
                and await until(lambda: healthy(f"{self.stack.public_url}/healthz"), 60))
        resumed_after_s = time.monotonic() - killed_at[0]
        await self.client.resume(answer)
        row = await final_row(answer, timeout_s=60)
        after = await self.client.answer()
        return FaultResult(
            "kill -9 of nginx mid-answer", f"{broken}; resumed {resumed_after_s:.1f} s after the "
            f"kill, as the page does: {saw(answer)} in all", stored(row),
            f"nginx back under a new pid: {'yes' if back else 'NO'}; next answer: {saw(after)}",
            back and answer.outcome is Outcome.FINISHED and row is not None
            and row["status"] in ("completed", "truncated") and same_text(answer, row)
            and after.outcome is Outcome.FINISHED)

    async def stop_and_read_on(self) -> tuple[Answer, float | None, dict | None, float]:
        """An answer Stopped at its first delta and read on to `done`: seconds from the Stop's
        202 to `done` (the channel layer carries it at once; the row, at the next heartbeat),
        and how long the Stop's request took."""
        acknowledged = []

        async def press_stop(answer: Answer):
            pressed = time.monotonic()
            response = await self.client._post(f"/api/generations/{answer.generation_id}/stop",
                                               {"seen_chars": answer.seen_chars})
            answered = time.monotonic()
            acknowledged.append((response.status_code, answered, answer.seen, answered - pressed))

        answer = await self.client.answer(press_stop)
        row = await final_row(answer, timeout_s=60)
        status, at, seen_then, took = acknowledged[0]
        answer.seen = seen_then  # what the user saw when pressing Stop; later deltas were never shown
        latency = max(answer.ended_at - at, 0.0) if status == 202 and answer.done else None
        return answer, latency, row, took

    async def redis_outage(self) -> FaultResult:
        self.redis.stop()
        started = time.monotonic()
        during = await self.client.answer()
        stopped = await self.stop_and_read_on()
        await asyncio.sleep(max(0.0, REDIS_OUTAGE_S - (time.monotonic() - started)))  # the outage's length
        self.redis.start()
        return await self.redis_back(f"Redis stopped for {REDIS_OUTAGE_S} s, then restarted", during,
                                     stopped, "outage")

    async def redis_paused(self) -> FaultResult:
        os.kill(self.redis.pid, signal.SIGSTOP)
        started = time.monotonic()
        try:
            during = await self.client.answer()
            stopped = await self.stop_and_read_on()
            await asyncio.sleep(max(0.0, REDIS_PAUSE_S - (time.monotonic() - started)))  # the pause's length
        finally:
            os.kill(self.redis.pid, signal.SIGCONT)
        return await self.redis_back(f"Redis paused (SIGSTOP) for {REDIS_PAUSE_S} s, then resumed", during,
                                     stopped, "pause")

    async def redis_back(self, fault: str, during: Answer, stopped_during: tuple, what: str) -> FaultResult:
        """After Redis failed (`what`: an outage, a pause) and came back: chat went on during it, a
        Stop then was answered within the app's bound and applied through the row at the relay's
        heartbeat, and a Stop now reaches the relay over the channel layer at once."""
        answer_during, latency_during, row_during, took_during = stopped_during
        answer_after, latency_after, row_after, took_after = await self.stop_and_read_on()

        def stopped_by_user(row):
            return row is not None and (row["status"], row["cancelled_by"]) == ("stopped", "user")

        def seconds(value):
            return "-" if value is None else f"{value:.1f} s"

        return FaultResult(
            fault,
            f"during: an answer {saw(during)}; a Stop answered 202 in {seconds(took_during)}, `done` "
            f"{seconds(latency_during)} after it; after it, a Stop answered in {seconds(took_after)}, `done` "
            f"{seconds(latency_after)} after it",
            f"the Stopped answers: {stored(row_during)} and {stored(row_after)}, each the text seen",
            f"chat went on; Stop worked throughout (during the {what} through the row at the relay's "
            "heartbeat, after it over the channel layer again)",
            during.outcome is Outcome.FINISHED and stopped_by_user(row_during) and stopped_by_user(row_after)
            and same_text(answer_during, row_during) and same_text(answer_after, row_after)
            and took_during < STOP_ANSWERED_WITHIN_S
            and latency_after is not None and latency_after < float(SETTINGS["CHAT_RELAY_HEARTBEAT_SECONDS"]))

    async def paused_web(self) -> FaultResult:
        pid = self.stack.pids()[Role.WEB]

        async def pause(_):
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(WEB_PAUSE_S)  # the pause's length
            finally:
                os.kill(pid, signal.SIGCONT)

        answer = await self.client.answer(pause)
        row = await final_row(answer, timeout_s=60)
        return FaultResult(
            f"the web process paused (SIGSTOP) for {WEB_PAUSE_S} s mid-answer", saw(answer), stored(row),
            f"SIGCONT: the same pid serves: {'yes' if self.stack.pids().get(Role.WEB) == pid else 'NO'}",
            answer.outcome is Outcome.FINISHED and row is not None and row["status"] in ("completed", "truncated")
            and same_text(answer, row) and self.stack.pids().get(Role.WEB) == pid)

    async def stalled_upstream(self) -> FaultResult:
        pid = self.stack.pids()[Role.INFERENCE]

        async def freeze(_):
            os.kill(pid, signal.SIGSTOP)

        try:
            answer = await self.client.answer(freeze)
        finally:
            os.kill(pid, signal.SIGCONT)
        row = await final_row(answer, timeout_s=60)
        drained = await asyncio.to_thread(engine_sequences, self.stack, 60)
        after = await self.client.answer()
        return FaultResult(
            "the inference service stalls (SIGSTOP) mid-answer", saw(answer), stored(row),
            f"SIGCONT: engine sequences left {sum(drained.values()):g}; next answer: {saw(after)}",
            (answer.done or {}).get("status") == "failed" and row is not None and row["status"] == "failed"
            and same_text(answer, row) and not any(drained.values()) and after.outcome is Outcome.FINISHED)


async def run_faults(stack: StackUnderTest, redis: RedisServer, username: str) -> list[FaultResult]:
    client = FaultClient(stack.public_url, username, PASSWORD)
    await client.sign_in()
    faults, database = Faults(stack, redis, client), DatabaseFaults(client, stack.database_url)
    try:
        return [
            await faults.kill(Role.WORKER),
            await database.backends_mid_answer(),
            await database.backends_idle(),
            await database.outage(),
            await faults.redis_outage(),
            await faults.redis_paused(),
            await faults.stalled_upstream(),
            await faults.paused_web(),
            await faults.killed_nginx(),
            await faults.kill(Role.INFERENCE),
            await faults.kill(Role.WEB),
        ]
    finally:
        await client.aclose()


def render(command: str, results: list[FaultResult], started_at: float) -> str:
    machine = inference_notes(threads=0)
    lines = [
        "## Faults", "",
        f"Command: `{command}` (`make faults`; started {report.stamp(started_at)}, "
        f"{(time.time() - started_at) / 60:.1f} min, commit {machine['commit']}). Machine: "
        f"{machine['cpu']}, {machine['cores']} cores.", "",
        "One stack under `make run` (`python -m stack`: inference with the real model, daphne, a "
        "Celery worker, nginx, the supervisor) on PostgreSQL and a Redis server of the suite's own; "
        "every request through nginx. Each fault strikes when an answer's first delta arrives. "
        f"Shortened timings: {', '.join(f'{k}={v}' for k, v in SETTINGS.items())}.", "",
        "| fault | what the user saw | what was stored | recovery | verdict |", "|---|---|---|---|---|",
    ]
    lines += [f"| {r.fault} | {r.user_saw} | {r.stored} | {r.recovery} | {'PASS' if r.is_passed else '**FAIL**'} |"
              for r in results]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    database_server_url = env.string("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    started_at = time.time()
    with RedisServer() as redis:
        config = StackConfig(database_server_url=database_server_url, redis_url=redis.url, settings=SETTINGS)
        with stack_under_test(config) as stack:
            use_database(stack.database_url, redis.url)
            [username] = create_users(1, PASSWORD, prefix="faults")
            results = asyncio.run(run_faults(stack, redis, username))
    command = "python -m reliability.faults " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render(command.strip(), results, started_at)
    write_reliability_section("faults", section)
    print(section)
    return 0 if all(r.is_passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
