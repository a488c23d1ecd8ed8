"""Writes of conversations and messages, and the start of an answer (its plan, then its rows)."""

import copy
import uuid
from dataclasses import dataclass, field

import regex
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from common.vocabulary import CancelledBy, GenerationStatus, MessageStatus

from .. import conversation_settings
from ..title_text import cut_between_glyphs, shown_line
from ..errors import ApiError, not_found
from ..models import Conversation, Generation, Message
from .generations import IllegalTransition, Outcome, generation_finish, generation_stop
from .stream_claims import refuse_when_full, stream_claim_release

FIRST_LINE_CHARS = 80  # of a title taken from the first message
# A title's length in code points, as the database counts it; the rename box is told it (the session).
MAX_TITLE_CHARS = Conversation._meta.get_field("title").max_length

# --- conversations ---
def conversation_create(*, owner, title: str = "", choices: dict | None = None) -> Conversation:
    title = _title(title)
    return Conversation.objects.create(owner=owner, title=title, title_set_by_user=bool(title),
                                       **{"model": settings.CHAT_MODEL, **(choices or {})})


def conversation_update(*, conversation: Conversation, title: str | None = None,
                        choices: dict | None = None) -> Conversation:
    """Writes only what the request changes, and only to a conversation still there (else 404):
    the whole row saved as it was read would put back what was written beside the request
    meanwhile (a delete: the conversation came back; the title its first message gave it)."""
    changes = {**(choices or {}), "updated_at": timezone.now()}
    if title is not None:
        # A name the user clears gives the title back to the first message at once: an empty
        # title is a conversation's before its first message, and the next one sent would take it.
        changes["title"] = _title(title) or _first_question_title(conversation)
        changes["title_set_by_user"] = bool(_title(title))
    if not Conversation.objects.alive().filter(pk=conversation.pk).update(**changes):
        raise not_found("conversation")
    conversation.refresh_from_db()
    return conversation


@transaction.atomic
def conversation_delete(*, conversation: Conversation) -> list[int]:
    """Deletes the conversation (softly: its audit rows keep pointing at it) and records a Stop
    of its answer still streaming, which nobody will read now: returns those generations, whose
    relays the caller tells. The user's row lock orders this with every answer's start
    (`answer_write`), so no answer starts in a conversation already deleted."""
    _lock_user(conversation.owner_id)
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at"])
    streaming = Generation.objects.filter(conversation=conversation, status=GenerationStatus.STREAMING)
    stopped = []
    for generation in streaming:
        try:
            # Nobody says how much was seen: the audit keeps all that was sent.
            generation_stop(generation=generation, seen_chars=None, cancelled_by=CancelledBy.USER)
        except IllegalTransition:
            continue  # it ended meanwhile
        stopped.append(generation.pk)
    return stopped


def _lock_user(user_id: int) -> None:
    """The user's row, locked until the transaction ends: answers start and conversations go
    one at a time per user, across processes."""
    if connection.features.has_select_for_update:
        # (SQLite has no row locks: every transaction of ours there takes the file's write lock.)
        get_user_model().objects.select_for_update().filter(pk=user_id).exists()


def conversation_title_by_model(*, conversation_id: int, title: str, replacing: str) -> bool:
    """The model's title, saved unless the user named the conversation or its title is no longer
    `replacing` (a rename, or an edit of the first message, since the read wins)."""
    return bool(Conversation.objects.filter(pk=conversation_id, title_set_by_user=False, title=replacing)
                .update(title=title))


def _title(title: str) -> str:
    """The user's name for a conversation, as it is shown (title_text.shown_line)."""
    if len(title) > MAX_TITLE_CHARS:
        raise ApiError(400, "title_too_long", f"a title holds at most {MAX_TITLE_CHARS} characters")
    return shown_line(title)


def _first_question_title(conversation: Conversation) -> str:
    first = (conversation.messages.filter(role=Message.Role.USER).order_by("pk")
             .values_list("content", flat=True).first())
    return "" if first is None else title_from(first)


def title_from(content: str) -> str:
    """The title a conversation takes from its first message: that message's first line with
    something to show (one of only invisible characters is none), at most 80 characters."""
    return cut_between_glyphs(next(filter(None, map(shown_line, content.splitlines())), ""), FIRST_LINE_CHARS)


