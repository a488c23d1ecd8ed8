"""The client side of any OpenAI-compatible streaming upstream (our service, vLLM, TGI, llama.cpp).

Requests go through the process's client for their loop (http_client.py). Refusals before the
first byte raise `UpstreamRefused`; trouble after it raises `UpstreamBroken` from the chunk
iterator. Of several replicas (inference_replicas.py) the least loaded is asked first, and a
refusal that another replica might not repeat (unreachable, 5xx, busy) passes the request on to
the next.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2
from django.conf import settings

from common.vocabulary import FinishReason

from .. import request_input
from . import inference_replicas
from .http_client import client, send
from .inference_replicas import Replica
from common.sse import SSEParser

# Peers name the same ends differently; TGI says stop_sequence and eos_token.
_FINISH_REASONS = {
    "stop": FinishReason.STOP, "stop_sequence": FinishReason.STOP, "eos_token": FinishReason.STOP,
    "length": FinishReason.LENGTH, "max_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}


class UpstreamRefused(Exception):
    """No stream: the upstream could not be reached or answered with an error status."""

    def __init__(self, status: int, code: str, message: str, elsewhere: bool = False,
                 retry_after_s: int | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.elsewhere = elsewhere  # another replica may well answer (this one is down or busy)
        self.retry_after_s = retry_after_s  # sent to the browser as Retry-After


class UpstreamBroken(Exception):
    """The stream started but did not end as the protocol intends."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class UpstreamChunk:
    text: str = ""
    finish_reason: FinishReason | None = None
    usage: dict | None = None


# How long the end of a finished answer's HTTP body may take to arrive after [DONE]: it is
# normally in the same read; a peer that lingers longer costs us the connection, not the wait.
_REUSE_WAIT_SECONDS = 0.25
BUSY_RETRY_AFTER_SECONDS = 1  # a waiting place comes free as soon as a running answer ends
# Unreachable: a service restarting or loading its model (our own says 5 s while it loads).
UNREACHABLE_RETRY_AFTER_SECONDS = 5
# A peer's own Retry-After is passed on within these: a page told to wait a day would look dead.
RETRY_AFTER_BOUNDS_SECONDS = (1, 60)


class UpstreamStream:
    def __init__(self, response: httpx2.Response, replica: Replica):
        self._response, self._replica = response, replica
        # Kept across `chunks()` and `aclose()`, so that the body's end can still be read after
        # [DONE]: only a response read to its end lets httpx2 put the connection back in the pool.
        # Made by the first `chunks()`: a relay dropped before its first event is closed by the
        # garbage collector, which would close a generator never started in the same sweep, and
        # the answer, carried on for its page, would end at once without [DONE].
        self._raw: AsyncIterator[bytes] | None = None
        self._saw_done = False
        # Sent by our inference service at open; None from peers that do not say it.
        self.prompt_tokens = _count(response.headers.get("x-prompt-tokens"))

    @classmethod
    async def open(cls, payload: dict, request_id: str) -> "UpstreamStream":
        """A stream from the first replica of the payload's model, in `in_order`'s order, that
        does not refuse it."""
        refusal = UpstreamRefused(502, "upstream_unreachable", f"no upstream serves the model {payload['model']!r}")
        for replica in inference_replicas.in_order(payload["model"]):
            try:
                with replica.opening():
                    return cls(await _response(replica, payload, request_id), replica)
            except UpstreamRefused as error:
                if not error.elsewhere:
                    raise
                replica.refused()
                refusal = error
        raise refusal

    async def chunks(self) -> AsyncIterator[UpstreamChunk]:
        parser = SSEParser()
        self._raw = self._raw or self._response.aiter_raw()
        try:
            async for data in self._raw:
                for event in parser.feed(data):
                    if event.data.strip() == "[DONE]":
                        self._saw_done = True
                        return
                    yield _chunk(event.data)
        except httpx2.TimeoutException as error:
            raise UpstreamBroken("upstream_timeout", "the inference service sent nothing for "
                                 f"{settings.INFERENCE_READ_TIMEOUT_SECONDS:g} s") from error
        except httpx2.TransportError as error:
            raise UpstreamBroken("upstream_disconnected",
                                 f"the inference service dropped the stream ({error!r})") from error
        raise UpstreamBroken("upstream_disconnected", "the stream ended without [DONE]")

    async def aclose(self) -> None:
        """Closing mid-stream drops the connection, which is how the upstream learns to stop.

        After [DONE] the connection goes back to the pool instead, once the body's end is read,
        so the next answer does not pay for a new one.
        """
        if self._saw_done:  # then the body's iterator rests at a yield: ours to go on with
            with contextlib.suppress(httpx2.HTTPError, TimeoutError):
                async with asyncio.timeout(_REUSE_WAIT_SECONDS):
                    async for _ in self._raw:
                        pass  # nothing is expected after [DONE]; whatever comes is dropped
            await self._raw.aclose()
        try:
            await self._response.aclose()
        finally:
            if self._replica is not None:  # counted once, however often closed
                self._replica, replica = None, self._replica
                replica.closed()


