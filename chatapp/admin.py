"""Django admin: the audit log and its daily rollups are for review only; nobody edits history."""

import re
import uuid

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q, Subquery
from django.forms.models import BaseInlineFormSet

from . import login_limit, request_input
from .models import Conversation, DailyRollup, Generation, Message
from .staff import selectors as staff_selectors


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


class DrillDownBoundedChangeList(ChangeList):
    """A list whose date drill-down (`date_hierarchy`) refuses a date past Python's last year
    as Django refuses a month 13, by the list's ?e=1: Django turns the year, month and day into
    the period's bounds as datetimes, and only catches the ValueError of the first bound, not
    an OverflowError (a year past a C int), nor either error of the period's end (9999's)."""

    def get_filters(self, request):
        try:
            return super().get_filters(request)
        except (OverflowError, ValueError) as error:
            raise IncorrectLookupParameters(error) from error


class ReviewOnlyAdmin(admin.ModelAdmin):
    """Rows shown, never added, changed or deleted here."""

    # A filtered page's "(N total)" is a second count of the whole table, which only grows.
    show_full_result_count = False

    def get_changelist(self, request, **kwargs):
        return DrillDownBoundedChangeList

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


_HEX_DIGITS = re.compile(r"[0-9a-f]{1,32}")


def request_ids_starting(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The first and last request id whose digits start with those of `term` (dashes and case
    aside), for the unique index to find in one range; None when `term` is no such start."""
    digits = term.replace("-", "").lower()
    if not _HEX_DIGITS.fullmatch(digits):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


class ModelsInTheLog(admin.AllValuesFieldListFilter):
    """The model filter, its choices read by the model index (staff_selectors.models_in_the_log)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lookup_choices = staff_selectors.models_in_the_log()


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
    list_filter = ["status", "finish_reason", "cancelled_by", ("model", ModelsInTheLog), "started_at"]
    search_fields = ["request_id", "user__username"]  # as get_search_results below reads them
    search_help_text = "A request id, whole or its first digits, or a username or part of one."
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

    def get_search_results(self, request, queryset, search_term):
        """The rows of a request id starting with the term, or of the users whose name holds it,
        each found by an index. Django's own search (icontains on both) cast every request id to
        text and matched it in one OR with the username, across a join: a read of the whole log
        for every search, 2 to 4 s a page at 300,000 rows and growing with them."""
        term = search_term.strip()
        if not term:
            return queryset, False
        users = get_user_model().objects.filter(username__icontains=term).values_list("pk", flat=True)
        found = Q(user_id__in=list(users))
        if (first_ids := request_ids_starting(term)) is not None:
            found |= Q(request_id__range=first_ids)
        return queryset.filter(found), False

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


class NewestMessages(BaseInlineFormSet):
    """A conversation's newest messages, oldest first: a page of all of them was 7.8 MB and 7 s
    to draw at 5,000 messages (and grew with them)."""

    def get_queryset(self):
        everything = super().get_queryset()
        newest = everything.order_by("-created_at", "-pk").values("pk")[:MessageInline.shown]
        return everything.filter(pk__in=Subquery(newest)).order_by("created_at", "pk")


class MessageInline(admin.TabularInline):
    model = Message
    formset = NewestMessages
    shown = 100
    extra = 0
    fields = ["role", "status", "content", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_formset(self, request, obj=None, **kwargs):
        # An instance serves one request (ModelAdmin.get_inline_instances): its heading may say so.
        count = obj.messages.count() if obj is not None else 0
        if count > self.shown:
            self.verbose_name_plural = f"messages: the newest {self.shown} of {count}"
        return super().get_formset(request, obj, **kwargs)


@admin.register(Conversation)
class ConversationAdmin(ReviewOnlyAdmin):
    """A user's conversation as they have it: shown, never reassigned, rewritten or deleted here
    (its audit rows name its owner; a user deletes their own, softly, in the app)."""

    list_display = ["id", "title", "owner", "updated_at", "deleted_at"]
    list_filter = ["deleted_at"]
    search_fields = ["title", "owner__username"]
    inlines = [MessageInline]
