"""Server-sent events written to the browser: the events of an answer's stream and of a watch stream."""

import contextlib
import json
import logging
from collections.abc import AsyncIterator

from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)


def event(name: str, payload: dict) -> bytes:
    """One named event; JSON never contains a raw newline, so one `data:` line suffices."""
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def delta(text: str, proof: str, saved: int | None = None) -> bytes:
    """A `delta` event, the one sent per token: only the text is encoded, the rest is fixed.
    `proof` (text_proof.py, hex digits) lets the page hand the piece back should it be lost;
    `saved` (the relay's, when it changed) says how much of the text is stored, which the page
    then need not keep pieces of."""
    saved_field = b"" if saved is None else b', "saved": ' + str(saved).encode()
    return (b'event: delta\ndata: {"text": ' + _encode_string(text).encode()
            + b', "proof": "' + proof.encode() + b'"' + saved_field + b'}\n\n')


_encode_string = json.JSONEncoder(ensure_ascii=False).encode

def done(generation, message_status: str | None, title_requested: bool = False) -> bytes:
    """The last event of an answer's stream and of its watch stream: how the generation ended,
    and what its answer's message shows now (`message_status`: a continuation that failed leaves
    its answer truncated, services.generations._message_status; None once the message is gone).

    `title_requested` (the answer's own stream, and a watch stream that saw it end): the model
    is asked for the conversation's title, which the page then reads again until it changes.
    """
    return event("done", {
        "generation_id": generation.pk, "message_id": generation.message_id,
        "finish_reason": generation.finish_reason, "status": generation.status,
        "message_status": message_status,
        "usage": {"prompt_tokens": generation.input_tokens, "completion_tokens": generation.output_tokens},
        "ttft_ms": generation.ttft_ms, **({"title_requested": True} if title_requested else {}),
    })


HEARTBEAT = b": ping\n\n"

# The last event of a stream whose session ended (streaming/session_ends.py): nothing more of
# the answer goes to it.
SIGNED_OUT = event("error", {"code": "signed_out",
                             "message": "this session has ended (signed out, or the password was changed)"})


async def failures_as_events(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`events`, and a failure of ours after them as a last `error` event: once the first byte
    went out the status was sent (200), and a stream cut short would read to the page as a lost
    connection, to be resumed from a server that has nothing more to say. The database refusing
    past its patience (an answer's final write, CHAT_DATABASE_PATIENCE_SECONDS) is
    `database_unavailable`, for the page to hand back the text it holds; anything else is
    `server_error`. Cancellation and closing go through as they came."""
    async with contextlib.aclosing(events):
        try:
            async for chunk in events:
                yield chunk
        except (InterfaceError, OperationalError) as refusal:
            logger.warning("a stream ended: the database refused it past its patience (%s)", refusal)
            yield event("error", {"code": "database_unavailable",
                                  "message": "the database did not come back in time to store this answer"})
        except Exception:
            logger.exception("a stream failed after its first byte")
            yield event("error", {"code": "server_error", "message": "the server failed while streaming"})
