"""How a query's time expression becomes the ranking's preferred window (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from app.retrieval.presets import DEFAULT
from app.services.query import QueryRequest, time_preference


def request(query: str, as_of: datetime | None = None) -> QueryRequest:
    return QueryRequest(user_id="u", query=query, limit=5, min_score=0.0, as_of=as_of)


def test_relative_expressions_resolve_against_as_of() -> None:
    preset = DEFAULT.with_(time_boost=0.5, time_mention_slack_days=14)
    as_of = datetime(2022, 7, 1, tzinfo=UTC)
    window = time_preference("hiking last year", request("hiking last year", as_of), preset)
    assert window is not None
    assert window.start == datetime(2021, 1, 1, tzinfo=UTC)
    assert window.end == datetime(2022, 1, 15, tzinfo=UTC)  # the year plus 14 days of slack


def test_no_expression_or_no_boost_gives_no_preference() -> None:
    preset = DEFAULT.with_(time_boost=0.5)
    assert time_preference("hiking", request("hiking"), preset) is None
    off = DEFAULT.with_(time_boost=0.0)
    assert time_preference("hiking in 2023", request("hiking in 2023"), off) is None
