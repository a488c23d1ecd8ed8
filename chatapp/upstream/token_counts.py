"""What the upstream itself says about prompts: how many tokens one is, and how many it reads.

Two questions, each in the shape its kind of server answers. The context: `GET /v1/models`
carries `max_model_len` (vLLM's and our service's); llama.cpp's server says its slot's `n_ctx`
in `GET /props`. A prompt's tokens, with the chat template applied as a completion would:
`POST /tokenize` with the messages answers `count` (vLLM's and ours); llama.cpp's `/tokenize`
takes text only, so there it is `/apply-template` then `/tokenize`. Which kind an upstream is
is learned by trying, once, and remembered per upstream, as is an upstream with no such
endpoint (404, 405, 501: the chat then estimates). A failure that may pass (unreachable, a
timeout, a 5xx) is not remembered: that answer estimates, the next one asks again; a replica
that could not be reached goes to the back of the line (inference_replicas.py), as one that
refused an answer does, so that the next count asks another.
"""

import asyncio
import enum
import json

import httpx2
from django.conf import settings

from . import inference_replicas
from .http_client import client, send


class Counter(enum.Enum):
    MESSAGES = "messages"  # POST /tokenize {messages} -> {count}
    LLAMA_CPP = "llama_cpp"  # POST /apply-template {messages} -> {prompt}; /tokenize {content} -> {tokens}
    NONE = "none"  # no way to count: estimate


# An upstream without the endpoint answers one of these, and always will.
_ABSENT = (404, 405, 501)

_counters: dict[str, Counter] = {}
_contexts: dict[tuple[str, str], int | None] = {}
_list_tokens: dict[tuple[str, str], int | None] = {}


def forget() -> None:
    """Learn every upstream's kind and context again (a replica replaced by another server)."""
    _counters.clear()
    _contexts.clear()
    _list_tokens.clear()


class _Unanswered(Exception):
    """The upstream gave no usable answer this time; ask again next time."""


class _Absent(_Unanswered):
    """The endpoint is not there, and will not be."""


class _Unreachable(_Unanswered):
    """The upstream could not be reached, or did not answer in time."""


async def _post(url: str, body: dict) -> httpx2.Response:
    return await _send("POST", url, json=body)


async def _send(method: str, url: str, **kwargs) -> httpx2.Response:
    try:
        request = client().build_request(method, url, timeout=settings.INFERENCE_CONNECT_TIMEOUT_SECONDS, **kwargs)
        return await send(request)
    except httpx2.TransportError as error:
        raise _Unreachable(repr(error)) from error
    except httpx2.HTTPError as error:
        raise _Unanswered(repr(error)) from error


def _json(response: httpx2.Response) -> dict:
    if response.status_code != 200:
        raise _Unanswered(f"HTTP {response.status_code}")
    try:
        found = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _Unanswered("not JSON") from error
    if not isinstance(found, dict):
        raise _Unanswered("not a JSON object")
    return found


