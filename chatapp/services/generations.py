"""Writes of one answer's life once started: status moves, the final write, partial saves while
it streams, the relay's heartbeat, and Stop."""

import logging
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models.functions import Length
from django.utils import timezone

from common.vocabulary import CancelledBy, FinishReason, GenerationStatus, MessageStatus, status_for

from ..errors import ApiError
from ..models import Generation, Message

logger = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How one generation ended, as the relay saw it."""

    # What went out to the browser. None: the text saved last, read under the row's lock (the
    # reaper's, for a relay that died: its page may have handed back text since the reaper read).
    text: str | None = ""
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
    if generation.message is not None and to.is_final:
        _write_message(generation, to)
    return generation


def _write_message(generation: Generation, ended: GenerationStatus | None = None) -> None:
    """The answer's message takes the text of its generations up to this one (a continued
    answer's starts with the earlier ones') and, with `ended` (this one's final status), the
    status it shows."""
    message = generation.message
    earlier = message.generations.filter(pk__lt=generation.pk).exclude(status__in=Generation.LIVE_STATUSES)
    texts = list(earlier.order_by("pk").values_list("final_text", flat=True))
    message.content = "".join(texts) + generation.final_text
    if ended is None:
        message.save(update_fields=["content"])
        return
    message.status = _message_status(ended, continues=bool(texts))
    message.save(update_fields=["content", "status"])


def _message_status(to: GenerationStatus, continues: bool) -> MessageStatus:
    """What the answer's message shows once one of its generations ends: that generation's
    status, except where a continuation failed. That fails the continuation alone: the answer it
    wrote on stays cut short, with what it added, so it can be continued again and stays part of
    what the model reads (a failed answer is not)."""
    if continues and to == GenerationStatus.FAILED:
        return MessageStatus.TRUNCATED
    return to.message_status


@transaction.atomic
def generation_finish(*, generation_id: int, outcome: Outcome, unless_heartbeat_since: object = None,
                      unless_ended: bool = False) -> Generation | None:
    """The final write: the exact text the user saw, the status, and the audit figures.

    A Stop recorded earlier (stop_requested) wins over however the stream ended: the text is cut
    to what the user saw then. A generation that already ended (the reaper judged it dead) keeps
    its final status: it is returned as it is, or None given `unless_ended` (the reaper's). With
    `unless_heartbeat_since` (the reaper's cutoff), a generation whose relay has proven alive
    since then is left alone (None) too.
    """
    # Locked from this read on, so that a Stop or a heartbeat cannot land between it and the move.
    current = _locked(generation_id)
    if (unless_ended or unless_heartbeat_since is not None) and GenerationStatus(current.status).is_final:
        return None  # its relay finished it meanwhile
    if unless_heartbeat_since is not None and current.heartbeat_at >= unless_heartbeat_since:
        return None  # alive after all
    text = current.final_text if outcome.text is None else outcome.text
    reason, cancelled_by = outcome.finish_reason, outcome.cancelled_by
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
    # The count said at the start, stored then, stands unless the final usage says otherwise.
    prompt_tokens = usage.get("prompt_tokens", outcome.prompt_tokens)
    try:
        return _move(
            current, status_for(reason), final_text=text,
            finish_reason=reason, cancelled_by=cancelled_by or "", error_code=error_code,
            error_message=error_message,
            input_tokens=current.input_tokens if prompt_tokens is None else prompt_tokens,
            # Without usage (a stream cut short), each content chunk carried at least one token;
            # ended by someone other than its relay (the reaper), the count was never made.
            output_tokens=usage.get("completion_tokens", outcome.num_chunks if outcome.text is not None
                                    else current.output_tokens),
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


def generation_save_partials(*, partials: list[PartialText]) -> list[int]:
    """The periodic saves of several streaming answers, in one transaction: a crash loses at
    most one interval. Returns the generations written: each now stores at least its text.

    Only answers whose generation is still live are written: their rows are locked first (on
    PostgreSQL; a SQLite transaction of ours holds the file's write lock), so one that ends
    meanwhile either ended before (and is left alone) or waits for this write to commit. A text
    shorter than the stored one is not written (its heartbeat is): the relay took it before its
    page handed back what it had been sent since (generation_recover), which the relay's next
    save or final write has too.
    """
    with transaction.atomic():
        stored_length = dict(Generation.objects.select_for_update()
                             .filter(pk__in=[p.generation_id for p in partials],
                                     status__in=Generation.LIVE_STATUSES)
                             .values_list("pk", Length("final_text")))
        kept = [p for p in partials if p.generation_id in stored_length]
        grown, shorter = [], []
        for p in kept:
            (grown if len(p.text) >= stored_length[p.generation_id] else shorter).append(p)
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        _update_each(Generation, ["final_text", "heartbeat_at"], [(p.text, now, p.generation_id) for p in grown])
        _update_each(Generation, ["heartbeat_at"], [(now, p.generation_id) for p in shorter])
        _update_each(Message, ["content"], [(p.before + p.text, p.message_id) for p in grown])
    return [p.generation_id for p in kept]


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


def generation_stop(*, generation: Generation, seen_chars: int | None,
                    cancelled_by: CancelledBy = CancelledBy.USER) -> Generation:
    """Records a Stop with the length its user saw; the relay applies it at its final write.

    An admin's Stop (from the live view) passes `seen_chars=None`: the answer keeps every
    character its user was sent. A second Stop while the first is pending changes nothing.
    A user's Stop that comes after the answer ended for want of a reader (its page was away
    past the grace period, the Stop kept until the server was reachable) is applied to the
    ended answer: see `_stop_late`. Raises IllegalTransition when the answer has otherwise
    ended: its text and audit figures stay as they are.
    """
    with transaction.atomic():
        current = _locked(generation.pk)
        if _is_stop_late(current, seen_chars, cancelled_by):
            return _stop_late(current, seen_chars)
        try:
            return _move(current, GenerationStatus.STOP_REQUESTED, cancelled_by=cancelled_by,
                         stop_seen_chars=seen_chars)
        except IllegalTransition as refused:
            if refused.status == GenerationStatus.STOP_REQUESTED:
                return current
            raise


@dataclass(frozen=True)
class SentPiece:
    """A piece of a generation's own text that a page was sent, at its offset (code points)."""

    offset: int
    text: str


# The error code the reaper records of an answer whose relay died (chatapp/tasks.py).
INTERRUPTED = "interrupted"


def generation_recover(*, generation_id: int, pieces: list[SentPiece]) -> Generation:
    """Keeps the text a page was sent past what was stored, of an answer whose relay died between
    two partial saves. Still `streaming` (its resumed stream said the stored text is shorter than
    the page's), the saved text grows, and whatever ends the answer next starts from it: the
    reaper, or the relay's own final write if it was alive after all (its text agrees: the page
    was sent it). Ended by the reaper (`failed`, `interrupted`) with the text saved last, the
    final text grows, and the audit says by how much. The caller checked each piece's proof
    (chatapp/streaming/text_proof.py); the pieces must join the stored text, agreeing with it
    where they overlap. Raises ApiError: 409 for an answer that ended otherwise, or that was
    continued since (its later text was written after the shorter one), or pieces that differ
    from its text; 400 for pieces that leave a gap.
    """
    with transaction.atomic():
        current = _locked(generation_id)
        interrupted = current.status == GenerationStatus.FAILED and current.error_code == INTERRUPTED
        if not (interrupted or current.is_streaming):
            raise ApiError(409, "not_interrupted", "only an answer still being written, or whose stream "
                                                   "was interrupted, takes back the text its page holds")
        message = current.message
        if message is not None and message.generations.filter(pk__gt=current.pk).exists():
            raise ApiError(409, "answer_continued", "the answer was continued since; its text stays")
        text = _joined(current.final_text, pieces)
        if len(text) > len(current.final_text):
            if interrupted:  # the audit says where the text's end came from
                added = len(text) - len(current.final_text)
                current.error_message += f"; its page handed back {added} characters it was shown"
            current.final_text = text
            current.save(update_fields=["final_text", "error_message"])
            if message is not None:
                _write_message(current)
        return current


def _joined(stored: str, pieces: list[SentPiece]) -> str:
    """The stored text with what the pieces add after it (as code points: linear in the text,
    however many pieces)."""
    text = list(stored)
    for piece in sorted(pieces, key=lambda piece: piece.offset):
        if piece.offset > len(text):
            raise ApiError(400, "invalid_value",
                           f"the piece at {piece.offset} leaves a gap after character {len(text)}")
        overlap = "".join(text[piece.offset: piece.offset + len(piece.text)])
        if not piece.text.startswith(overlap):
            raise ApiError(409, "text_differs", "the pieces differ from the answer's stored text")
        text.extend(piece.text[len(overlap):])
    return "".join(text)


def _is_stop_late(generation: Generation, seen_chars: int | None, cancelled_by: CancelledBy) -> bool:
    """A user's Stop of an answer that ended because nobody read it, still in its conversation
    (an answer regenerated since has lost its message: what the user sees is the new one).
    Only a truncated answer is continued, so nothing was written after this one's text."""
    return (cancelled_by == CancelledBy.USER and seen_chars is not None
            and generation.status == GenerationStatus.STOPPED
            and generation.cancelled_by == CancelledBy.CLIENT_GONE
            and generation.message is not None)


def _stop_late(generation: Generation, seen_chars: int) -> Generation:
    """The Stop the user pressed while the answer still ran: the stored text becomes what they
    saw (never longer than what was stored), and the audit says the user stopped it. The status,
    finish reason and figures stay: the answer did end then, cancelled."""
    generation.final_text = generation.final_text[:seen_chars]
    generation.cancelled_by, generation.stop_seen_chars = CancelledBy.USER, seen_chars
    generation.save(update_fields=["final_text", "cancelled_by", "stop_seen_chars"])
    _write_message(generation)
    return generation
