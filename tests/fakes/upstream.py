"""Fault injection: a stand-in OpenAI-compatible upstream that misbehaves on demand.

The real inference service cannot be made to crash mid-stream, stall, answer 500 or send
garbage when a test wants it; this one can. It also records what it was sent and notices when
its client hangs up, so a test can see that the relay closed the upstream connection.
"""

import asyncio
import dataclasses
import json
import threading
from dataclasses import dataclass, field

# The model the tests' settings name (CHAT_MODEL's default), which the stand-in serves unless told.
DEFAULT_MODEL = "SmolLM2-135M-Instruct"


@dataclass
class Script:
    chunks: list[str] = field(default_factory=lambda: ["Hello", ",", " world", "!"])
    interval_s: float = 0.0  # pause after each content chunk
    first_delay_s: float = 0.0  # pause between the role chunk and the first content (a queued prompt)
    finish_reason: str = "stop"
    status: int = 200  # anything else: refuse with this status and a JSON error
    error_code: str = "nope"  # that error's code
    retry_after: str | None = None  # that refusal's Retry-After header
    models_status: int = 200  # what GET /v1/models answers with (503: ours while its model loads)
    crash_after: int | None = None  # drop the connection after this many content chunks
    stall_after: int | None = None  # go quiet after this many content chunks, until hung up
    garbage_after: int | None = None  # send a line that is not JSON after this many chunks
    error_after: int | None = None  # send an OpenAI error event after this many chunks
    send_done: bool = True
    # Our inference service says the prompt's size at open (X-Prompt-Tokens); other peers do not.
    prompt_tokens_header: int | None = None
    tgi_style: bool = False  # role on every delta, stop_sequence, extra fields
    # The whole answer (up to a stall) in one write: a backlog that arrives in one network read.
    one_write: bool = False
    # Each content chunk after the first waits for a release of this (by the test, once it has
    # read the previous delta): a relay that keeps up, proven without timing.
    gate: threading.Semaphore | None = None
    # The response's head waits until this is set (an upstream slow to take the request).
    head_held: threading.Event | None = None
    # The answer is what the upstream was asked (each message as "role: content", a paragraph each).
    echo: bool = False
    # GET /v1/models says this context (max_model_len) of each model; None: it says none.
    context_tokens: int | None = None
    # POST /tokenize counts a token per byte of text, far denser than any estimate (a prompt the
    # relay cannot guess); False: the endpoint is missing (404), as on TGI.
    counts_every_byte: bool = False


