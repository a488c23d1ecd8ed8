"""Reads of the conversation core, scoped to their owner where a user asks.

The background work's reads (the titles, the reaper) name the rows they mean instead. The staff
pages' reads, across every owner, are staff/selectors.py.
"""

from dataclasses import dataclass
from datetime import datetime
from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
from django.db import connection
from django.db.models import Case, Exists, F, OuterRef, Prefetch, Q, Subquery, When
from django.db.models.functions import Coalesce, Length, Substr
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from common.vocabulary import GenerationStatus, MessageStatus

from .errors import not_found
from .models import Conversation, Generation, Message, StreamClaim

PAGE_SIZE = 20


@dataclass(frozen=True)
class ConversationPage:
    conversations: list[Conversation]  # newest first, each with `live_generation_id`
    has_more: bool  # the list goes on after the last of these


def conversation_list(*, user, query: str = "",
                      after: tuple[datetime, int] | None = None) -> ConversationPage:
    """The user's first PAGE_SIZE conversations, or (`after`: an (updated_at, id) read from one)
    those just after that place in the list, each with `live_generation_id`: its answer being
    written, if one is (a page loaded afresh follows it, so that it ends as written).

    A place and not a page number: a conversation deleted elsewhere, or moved to the top by an
    answer, shifts every numbered page after it, so that the next page read would skip one or
    repeat one. The order is (updated_at, id), newest first; the place is a conversation's in it
    as it was read, which stays when that conversation moves or goes.
    """
    live = Generation.objects.filter(conversation=OuterRef("pk"),
                                     status__in=Generation.LIVE_STATUSES)
    conversations = (Conversation.objects.alive().filter(owner=user)
                     .annotate(live_generation_id=Subquery(live.values("pk")[:1])))
    if query:
        conversations = conversations.filter(
            Q(title__icontains=query) | Q(messages__content__icontains=query)
        ).distinct()
    newest_first = conversations.order_by("-updated_at", "-id")
    if after is not None:
        moment, conversation_id = after
        newest_first = newest_first.filter(
            Q(updated_at__lt=moment) | Q(updated_at=moment, pk__lt=conversation_id))
    read = list(newest_first[: PAGE_SIZE + 1])
    return ConversationPage(read[:PAGE_SIZE], has_more=len(read) > PAGE_SIZE)


def conversation_get(*, user, conversation_id: int) -> Conversation:
    try:
        return Conversation.objects.alive().get(pk=conversation_id, owner=user)
    except Conversation.DoesNotExist:
        raise not_found("conversation") from None


MESSAGE_PAGE_SIZE = 50
MAX_MESSAGE_PAGE_SIZE = 200


class UnknownCursor(ValueError):
    """A page asked for before a message the conversation does not hold (another's, or deleted since)."""


@dataclass(frozen=True)
class MessagePage:
    messages: list[Message]  # oldest first, each with its generations read along
    has_older: bool  # the conversation holds messages before the first of these


def message_page(*, conversation: Conversation, before: int | None = None,
                 limit: int = MESSAGE_PAGE_SIZE) -> MessagePage:
    """The conversation's newest `limit` messages, or those just before the message `before`.

    A cursor and not a page number: messages come at the end and an edit drops every one after
    it, so that numbered pages counted from the newest would shift between two reads (a repeat or
    a gap). The order is Message's, (created_at, id): the cursor is the message's place in it.
    Generations are read oldest first (the last is the latest; their own order is the audit's).
    """
    newest_first = conversation.messages.order_by("-created_at", "-pk")
    if before is not None:
        moment = conversation.messages.filter(pk=before).values_list("created_at", flat=True).first()
        if moment is None:
            raise UnknownCursor(before)
        newest_first = newest_first.filter(Q(created_at__lt=moment) | Q(created_at=moment, pk__lt=before))
    oldest_first = Prefetch("generations", queryset=Generation.objects.order_by("pk"))
    read = list(newest_first.prefetch_related(oldest_first)[: limit + 1])
    return MessagePage(read[:limit][::-1], has_older=len(read) > limit)


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
    """The user's answers streaming, and those starting (a StreamClaim not expired), counted in
    one statement: an answer whose write turns its claim into its generation meanwhile is counted
    once, either way. Written as SQL: it runs twice in front of every first token (the claim,
    the write), and the ORM took 1.7 ms a call to compile its two subqueries, which the
    database answers in 0.5 ms."""
    quote, ops = connection.ops.quote_name, connection.ops
    live = list(Generation.LIVE_STATUSES)
    sql = (f"SELECT (SELECT COUNT(*) FROM {quote(Generation._meta.db_table)}"
           f" WHERE user_id = %s AND status IN ({', '.join(['%s'] * len(live))}))"
           f" + (SELECT COUNT(*) FROM {quote(StreamClaim._meta.db_table)}"
           f" WHERE user_id = %s AND claimed_at >= %s)")
    since = ops.adapt_datetimefield_value(timezone.now() - StreamClaim.LIFETIME)
    with connection.cursor() as cursor:
        cursor.execute(sql, [user.pk, *live, user.pk, since])
        return cursor.fetchone()[0]


def sessions_signed_in(*, user_id: int, session_keys: set[str]) -> dict[str, bool]:
    """Of `session_keys`, those still stored: each True while it signs in the user `user_id`,
    as Django's auth.get_user judges a session at its next request (its user active, its
    password hash current), without get_user's flush of those that do not. A sign-out deleted
    its session (absent here); a password change left every other session a stale hash (False)."""
    engine, user, stored = import_module(settings.SESSION_ENGINE), None, {}
    for key in session_keys:
        session = engine.SessionStore(key).load()
        if not session:
            continue
        stored[key] = False
        backend = session.get(BACKEND_SESSION_KEY)
        if str(session.get(SESSION_KEY)) != str(user_id) or backend not in settings.AUTHENTICATION_BACKENDS:
            continue
        user = user or load_backend(backend).get_user(user_id)
        if user is None:
            continue
        hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
        stored[key] = any(constant_time_compare(session.get(HASH_SESSION_KEY, ""), known) for known in hashes)
    return stored
