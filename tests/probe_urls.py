from django.urls import path

# Django looks for the error handlers in the root URLconf: the app's, as in production.
from chatapp.urls import handler400, handler403, handler404, handler500  # noqa: F401
from chatapp.urls import urlpatterns as app_urlpatterns
from tests import probe_views

urlpatterns = [
    path("api/_probe/stream", probe_views.small_events),
    path("api/_probe/echo", probe_views.echo),
    path("api/_probe/connections", probe_views.connections_opened),
    path("api/_probe/thread", probe_views.thread_name),
    path("api/_probe/loop", probe_views.event_loop),
    path("api/_probe/error", probe_views.failure),
    *app_urlpatterns,
]
