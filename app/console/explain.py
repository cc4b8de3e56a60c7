"""Turn a query's trace into one explanation row per candidate (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.retrieval.budget import count_tokens
from app.services.query import QueryRequest, QueryTrace, Source


@dataclass(frozen=True)
class CandidateRow:
    rank: int  # place in the final ranking (1 = best)
    id: str
    kind: str  # memory | message
    type: str  # memory type, or the message's role
    content: str
    bm25: float | None  # raw keyword score (None: the keyword arm did not find it)
    keyword: float  # calibrated keyword relevance
    cosine: float | None  # raw cosine similarity (None: the vector arm did not find it)
    semantic: float  # calibrated vector relevance
    fused: float  # the score that orders the ranking
    relevance: float  # calibrated relevance, compared with the floor
    passed_floor: bool
    passed_relative: bool | None  # None: already out at the floor
    tokens: int  # tokens returned (cut items: after the cut), else the item's own count
    fate: str  # returned | cut to fit | left out: budget | left out: result limit | filtered
    returned: bool


@dataclass(frozen=True)
class Explanation:
    rows: list[CandidateRow]
    unfetched: int  # arm hits below the depth whose rows are fetched (never returnable)
    min_score: float
    limit: int
    budget: int


def explain(request: QueryRequest, trace: QueryTrace) -> Explanation:
    """Every ranked candidate with its scores and what happened to it, in ranking order."""
    kept = set(trace.kept)
    top = set(trace.kept[: request.limit])
    rows = []
    for place, r in enumerate(trace.ranked, start=1):
        c = trace.candidates.get(r.key)
        if c is None:
            continue
        floor = request.min_score <= 0.0 or r.relevance >= request.min_score
        packed = trace.packed.get(r.key)
        if packed is not None:
            fate, tokens = ("cut to fit" if packed.cut else "returned"), packed.tokens
        else:
            tokens = count_tokens(c.content)
            if r.key in top:
                fate = "left out: budget"
            elif r.key in kept:
                fate = "left out: result limit"
            else:
                fate = "filtered"
        rows.append(
            CandidateRow(
                rank=place,
                id=str(c.id),
                kind="memory" if c.source is Source.MEMORY else "message",
                type=(c.type or "") if c.source is Source.MEMORY else (c.role or "message"),
                content=c.content,
                bm25=_maybe(trace.bm25, r.key),
                keyword=r.keyword,
                cosine=_maybe(trace.cosine, r.key),
                semantic=r.semantic,
                fused=r.fused,
                relevance=r.relevance,
                passed_floor=floor,
                passed_relative=(r.key in kept) if floor else None,
                tokens=tokens,
                fate=fate,
                returned=packed is not None,
            )
        )
    hits = set(trace.bm25) | set(trace.cosine)
    return Explanation(
        rows=rows,
        unfetched=len(hits - set(trace.candidates)),
        min_score=request.min_score,
        limit=request.limit,
        budget=trace.budget,
    )


def _maybe(scores: dict[Any, float], key: Any) -> float | None:
    value = scores.get(key)
    return None if value is None else float(value)
