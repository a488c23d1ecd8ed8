"""Errors the API answers before any stream starts, as `{"error": {"code", "message"}}`, with
`details` where a refusal has several reasons worth showing one by one."""

from django.http import JsonResponse

# A 429 for what the user's own streams hold (its answers, its watch streams): a slot comes free
# when one of them ends, which no one can tell; a client that retries waits this long first.
STREAMS_RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after_s: int | None = None,
                 details: list[str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after_s = retry_after_s  # sent as Retry-After
        self.details = details


def not_found(what: str) -> ApiError:
    # Another user's object is answered exactly like a missing one: 404, never 403.
    return ApiError(404, "not_found", f"no such {what}")


def error_response(status: int, code: str, message: str, details: list[str] | None = None) -> JsonResponse:
    error = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return JsonResponse({"error": error}, status=status)
