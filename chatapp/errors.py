"""Errors the API answers before any stream starts, as `{"error": {"code", "message"}}`."""


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def not_found(what: str) -> ApiError:
    # Another user's object is answered exactly like a missing one: 404, never 403.
    return ApiError(404, "not_found", f"no such {what}")
