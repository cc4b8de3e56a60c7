"""The retry rule as a pure function: which answers are retried, and after how long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx

from pgrecall._core import Call, RetryPolicy, nothing, retry_after, retry_delay

READ = Call("GET", "/v1/conversations", nothing, idempotent=True)
WRITE = Call("POST", "/v1/conversations", nothing)
POLICY = RetryPolicy(max_retries=3, backoff_base=0.5, max_delay=10.0)


def unavailable(error: str = "DatabaseUnavailableError", **headers: str) -> httpx.Response:
    return httpx.Response(503, json={"error": error, "detail": "x"}, headers=headers)


def test_reads_retry_any_503_with_retry_after_or_backoff() -> None:
    assert retry_delay(READ, 0, POLICY, response=unavailable("Other", **{"Retry-After": "3"})) == 3
    assert retry_delay(READ, 2, POLICY, response=httpx.Response(503, text="busy")) == 2.0


def test_writes_retry_only_when_the_service_says_nothing_was_stored() -> None:
    assert retry_delay(WRITE, 0, POLICY, response=unavailable(**{"Retry-After": "1"})) == 1
    assert retry_delay(WRITE, 0, POLICY, response=unavailable("EmbeddingError")) == 0.5
    assert retry_delay(WRITE, 0, POLICY, response=unavailable("SomethingElse")) is None
    assert retry_delay(WRITE, 0, POLICY, response=httpx.Response(503, text="proxy")) is None


def test_a_named_503_that_is_not_an_outage_is_not_retried() -> None:
    # e.g. a dependency the server is not configured with: waiting does not change the answer.
    assert retry_delay(READ, 0, POLICY, response=unavailable("ServiceError")) is None
    assert retry_delay(READ, 0, POLICY, response=unavailable("EmbeddingError")) == 0.5


def test_other_statuses_and_the_last_attempt_are_not_retried() -> None:
    for status in (200, 404, 422, 429, 500, 502):
        assert retry_delay(READ, 0, POLICY, response=httpx.Response(status)) is None
    assert retry_delay(READ, 3, POLICY, response=unavailable()) is None


def test_waits_are_bounded() -> None:
    assert retry_delay(READ, 0, POLICY, response=unavailable(**{"Retry-After": "3600"})) == 10.0
    assert POLICY.backoff(20) == 10.0


def test_retry_after_as_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    seconds = retry_after(httpx.Response(503, headers={"Retry-After": when}))
    assert seconds is not None and 25 <= seconds <= 30
    assert retry_after(httpx.Response(503, headers={"Retry-After": "soon"})) is None


def test_transport_failures() -> None:
    request = httpx.Request("POST", "http://x")
    refused = httpx.ConnectError("refused", request=request)
    timed_out = httpx.ReadTimeout("slow", request=request)
    assert retry_delay(WRITE, 0, POLICY, error=refused) == 0.5  # never reached the service
    assert retry_delay(WRITE, 0, POLICY, error=timed_out) is None  # may have been stored
    assert retry_delay(READ, 1, POLICY, error=timed_out) == 1.0
