from django.contrib import admin
from django.urls import include, path, re_path

from . import api, auth_api, views
from .staff import audit_views

handler400 = "chatapp.error_views.bad_request"
handler403 = "chatapp.error_views.permission_denied"
handler404 = "chatapp.error_views.page_not_found"
handler500 = "chatapp.error_views.server_error"

api_patterns = [
    path("auth/session", auth_api.session, name="session"),
    path("auth/login", auth_api.login, name="login"),
    path("auth/logout", auth_api.logout, name="logout"),
    path("auth/password", auth_api.password, name="password"),
    path("models", api.models, name="models"),
    path("conversations", api.conversations, name="conversations"),
    path("conversations/<int:conversation_id>", api.conversation, name="conversation"),
    path("conversations/<int:conversation_id>/messages", api.messages, name="messages"),
    path("conversations/<int:conversation_id>/regenerate", api.regenerate, name="regenerate"),
    path("messages/<int:message_id>/edit", api.edit, name="edit"),
    path("messages/<int:message_id>/continue", api.continue_answer, name="continue"),
    path("generations/<int:generation_id>", api.generation, name="generation"),
    path("generations/<int:generation_id>/events", api.generation_events, name="generation-events"),
    path("generations/<int:generation_id>/stop", api.stop, name="stop"),
    path("generations/<int:generation_id>/recover", api.recover, name="recover"),
    path("staff/live/events", api.live_events, name="live-events"),
    path("staff/generations/<int:generation_id>/stop", api.staff_stop, name="staff-stop"),
]

urlpatterns = [
    path("api/", include((api_patterns, "api"))),
    path("admin/", admin.site.urls),
    path("staff/audit/", audit_views.audit, name="staff-audit"),
    path("staff/live/", views.live, name="staff-live"),
    path("healthz", views.health, name="health"),
    path("", views.index, name="index"),
    # The front end's files at the site root, as nginx serves them (no dot-leading segment, so
    # no "..": the view checks again).
    re_path(r"^(?P<path>(?:vendor/(?:[\w-][\w.-]*/)*)?[\w-][\w.-]*\.(?:js|mjs|css|svg|png|ico|map|woff2))$",
            views.frontend_asset, name="frontend-asset"),
]
