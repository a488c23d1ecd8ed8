"""Titles by the model: after a conversation's first answer, the conversation's model names it.

The first answer's relay asks for it once its final write is done (`request_title`), off the
event loop; the request itself (not streaming, a few tokens) runs in a Celery task defined here
(`title_conversation`), in a worker with Redis and in-process without. Until it lands, and
whenever it fails (the upstream down, an answer that is no title), the conversation keeps the
first line of its first message. The save is conditional (services.conversation_title_by_model):
a title the user chose meanwhile, or one that an edit of the first message changed, is never
overwritten.
"""

import logging
import re
from concurrent.futures import ThreadPoolExecutor

import httpx2
from celery import shared_task
from django.conf import settings
from django.db import connections

from common.vocabulary import GenerationStatus

from .. import selectors, services
from ..title_text import shown_line
from . import inference_client, inference_replicas
from . import models as upstream_models
from .http_client import sync_client

logger = logging.getLogger(__name__)

# A title of a few words: the request is cheap, and an answer that runs on is no title.
MAX_TOKENS = 16
MAX_WORDS = 10
MAX_CHARS = 80
# Only the start of each text: enough to name the topic, and a prompt that stays small.
_QUESTION_CHARS, _ANSWER_CHARS = 1000, 1000
# Measured on the default model (SmolLM2-135M-Instruct): with the conversation first and the
# request after it, it answers with a title more often than it answers the question again.
_SYSTEM = "You write short titles for conversations."
_INSTRUCTION = "Write a title of three to six words for the conversation above. Answer with the title only."


def prompt(question: str, answer: str) -> list[dict]:
    conversation = f"User: {question[:_QUESTION_CHARS]}\nAssistant: {answer[:_ANSWER_CHARS]}"
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": f"{conversation}\n\n{_INSTRUCTION}"}]


# What the default model says around a title or instead of one, as recorded for 30 first
# exchanges (tests/chat/data/titles_recorded.json): a preamble ("Sure!", "Here's a possible
# title for the conversation:", "Title:"), the title in quotes, or a sentence about the topic
# cut off at MAX_TOKENS. A preamble goes; a quoted title is taken; the rest must read as a title,
# else the conversation keeps its first line.
_PREAMBLE = re.compile(
    r"^(?:(?:sure|certainly|of course|okay|ok)\b[!,.]*\s*)?"
    r"(?:here(?:'s|’s| is| are)\b[^:\n]*(?::|(?=\n)|$)\s*)?"
    r"(?:\**\s*title\s*\**\s*:\s*)?", re.IGNORECASE)
_QUOTED = re.compile(r'"([^"\n]+)"|“([^”\n]+)”')
_EDGES = "\"'`*_#“”‘’«» \t"
# A title that talks about itself or the exchange, or the model speaking for itself.
_ABOUT_ITSELF = re.compile(
    r"\b(?:titles?|conversations?|users?|user's|assistants?)\b|^(?:i|i'm|i'll|i'd|let me|your (?:answer|response))\b",
    re.IGNORECASE)
# Two sentences ("Ciao, ami. I'm glad"), not one title.
_SENTENCE_BREAK = re.compile(r"[.!?]\s+\S")
# A last word that leaves the phrase open: the answer was cut off at MAX_TOKENS.
_DANGLING = {"a", "an", "the", "of", "to", "and", "or", "in", "on", "at", "for", "with", "by", "from", "as",
             "is", "are", "was", "be", "that", "your", "my", "its", "their", "our"}
_PLACEHOLDERS = {"untitled", "uncategorized", "none", "n/a"}


def cleaned(text: str) -> str | None:
    """The model's answer as a title, or None when it is none (empty, too long, not words, a
    sentence cut off, or words about the title or the conversation)."""
    rest = _PREAMBLE.sub("", (text or "").strip(), count=1)
    lines = [line for line in rest.splitlines() if line.strip()]
    if not lines:
        return None
    quoted = _QUOTED.search(lines[0])
    title = next(group for group in quoted.groups() if group) if quoted else lines[0]
    title = _PREAMBLE.sub("", title.strip(_EDGES), count=1).strip(_EDGES)
    if title.count("(") > title.count(")"):  # a parenthesis the token limit left open
        title = title[:title.rfind("(")]
    title = shown_line(title.rstrip(".:;,!?").strip(_EDGES))
    words = title.split()
    if not words or len(title) > MAX_CHARS or len(words) > MAX_WORDS:
        return None
    if (not any(character.isalnum() for character in title) or _ABOUT_ITSELF.search(title)
            or _SENTENCE_BREAK.search(title) or words[-1].lower() in _DANGLING
            or title.lower() in _PLACEHOLDERS):
        return None
    return title