# --- starting an answer ---
# A start is decided by one read (a plan: every refusal is raised there, before anything goes
# upstream), then written while the upstream request is already on its way (answer_write).
@dataclass
class AnswerPlan:
    """What one read decided: the upstream request, and the rows the write will store."""

    user: object
    conversation: Conversation
    seen: list[tuple]  # each message read (_as_read): the write finds them so or refuses
    said: list[Message]  # what the model may see, oldest first: prompt_fit keeps what fits of it
    prompt: list[dict]  # the whole of it until prompt_fit leaves out what does not fit
    sampling: dict
    request_id: uuid.UUID = field(default_factory=uuid.uuid4)
    question: Message | None = None  # a new user message, not yet saved (send)
    edited: Message | None = None  # a user message holding its new text (edit)
    dropped: list[Message] = field(default_factory=list)  # messages that go (regenerate, edit)
    continued: Message | None = None  # a truncated answer written on at its end (continue)
    title: str | None = None  # the conversation's title from its first message, when it takes one
    chosen_model: str | None = None  # another model the user picked for this answer (regenerate)
    context_from: Message | None = None  # the first message the model reads, when older ones are left out
    relay_process: str = ""  # the web process that will relay it (chatapp/runtime/web_process.py)
    prompt_tokens: int | None = None  # as the upstream said it at open, when it did

    @property
    def continue_final_message(self) -> bool:
        return self.continued is not None

    @property
    def model(self) -> str:
        return self.chosen_model or self.conversation.model_name


@dataclass
class AnswerStart:
    """What the relay needs: the rows written before the first byte and the upstream request."""

    message: Message
    generation: Generation
    prompt: list[dict]
    continue_final_message: bool = False  # writing on at the end of a truncated answer


# Spaces, control and invisible format characters alone say nothing (frontend/message_text.js
# draws the same line, so the page does not send what would be refused).
NOTHING_BUT_BLANKS = regex.compile(r"[\s\p{Cc}\p{Cf}]*")


def validate_content(content: str) -> str:
    if NOTHING_BUT_BLANKS.fullmatch(content):
        raise ApiError(400, "empty_message", "a message needs some text")
    if len(content) > settings.CHAT_MAX_MESSAGE_CHARS:
        raise ApiError(400, "message_too_long",
                       f"a message holds at most {settings.CHAT_MAX_MESSAGE_CHARS} characters")
    return content


def _check_limits(user, conversation: Conversation) -> list[Message]:
    """Raises 429 or 409 when no answer may start; else the conversation's messages."""
    refuse_when_full(user=user)
    history = list(conversation.messages.all())
    if any(message.status == MessageStatus.STREAMING for message in history):
        raise ApiError(409, "conversation_busy", "an answer is still streaming in this conversation")
    return history


@dataclass(frozen=True)
class ShownLast:
    """The last message a page shows, as it read it: its id, and the number of characters (code
    points) of its text, when the page says. A message that keeps its id changes only by growing
    (an answer continued, or given back what its page was sent): a length the page did not read
    is a text it never showed, and an id alone would not tell."""

    message_id: int
    chars: int | None = None

    def is_stale_for(self, history: list[Message]) -> bool:
        if not history or history[-1].pk != self.message_id:
            return True
        return self.chars is not None and len(history[-1].content) != self.chars


def _check_shown_last(history: list[Message], shown_last: ShownLast | None) -> None:
    """A page that drops messages (regenerate, edit) names the last one it shows: a page that has
    not seen a later one, or later text of it, written from another tab or device, would drop
    what it never showed."""
    if shown_last is not None and shown_last.is_stale_for(history):
        raise ApiError(409, "conversation_changed",
                       "the conversation changed since this page read it (in another tab or "
                       "device): read it again")


def _as_read(message: Message) -> tuple[int, str, int]:
    """What a plan's write must find of a message: a continuation ended meanwhile may leave its
    status as it was and its id too, but not its length (ShownLast)."""
    return message.pk, message.status, len(message.content)


def _plan(user, conversation: Conversation, history: list[Message], said: list[Message],
          **rows) -> AnswerPlan:
    """`history` is the conversation as read; `said` is what the model is to see of it: an
    answer that failed or is still streaming is not part of what was said."""
    said = [m for m in said if m.status not in (MessageStatus.FAILED, MessageStatus.STREAMING)]
    system = [{"role": "system", "content": conversation.system_prompt}] if conversation.system_prompt else []
    return AnswerPlan(user, conversation, [_as_read(m) for m in history], said,
                      system + [{"role": m.role, "content": m.content} for m in said],
                      conversation_settings.sampling(conversation), **rows)


