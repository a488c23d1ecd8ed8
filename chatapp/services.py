"""Writes: every change of a conversation, message or audit row goes through here."""

from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from common.vocabulary import CancelledBy, FinishReason, MessageStatus, status_for

from . import selectors
from .errors import ApiError
from .models import Conversation, Generation, Message


# --- conversations ---
def conversation_create(*, owner, title: str = "", system_prompt: str = "") -> Conversation:
    return Conversation.objects.create(owner=owner, title=_title(title), system_prompt=system_prompt)


def conversation_update(*, conversation: Conversation, title: str | None = None,
                        system_prompt: str | None = None) -> Conversation:
    if title is not None:
        conversation.title = _title(title)
    if system_prompt is not None:
        conversation.system_prompt = system_prompt
    conversation.save()
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at"])


def _title(title: str) -> str:
    if len(title) > 200:
        raise ApiError(400, "title_too_long", "a title holds at most 200 characters")
    return title.strip()


# --- starting an answer ---
@dataclass
class AnswerStart:
    """What the relay needs: the rows written before the first byte and the upstream request."""

    message: Message
    generation: Generation
    prompt: list[dict]
    continue_final_message: bool = False  # writing on at the end of a truncated answer
    sampling: dict = field(default_factory=dict)


def _sampling() -> dict:
    return {"temperature": settings.CHAT_TEMPERATURE, "top_p": settings.CHAT_TOP_P,
            "max_tokens": settings.CHAT_MAX_TOKENS}


def validate_content(content) -> str:
    if not isinstance(content, str) or not content.strip():
        raise ApiError(400, "empty_message", "a message needs some text")
    if len(content) > settings.CHAT_MAX_MESSAGE_CHARS:
        raise ApiError(400, "message_too_long",
                       f"a message holds at most {settings.CHAT_MAX_MESSAGE_CHARS} characters")
    return content


def _check_limits(user, conversation: Conversation) -> list[Message]:
    """Raises 429 or 409 when no answer may start; else the conversation's messages, read under the lock."""
    if connection.features.has_select_for_update:
        # Locking the user row makes the per-user stream count race-free across processes.
        # (SQLite has no row locks: every transaction of ours there takes the file's write lock.)
        get_user_model().objects.select_for_update().filter(pk=user.pk).exists()
    if selectors.streams_open(user=user) >= settings.CHAT_MAX_STREAMS_PER_USER:
        raise ApiError(429, "too_many_streams",
                       f"at most {settings.CHAT_MAX_STREAMS_PER_USER} answers may stream at once")
    history = list(conversation.messages.all())
    if any(message.status == MessageStatus.STREAMING for message in history):
        raise ApiError(409, "conversation_busy", "an answer is still streaming in this conversation")
    return history


def _begin_answer(user, conversation: Conversation, history: list[Message],
                  answer: Message | None = None) -> AnswerStart:
    """Writes the streaming answer and its audit row; `answer` is a truncated one to continue.

    `history` is the conversation's messages as they are now, `answer` included.
    """
    prompt = selectors.prompt_messages(conversation=conversation, history=history)
    continuing = answer is not None
    if answer is None:
        answer = Message.objects.create(conversation=conversation, role=Message.Role.ASSISTANT,
                                        status=MessageStatus.STREAMING)
    else:
        answer.status = MessageStatus.STREAMING
        answer.save(update_fields=["status"])
    generation = Generation.objects.create(
        user=user, conversation=conversation, message=answer, model=settings.CHAT_MODEL,
        sampling=_sampling(), prompt_messages=len(prompt),
    )
    conversation.save(update_fields=["title", "updated_at"])  # newest first in the list
    return AnswerStart(answer, generation, prompt, continuing, _sampling())


@transaction.atomic
def message_send(*, user, conversation: Conversation, content: str) -> AnswerStart:
    history = _check_limits(user, conversation)
    history.append(Message.objects.create(conversation=conversation, role=Message.Role.USER, content=content))
    if not conversation.title:
        conversation.title = content.strip().splitlines()[0][:80]
    return _begin_answer(user, conversation, history)


@transaction.atomic
def message_edit_and_resend(*, user, message: Message, content: str) -> AnswerStart:
    """The edited message takes its new text; every later message of the conversation goes."""
    conversation = message.conversation
    _check_limits(user, conversation)
    if message.role != Message.Role.USER:
        raise ApiError(409, "not_a_user_message", "only your own messages can be edited")
    conversation.messages.filter(created_at__gt=message.created_at).delete()
    conversation.messages.filter(created_at=message.created_at, pk__gt=message.pk).delete()
    message.content = content
    message.save(update_fields=["content"])
    return _begin_answer(user, conversation, list(conversation.messages.all()))


@transaction.atomic
def answer_regenerate(*, user, conversation: Conversation) -> AnswerStart:
    history = _check_limits(user, conversation)
    if not history or history[-1].role != Message.Role.ASSISTANT:
        raise ApiError(409, "nothing_to_regenerate", "the conversation does not end with an answer")
    history.pop().delete()  # its audit rows stay, with the text the user saw
    return _begin_answer(user, conversation, history)