def _whole(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# --- the context ---
async def context_tokens(url: str, model: str) -> int | None:
    """The tokens the upstream reads (prompt and answer together); None if it does not say."""
    key = (url, model)
    if not url:
        return None
    if key not in _contexts:
        try:
            _contexts[key] = await _models_context(url, model) or await _props_context(url)
        except _Unreachable:
            inference_replicas.avoid(url)
            return None
        except _Unanswered:
            return None
    return _contexts[key]


async def _models_context(url: str, model: str) -> int | None:
    response = await _send("GET", f"{url}/v1/models")
    if response.status_code in _ABSENT:
        return None
    listed = [entry for entry in _json(response).get("data") or [] if isinstance(entry, dict)]
    named = [entry for entry in listed if entry.get("id") == model] or listed
    return _whole(named[0].get("max_model_len")) if named else None


async def _props_context(url: str) -> int | None:
    """llama.cpp's: one slot's context (`-c` shared among `--parallel` slots)."""
    response = await _send("GET", f"{url}/props")
    if response.status_code in _ABSENT:
        return None
    settings_of_slots = _json(response).get("default_generation_settings")
    return _whole(settings_of_slots.get("n_ctx")) if isinstance(settings_of_slots, dict) else None


# --- a prompt's tokens ---
def template_body(model: str, messages: list[dict], continue_final_message: bool) -> dict:
    """The messages and the template's flags, for a count and for the completion alike."""
    body = {"model": model, "messages": messages}
    if continue_final_message:  # both, or vLLM and llama.cpp refuse it (a new turn by default)
        body.update(continue_final_message=True, add_generation_prompt=False)
    return body


async def prompt_tokens(url: str, model: str, messages: list[dict], *,
                        continue_final_message: bool = False) -> int | None:
    """The prompt's tokens as the upstream counts them; None when it cannot say (estimate)."""
    if not url:
        return None
    body = template_body(model, messages, continue_final_message)
    counter = _counters.get(url)
    try:
        if counter is None:
            counter, count = await _learn_counter(url, body)
            _counters[url] = counter
            return count
        if counter is Counter.MESSAGES:
            return await _messages_count(url, body)
        if counter is Counter.LLAMA_CPP:
            return await _llama_cpp_count(url, body)
    except _Unreachable:
        inference_replicas.avoid(url)
        return None
    except _Unanswered:
        return None
    return None


async def _learn_counter(url: str, body: dict) -> tuple[Counter, int | None]:
    response = await _post(f"{url}/tokenize", body)
    if response.status_code in _ABSENT:
        return Counter.NONE, None
    found = _json(response)
    if _whole(found.get("count")) is not None:
        return Counter.MESSAGES, found["count"]
    if isinstance(found.get("tokens"), list):  # llama.cpp's: it tokenized no `content`
        try:
            return Counter.LLAMA_CPP, await _llama_cpp_count(url, body)
        except _Absent:
            return Counter.NONE, None
    raise _Unanswered("a /tokenize answer without a count")


async def _messages_count(url: str, body: dict) -> int:
    count = _whole(_json(await _post(f"{url}/tokenize", body)).get("count"))
    if count is None:
        raise _Unanswered("a /tokenize answer without a count")
    return count


async def _llama_cpp_count(url: str, body: dict) -> int:
    applied = await _post(f"{url}/apply-template", body)
    if applied.status_code in _ABSENT:
        raise _Absent(f"HTTP {applied.status_code}")
    prompt = _json(applied).get("prompt")
    if not isinstance(prompt, str):
        raise _Unanswered("an /apply-template answer without a prompt")
    # add_special: the BOS token, where the model has one, as a completion's prompt gets it.
    tokens = _json(await _post(f"{url}/tokenize", {"content": prompt, "add_special": True})).get("tokens")
    if not isinstance(tokens, list):
        raise _Unanswered("a /tokenize answer without tokens")
    return len(tokens)


# --- the template's own tokens ---
_X, _Y, _Z = ({"role": "user", "content": "Hello there."}, {"role": "assistant", "content": "Hi! How can I help?"},
              {"role": "system", "content": "Be brief."})


async def list_tokens(url: str, model: str) -> int | None:
    """The tokens a prompt of messages (no system prompt among them) costs beyond what its
    messages do, where the template adds messages up one by one whatever comes before them;
    None where it does not (it merges a system prompt into the first question, or refuses two
    questions in a row) or where the upstream cannot count.

    Then the messages new since a prompt's count can be counted alone: their count less these.
    Learned once per upstream and model, from six counts of short messages asked at once.
    """
    key = (url, model)
    if key not in _list_tokens:
        lists = [[_X], [_X, _X], [_X, _Y, _X], [_Y, _X], [_Z, _X], [_Z, _X, _Y, _X]]
        counts = await asyncio.gather(*(prompt_tokens(url, model, messages) for messages in lists))
        if None in counts and url not in _counters:
            return None  # unreachable: asked again next time
        _list_tokens[key] = None if None in counts else _added_up(*counts)
    return _list_tokens[key]


def _added_up(x: int, x_x: int, x_y_x: int, y_x: int, z_x: int, z_x_y_x: int) -> int | None:
    """The template's own tokens, if every message costs the same wherever it stands."""
    question = x_x - x
    answer = x_y_x - x_x
    fixed = x - question
    same_everywhere = y_x == fixed + answer + question and z_x_y_x - z_x == answer + question
    return fixed if same_everywhere and fixed >= 0 else None