def message_send(*, user, conversation: Conversation, content: str) -> AnswerPlan:
    history = _check_limits(user, conversation)
    question = Message(conversation=conversation, role=Message.Role.USER, content=content)
    title = None if conversation.title else title_from(content)
    return _plan(user, conversation, history, [*history, question], question=question, title=title)


def message_edit_and_resend(*, user, message: Message, content: str,
                            shown_last: ShownLast | None = None) -> AnswerPlan:
    """The edited message takes its new text; every later message of the conversation goes.
    `shown_last`: the last message the page shows, when it says (_check_shown_last)."""
    conversation = message.conversation
    history = _check_limits(user, conversation)
    _check_shown_last(history, shown_last)
    if message.role != Message.Role.USER:
        raise ApiError(409, "not_a_user_message", "only your own messages can be edited")
    position = next((i for i, m in enumerate(history) if m.pk == message.pk), None)
    if position is None:
        raise not_found("message")  # deleted since it was looked up
    # A copy takes the new text: the plan's write must find the message as it was read (_as_read).
    edited = copy.copy(history[position])
    edited.content = content
    first_question = next(m for m in history if m.role == Message.Role.USER)
    title = title_from(content) if edited.pk == first_question.pk and not conversation.title_set_by_user else None
    return _plan(user, conversation, history, [*history[:position], edited], edited=edited,
                 dropped=history[position + 1:], title=title)


def answer_regenerate(*, user, conversation: Conversation, model: str | None = None,
                      shown_last: ShownLast | None = None) -> AnswerPlan:
    """The last answer again, from the conversation's model or `model`, which it then keeps.
    `shown_last`: the answer the page shows last, when it says (_check_shown_last)."""
    history = _check_limits(user, conversation)
    _check_shown_last(history, shown_last)
    if not history or history[-1].role != Message.Role.ASSISTANT:
        raise ApiError(409, "nothing_to_regenerate", "the conversation does not end with an answer")
    # The old answer's audit rows stay, with the text the user saw.
    return _plan(user, conversation, history, history[:-1], dropped=history[-1:], chosen_model=model)


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
    sent upstream would no longer match it, and one deleted meanwhile answers 404.
    """
    _lock_user(plan.user.pk)
    stream_claim_release(user=plan.user, request_id=plan.request_id)  # its generation holds it now
    history = _check_limits(plan.user, plan.conversation)
    if [_as_read(m) for m in history] != plan.seen:
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
    generation = _generation_row(plan, answer)
    # Newest first in the list; a title from the first message only where the user has not named
    # it since the plan's read (a rename meanwhile is theirs to keep); a model picked here stays.
    changes = {"updated_at": timezone.now(), **({"model": plan.chosen_model} if plan.chosen_model else {})}
    if plan.title is not None:
        changes["title"] = Case(When(title_set_by_user=False, then=Value(plan.title)), default=F("title"))
    if not Conversation.objects.alive().filter(pk=plan.conversation.pk).update(**changes):
        raise not_found("conversation")  # deleted since the plan's read: nothing here is kept
    return AnswerStart(answer, generation, plan.prompt, plan.continue_final_message)


@transaction.atomic
def answer_unstarted(*, plan: AnswerPlan, outcome: Outcome) -> Generation:
    """The audit row of an answer that never started (its upstream refused it, or its browser
    left before the upstream answered): the conversation stays as it was, none of the plan's
    messages written or dropped, and the row belongs to no message."""
    return generation_finish(generation_id=_generation_row(plan, None).pk, outcome=outcome)


def _generation_row(plan: AnswerPlan, answer: Message | None) -> Generation:
    return Generation.objects.create(
        request_id=plan.request_id, user=plan.user, conversation=plan.conversation, message=answer,
        model=plan.model, sampling=plan.sampling, prompt_messages=len(plan.prompt),
        context_from_message_id=plan.context_from and plan.context_from.pk,
        relay_process=plan.relay_process, input_tokens=plan.prompt_tokens,
    )
