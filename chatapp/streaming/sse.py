"""Server-sent events written to the browser: the events of an answer's stream and of a watch stream."""

import json


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
