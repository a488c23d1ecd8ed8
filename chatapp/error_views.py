"""Django's error answers (handler400/403/404/500 and CSRF_FAILURE_VIEW): under /api/ the API's
`{"error": {"code", "message"}}`, which the page turns into a sentence per code
(frontend/errors.js); elsewhere Django's own HTML pages. nginx answers its own errors under
/api/ in the same shape (nginx/chatapp.conf.template)."""

from django.core.exceptions import RequestDataTooBig
from django.views import csrf, defaults

from . import nginx_paths
from .errors import error_response


def _is_api(request) -> bool:
    # As nginx chose its location: `//api/x` is proxied as the API's, and passed on as sent.
    return nginx_paths.routed(request.path_info).startswith("/api/")


def bad_request(request, exception):
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        # Django reports a body past DATA_UPLOAD_MAX_MEMORY_SIZE as a 400; it is what 413 means.
        return error_response(413, "body_too_large", "the request body is too large")
    return error_response(400, "bad_request", "the request could not be read")


def permission_denied(request, exception):
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return error_response(403, "forbidden", "not allowed")


def page_not_found(request, exception):
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return error_response(404, "not_found", "no such endpoint or object")


def server_error(request):
    if not _is_api(request):
        return defaults.server_error(request)
    return error_response(500, "server_error", "the server failed to answer this request")


def csrf_failure(request, reason=""):
    if not _is_api(request):
        return csrf.csrf_failure(request, reason)
    # The reason names what was missing or wrong; the page reloads for a fresh token either way.
    return error_response(403, "csrf_failed", f"CSRF check failed: {reason}")