class NoTitle(Exception):
    """The inference service gave no usable title."""


def ask(question: str, answer: str, model: str) -> str:
    """The title by `model` for a conversation that began with `question` and `answer`.

    With several replicas of the model they take turns at being tried first, and a refusal
    that another replica might not repeat passes the request to the next, by the relay's rules
    (inference_client.refusal, .unreachable); that replica is then asked after the others for
    a while, as the relay avoids it (inference_replicas.avoid). The relay's own choice by load
    lives on the event loop; a request of 16 tokens does not need it.
    """
    upstream_models.fresh_now()
    replicas = inference_replicas.taking_turns(model)
    if not replicas:
        raise NoTitle(f"no upstream serves the model {model!r}")
    failures = []
    body = {"model": model, "messages": prompt(question, answer), "stream": False,
            "max_tokens": MAX_TOKENS, "temperature": 0}
    timeout = httpx2.Timeout(settings.INFERENCE_READ_TIMEOUT_SECONDS,
                             connect=settings.INFERENCE_CONNECT_TIMEOUT_SECONDS)
    with sync_client(timeout=timeout) as upstream:  # one for every replica tried
        for url in replicas:
            try:
                response = upstream.post(f"{url}/v1/chat/completions", json=body)
            except httpx2.HTTPError as error:
                refused = inference_client.unreachable(error)
            else:
                if response.status_code == 200:
                    return _title_in(response)
                refused = inference_client.refusal(response.status_code, response.content, response.headers.get("retry-after"))
            if not refused.elsewhere:
                raise NoTitle(refused.message)
            inference_replicas.avoid(url)  # the next title asks the others first
            failures.append(f"{url}: {refused.message}")
    raise NoTitle("; ".join(failures))


def _title_in(response: httpx2.Response) -> str:
    try:
        text = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise NoTitle(f"the answer is not a chat completion: {response.text[:80]!r}") from error
    title = cleaned(text if isinstance(text, str) else "")
    if title is None:
        raise NoTitle(f"the answer is no title: {str(text)[:80]!r}")
    return title


def asked_for(*, questions: int, continued: bool, status: str) -> bool:
    """Whether an answer's end asks the model to name its conversation: the conversation's only
    question answered well, and not by a continuation (the answer it continues was the one)."""
    return (settings.CHAT_MODEL_TITLES and questions == 1 and not continued
            and status in (GenerationStatus.COMPLETED, GenerationStatus.TRUNCATED))


def asked_for_watched(*, generation, continued: bool) -> bool:
    """`asked_for`, read from the rows, for a page that watched the answer end rather than ran it."""
    questions = selectors.questions_before(conversation_id=generation.conversation_id,
                                           message_id=generation.message_id)
    return asked_for(questions=questions, continued=continued, status=generation.status)


# Named as when it lived in chatapp/tasks.py: a queued message names its task, and a worker of
# either version reads the other's.
@shared_task(name="chatapp.tasks.title_conversation")
def title_conversation(conversation_id: int) -> str | None:
    """Asks for the title of a conversation whose first answer is complete and saves it.

    Returns the title saved, or None: the conversation is gone, named by its user, its first
    answer is not complete, the model gave no title, or the title changed while it was asked.
    """
    first = selectors.first_exchange(conversation_id=conversation_id)
    if first is None:
        return None
    try:
        title = ask(first.question.content, first.answer.content, first.conversation.model_name)
    except NoTitle as failure:
        logger.warning("conversation %s keeps its first-line title: %s", conversation_id, failure)
        return None
    saved = services.conversation_title_by_model(conversation_id=conversation_id, title=title,
                                                 replacing=first.conversation.title)
    return title if saved else None


# One thread: the enqueue (a Redis round trip) or, without Redis, the whole task (an HTTP
# request of a second or more) must not hold the relay's event loop.
_requests = ThreadPoolExecutor(max_workers=1, thread_name_prefix="titles")


def request_title(conversation_id: int):
    """Has the conversation titled by the model, in the background; returns the Future."""
    return _requests.submit(_enqueue, conversation_id)


def _enqueue(conversation_id: int) -> None:
    try:
        title_conversation.delay(conversation_id)  # eager without Redis: the task runs here
    except Exception:
        logger.exception("the title of conversation %s could not be asked for", conversation_id)
    finally:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            connections.close_all()  # this thread's connection is not needed until the next title
