"""The database's faults (reliability/faults.py): PostgreSQL ending the stack's sessions, mid-answer
or while idle, and refusing the stack's database for a while."""

import asyncio
import time

from harness.database_administrator import DatabaseAdministrator

from .chat_client import Outcome
from .fault_client import FaultClient, FaultResult, final_row, saw, same_text, sessions, stored

# PostgreSQL refusing the stack's database (its sessions ended, new ones refused) for longer than
# an answer takes to end (96 tokens), as a restart or a failover that takes a while would.
DATABASE_OUTAGE_S = 20


class DatabaseFaults:
    def __init__(self, client: FaultClient, database_url: str):
        self.client, self.database_url = client, database_url

    def terminate_backends(self) -> int:
        """Every session on the stack's database, as an administrator's restart would end them."""
        with DatabaseAdministrator(self.database_url) as administrator:
            return administrator.end_sessions()

    async def backends_mid_answer(self) -> FaultResult:
        terminated = []

        async def terminate(_):
            terminated.append(await asyncio.to_thread(self.terminate_backends))

        answer = await self.client.answer(terminate)
        row = await final_row(answer, timeout_s=60)
        after = await self.client.answer()
        return FaultResult(
            f"PostgreSQL: the stack's {sessions(terminated[0])} terminated mid-answer", saw(answer),
            stored(row), f"next answer: {saw(after)}",
            answer.outcome is Outcome.FINISHED and same_text(answer, row) and after.outcome is Outcome.FINISHED)

    async def backends_idle(self) -> FaultResult:
        # At the same time, so that every database thread holds a connection (one after another
        # they may all land on one thread).
        await asyncio.gather(*(self.client.http.get("/api/conversations") for _ in range(20)))
        terminated = await asyncio.to_thread(self.terminate_backends)
        statuses = [(await self.client.http.get("/api/conversations")).status_code for _ in range(20)]
        after = await self.client.answer()
        failed = [s for s in statuses if s != 200]
        return FaultResult(
            f"PostgreSQL: the stack's {sessions(terminated)} terminated while idle",
            f"{len(failed)} of 20 requests after it failed ({failed or 'none'})", "-",
            f"next answer: {saw(after)}", not failed and after.outcome is Outcome.FINISHED)

    async def outage(self) -> FaultResult:
        """The stack's database refuses every session from an answer's first delta for
        DATABASE_OUTAGE_S, past the answer's end (its sessions ended, new ones refused)."""
        refused, ends = [], []

        with DatabaseAdministrator(self.database_url) as administrator:
            async def back_after_the_outage():
                await asyncio.sleep(DATABASE_OUTAGE_S)  # the outage's length
                await asyncio.to_thread(administrator.allow_sessions)
                return time.monotonic()

            async def begin(_):
                await asyncio.to_thread(administrator.refuse_sessions)
                ends.append(asyncio.create_task(back_after_the_outage()))
                await asyncio.to_thread(administrator.end_sessions)
                listed = await self.client.http.get("/api/conversations")
                refused.append(f"{listed.status_code} {listed.json().get('error', {}).get('code', '')}".strip())

            answer = await self.client.answer(begin)
            ended = await ends[0]
        row = await final_row(answer, timeout_s=60)
        after = await self.client.answer()
        done_at = "" if answer.done is None else f" ({answer.ended_at - ended:+.1f} s from the outage's end)"
        return FaultResult(
            f"PostgreSQL refuses the stack's database for {DATABASE_OUTAGE_S} s from an answer's first delta",
            f"{saw(answer)}{done_at}; the conversations listed meanwhile: {refused[0]}", stored(row),
            f"next answer: {saw(after)}",
            answer.outcome is Outcome.FINISHED and same_text(answer, row) and refused == ["503 database_unavailable"]
            and after.outcome is Outcome.FINISHED)
