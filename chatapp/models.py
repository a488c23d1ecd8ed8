"""Conversations, their messages, and one audit row per generated answer."""

import uuid
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from common.vocabulary import CancelledBy, FinishReason, GenerationStatus, MessageStatus


def _choices(vocabulary) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ")) for member in vocabulary]


class ConversationQuerySet(models.QuerySet):
    def alive(self):
        return self.filter(deleted_at__isnull=True)


class Conversation(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    # The user named the conversation: the title no longer follows an edit of its first message.
    title_set_by_user = models.BooleanField(default=False)
    system_prompt = models.TextField(blank=True)
    # The model its answers come from (blank: CHAT_MODEL, whatever it is now), and its own
    # sampling (null: CHAT_TEMPERATURE, CHAT_TOP_P). A model no upstream serves any more stays
    # here until the user picks another: nothing stored is lost with it.
    model = models.CharField(max_length=200, blank=True)
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Soft delete: audit rows keep pointing at a conversation its owner removed.
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "deleted_at", "-updated_at"])]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"

    @property
    def model_name(self) -> str:
        return self.model or settings.CHAT_MODEL


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    status = models.CharField(
        max_length=16, choices=_choices(MessageStatus), default=MessageStatus.COMPLETED
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["conversation", "created_at"])]

    def __str__(self) -> str:
        return f"{self.role} #{self.pk} ({self.status})"


class Generation(models.Model):
    """The audit row of one generation: written at its start, coarsely while streaming, at its end.

    An answer usually has one; continuing a truncated answer adds another to the same message.
    `status` changes only through services.generation_move, which refuses illegal moves.
    """

    Status = GenerationStatus
    LIVE_STATUSES = (GenerationStatus.STREAMING, GenerationStatus.STOP_REQUESTED)

    request_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="generations"
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.PROTECT, related_name="generations"
    )
    message = models.ForeignKey(
        Message, on_delete=models.SET_NULL, null=True, blank=True, related_name="generations"
    )
    model = models.CharField(max_length=200)
    sampling = models.JSONField(default=dict, blank=True)
    prompt_messages = models.PositiveIntegerField(default=0)
    # Older messages were left out to fit the model's context: the first message it read (an id
    # and not a key, so that the audit row keeps it after the message is edited away).
    context_from_message_id = models.PositiveBigIntegerField(null=True, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    first_token_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    itl_mean_ms = models.FloatField(null=True, blank=True)
    itl_max_ms = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=_choices(GenerationStatus),
                              default=GenerationStatus.STREAMING)
    finish_reason = models.CharField(
        max_length=16, choices=_choices(FinishReason), blank=True, db_index=True
    )
    cancelled_by = models.CharField(
        max_length=16, choices=_choices(CancelledBy), blank=True, db_index=True
    )
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    final_text = models.TextField(blank=True)
    # Stop pressed: how many characters (code points) of this generation's text the user saw.
    stop_seen_chars = models.PositiveIntegerField(null=True, blank=True)
    # Refreshed by the relay's own timer while it streams, tokens or not: a live row whose
    # heartbeat is old has lost its relay (a crash, a killed process) and is reaped.
    heartbeat_at = models.DateTimeField(default=timezone.now)
    # The web process relaying it (chatapp/runtime/web_process.py; '' when none announced itself):
    # a live row whose process is gone lost its relay, and is reaped without waiting for the heartbeat.
    # A default in the database too, for rows written by SQL of our own (benchmarks/audit_bench.py).
    relay_process = models.CharField(max_length=32, blank=True, default="", db_default="", editable=False)

    class Meta:
        ordering = ["-started_at"]
        # Viewing generations (Django's own `view_generation`) lets a staff member review every
        # user's answers, here and on the staff pages; this one lets them stop anyone's.
        permissions = [("stop_generation", "Can stop anyone's answer while it streams")]
        indexes = [
            models.Index(fields=["model"]),
            models.Index(fields=["started_at"]),
            models.Index(fields=["user", "started_at"]),
            models.Index(fields=["user", "status"]),
            models.Index(fields=["status", "heartbeat_at"]),
        ]

    def __str__(self) -> str:
        return str(self.request_id)

    @property
    def is_streaming(self) -> bool:
        return self.status in self.LIVE_STATUSES

    @property
    def duration_ms(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds() * 1000


class StreamClaim(models.Model):
    """One of a user's places among the answers that may stream at once (CHAT_MAX_STREAMS_PER_USER),
    taken by an answer starting, from its plan until its rows are written (its generation holds the
    place from then on) or it is refused: so that of two starts at once for the last place, one is
    refused before anything goes upstream (services/stream_claims.py). One left by a web process
    that died between the two stops counting after LIFETIME, and is deleted by the user's next
    start or the periodic purge; a start slower than that is still checked by its write."""

    # As long as the slowest start waits on its upstream (its prompt counted, the answer's head:
    # each bounded by INFERENCE_READ_TIMEOUT_SECONDS, 60 s by default); a place a dead process
    # left is free again as soon.
    LIFETIME = timedelta(seconds=60)

    request_id = models.UUIDField(primary_key=True)  # the answer's, as its generation will have it
    # No constraint in the database: its check would share-lock the user's row, which an answer's
    # write holds while its upstream request is open, and a claim must not wait on that.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+",
                             db_constraint=False)
    # Indexed for the periodic purge of the expired claims of every user (tasks.py).
    claimed_at = models.DateTimeField(default=timezone.now, db_index=True)


class DailyRollup(models.Model):
    """One UTC day of the audit log summed up (chatapp/staff/rollups.py), so the staff page reads a row
    per past day instead of every generation; the fields are those of audit.DayTotals.

    A day has one row for every model together (`model` ALL_MODELS) and one for each model its
    answers came from: the percentiles of a day do not add up from its models' percentiles, so
    the every-model row is kept whole rather than summed.
    """

    ALL_MODELS = ""

    day = models.DateField()
    model = models.CharField(max_length=200, blank=True, default=ALL_MODELS)
    # On the every-model row: whether the day's per-model rows were written with it. A day rolled
    # up before rollups were kept per model has its every-model row alone (migration 0009).
    is_split_by_model = models.BooleanField(default=False)
    generations = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    finished = models.PositiveIntegerField(default=0)
    duration_ms_sum = models.FloatField(default=0.0)
    finish_reasons = models.JSONField(default=dict)  # finish_reason (or "in progress") -> count
    cancelled_by = models.JSONField(default=dict)
    errors = models.JSONField(default=dict)  # error_code (or "(no code)") -> count
    ttft_p50 = models.FloatField(null=True)
    ttft_p95 = models.FloatField(null=True)
    itl_p50 = models.FloatField(null=True)
    itl_p95 = models.FloatField(null=True)
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["day", "model"]
        constraints = [models.UniqueConstraint(fields=["day", "model"], name="daily_rollup_one_per_day_and_model")]

    def __str__(self) -> str:
        return f"{self.day} {self.model or 'every model'}: {self.generations} generation(s)"
