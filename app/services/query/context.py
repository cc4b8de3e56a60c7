"""Stage 4, the context: the rows of the ranking's first items and the turns around the seed
messages; stage 5, the rerank over those rows (app/retrieval/rerank.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from app.repositories.retrieval import Candidate, RetrievalRepository
from app.repositories.search_index import Source
from app.retrieval.dates import TimeWindow, parse_time_expression
from app.retrieval.phatic import acknowledges
from app.retrieval.presets import RetrievalPreset
from app.retrieval.rerank import rerank
from app.retrieval.scoring import Ranked, propagate
from app.services.query.model import QueryRequest
from app.services.query.state import Key, Rows, Scope


def context_depth(s: Scope) -> int:
    """How many of the ranking's first candidates the context stage fetches."""
    return max(s.request.limit * 3, 30, s.preset.rerank_depth)


async def context(repo: RetrievalRepository, s: Scope, ranked: list[Ranked[Key]]) -> Rows:
    """One round trip for the seeds' neighbours and the content of every item that can make
    the cut: propagation only raises the neighbours, so the first `depth` after it are among
    the first `depth` before it and the neighbours."""
    request, preset = s.request, s.preset
    neighbours: dict[Key, tuple[Any, Any]] = {}
    depth = context_depth(s)
    seeds: list[Any] = []
    if s.messages and (preset.next_turn_weight > 0 or preset.previous_turn_weight > 0):
        seeds = [r.key for r in ranked if r.key[0] is Source.MESSAGE][: preset.neighbour_seeds]
    around, fetched, vectors = await repo.fetch_around(
        request.user_id,
        [r.key for r in ranked[:depth]],
        [i for _, i in seeds],
        request.when,
        [i for _, i in topic_vectors(s, ranked)],
    )
    if seeds:
        neighbours = {
            (Source.MESSAGE, i): (
                (Source.MESSAGE, p) if p else None,
                (Source.MESSAGE, n) if n else None,
            )
            for i, (p, n) in around.items()
        }
        ranked = propagate(
            ranked,
            informative(neighbours, fetched),
            next_weight=preset.next_turn_weight,
            previous_weight=preset.previous_turn_weight,
        )
    keep = [r.key for r in ranked[:depth]]
    return Rows(ranked, {k: fetched[k] for k in keep if k in fetched}, neighbours, vectors)


def topic_vectors(s: Scope, ranked: list[Ranked[Key]]) -> list[Key]:
    """The memories whose stored vectors the context stage reads with their rows: the first
    `topic_depth` when the topic links read memories of every kind (`topic_link`, `tie_link`;
    the decisions alone are read after, once the rows say which are decisions)."""
    if not s.memories or not topic_vectors_read(s.preset):
        return []
    return [r.key for r in ranked if r.key[0] is Source.MEMORY][: s.preset.topic_depth]


def topic_vectors_read(preset: RetrievalPreset) -> bool:
    """Whether the first memories' vectors come with their rows: when the links read memories
    of every kind (`topic_link`, `tie_link`, `revision_threshold`), not the decisions alone."""
    return preset.topic_link > 0.0 or preset.tie_link > 0.0 or preset.revision_threshold > 0.0


def informative(
    neighbours: dict[Key, tuple[Any, Any]], rows: dict[Key, Candidate]
) -> dict[Key, tuple[Any, Any]]:
    """The neighbours that may inherit a seed's score: not the other speaker's "Noted." after
    a statement (app/retrieval/phatic.acknowledges), which would only repeat its evidence."""
    out: dict[Key, tuple[Any, Any]] = {}
    for seed, (previous, following) in neighbours.items():
        said, reply = rows.get(seed), rows.get(following) if following is not None else None
        if said and reply and acknowledges(said.content, said.role, reply.content, reply.role):
            following = None
        out[seed] = (previous, following)
    return out


def rerank_rows(s: Scope, rows: Rows) -> list[Ranked[Key]]:
    window = time_preference(s.query, s.request, s.preset)
    return rerank(rows.ranked, rows.candidates, rows.neighbours, s.query, window, s.preset)


def time_preference(
    query: str, request: QueryRequest, preset: RetrievalPreset
) -> TimeWindow | None:
    """The window a question's time expression names, resolved against as_of (else now) and
    extended by the mention slack; None when it names no time or the preference is off."""
    if preset.time_boost <= 0.0:
        return None
    window = parse_time_expression(query, request.as_of or datetime.now(UTC))
    if window is None:
        return None
    return window.widened(after=timedelta(days=preset.time_mention_slack_days))
