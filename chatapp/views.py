"""Plain views: health for the supervisor and load balancers, the front end's entry page, and
the staff's live view page (its data comes from the API's staff endpoints)."""

import logging

from django.conf import settings
from django.db import connection
from django.http import FileResponse, Http404, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.static import serve

from .runtime.database_threads import on_database_thread
from .staff.permissions import REVIEW_ANSWERS, STOP_ANSWERS, staff_page

log = logging.getLogger(__name__)


async def health(request):
    """Ready when the app can reach its database (on the connection the views' work uses)."""

    def database_answers() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)

    try:
        ok = await on_database_thread(database_answers)()
    except Exception:  # any database failure means not ready
        # The error names hosts, users and databases: it goes to the log, not to whoever asks.
        log.exception("health check: the database does not answer")
        return JsonResponse({"status": "unhealthy", "error": "the database does not answer"}, status=503)
    return JsonResponse({"status": "ok" if ok else "unhealthy"}, status=200 if ok else 503)


@ensure_csrf_cookie
def index(request):
    """The single-page front end, for when no nginx serves `frontend/` in front of us."""
    response = FileResponse(open(settings.FRONTEND_DIR / "index.html", "rb"), content_type="text/html")
    response["Content-Security-Policy"] = settings.CHAT_FRONT_END_POLICY
    return response


@staff_page(REVIEW_ANSWERS)
def live(request):
    """The answers streaming now, the replicas' load, and a Stop for each answer (live_view.js)
    where the staff member may stop them."""
    return render(request, "chatapp/live.html", {"may_stop": request.user.has_perm(STOP_ANSWERS)})


# The browser's files only: never package.json, node_modules/, tests/ or scripts/ (the URL
# pattern admits only the folder's top level and vendor/).
FRONTEND_ASSET_SUFFIXES = (".js", ".mjs", ".css", ".svg", ".png", ".ico", ".map", ".woff2")


def frontend_asset(request, path):
    """A file of `frontend/` for when no nginx serves the folder in front of us."""
    parts = path.split("/")
    if not path.endswith(FRONTEND_ASSET_SUFFIXES) or any(p.startswith(".") or not p for p in parts):
        raise Http404("not a front-end file")
    if len(parts) > 1 and parts[0] != "vendor":
        raise Http404("not a front-end file")
    response = serve(request, path, document_root=settings.FRONTEND_DIR)
    response["Content-Security-Policy"] = settings.CHAT_FRONT_END_POLICY
    return response
