"""Django admin: the audit log and its daily rollups are for review only; nobody edits history."""

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError

from . import login_limit, request_input
from .models import Conversation, DailyRollup, Generation, Message


class SignInForm(AdminAuthenticationForm):
    """The admin's sign-in, held back by the same limit as the API's (chatapp/login_limit.py),
    says so rather than "wrong password": the right one would be refused too until then."""

    def get_invalid_login_error(self):
        wait = getattr(self.request, login_limit.REFUSED_FOR, 0)
        if wait:
            return ValidationError(f"too many failed sign-ins: try again in {wait} s", code="too_many_attempts")
        return super().get_invalid_login_error()


admin.site.login_form = SignInForm


def tenths_of(field: str, description: str):
    """A column of `field`, in milliseconds, to a tenth: latencies as measured carry noise far
    below it."""

    @admin.display(description=description, ordering=field)
    def column(self, row) -> str | None:
        milliseconds = getattr(row, field)
        return None if milliseconds is None else f"{milliseconds:.1f}"

    return column


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

    def get_changelist_instance(self, request):
        """A filter holding a character no database compares (a NUL: PostgreSQL refuses it in
        text, raised only once the list is read, past Django's own checks) is a lookup the list
        cannot use, answered as Django answers any other (the list's ?e=1), not a 500."""
        if any(request_input.storable(text) != text
               for key, values in request.GET.lists() for text in (key, *values)):
            raise IncorrectLookupParameters("a filter holds a NUL character or a lone surrogate")
        return super().get_changelist_instance(request)


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

    # Shown to a tenth of a millisecond by the columns below.
    ROUNDED = {"ttft_ms": "ttft", "itl_mean_ms": "itl_mean", "itl_max_ms": "itl_max"}

    def get_readonly_fields(self, request, obj=None):
        return [self.ROUNDED.get(field.name, field.name) for field in self.model._meta.fields]

    def get_exclude(self, request, obj=None):
        return list(self.ROUNDED)  # shown by the methods below instead

    ttft = tenths_of("ttft_ms", "TTFT (ms)")
    itl_mean = tenths_of("itl_mean_ms", "ITL mean (ms)")
    itl_max = tenths_of("itl_max_ms", "ITL max (ms)")

    @admin.display(description="duration (ms)", ordering="finished_at")
    def duration(self, generation: Generation) -> str:
        duration = generation.duration_ms
        return "" if duration is None else f"{duration:.0f}"


@admin.register(DailyRollup)
class DailyRollupAdmin(ReviewOnlyAdmin):
    """The days the staff page reads instead of their generations (chatapp/staff/rollups.py): a
    row for every model (a blank model) and one for each model."""

    list_display = ["day", "model", "generations", "cancelled", "input_tokens", "output_tokens", "ttft_p50_ms",
                    "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms", "errors", "computed_at"]
    list_filter = ["model"]
    date_hierarchy = "day"
    ordering = ["-day", "model"]

    ttft_p50_ms = tenths_of("ttft_p50", "TTFT p50 (ms)")
    ttft_p95_ms = tenths_of("ttft_p95", "TTFT p95 (ms)")
    itl_p50_ms = tenths_of("itl_p50", "ITL p50 (ms)")
    itl_p95_ms = tenths_of("itl_p95", "ITL p95 (ms)")


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    fields = ["role", "status", "content", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Conversation)
class ConversationAdmin(ReviewOnlyAdmin):
    """A user's conversation as they have it: shown, never reassigned, rewritten or deleted here
    (its audit rows name its owner; a user deletes their own, softly, in the app)."""

    list_display = ["id", "title", "owner", "updated_at", "deleted_at"]
    list_filter = ["deleted_at"]
    search_fields = ["title", "owner__username"]
    inlines = [MessageInline]
