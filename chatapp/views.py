"""Plain views: health for the supervisor and load balancers, and the front end's entry page."""

from django.conf import settings
from django.db import connection
from django.http import FileResponse, JsonResponse
from django.views.decorators.csrf import ensure_csrf_cookie


async def health(request):
    """Ready when the app can reach its database."""
    from asgiref.sync import sync_to_async

    def database_answers() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)

    try:
        ok = await sync_to_async(database_answers)()
    except Exception as error:  # any database failure means not ready
        return JsonResponse({"status": "unhealthy", "error": str(error)}, status=503)
    return JsonResponse({"status": "ok" if ok else "unhealthy"}, status=200 if ok else 503)


@ensure_csrf_cookie
def index(request):
    """The single-page front end, for when no nginx serves `frontend/` in front of us."""
    return FileResponse(open(settings.FRONTEND_DIR / "index.html", "rb"), content_type="text/html")
