"""What the sync and async clients share: the calls, the error type, the retry rule.

Each public method of the clients builds a `Call` here (method, path, body, how to read the
answer, whether a retry is safe) and runs it through its own transport loop, so the two clients
cannot drift apart.
"""

from __future__ import annotations

import email.utils
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel

T = TypeVar("T")

# 503s whose body says nothing was stored (app/errors.py): a write that got one may be retried.
NOTHING_STORED_ERRORS = frozenset({"DatabaseUnavailableError", "EmbeddingError"})


class PgrecallError(Exception):
    """Any failed call: the service's error body, or a transport failure (status 0)."""

    def __init__(
        self,
        status: int,
        error: str,
        detail: str,
        fields: list[dict[str, str]] | None = None,
        correlation_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        self.fields = fields
        self.correlation_id = correlation_id

    @classmethod
    def from_response(cls, response: httpx.Response) -> PgrecallError:
        try:
            body = response.json()
        except ValueError:
            body = None
        correlation = response.headers.get("x-correlation-id")
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            fields = body.get("fields")
            return cls(
                response.status_code,
                body["error"],
                str(body.get("detail", "")),
                fields if isinstance(fields, list) else None,
                correlation,
            )
        return cls(response.status_code, "HTTPError", response.text[:2000], None, correlation)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: at most `max_retries` more attempts, each wait at most `max_delay` s."""

    max_retries: int = 3
    backoff_base: float = 0.5
    max_delay: float = 10.0

    def backoff(self, attempt: int) -> float:
        return float(min(self.max_delay, self.backoff_base * 2**attempt))


# Every call sent once: what benchmarks and probes use, so a retry never hides in a timing.
NO_RETRY = RetryPolicy(max_retries=0)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    # An HTML form post (the admin console) instead of a JSON body.
    form: Mapping[str, str] | None = None
    admin: bool = False
    # Send the client's key and user id; the console signs in with a cookie instead.
    identity: bool = True
    # Reads and PUT-style writes: repeating them changes nothing.
    idempotent: bool = False
    expect: frozenset[int] = field(default_factory=lambda: frozenset({200, 201, 204}))


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_delay(
    call: Call[Any],
    attempt: int,
    policy: RetryPolicy,
    response: httpx.Response | None = None,
    error: httpx.TransportError | None = None,
) -> float | None:
    """Seconds to wait before retrying, or None to stop.

    Retried: a 503 on an idempotent call that is an outage (from a proxy, with Retry-After, or
    DatabaseUnavailableError / EmbeddingError), or on a write whose body says nothing was
    stored (those two errors); a connection that never opened (any call); any
    other transport failure on an idempotent call. Retry-After is honoured up to `max_delay`.
    """
    if attempt >= policy.max_retries:
        return None
    if error is not None:
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout) or call.idempotent:
            return policy.backoff(attempt)
        return None
    if response is None or response.status_code != 503:
        return None
    try:
        name = response.json().get("error")
    except (ValueError, AttributeError):
        name = None
    hinted = retry_after(response)
    if not call.idempotent and name not in NOTHING_STORED_ERRORS:
        return None
    if name is not None and name not in NOTHING_STORED_ERRORS and hinted is None:
        # The service named a failure that is not an outage and set no Retry-After: waiting
        # would not change the answer (a missing dependency, a configuration problem).
        return None
    return policy.backoff(attempt) if hinted is None else min(hinted, policy.max_delay)


def model(kind: type[BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda response: kind.model_validate(response.json())


def as_json(response: httpx.Response) -> Any:
    return response.json()


def nothing(_: httpx.Response) -> None:
    return None


def dump(value: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """A request item given as a pydantic model (e.g. the service's schema) or a plain mapping."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    return {k: _jsonable(v) for k, v in value.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in values.items() if v is not None}


def items(values: Sequence[BaseModel | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dump(v) for v in values]
