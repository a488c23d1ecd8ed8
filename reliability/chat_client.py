"""A signed-in user of the chat API, through nginx, recording exactly what it saw of each answer.

Cancelling follows the real clients: Stop is POSTed first with the code points seen, and the
stream is closed once the Stop is answered (docs/api.md, "Stop"); closing alone just drops the
connection, as a closed tab does.
"""

import json
import time
from dataclasses import dataclass, field
from enum import Enum

import httpx2

from common.sse import SSEParser


class Ending(str, Enum):
    """How the client means to end an answer."""

    READ_ALL = "read_all"
    CLOSE = "close"  # drop the connection mid-answer
    STOP = "stop"    # POST Stop with the seen length, then close


class Outcome(str, Enum):
    """What happened to one request, as the client saw it."""

    FINISHED = "finished"        # read to the `done` event
    CLOSED = "closed"            # closed by us mid-answer
    STOPPED = "stopped"          # Stop answered 202, then closed by us
    BUSY = "busy"                # 429: this user's previous answer still streams
    FAILED = "failed"            # anything else: an unexpected error


@dataclass
class Answer:
    ending: Ending
    cancel_after_chars: int | None = None  # the point where the client cancels
    outcome: Outcome | None = None
    status_code: int | None = None
    generation_id: int | None = None
    message_id: int | None = None
    seen: str = ""  # the text of every delta the client read
    # With `keeps_pieces`, each delta as the page keeps it, to hand back what the server lost.
    keeps_pieces: bool = False
    pieces: list[dict] = field(default_factory=list)  # {"offset", "text", "proof"}
    done: dict | None = None
    error: str = ""
    stop_status: int | None = None
    is_stop_late: bool = False  # the Stop found the answer ended (409) and it was read to the end
    sent_at: float = 0.0
    first_delta_at: float | None = None
    ended_at: float = 0.0

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_delta_at is None else self.first_delta_at - self.sent_at

    @property
    def seen_chars(self) -> int:
        return len(self.seen)  # Python strings count code points, as the Stop wants


@dataclass
class ChatClient:
    base_url: str
    username: str
    password: str
    timeout_s: float = 120.0  # above the server's heartbeat: a quiet queue is not a dead one
    http: httpx2.AsyncClient = field(init=False)

    def __post_init__(self):
        # One connection for the stream, one for a Stop while it is open, one spare.
        self.http = httpx2.AsyncClient(base_url=self.base_url, timeout=httpx2.Timeout(self.timeout_s, connect=10.0),
                                      limits=httpx2.Limits(max_connections=8))

    async def aclose(self) -> None:
        await self.http.aclose()

    async def sign_in(self) -> None:
        (await self.http.get("/api/auth/session")).raise_for_status()
        (await self._post("/api/auth/login", {"username": self.username, "password": self.password})).raise_for_status()

    async def new_conversation(self, title: str) -> int:
        response = await self._post("/api/conversations", {"title": title})
        response.raise_for_status()
        return response.json()["id"]

    async def ask(self, conversation_id: int, content: str, answer: Answer) -> Answer:
        """Sends `content` and follows the answer to its end or to the client's cancel point."""
        answer.sent_at = time.monotonic()
        return await self._read(answer, "POST", f"/api/conversations/{conversation_id}/messages",
                                json={"content": content}, headers=self._csrf())

    async def _read(self, answer: Answer, method: str, path: str, **request) -> Answer:
        """Opens the stream at `path` and follows it into `answer`; a refusal (429: busy) or a
        broken connection is its outcome."""
        try:
            async with self.http.stream(method, path, **request) as response:
                answer.status_code = response.status_code
                if response.status_code != 200:
                    answer.error = (await response.aread()).decode(errors="replace")[:300]
                    answer.outcome = Outcome.BUSY if response.status_code == 429 else Outcome.FAILED
                    return answer
                await self._follow(response, answer)
        except httpx2.HTTPError as error:
            answer.outcome, answer.error = Outcome.FAILED, f"{type(error).__name__}: {error}"
        finally:
            answer.ended_at = time.monotonic()
        return answer

    async def _follow(self, response: httpx2.Response, answer: Answer) -> None:
        parser = SSEParser()
        async for chunk in response.aiter_raw():
            for event in parser.feed(chunk):
                payload = json.loads(event.data)
                if event.event == "start":
                    answer.generation_id, answer.message_id = payload["generation_id"], payload["message_id"]
                elif event.event == "delta":
                    answer.first_delta_at = answer.first_delta_at or time.monotonic()
                    if answer.keeps_pieces:
                        answer.pieces.append({"offset": answer.seen_chars, "text": payload["text"],
                                              "proof": payload["proof"]})
                    answer.seen += payload["text"]
                elif event.event == "error":
                    answer.error = f"{payload.get('code')}: {payload.get('message')}"
                elif event.event == "done":
                    answer.done = payload
                    answer.outcome = Outcome.FAILED if answer.error else Outcome.FINISHED
                    return
                if answer.generation_id is not None and await self._cancels_here(answer):
                    return  # leaving the `async with` closes the connection
        answer.outcome = Outcome.FAILED
        answer.error = answer.error or "the stream ended without `done`"

    async def _cancels_here(self, answer: Answer) -> bool:
        if (answer.ending is Ending.READ_ALL or answer.is_stop_late
                or answer.seen_chars < answer.cancel_after_chars):
            return False
        if answer.ending is Ending.CLOSE:
            answer.outcome = Outcome.CLOSED
            return True
        stop = await self._post(f"/api/generations/{answer.generation_id}/stop", {"seen_chars": answer.seen_chars})
        answer.stop_status = stop.status_code
        if stop.status_code == 202:
            answer.outcome = Outcome.STOPPED
            return True
        if stop.status_code != 409:  # 409: it ended before the Stop came; read on to `done`
            answer.outcome, answer.error = Outcome.FAILED, f"Stop answered {stop.status_code}: {stop.text[:200]}"
            return True
        answer.is_stop_late = True
        return False

    async def hand_back(self, answer: Answer) -> int:
        """What a page does once an answer whose web process died ends shorter than it saw
        (docs/api.md, "Resuming an answer"): the pieces it was sent, with their proofs. The status."""
        response = await self._post(f"/api/generations/{answer.generation_id}/recover", {"pieces": answer.pieces})
        return response.status_code

    async def _post(self, path: str, body: dict) -> httpx2.Response:
        return await self.http.post(path, json=body, headers=self._csrf())

    def _csrf(self) -> dict[str, str]:
        return {"X-CSRFToken": self.http.cookies.get("csrftoken", "")}
