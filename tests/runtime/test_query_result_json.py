"""QueryResult.to_json (the Redis answer cache's payload): the same JSON as dataclasses.asdict,
and from_json gives the result back."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime

from app.services.query.model import QueryItem, QueryResult


def _result() -> QueryResult:
    item = QueryItem(
        id="0b7c",
        source_kind="message",
        content="We moved to Lisbon",
        type="message",
        relevance_score=0.8123,
        keyword_score=0.5,
        semantic_score=0.61,
        source="conversation:c#3",
        created_at=datetime(2026, 5, 1, 12, 30, tzinfo=UTC),
        importance=None,
        role="user",
        conversation_id="c",
        tokens=5,
        cut=False,
    )
    return QueryResult(items=[item, item], total_count=2, token_count=10, confidence=0.81)


def test_the_payload_is_asdicts_json_and_reads_back() -> None:
    result = _result()
    payload = result.to_json()
    assert json.loads(payload) == json.loads(json.dumps(asdict(result), default=str))
    assert QueryResult.from_json(payload) == result
    assert QueryResult.from_json(QueryResult().to_json()) == QueryResult()
