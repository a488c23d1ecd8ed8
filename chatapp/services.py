"""Writes: every change of a conversation, message or audit row goes through here."""

import logging
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from common.vocabulary import CancelledBy, FinishReason, GenerationStatus, MessageStatus, status_for

from . import selectors
from .errors import ApiError, not_found
from .models import Conversation, Generation, Message

logger = logging.getLogger(__name__)


# --- conversations ---
def conversation_create(*, owner, title: str = "", system_prompt: str = "") -> Conversation:
    title = _title(title)
    return Conversation.objects.create(owner=owner, title=title, title_set_by_user=bool(title),
                                       system_prompt=system_prompt)


def conversation_update(*, conversation: Conversation, title: str | None = None,
                        system_prompt: str | None = None) -> Conversation:
    if title is not None:
        # A name the user clears gives the title back to the first message.
        conversation.title = _title(title)
        conversation.title_set_by_user = bool(conversation.title)
    if system_prompt is not None:
        conversation.system_prompt = system_prompt
    conversation.save()
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at"])


def conversation_title_by_model(*, conversation_id: int, title: str, replacing: str) -> bool:
    """The model's title, saved unless the user named the conversation or its title is no longer
    `replacing` (a rename, or an edit of the first message, since the read wins)."""
    return bool(Conversation.objects.filter(pk=conversation_id, title_set_by_user=False, title=replacing)
                .update(title=title))


def _title(title: str) -> str:
    if len(title) > 200:
        raise ApiError(400, "title_too_long", "a title holds at most 200 characters")
    return title.strip()


def title_from(content: str) -> str:
    """The title a conversation takes from its first message: that message's first line."""
    return content.strip().splitlines()[0][:80]


# --- starting an answer ---
# A start is decided by one read (a plan: every refusal is raised there, before anything goes
# upstream), then written while the upstream request is already on its way (answer_write).
@dataclass
class AnswerPlan:
    """What one read decided: the upstream request, and the rows the write will store."""

    user: object
    conversation: Conversation
    seen: list[tuple[int, str]]  # (pk, status) of the messages read: the write finds them so or refuses
    said: list[Message]  # what the model may see, oldest first: prompt_fit keeps what fits of it
    prompt: list[dict]  # the whole of it until prompt_fit leaves out what does not fit
    sampling: dict
    request_id: uuid.UUID = field(default_factory=uuid.uuid4)
    question: Message | None = None  # a new user message, not yet saved (send)
    edited: Message | None = None  # a user message holding its new text (edit)
    dropped: list[Message] = field(default_factory=list)  # messages that go (regenerate, edit)
    continued: Message | None = None  # a truncated answer written on at its end (continue)
    title: str | None = None  # the conversation's title from its first message, when it takes one
    context_from: Message | None = None  # the first message the model reads, when older ones are left out

    @property
    def continue_final_message(self) -> bool:
        return self.continued is not None


@dataclass
class AnswerStart:
    """What the relay needs: the rows written before the first byte and the upstream request."""

    message: Message
    generation: Generation
    prompt: list[dict]
    continue_final_message: bool = False  # writing on at the end of a truncated answer


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
    """Raises 429 or 409 when no answer may start; else the conversation's messages."""
    if selectors.streams_open(user=user) >= settings.CHAT_MAX_STREAMS_PER_USER:
        raise ApiError(429, "too_many_streams",
                       f"at most {settings.CHAT_MAX_STREAMS_PER_USER} answers may stream at once")
    history = list(conversation.messages.all())
    if any(message.status == MessageStatus.STREAMING for message in history):
        raise ApiError(409, "conversation_busy", "an answer is still streaming in this conversation")
    return history


def _plan(user, conversation: Conversation, history: list[Message], said: list[Message],
          **rows) -> AnswerPlan:
    """`history` is the conversation as read; `said` is what the model is to see of it: an
    answer that failed or is still streaming is not part of what was said."""
    said = [m for m in said if m.status not in (MessageStatus.FAILED, MessageStatus.STREAMING)]
    system = [{"role": "system", "content": conversation.system_prompt}] if conversation.system_prompt else []
    return AnswerPlan(user, conversation, [(m.pk, m.status) for m in history], said,
                      system + [{"role": m.role, "content": m.content} for m in said], _sampling(), **rows)


