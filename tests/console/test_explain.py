"""The explanation of a query: one row per ranked candidate (pure), and the same answer as the
tool (real database): explaining never changes the ranking."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from app.adapters.mlflow_runs import last_runs
from app.console.explain import explain
from app.repositories.retrieval import Candidate
from app.repositories.search_index import Source
from app.retrieval.budget import Packed
from app.retrieval.scoring import Ranked
from app.services.query import QueryRequest, QueryService, QueryTrace


def _candidate(key: tuple[Source, uuid.UUID], content: str) -> Candidate:
    return Candidate(
        source=key[0],
        id=key[1],
        content=content,
        type="fact" if key[0] is Source.MEMORY else None,
        importance=0.5,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        reference=None,
        conversation_id=None,
        role=None if key[0] is Source.MEMORY else "user",
    )


def test_every_candidate_gets_its_scores_and_its_fate() -> None:
    keys = [(Source.MEMORY, uuid.uuid4()) for _ in range(5)] + [(Source.MESSAGE, uuid.uuid4())]
    a, b, c, d, e, m = keys
    # Ranked best first: relevance decides the thresholds, fused the order.
    ranked = [
        Ranked(a, fused=0.9, relevance=0.9, keyword=0.8, semantic=0.6),
        Ranked(b, fused=0.8, relevance=0.8, keyword=0.0, semantic=0.8),
        Ranked(c, fused=0.7, relevance=0.7, keyword=0.5, semantic=0.0),
        Ranked(d, fused=0.6, relevance=0.6, keyword=0.4, semantic=0.4),
        Ranked(e, fused=0.5, relevance=0.4, keyword=0.4, semantic=0.0),  # under the relative cut
        Ranked(m, fused=0.4, relevance=0.2, keyword=0.0, semantic=0.2),  # under the floor
    ]
    trace = QueryTrace(
        bm25={a: 3.0, c: 2.0, d: 1.5, e: 1.4, (Source.MEMORY, uuid.uuid4()): 0.1},
        cosine={a: 0.6, b: 0.7, d: 0.5, m: 0.3},
        ranked=ranked,
        kept=[a, b, c, d],
        candidates={k: _candidate(k, f"text {i}") for i, k in enumerate(keys)},
        packed={a: Packed(0, "text 0", 2, cut=False), b: Packed(1, "te …", 2, cut=True)},
        budget=4,
    )
    request = QueryRequest(user_id="u", query="q", limit=3, min_score=0.3)
    out = explain(request, trace)
    rows = {r.id: r for r in out.rows}
    assert [r.rank for r in out.rows] == [1, 2, 3, 4, 5, 6]
    assert rows[str(a[1])].fate == "returned" and rows[str(a[1])].returned
    assert (rows[str(a[1])].bm25, rows[str(a[1])].cosine) == (3.0, 0.6)
    assert rows[str(b[1])].fate == "cut to fit" and rows[str(b[1])].bm25 is None
    assert rows[str(c[1])].fate == "left out: budget" and rows[str(c[1])].cosine is None
    assert rows[str(d[1])].fate == "left out: result limit"
    assert rows[str(e[1])].fate == "filtered"
    assert (rows[str(e[1])].passed_floor, rows[str(e[1])].passed_relative) == (True, False)
    assert (rows[str(m[1])].passed_floor, rows[str(m[1])].passed_relative) == (False, None)
    assert rows[str(m[1])].kind == "message" and rows[str(m[1])].type == "user"
    assert rows[str(c[1])].tokens > 0  # counted even though it was not returned
    assert out.unfetched == 1


async def test_explaining_returns_what_the_tool_returns(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        for content, kind in (
            ("Ben's sister lives in Porto and teaches maths", "fact"),
            ("Ben prefers trains to planes for trips under six hours", "preference"),
            ("Ben decided to learn Portuguese this year", "decision"),
        ):
            r = await client.post(
                "/v1/admin/memories", json={"user_id": user_id, "content": content, "type": kind}
            )
            assert r.status_code == 201
        resources = app.state.resources
        service = QueryService(
            resources.engine, resources.embeddings, resources.cache, resources.query_config
        )
        request = QueryRequest(
            user_id=user_id,
            query="where does Ben's sister live?",
            limit=10,
            min_score=resources.query_config.min_relevance,
        )
        plain = await service.query(request)
        explained, trace = await service.explain(request)
        assert not plain.cached and not explained.cached
        assert [(i.id, i.relevance_score, i.tokens) for i in explained.items] == [
            (i.id, i.relevance_score, i.tokens) for i in plain.items
        ]
        assert plain.items and "Porto" in plain.items[0].content
        rows = explain(request, trace).rows
        assert [r.id for r in rows if r.returned] == [i.id for i in plain.items]


async def test_evaluation_runs_say_why_there_are_none(tmp_path: Any) -> None:
    missing = await last_runs(f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.runs == [] and "no MLflow store" in (missing.note or "")
    remote = await last_runs("http://mlflow.example:5000")
    assert remote.runs == [] and "not a local sqlite store" in (remote.note or "")
