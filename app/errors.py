"""One error hierarchy: every failure the API reports is a ServiceError."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


class ServiceError(Exception):
    """Base of every error the service reports to a caller."""

    status_code: int = 500

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code

    @property
    def name(self) -> str:
        """The error's name in every answer (`{"error": <name>}`, MCP's `<name>: <detail>`)."""
        return type(self).__name__


class RepeatedHeaderError(ServiceError):
    """An identity or credential header sent more than once: which one counts is ambiguous."""

    status_code = 400


class NotFoundError(ServiceError):
    """The resource does not exist for this caller (never says whether it exists for another)."""

    status_code = 404


class AuthenticationError(ServiceError):
    """Missing or malformed credentials."""

    status_code = 401


class PermissionDeniedError(ServiceError):
    """Credentials are valid but do not allow this."""

    status_code = 403


class ValidationFailedError(ServiceError):
    """Input that passed the schema but fails a service rule."""

    status_code = 422

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        # Where the bad input is ("header.X-User-Id"), reported like schema errors are.
        self.field = field

    @property
    def name(self) -> str:
        """Named like the schema's own refusals: one name for every invalid input."""
        return "ValidationError"


class PayloadTooLargeError(ServiceError):
    """Request body over the configured limit."""

    status_code = 413


class UnsupportedMediaTypeError(ServiceError):
    """A request body in an encoding other than UTF-8 (a charset the service does not read)."""

    status_code = 415


class ConflictError(ServiceError):
    """The write conflicts with existing state."""

    status_code = 409


class DatabaseUnavailableError(ServiceError):
    """Postgres is down or timing out; nothing was acknowledged."""

    status_code = 503


class CapacityError(ServiceError):
    """A configured capacity is in use (e.g. every GET /mcp stream allowed): retry later."""

    status_code = 503


class EmbeddingError(ServiceError):
    """The embedder failed or timed out."""

    status_code = 503


class LocalModelMissingError(EmbeddingError):
    """An optional local embedding model is not installed (or its files do not check out)."""


class UpstreamError(ServiceError):
    """The chat proxy's model upstream is not configured, unreachable or timed out."""

    status_code = 502

    def __init__(self, message: str, status_code: int | None = None, reason: str = "") -> None:
        super().__init__(message, status_code)
        # What went wrong, as the stored user turn's metadata.upstream_error says it.
        self.reason = reason


class RateLimitedError(ServiceError):
    """Too many writes for this user in the current window; nothing was stored."""

    status_code = 429


def found(value: T | None, what: str) -> T:
    """`value`, or NotFoundError("<what> not found") when there is none (for this caller)."""
    if value is None:
        raise NotFoundError(f"{what} not found")
    return value
