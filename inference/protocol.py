"""The OpenAI Chat Completions subset we speak, and vLLM's /tokenize: validation and shapes.

Imports no torch. Fields we do not implement are refused with a 400 naming the field, rather
than silently ignored.
"""

import json
import time
from dataclasses import dataclass
from typing import Any

from common import strict_json

ROLES = ("system", "user", "assistant")
# OpenAI's newer name for the system message: read as one (chat templates know only "system").
ROLE_READ_AS = {"developer": "system"}
MAX_STOP_SEQUENCES = 4
# Each is followed through the answer at every token, and prepared when the request arrives.
MAX_STOP_CHARS = 1024
# What torch.Generator.manual_seed takes (a negative seed wraps around modulo 2**64).
SEED_RANGE = (-2**63, 2**64 - 1)
ACCEPTED_FIELDS = {
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "stop", "seed", "n", "user",
    # vLLM's extensions, which llama.cpp's server speaks too: write on at the end of a final
    # assistant message (continue_final_message) instead of opening a new turn for the answer
    # (add_generation_prompt, true unless the message is continued).
    "continue_final_message", "add_generation_prompt",
}
# Fields OpenAI's clients send at the value that asks for nothing (LangChain sends both penalties
# at 0): served at that value (or null), refused at any other as the fields above are not.
NO_OP_VALUES = {"presence_penalty": (0,), "frequency_penalty": (0,), "logprobs": (False,),
                "response_format": ({"type": "text"},)}
# vLLM's /tokenize takes chat messages (the chat template applied as for a completion) or a
# plain prompt, never both.
TOKENIZE_CHAT_FIELDS = {"model", "messages", "add_generation_prompt", "continue_final_message"}
TOKENIZE_PROMPT_FIELDS = {"model", "prompt"}


class ProtocolError(Exception):
    """An error answered before any stream starts, as `{"error": {...}}` with an HTTP status."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None,
                 error_type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = error_type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, error_type: str, code: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": error_type, "code": code, "param": param}}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None
    continue_final_message: bool = False


@dataclass(frozen=True)
class TokenizeRequest:
    """Chat messages to count as a completion of them would be prompted, or a plain prompt."""

    model: str | None  # None: whichever model the service serves
    messages: list[dict[str, str]] | None = None
    continue_final_message: bool = False
    prompt: str | None = None


def parse_json(raw: bytes) -> Any:
    """The body as Python values, or a 400 (common/strict_json says what it refuses), every
    string real Unicode: writing the body out again finds a lone surrogate wherever it hides."""
    try:
        body = strict_json.loads(raw)
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (strict_json.InvalidJson, RecursionError) as error:
        raise ProtocolError(400, str(error), "invalid_json") from error
    except UnicodeEncodeError as error:
        raise ProtocolError(400, f"the body is not valid JSON: {error}", "invalid_json") from error
    return body


def parse_json_object(raw: bytes) -> dict:
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ProtocolError(400, "the body must be a JSON object", "invalid_request")
    return body


def _is_one_of(value, values: tuple) -> bool:
    """`value` is one of `values` as JSON tells them apart (0 is 0.0, false is no 0)."""
    return any(isinstance(value, bool) == isinstance(v, bool) and value == v for v in values)


def _refuse_unknown(body: dict, accepted: set[str]) -> None:
    unknown = sorted(set(body) - accepted)
    if unknown:
        raise ProtocolError(400, f"unsupported field: {unknown[0]}", "unsupported_field", unknown[0])


def parse_chat_request(raw: bytes) -> ChatRequest:
    body = parse_json_object(raw)
    asking_nothing = {name for name, values in NO_OP_VALUES.items()
                      if name in body and (body[name] is None or _is_one_of(body[name], values))}
    _refuse_unknown(body, ACCEPTED_FIELDS | asking_nothing)

    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProtocolError(400, "model is required", "missing_field", "model")
    stream = _typed(body, "stream", bool, False)
    options = _typed(body, "stream_options", dict, None)
    if options is not None and not stream:
        raise ProtocolError(400, "stream_options is only allowed with stream: true",
                            "invalid_value", "stream_options")
    include_usage = _typed(options or {}, "include_usage", bool, False, "stream_options.include_usage")
    if set(options or {}) - {"include_usage"}:
        raise ProtocolError(400, "stream_options supports include_usage only", "unsupported_field",
                            "stream_options")
    if _typed(body, "n", int, 1) != 1:
        raise ProtocolError(400, "only n = 1 is supported", "invalid_value", "n")
    _typed(body, "user", str, None)

    messages = _messages(body.get("messages"))
    continue_final_message = _continue_final_message(body, messages)
    return ChatRequest(
        model=model,
        messages=messages,
        stream=stream,
        include_usage=include_usage,
        max_tokens=_max_tokens(body),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        stop=_stop(body.get("stop")),
        seed=_seed(body),
        continue_final_message=continue_final_message,
    )


def parse_tokenize_request(raw: bytes) -> TokenizeRequest:
    body = parse_json_object(raw)
    model = _typed(body, "model", str, None)
    if model == "":
        raise ProtocolError(400, "model must name the served model, or be left out", "invalid_value", "model")
    if "prompt" in body:
        if "messages" in body:
            raise ProtocolError(400, "send either prompt or messages, not both", "invalid_value", "prompt")
        _refuse_unknown(body, TOKENIZE_PROMPT_FIELDS)
        if not isinstance(body["prompt"], str):
            raise ProtocolError(400, "prompt must be a string", "invalid_type", "prompt")
        return TokenizeRequest(model, prompt=body["prompt"])
    _refuse_unknown(body, TOKENIZE_CHAT_FIELDS)
    if "messages" not in body:
        raise ProtocolError(400, "messages (or prompt) is required", "missing_field", "messages")
    messages = _messages(body["messages"])
    return TokenizeRequest(model, messages, _continue_final_message(body, messages))


def _continue_final_message(body: dict, messages: list[dict[str, str]]) -> bool:
    """Whether to write on at the end of the last message, asked for as vLLM and llama.cpp ask:
    continue_final_message with add_generation_prompt false (either alone, they refuse)."""
    continue_final_message = _typed(body, "continue_final_message", bool, False)
    add_generation_prompt = _typed(body, "add_generation_prompt", bool, True)
    if continue_final_message and add_generation_prompt:
        raise ProtocolError(400, "continue_final_message needs add_generation_prompt: false "
                            "(no new turn opens for a message written on)", "invalid_value",
                            "add_generation_prompt")
    if not continue_final_message and not add_generation_prompt:
        raise ProtocolError(400, "add_generation_prompt: false is supported with "
                            "continue_final_message only", "invalid_value", "add_generation_prompt")
    if continue_final_message and messages[-1]["role"] != "assistant":
        raise ProtocolError(400, "continue_final_message needs an assistant message last",
                            "invalid_value", "continue_final_message")
    return continue_final_message


def _typed(body: dict, name: str, kind: type, default, param: str | None = None):
    value = body.get(name, default)
    if value is None:
        return default
    # bool is an int in Python; a JSON true is no count.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(400, f"{param or name} must be {kind.__name__}", "invalid_type", param or name)
    return value


def _number(body: dict, name: str, default: float, low: float, high: float,
            low_open: bool = False) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(400, f"{name} must be a number", "invalid_type", name)
    if value > high or value < low or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low}, {high}]"
        raise ProtocolError(400, f"{name} must be in {interval}, got {value}", "invalid_value", name)
    return float(value)


def _seed(body: dict) -> int | None:
    seed = _typed(body, "seed", int, None)
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise ProtocolError(400, f"seed must be in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {seed}",
                            "invalid_value", "seed")
    return seed


def _max_tokens(body: dict) -> int | None:
    values = {name: body[name] for name in ("max_completion_tokens", "max_tokens")
              if body.get(name) is not None}
    if len(set(map(repr, values.values()))) > 1:
        raise ProtocolError(400, "max_tokens and max_completion_tokens disagree", "invalid_value",
                            "max_tokens")
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProtocolError(400, f"{name} must be a positive integer", "invalid_value", name)
        return value
    return None


def _messages(messages) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise ProtocolError(400, "messages must be a non-empty list", "invalid_value", "messages")
    parsed = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise ProtocolError(400, f"{where} must be an object", "invalid_type", where)
        role = message.get("role")
        role = ROLE_READ_AS.get(role, role) if isinstance(role, str) else role
        if role not in ROLES:
            raise ProtocolError(400, f"{where}.role must be one of {', '.join((*ROLES, *ROLE_READ_AS))}",
                                "invalid_value", f"{where}.role")
        parsed.append({"role": role, "content": _content(message.get("content"), f"{where}.content")})
    return parsed


def _content(content, where: str) -> str:
    """A string, or a list of text parts as newer clients send."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise ProtocolError(400, f"{where} must be a string or a list of text parts", "invalid_type", where)