def message_send(*, user, conversation: Conversation, content: str) -> AnswerPlan:
    history = _check_limits(user, conversation)
    question = Message(conversation=conversation, role=Message.Role.USER, content=content)
    title = None if conversation.title else title_from(content)
    return _plan(user, conversation, history, [*history, question], question=question, title=title)


def message_edit_and_resend(*, user, message: Message, content: str) -> AnswerPlan:
    """The edited message takes its new text; every later message of the conversation goes."""
    conversation = message.conversation
    history = _check_limits(user, conversation)
    if message.role != Message.Role.USER:
        raise ApiError(409, "not_a_user_message", "only your own messages can be edited")
    position = next((i for i, m in enumerate(history) if m.pk == message.pk), None)
    if position is None:
        raise not_found("message")  # deleted since it was looked up
    edited = history[position]
    edited.content = content
    first_question = next(m for m in history if m.role == Message.Role.USER)
    title = title_from(content) if edited is first_question and not conversation.title_set_by_user else None
    return _plan(user, conversation, history, history[: position + 1], edited=edited,
                 dropped=history[position + 1:], title=title)


def answer_regenerate(*, user, conversation: Conversation) -> AnswerPlan:
    history = _check_limits(user, conversation)
    if not history or history[-1].role != Message.Role.ASSISTANT:
        raise ApiError(409, "nothing_to_regenerate", "the conversation does not end with an answer")
    # The old answer's audit rows stay, with the text the user saw.
    return _plan(user, conversation, history, history[:-1], dropped=history[-1:])


def answer_continue(*, user, message: Message) -> AnswerPlan:
    conversation = message.conversation
    history = _check_limits(user, conversation)
    if message.status != MessageStatus.TRUNCATED or not history or history[-1].pk != message.pk:
        raise ApiError(409, "not_truncated",
                       "only the last answer, cut short at its length limit, can be continued")
    return _plan(user, conversation, history, history, continued=history[-1])


@transaction.atomic
def answer_write(*, plan: AnswerPlan) -> AnswerStart:
    """Writes the plan's rows: the streaming answer, its audit row, and the messages it changes.

    The checks are made again under the user's row lock, which makes them race-free across
    processes: of two starts in one conversation, the second to lock finds the first streaming
    (409). A conversation that changed since the plan's read is refused too: the prompt already
    sent upstream would no longer match it.
    """
    if connection.features.has_select_for_update:
        # (SQLite has no row locks: every transaction of ours there takes the file's write lock.)
        get_user_model().objects.select_for_update().filter(pk=plan.user.pk).exists()
    history = _check_limits(plan.user, plan.conversation)
    if [(m.pk, m.status) for m in history] != plan.seen:
        raise ApiError(409, "conversation_changed",
                       "the conversation changed while the answer was starting; try again")
    Message.objects.filter(pk__in=[m.pk for m in plan.dropped]).delete()
    if plan.edited is not None:
        plan.edited.save(update_fields=["content"])
    if plan.question is not None:
        plan.question.save()
    answer = plan.continued or Message(conversation=plan.conversation, role=Message.Role.ASSISTANT)
    answer.status = MessageStatus.STREAMING
    answer.save(update_fields=["status"] if plan.continued else None)
    generation = Generation.objects.create(
        request_id=plan.request_id, user=plan.user, conversation=plan.conversation, message=answer,
        model=settings.CHAT_MODEL, sampling=plan.sampling, prompt_messages=len(plan.prompt),
        context_from_message_id=plan.context_from and plan.context_from.pk,
    )
    # Newest first in the list; a title from the first message only where the user has not
    # named the conversation since the plan's read (a rename meanwhile is theirs to keep).
    Conversation.objects.filter(pk=plan.conversation.pk).update(updated_at=timezone.now(), **(
        {} if plan.title is None else
        {"title": Case(When(title_set_by_user=False, then=Value(plan.title)), default=F("title"))}))
    return AnswerStart(answer, generation, plan.prompt, plan.continue_final_message)


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
    prompt_tokens: int | None = None  # said by the upstream at open; its final usage wins
    first_token_at: object = None  # datetime
    ttft_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_max_ms: float | None = None
    num_chunks: int = 0


