"""What a fault does to one answer, as the faults read it (reliability/faults.py): a chat client
that strikes when an answer's first text arrives, and the answer's stored row, said in words."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .chat_client import Answer, ChatClient, Ending

QUESTION = "Write a long story about a lighthouse keeper and the sea."


@dataclass
class FaultResult:
    fault: str
    user_saw: str
    stored: str
    recovery: str
    is_passed: bool


class FaultClient(ChatClient):
    """A chat client that runs `at_first_delta(answer)` once, when an answer's first text arrives."""

    at_first_delta: Callable[[Answer], Awaitable[None]] | None = None

    async def _cancels_here(self, answer: Answer) -> bool:
        if self.at_first_delta is not None and answer.seen:
            hook, self.at_first_delta = self.at_first_delta, None
            await hook(answer)
        return await super()._cancels_here(answer)

    async def answer(self, hook=None) -> Answer:
        self.at_first_delta = hook
        conversation = await self.new_conversation("faults")
        return await self.ask(conversation, QUESTION, Answer(Ending.READ_ALL, keeps_pieces=True))

    async def resume(self, answer: Answer) -> Answer:
        """What the page does when an answer's stream broke without `done` (docs/api.md,
        "Resuming an answer"): the same answer from the code points it holds, read on `answer`
        to its end."""
        answer.outcome, answer.error = None, ""
        return await self._read(answer, "GET", f"/api/generations/{answer.generation_id}/events",
                                params={"from": answer.seen_chars})


def row_of(generation_id: int | None) -> dict | None:
    from django.db import connection

    from chatapp.models import Generation

    try:
        found = Generation.objects.filter(pk=generation_id).select_related("message").first()
        return None if found is None else {
            "status": found.status, "cancelled_by": found.cancelled_by, "error_code": found.error_code,
            "text": found.message.content, "finished_at": found.finished_at}
    finally:
        connection.close()


async def final_row(answer: Answer, timeout_s: float) -> dict | None:
    """The answer's stored row once it is final (a reaped one takes the stale time)."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = await asyncio.to_thread(row_of, answer.generation_id)
        if (row and row["status"] not in ("streaming", "stop_requested")) or time.monotonic() > deadline:
            return row
        await asyncio.sleep(0.05)


async def until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


def saw(answer: Answer) -> str:
    ending = (f"`done` {answer.done['status']}" if answer.done else "no `done`: the connection ended")
    error = f", error event `{answer.error.split(':')[0]}`" if answer.done and answer.error else ""
    return f"{answer.seen_chars} code points{error}, {ending}"


def sessions(count: int) -> str:
    return f"{count} session" if count == 1 else f"{count} sessions"


def stored(row: dict | None) -> str:
    if row is None:
        return "no row"
    cause = row["cancelled_by"] or row["error_code"] or "-"
    return f"{row['status']} ({cause}), {len(row['text'])} code points"


def same_text(answer: Answer, row: dict | None) -> bool:
    return row is not None and row["text"] == answer.seen