def _stop(stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    sequences = [stop] if isinstance(stop, str) else stop
    if (not isinstance(sequences, list) or len(sequences) > MAX_STOP_SEQUENCES
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in sequences)):
        raise ProtocolError(400, f"stop must be a string or a list of up to {MAX_STOP_SEQUENCES} "
                            f"strings, each of 1 to {MAX_STOP_CHARS} characters", "invalid_value", "stop")
    return tuple(sequences)


# --- responses ---
_SLOT = "\x00"  # a text no id or model name holds (HTTP headers and our config carry no NUL)
_SLOT_JSON = json.dumps(_SLOT).encode()


class CompletionShape:
    """Builds the JSON objects of one completion, streamed or whole."""

    def __init__(self, completion_id: str, model: str):
        self.id = completion_id
        self.model = model
        self.created = int(time.time())
        # Content chunks differ only in their text: the rest of the event is encoded once.
        self._content_head, self._content_tail = sse(self.chunk({"content": _SLOT})).split(_SLOT_JSON)

    def content_event(self, text: str) -> bytes:
        """`sse(self.chunk({"content": text}))`, byte for byte, at a fraction of the cost."""
        return self._content_head + json.dumps(text, ensure_ascii=False).encode() + self._content_tail

    def _envelope(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def chunk(self, delta: dict[str, str], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._envelope("chat.completion.chunk"), "choices": [choice]}

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        return {**self._envelope("chat.completion.chunk"), "choices": [],
                "usage": usage(prompt_tokens, completion_tokens, cached_tokens)}

    def completion(self, text: str, finish_reason: str, prompt_tokens: int,
                   completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": finish_reason}
        return {**self._envelope("chat.completion"), "choices": [choice],
                "usage": usage(prompt_tokens, completion_tokens, cached_tokens)}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """OpenAI's usage: every prompt token counts, those reused from a cached prefix included."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def tokenized(token_ids: list[int], max_model_len: int) -> dict[str, Any]:
    """vLLM's /tokenize answer: the count, the context it must fit, and the tokens."""
    return {"count": len(token_ids), "max_model_len": max_model_len, "tokens": token_ids}


def sse(data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


SSE_DONE = sse("[DONE]")
SSE_HEARTBEAT = b": ping\n\n"
