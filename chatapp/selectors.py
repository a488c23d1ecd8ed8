"""Reads of the conversation core, scoped to their owner where a user asks.

The background work's reads (the titles, the reaper) name the rows they mean instead. The staff
pages' reads, across every owner, are staff/selectors.py.
"""

from dataclasses import dataclass

from django.core.paginator import Paginator
from django.db.models import Case, Exists, F, OuterRef, Prefetch, Q, Subquery, When
from django.db.models.functions import Coalesce, Length, Substr

from common.vocabulary import GenerationStatus, MessageStatus

from .errors import not_found
from .models import Conversation, Generation, Message

PAGE_SIZE = 20


def conversation_list(*, user, query: str = "", page: int = 1):
    """A page of the user's conversations, each with `live_generation_id`: its answer being
    written, if one is (a page loaded afresh follows it, so that it ends as written)."""
    live = Generation.objects.filter(conversation=OuterRef("pk"),
                                     status__in=Generation.LIVE_STATUSES)
    conversations = (Conversation.objects.alive().filter(owner=user)
                     .annotate(live_generation_id=Subquery(live.values("pk")[:1])))
    if query:
        conversations = conversations.filter(
            Q(title__icontains=query) | Q(messages__content__icontains=query)
        ).distinct()
    return Paginator(conversations.order_by("-updated_at", "-id"), PAGE_SIZE).get_page(page)


def conversation_get(*, user, conversation_id: int) -> Conversation:
    try:
        return Conversation.objects.alive().get(pk=conversation_id, owner=user)
    except Conversation.DoesNotExist:
        raise not_found("conversation") from None


def message_list(*, conversation: Conversation) -> list[Message]:
    """The conversation's messages in order, each with its generations read along, oldest first
    (the last is the latest; Generation's own order is the audit's, newest first)."""
    oldest_first = Prefetch("generations", queryset=Generation.objects.order_by("pk"))
    return list(conversation.messages.prefetch_related(oldest_first))


def message_get(*, user, message_id: int) -> Message:
    try:
        return Message.objects.select_related("conversation").get(
            pk=message_id, conversation__owner=user, conversation__deleted_at__isnull=True
        )
    except Message.DoesNotExist:
        raise not_found("message") from None


def generation_get(*, user, generation_id: int) -> Generation:
    """One of the user's answers, gone with its conversation as its messages are."""
    try:
        return Generation.objects.select_related("message").get(
            pk=generation_id, user=user, conversation__deleted_at__isnull=True)
    except Generation.DoesNotExist:
        raise not_found("generation") from None


@dataclass(frozen=True)
class Progress:
    """How far one answer has got, as its rows say."""

    generation: Generation  # its status, and once it has ended the figures of the `done` event
    text_length: int  # characters of the answer's text saved so far
    text_after: str  # that text from the character asked for on
    own_length: int  # of those characters, this generation's (a continued answer's text starts earlier)
    message_status: str | None  # the answer's message's, None once it is gone

    @property
    def ended(self) -> bool:
        return GenerationStatus(self.generation.status).is_final


def generation_progress(*, generation_id: int, after: int = 0) -> Progress:
    """The answer's status and saved text in one query, so that the two agree.

    The text is the message's (for a continued answer, all of it), or the generation's own once
    its message is gone or was continued since (the message's text then goes on past it); only
    the characters from `after` on are read, not the whole text again.
    """
    continued_since = Exists(Generation.objects.filter(message=OuterRef("message"),
                                                       pk__gt=OuterRef("pk")))
    saved = Case(When(continued_since, then=F("final_text")),
                 default=Coalesce("message__content", "final_text"))
    found = (Generation.objects.filter(pk=generation_id)
             .only("status", "message", "finish_reason", "input_tokens", "output_tokens", "ttft_ms")
             .annotate(saved_length=Length(saved), saved_after=Substr(saved, after + 1),
                       own_length=Length("final_text"), message_status=F("message__status"))
             .get())
    return Progress(found, found.saved_length, found.saved_after, found.own_length,
                    found.message_status)


def generation_ids_stale(*, cutoff) -> list[int]:
    """The live generations whose relay last beat before `cutoff` (their text is read as they
    end, under their row's lock: a page may hand some back meanwhile)."""
    return list(Generation.objects.filter(status__in=Generation.LIVE_STATUSES, heartbeat_at__lt=cutoff)
                .values_list("pk", flat=True))


def relay_processes_live() -> set[str]:
    """The web processes named as relaying a live generation (chatapp/runtime/web_process.py)."""
    return set(Generation.objects.filter(status__in=Generation.LIVE_STATUSES).exclude(relay_process="")
               .values_list("relay_process", flat=True).distinct())


def generation_ids_relayed_by(*, processes: set[str]) -> list[int]:
    """The live generations relayed by these web processes."""
    return list(Generation.objects.filter(status__in=Generation.LIVE_STATUSES, relay_process__in=processes)
                .values_list("pk", flat=True))


def questions_before(*, conversation_id: int, message_id: int) -> int:
    """The user's messages in the conversation before the message `message_id`."""
    return Message.objects.filter(conversation_id=conversation_id, role=Message.Role.USER,
                                  pk__lt=message_id).count()


@dataclass(frozen=True)
class FirstExchange:
    conversation: Conversation
    question: Message
    answer: Message


def first_exchange(*, conversation_id: int) -> FirstExchange | None:
    """A conversation its user has not named, with its first question and that question's
    complete answer; None when it is gone, named, or its first answer is not complete."""
    conversation = Conversation.objects.filter(pk=conversation_id, title_set_by_user=False).first()
    if conversation is None:
        return None
    first = list(conversation.messages.filter(role__in=[Message.Role.USER, Message.Role.ASSISTANT])
                 .order_by("pk")[:2])
    if ([m.role for m in first] != [Message.Role.USER, Message.Role.ASSISTANT]
            or first[1].status not in (MessageStatus.COMPLETED, MessageStatus.TRUNCATED)):
        return None
    return FirstExchange(conversation, *first)


def stop_requested(*, generation_id: int) -> bool:
    """The user pressed Stop on this generation (services.generation_stop recorded it)."""
    return Generation.objects.filter(pk=generation_id, status=GenerationStatus.STOP_REQUESTED).exists()


def last_used_model(*, user) -> str | None:
    """The model of the user's latest answer, in any conversation."""
    return (Generation.objects.filter(user=user).order_by("-started_at")
            .values_list("model", flat=True).first())


def streams_open(*, user) -> int:
    return Generation.objects.filter(user=user, status__in=Generation.LIVE_STATUSES).count()