class IllegalTransition(Exception):
    """A generation was asked to move where its status does not allow (a final one never moves)."""

    def __init__(self, generation: Generation, to: GenerationStatus):
        super().__init__(f"generation {generation.pk} is {generation.status}; it cannot become {to}")
        self.status, self.to = GenerationStatus(generation.status), to


# Every move a generation may make; a final status has no way out.
_MOVES = {
    GenerationStatus.STREAMING: {GenerationStatus.STOP_REQUESTED, GenerationStatus.COMPLETED,
                                 GenerationStatus.STOPPED, GenerationStatus.TRUNCATED,
                                 GenerationStatus.FAILED},
    GenerationStatus.STOP_REQUESTED: {GenerationStatus.STOPPED},
}


def generation_move(*, generation_id: int, to: GenerationStatus, **fields) -> Generation:
    """The one place a generation's status changes: under the row's lock, legal moves only.

    `fields` are written with the move; the answer's message follows the status. Raises
    IllegalTransition, leaving the row untouched, for any other move.
    """
    with transaction.atomic():
        return _move(_locked(generation_id), to, **fields)


def _locked(generation_id: int) -> Generation:
    """The generation with its message, its row locked until the transaction ends."""
    return (Generation.objects.select_for_update(of=("self",)).select_related("message")
            .get(pk=generation_id))


def _move(generation: Generation, to: GenerationStatus, **fields) -> Generation:
    """generation_move's work on a row already locked."""
    if to not in _MOVES.get(GenerationStatus(generation.status), ()):
        raise IllegalTransition(generation, to)
    generation.status = to
    for name, value in fields.items():
        setattr(generation, name, value)
    generation.save(update_fields=["status", *fields])
    message = generation.message
    if message is not None and to.is_final:
        message.content = _prefix(message, generation.pk) + generation.final_text
        message.status = to.message_status
        message.save(update_fields=["content", "status"])
    return generation


@transaction.atomic
def generation_finish(*, generation_id: int, outcome: Outcome,
                      unless_heartbeat_since: object = None) -> Generation | None:
    """The final write: the exact text the user saw, the status, and the audit figures.

    A Stop recorded earlier (stop_requested) wins over however the stream ended: the text is cut
    to what the user saw then. A generation that already ended (the reaper judged it dead) keeps
    its final status: it is returned as it is. With `unless_heartbeat_since` (the reaper's
    cutoff), a generation whose relay has proven alive since then is left alone (None).
    """
    # Locked from this read on, so that a Stop or a heartbeat cannot land between it and the move.
    current = _locked(generation_id)
    if unless_heartbeat_since is not None and (current.heartbeat_at >= unless_heartbeat_since
                                               or GenerationStatus(current.status).is_final):
        return None  # alive after all, or its relay finished it meanwhile
    text, reason, cancelled_by = outcome.text, outcome.finish_reason, outcome.cancelled_by
    error_code, error_message = outcome.error_code, outcome.error_message
    if current.status == GenerationStatus.STOP_REQUESTED:
        # An admin's Stop has no count of characters seen: the user keeps all that was sent.
        text = text[: current.stop_seen_chars]
        reason, error_code, error_message = FinishReason.CANCELLED, "", ""
        cancelled_by = current.cancelled_by or CancelledBy.USER
    elif cancelled_by is not None:
        reason = FinishReason.CANCELLED
    elif error_code or reason is None:
        # Without [DONE] the stream did not end as the protocol intends, whatever it said.
        reason = FinishReason.ERROR
    usage = outcome.usage or {}
    prompt_tokens = usage.get("prompt_tokens")
    try:
        return _move(
            current, status_for(reason), final_text=text,
            finish_reason=reason, cancelled_by=cancelled_by or "", error_code=error_code,
            error_message=error_message,
            input_tokens=outcome.prompt_tokens if prompt_tokens is None else prompt_tokens,
            # Without usage (a stream cut short), each content chunk carried at least one token.
            output_tokens=usage.get("completion_tokens", outcome.num_chunks),
            first_token_at=outcome.first_token_at, ttft_ms=outcome.ttft_ms,
            itl_mean_ms=outcome.itl_mean_ms, itl_max_ms=outcome.itl_max_ms,
            finished_at=timezone.now(),
        )
    except IllegalTransition as refused:
        logger.warning("generation %s had already ended (%s); its final write was dropped",
                       generation_id, refused.status)
        return current


