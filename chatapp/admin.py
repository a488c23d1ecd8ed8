"""Django admin: the audit log is for review only; nobody edits history."""

from django.contrib import admin

from .models import Conversation, Generation, Message


@admin.register(Generation)
class GenerationAdmin(admin.ModelAdmin):
    list_display = [
        "request_id",
        "user",
        "model",
        "status",
        "finish_reason",
        "cancelled_by",
        "ttft_ms",
        "input_tokens",
        "output_tokens",
        "duration",
        "started_at",
    ]
    list_filter = ["status", "finish_reason", "cancelled_by", "model", "started_at"]
    search_fields = ["request_id", "user__username"]
    date_hierarchy = "started_at"
    list_select_related = ["user"]

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="duration (ms)", ordering="finished_at")
    def duration(self, generation: Generation) -> str:
        duration = generation.duration_ms
        return "" if duration is None else f"{duration:.0f}"


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