@transaction.atomic
def answer_continue(*, user, message: Message) -> AnswerStart:
    conversation = message.conversation
    history = _check_limits(user, conversation)
    if message.status != MessageStatus.TRUNCATED or history[-1].pk != message.pk:
        raise ApiError(409, "not_truncated",
                       "only the last answer, cut short at its length limit, can be continued")
    return _begin_answer(user, conversation, history, answer=message)


# --- ending an answer ---
@dataclass
class Outcome:
    """How one generation ended, as the relay saw it."""

    text: str = ""  # what went out to the browser
    finish_reason: FinishReason | None = None
    cancelled_by: CancelledBy | None = None
    error_code: str = ""
    error_message: str = ""
    usage: dict | None = None
    first_token_at: object = None  # datetime
    ttft_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_max_ms: float | None = None
    num_chunks: int = 0


@transaction.atomic
def generation_finish(*, generation_id: int, outcome: Outcome) -> Generation:
    """The final write: the exact text the user saw, the status, and the audit figures.

    A Stop pressed earlier wins over however the stream ended: the text is cut to what the
    user saw then.
    """
    generation = Generation.objects.select_for_update(of=("self",)).select_related("message").get(pk=generation_id)
    text, reason, cancelled_by = outcome.text, outcome.finish_reason, outcome.cancelled_by
    error_code, error_message = outcome.error_code, outcome.error_message
    if generation.cancelled_by == CancelledBy.USER:
        text = text[: generation.stop_seen_chars]
        reason, cancelled_by, error_code, error_message = FinishReason.CANCELLED, CancelledBy.USER, "", ""
    elif cancelled_by is not None:
        reason = FinishReason.CANCELLED
    elif error_code or reason is None:
        # Without [DONE] the stream did not end as the protocol intends, whatever it said.
        reason = FinishReason.ERROR
    usage = outcome.usage or {}
    generation.final_text = text
    generation.finish_reason = reason
    generation.cancelled_by = cancelled_by or ""
    generation.error_code, generation.error_message = error_code, error_message
    generation.input_tokens = usage.get("prompt_tokens")
    # Without usage (a stream cut short), each content chunk carried at least one token.
    generation.output_tokens = usage.get("completion_tokens", outcome.num_chunks)
    generation.first_token_at = outcome.first_token_at
    generation.ttft_ms, generation.itl_mean_ms, generation.itl_max_ms = (
        outcome.ttft_ms, outcome.itl_mean_ms, outcome.itl_max_ms)
    generation.finished_at = timezone.now()
    generation.save()
    message = generation.message
    if message is not None:
        message.content = _prefix(message, generation.pk) + text
        message.status = status_for(reason)
        message.save(update_fields=["content", "status"])
    return generation


def generation_save_partial(*, generation_id: int, message_id: int, before: str, text: str) -> None:
    """The coarse periodic save while streaming: a crash loses at most one interval.

    `before` is the answer's text from earlier generations (a continuation's start). Two
    UPDATEs in one transaction: once the final save has come, the first matches no row and the
    message is left alone; until it commits, the final save waits for the generation's row.
    """
    with transaction.atomic():
        saved = Generation.objects.filter(pk=generation_id, finished_at=None).update(
            final_text=text, saved_at=timezone.now())
        if saved:
            Message.objects.filter(pk=message_id).update(content=before + text)


def _prefix(message: Message, generation_id: int) -> str:
    """The answer's text before this generation (the part a continuation continues)."""
    earlier = message.generations.filter(pk__lt=generation_id).exclude(finished_at=None)
    return "".join(earlier.order_by("pk").values_list("final_text", flat=True))


@transaction.atomic
def generation_stop(*, generation: Generation, seen_chars: int) -> bool:
    """Records the user's Stop; True when a relay still streams it and must be told."""
    generation = Generation.objects.select_for_update().get(pk=generation.pk)
    if generation.finished_at is None:
        generation.cancelled_by = CancelledBy.USER
        generation.stop_seen_chars = seen_chars
        generation.save(update_fields=["cancelled_by", "stop_seen_chars", "saved_at"])
        return True
    if generation.finish_reason == FinishReason.CANCELLED:
        # The browser's abort reached the relay before this request: the same Stop, now with the
        # length the user saw, which generation_finish applies.
        generation.cancelled_by = CancelledBy.USER
        generation.stop_seen_chars = seen_chars
        generation.save(update_fields=["cancelled_by", "stop_seen_chars"])
        generation_finish(generation_id=generation.pk, outcome=Outcome(
            text=generation.final_text, finish_reason=FinishReason.CANCELLED,
            usage={"prompt_tokens": generation.input_tokens,
                   "completion_tokens": generation.output_tokens},
            first_token_at=generation.first_token_at, ttft_ms=generation.ttft_ms,
            itl_mean_ms=generation.itl_mean_ms, itl_max_ms=generation.itl_max_ms,
        ))
    return False