@dataclass(frozen=True)
class PartialText:
    """An answer's text so far, for the coarse periodic save while it streams."""

    generation_id: int
    message_id: int
    before: str  # the answer's text from earlier generations (a continuation's start)
    text: str  # this generation's text so far


def generation_save_partials(*, partials: list[PartialText]) -> int:
    """The periodic saves of several streaming answers, in one transaction: a crash loses at
    most one interval. Returns how many were written.

    Only answers whose generation is still live are written: their rows are locked first (on
    PostgreSQL; a SQLite transaction of ours holds the file's write lock), so one that ends
    meanwhile either ended before (and is left alone) or waits for this write to commit.
    """
    with transaction.atomic():
        live = set(Generation.objects.select_for_update()
                   .filter(pk__in=[p.generation_id for p in partials], status__in=Generation.LIVE_STATUSES)
                   .values_list("pk", flat=True))
        kept = [p for p in partials if p.generation_id in live]
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        _update_each(Generation, ["final_text", "heartbeat_at"], [(p.text, now, p.generation_id) for p in kept])
        _update_each(Message, ["content"], [(p.before + p.text, p.message_id) for p in kept])
    return len(kept)


def _update_each(model, fields: list[str], rows: list[tuple]) -> None:
    """One UPDATE of `fields` by primary key, run for each row (the field values, then the key).

    Django's bulk_update builds one CASE over every row instead, which the database evaluates
    for each row it updates: 2 ms a row at 300 rows on SQLite. The statement is ours, its names
    come from the model.
    """
    if not rows:
        return
    quote, meta = connection.ops.quote_name, model._meta
    assignments = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in fields)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s",
                           rows)


def generation_heartbeat(*, generation_id: int) -> bool:
    """The relay is alive. True while the generation goes on streaming; False once a Stop is
    recorded or it has ended (then the relay stops and makes its final write)."""
    return bool(Generation.objects.filter(pk=generation_id, status=GenerationStatus.STREAMING)
                .update(heartbeat_at=timezone.now()))


def _prefix(message: Message, generation_id: int) -> str:
    """The answer's text before this generation (the part a continuation continues)."""
    earlier = message.generations.filter(pk__lt=generation_id).exclude(status__in=Generation.LIVE_STATUSES)
    return "".join(earlier.order_by("pk").values_list("final_text", flat=True))


def generation_stop(*, generation: Generation, seen_chars: int | None,
                    cancelled_by: CancelledBy = CancelledBy.USER) -> Generation:
    """Records a Stop with the length its user saw; the relay applies it at its final write.

    An admin's Stop (from the live view) passes `seen_chars=None`: the answer keeps every
    character its user was sent. A second Stop while the first is pending changes nothing.
    Raises IllegalTransition when the answer has already ended: its text and audit figures stay
    as they are.
    """
    try:
        return generation_move(generation_id=generation.pk, to=GenerationStatus.STOP_REQUESTED,
                               cancelled_by=cancelled_by, stop_seen_chars=seen_chars)
    except IllegalTransition as refused:
        if refused.status == GenerationStatus.STOP_REQUESTED:
            return Generation.objects.get(pk=generation.pk)
        raise
