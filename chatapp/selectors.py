"""Reads, always scoped to their owner."""

from dataclasses import dataclass

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import Q
from django.db.models.functions import Coalesce, Length, Substr

from common.vocabulary import GenerationStatus, MessageStatus

from .errors import ApiError, not_found
from .models import Conversation, Generation, Message

PAGE_SIZE = 20
# Without the model's tokenizer here, a conservative estimate: byte-level BPE gives at least
# about three bytes per token in practice, and each message costs a few template tokens.
BYTES_PER_TOKEN = 3
TOKENS_PER_MESSAGE = 6


def conversation_list(*, user, query: str = "", page: int = 1):
    conversations = Conversation.objects.alive().filter(owner=user)
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


def message_get(*, user, message_id: int) -> Message:
    try:
        return Message.objects.select_related("conversation").get(
            pk=message_id, conversation__owner=user, conversation__deleted_at__isnull=True
        )
    except Message.DoesNotExist:
        raise not_found("message") from None


def generation_get(*, user, generation_id: int) -> Generation:
    try:
        return Generation.objects.select_related("message").get(pk=generation_id, user=user)
    except Generation.DoesNotExist:
        raise not_found("generation") from None


@dataclass(frozen=True)
class Progress:
    """How far one answer has got, as its rows say."""

    generation: Generation  # its status, and once it has ended the figures of the `done` event
    text_length: int  # characters of the answer's text saved so far
    text_after: str  # that text from the character asked for on
    own_length: int  # of those characters, this generation's (a continued answer's text starts earlier)

    @property
    def ended(self) -> bool:
        return GenerationStatus(self.generation.status).is_final


def generation_progress(*, generation_id: int, after: int = 0) -> Progress:
    """The answer's status and saved text in one query, so that the two agree.

    The text is the message's (for a continued answer, all of it), or the generation's own once
    its message is gone; only the characters from `after` on are read, not the whole text again.
    """
    saved = Coalesce("message__content", "final_text")
    found = (Generation.objects.filter(pk=generation_id)
             .only("status", "message", "finish_reason", "input_tokens", "output_tokens", "ttft_ms")
             .annotate(saved_length=Length(saved), saved_after=Substr(saved, after + 1),
                       own_length=Length("final_text"))
             .get())
    return Progress(found, found.saved_length, found.saved_after, found.own_length)


def stop_requested(*, generation_id: int) -> bool:
    """The user pressed Stop on this generation (services.generation_stop recorded it)."""
    return Generation.objects.filter(pk=generation_id, status=GenerationStatus.STOP_REQUESTED).exists()


def last_used_model(*, user) -> str | None:
    """The model of the user's latest answer, in any conversation."""
    return (Generation.objects.filter(user=user).order_by("-started_at")
            .values_list("model", flat=True).first())


def streams_open(*, user) -> int:
    return Generation.objects.filter(user=user, status__in=Generation.LIVE_STATUSES).count()


def estimated_tokens(text: str) -> int:
    return -(-len(text.encode()) // BYTES_PER_TOKEN) + TOKENS_PER_MESSAGE


def prompt_messages(*, conversation: Conversation, history: list[Message]) -> list[dict]:
    """The conversation as the model sees it, oldest messages left out to fit the context.

    The system prompt and the newest message always stay; an answer that failed or is still
    streaming is not part of what was said.
    """
    said = [m for m in history if m.status not in (MessageStatus.FAILED, MessageStatus.STREAMING)]
    budget = settings.CHAT_CONTEXT_TOKENS - settings.CHAT_MAX_TOKENS
    system = [{"role": "system", "content": conversation.system_prompt}] if conversation.system_prompt else []
    budget -= sum(estimated_tokens(m["content"]) for m in system)
    kept: list[dict] = []
    for message in reversed(said):
        cost = estimated_tokens(message.content)
        if cost > budget:
            if not kept:
                raise ApiError(400, "context_too_long",
                               "the message is too long for the model's context")
            break
        kept.append({"role": message.role, "content": message.content})
        budget -= cost
    return system + kept[::-1]
