"""Django admin: the audit log and its daily rollups are for review only; nobody edits history."""

from django.contrib import admin

from .models import Conversation, DailyRollup, Generation, Message


class ReviewOnlyAdmin(admin.ModelAdmin):
    """Rows shown, never added, changed or deleted here."""

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Generation)
class GenerationAdmin(ReviewOnlyAdmin):
    list_display = [
        "request_id",
        "user",
        "model",
        "status",
        "finish_reason",
        "cancelled_by",
        "ttft",
        "itl_mean",
        "itl_max",
        "input_tokens",
        "output_tokens",
        "duration",
        "started_at",
    ]
    list_filter = ["status", "finish_reason", "cancelled_by", "model", "started_at"]
    search_fields = ["request_id", "user__username"]
    date_hierarchy = "started_at"
    list_select_related = ["user"]

    # Latencies as measured carry noise far below a tenth of a millisecond: shown rounded to it.
    ROUNDED = {"ttft_ms": "ttft", "itl_mean_ms": "itl_mean", "itl_max_ms": "itl_max"}

    def get_readonly_fields(self, request, obj=None):
        return [self.ROUNDED.get(field.name, field.name) for field in self.model._meta.fields]

    def get_exclude(self, request, obj=None):
        return list(self.ROUNDED)  # shown by the methods below instead

    @admin.display(description="TTFT (ms)", ordering="ttft_ms")
    def ttft(self, generation: Generation) -> str | None:
        return _tenths(generation.ttft_ms)

    @admin.display(description="ITL mean (ms)", ordering="itl_mean_ms")
    def itl_mean(self, generation: Generation) -> str | None:
        return _tenths(generation.itl_mean_ms)

    @admin.display(description="ITL max (ms)", ordering="itl_max_ms")
    def itl_max(self, generation: Generation) -> str | None:
        return _tenths(generation.itl_max_ms)

    @admin.display(description="duration (ms)", ordering="finished_at")
    def duration(self, generation: Generation) -> str:
        duration = generation.duration_ms
        return "" if duration is None else f"{duration:.0f}"


def _tenths(milliseconds: float | None) -> str | None:
    return None if milliseconds is None else f"{milliseconds:.1f}"


@admin.register(DailyRollup)
class DailyRollupAdmin(ReviewOnlyAdmin):
    """The days the staff page reads instead of their generations (chatapp/rollups.py)."""

    list_display = ["day", "generations", "cancelled", "input_tokens", "output_tokens", "ttft_p50_ms",
                    "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms", "errors", "computed_at"]
    date_hierarchy = "day"
    ordering = ["-day"]

    @admin.display(description="TTFT p50 (ms)", ordering="ttft_p50")
    def ttft_p50_ms(self, day: DailyRollup) -> str | None:
        return _tenths(day.ttft_p50)

    @admin.display(description="TTFT p95 (ms)", ordering="ttft_p95")
    def ttft_p95_ms(self, day: DailyRollup) -> str | None:
        return _tenths(day.ttft_p95)

    @admin.display(description="ITL p50 (ms)", ordering="itl_p50")
    def itl_p50_ms(self, day: DailyRollup) -> str | None:
        return _tenths(day.itl_p50)

    @admin.display(description="ITL p95 (ms)", ordering="itl_p95")
    def itl_p95_ms(self, day: DailyRollup) -> str | None:
        return _tenths(day.itl_p95)


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    fields = ["role", "status", "content", "created_at"]
    readonly_fields = fields
    can_delete = False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "owner", "updated_at", "deleted_at"]
    list_filter = ["deleted_at"]
    search_fields = ["title", "owner__username"]
    inlines = [MessageInline]
