from django.urls import path

from chatapp.urls import urlpatterns as app_urlpatterns
from tests import probe_views

urlpatterns = [
    path("api/_probe/stream", probe_views.small_events),
    path("api/_probe/echo", probe_views.echo),
    path("api/_probe/connections", probe_views.connections_opened),
    path("api/_probe/thread", probe_views.thread_name),
    path("api/_probe/loop", probe_views.event_loop),
    *app_urlpatterns,
]