class FakeUpstream:
    def __init__(self):
        self.script = Script()
        self.requests: list[tuple[dict, dict]] = []  # (body, headers)
        self.clients: list[tuple[str, int]] = []  # each request's peer: one port per connection
        self.hung_up = threading.Event()
        self.requested = threading.Event()  # a request came in (a test waits for it, from any thread)
        self.metrics = ""  # what GET /metrics answers (a Prometheus exposition)
        self.metrics_reads = 0
        # What GET /v1/models lists; None answers 404, as a peer without the endpoint would.
        self.models: list[str] | None = [DEFAULT_MODEL]
        self.counts: list[dict] = []  # the bodies of POST /tokenize

    def reset(self, script: Script | None = None, models: list[str] | None = None) -> None:
        """As new, serving `script` (a default one when None) and `models` (the default model's
        when None): one server serves test after test."""
        self.script = script or Script()
        self.requests.clear()
        self.clients.clear()
        self.hung_up.clear()
        self.requested.clear()
        self.metrics, self.metrics_reads = "", 0
        self.models = [DEFAULT_MODEL] if models is None else models
        self.counts.clear()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/metrics":
            self.metrics_reads += 1
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": self.metrics.encode()})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] != "/v1/chat/completions":
            await self._other(scope["path"], json.loads(body or b"{}"), send)
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append((json.loads(body or b"{}"), headers))
        self.clients.append(tuple(scope["client"]))
        self.requested.set()
        script = self.script
        if script.status != 200:
            payload = json.dumps({"error": {"message": "upstream says no", "type": "server_error",
                                            "code": script.error_code}}).encode()
            headers = [(b"content-type", b"application/json")]
            if script.retry_after is not None:
                headers.append((b"retry-after", script.retry_after.encode()))
            await send({"type": "http.response.start", "status": script.status, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return
        if script.echo:
            asked = self.requests[-1][0].get("messages", [])
            script = dataclasses.replace(script, chunks=["\n\n".join(f"{m['role']}: {m['content']}" for m in asked)])
        listener = asyncio.create_task(self._notice_hang_up(receive))
        if script.head_held is not None:
            await asyncio.to_thread(script.head_held.wait, 30)
        headers = [(b"content-type", b"text/event-stream")]
        if script.prompt_tokens_header is not None:
            headers.append((b"x-prompt-tokens", str(script.prompt_tokens_header).encode()))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await self._stream(script, send)
        finally:
            listener.cancel()

    async def _other(self, path: str, body: dict, send) -> None:
        """/v1/models and /tokenize as the script says; anything else is not here."""
        script, found = self.script, None
        if path == "/v1/models" and self.models is not None:  # vLLM's shape
            found = {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "fake",
                                                 "max_model_len": script.context_tokens} for name in self.models]}
        elif path == "/tokenize":
            self.counts.append(body)
        if path == "/tokenize" and script.counts_every_byte:
            messages = body.get("messages", [])
            count = sum(len(m["content"].encode()) + 5 for m in messages) + 3
            found = {"count": count, "max_model_len": script.context_tokens, "tokens": [0] * count}
        status = 404 if found is None else 200
        if path == "/v1/models" and script.models_status != 200:
            status, found = script.models_status, None
        payload = json.dumps(found or {"error": {"message": "not found", "type": "not_found", "code": "nope"}})
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload.encode()})

    async def _notice_hang_up(self, receive):
        while (await receive())["type"] != "http.disconnect":
            pass
        self.hung_up.set()

    async def _stream(self, script: Script, send):
        held: list[bytes] = []  # what a one-write answer has not yet sent

        async def data(payload) -> None:
            text = payload if isinstance(payload, str) else json.dumps(payload)
            held.append(f"data: {text}\n\n".encode())
            if not script.one_write:
                await flush()

        async def flush() -> None:
            body = b"".join(held)
            held.clear()
            await send({"type": "http.response.body", "body": body, "more_body": True})

        def chunk(delta: dict, finish=None) -> dict:
            if script.tgi_style:
                delta = {"role": "assistant", **delta}
            body = {"id": "x", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if script.tgi_style:
                body["system_fingerprint"] = "tgi"
            return body

        await data(chunk({"role": "assistant"}))
        if script.first_delay_s:
            await asyncio.sleep(script.first_delay_s)
        for index, text in enumerate(script.chunks):
            if index == script.crash_after:
                await flush()
                return  # no end of body: the connection just drops
            if index == script.stall_after:
                await flush()
                await asyncio.Event().wait()
            if index and script.gate is not None:
                await asyncio.to_thread(script.gate.acquire, timeout=10)  # a failed test frees it
            if index == script.garbage_after:
                await data("{this is not json")
            if index == script.error_after:
                await data({"error": {"message": "the model fell over", "type": "server_error",
                                      "code": "engine_error"}})
                await data("[DONE]")
                break
            await data(chunk({"content": text}))
            if script.interval_s:
                await asyncio.sleep(script.interval_s)  # the upstream's own pace
        else:
            finish = "stop_sequence" if script.tgi_style and script.finish_reason == "stop" else script.finish_reason
            await data(chunk({}, finish))
            # A token a chunk; with counts_every_byte, a token a byte and the end of turn.
            completion = (sum(len(text.encode()) for text in script.chunks) + 1 if script.counts_every_byte
                          else len(script.chunks))
            await data({"id": "x", "object": "chat.completion.chunk", "choices": [],
                        "usage": {"prompt_tokens": 11, "completion_tokens": completion,
                                  "total_tokens": 11 + completion}})
            if script.send_done:
                await data("[DONE]")
        body = b"".join(held)
        await send({"type": "http.response.body", "body": body, "more_body": False})