async def _response(replica: Replica, payload: dict, request_id: str) -> httpx2.Response:
    """The replica's streaming response, its status 200, or its refusal."""
    request = client().build_request(
        "POST", f"{replica.url}/v1/chat/completions", json=payload,
        headers={"X-Request-Id": request_id, "Accept": "text/event-stream"},
    )
    try:
        response = await send(request, stream=True)
    except httpx2.TransportError as error:
        raise unreachable(error) from error
    if response.status_code != 200:
        body = await response.aread()
        await response.aclose()
        raise refusal(response.status_code, body, response.headers.get("retry-after"))
    return response


def _chunk(data: str) -> UpstreamChunk:
    try:
        message = json.loads(data)
    except json.JSONDecodeError as error:
        raise UpstreamBroken("upstream_protocol", f"the stream sent something that is not JSON: "
                             f"{data[:80]!r}") from error
    if not isinstance(message, dict):
        raise UpstreamBroken("upstream_protocol", f"unexpected stream event {data[:80]!r}")
    if "error" in message:
        error = message["error"] if isinstance(message["error"], dict) else {"message": str(message["error"])}
        raise UpstreamBroken(str(error.get("code") or "upstream_error"),
                             str(error.get("message") or "the inference service failed"))
    choices = message.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    delta = choice.get("delta") or {}
    reason = choice.get("finish_reason")
    if not isinstance(delta, dict) or not isinstance(delta.get("content"), str | None):
        raise UpstreamBroken("upstream_protocol", f"the stream sent a delta whose content is no text: {data[:80]!r}")
    return UpstreamChunk(
        # A byte-level model may sample byte 0, and a peer's JSON may escape half a surrogate
        # pair: shown and stored as U+FFFD, not a final write PostgreSQL refuses.
        text=request_input.storable(delta.get("content") or ""),
        finish_reason=_FINISH_REASONS.get(reason, FinishReason.STOP) if reason else None,
        usage=message.get("usage") if isinstance(message.get("usage"), dict) else None,
    )


def _count(header: str | None) -> int | None:
    """A header's count of tokens; None when it is absent or not a plausible one (the audit
    row's token counts are PostgreSQL integers: a larger count from a peer is no count)."""
    return request_input.count((header or "").strip())


# The refusal rules, one for the relay and the titles: what passes a request on to the next replica.
def unreachable(error: httpx2.HTTPError) -> UpstreamRefused:
    """No answer from the replica (a timeout, a connection that failed): another may answer."""
    if isinstance(error, httpx2.TimeoutException):
        return UpstreamRefused(504, "upstream_timeout",
                               f"the inference service did not answer in time ({error!r})", elsewhere=True)
    return UpstreamRefused(502, "upstream_unreachable", f"the inference service is unreachable ({error!r})",
                           elsewhere=True, retry_after_s=UNREACHABLE_RETRY_AFTER_SECONDS)


def _retry_after(header: str | None) -> int:
    """The seconds a busy peer asked for (its Retry-After's delay form), within bounds."""
    told = request_input.count((header or "").strip())
    low, high = RETRY_AFTER_BOUNDS_SECONDS
    return BUSY_RETRY_AFTER_SECONDS if told is None else max(low, min(high, told))


def refusal(status: int, body: bytes, retry_after: str | None = None) -> UpstreamRefused:
    """The replica's answer other than 200, as a refusal; `retry_after`: its Retry-After header."""
    try:
        error = json.loads(body)["error"]
        detail, code = error["message"], error.get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        detail, code = body[:200].decode(errors="replace") or f"HTTP {status}", None
    if status == 400 and code == "invalid_messages":
        # The model's chat template refuses the conversation as it is (our inference service
        # quotes it): the user can change it (a system prompt the model takes none of), not retry.
        return UpstreamRefused(400, "model_refuses_messages",
                               f"the model does not take these messages: {detail}")
    if status == 400 and code == "context_length_exceeded":
        # Our count of the prompt was low (an estimate where the upstream could not count) or
        # this replica's context is smaller than the one the prompt was fitted to: another
        # replica may take it; if none does, the message is too long, and retrying cannot help.
        return UpstreamRefused(400, "context_too_long",
                               f"the message is too long for the model's context: {detail}", elsewhere=True)
    if status in (429, 503):
        return UpstreamRefused(503, "upstream_busy", f"the inference service is busy: {detail}", elsewhere=True,
                               retry_after_s=_retry_after(retry_after))
    # A 4xx is about the request, which another replica would refuse the same way.
    return UpstreamRefused(502, "upstream_error",
                           f"the inference service refused the request (HTTP {status}): {detail}",
                           elsewhere=status >= 500)
