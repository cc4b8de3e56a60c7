"""What the query's stages hand each other: the scope of one query (`scope`), how its vector
arm runs, and the values between the stages (pipeline.py lists the stages in order)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.repositories.retrieval import Candidate, KeywordHits
from app.repositories.search_index import Source
from app.retrieval.abstention import QuestionModel
from app.retrieval.answer_head import AnswerHead
from app.retrieval.names import query_names
from app.retrieval.presets import RetrievalPreset
from app.retrieval.relevance import RelevanceModel
from app.retrieval.revision import RevisionModel
from app.retrieval.scoring import Ranked
from app.services.query.model import QueryConfig, QueryRequest
from app.services.query.sizes import SearchSizes

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.adapters.verifier import Verifier
    from app.db import ShardRoute
    from app.services.query.shards import ShardRouter
    from app.services.query.space_cache import SpaceCache


Key = tuple[Source, Any]
Embedding = asyncio.Task[tuple[Any | None, str | None, int]]
# How the user's arms' hits become the ranking its context stage reads (`gather`): the hits
# of every owner the query reads, and their ranking.
Jointly = Callable[["ArmHits"], Awaitable[tuple["ArmHits", list[Ranked[Key]]]]]


@dataclass(frozen=True)
class Scope:
    """What one query searches: the request, its (possibly cut) text and the arms' size, and
    the relevance model fitted on the cosines of the service's embedder (relevance.model_for)."""

    request: QueryRequest
    query: str
    preset: RetrievalPreset
    relevance: RelevanceModel
    n: int  # candidates per arm
    memories: bool
    messages: bool
    # The answer head of the service's embedder (answer_head.head_for; None: it has none).
    head: AnswerHead | None = None
    # The answer verifier (app/adapters/verifier.py) when the preset reads it (verify_depth).
    verifier: Verifier | None = None
    # The question model of the service's embedder (abstention.question_model_for; None: none).
    question: QuestionModel | None = None
    # The revision model of the service's embedder (revision.revision_model_for; None: none):
    # newer wins on one topic when the preset reads it (`revision_threshold`).
    revision: RevisionModel | None = None
    # The names the question mentions (app/retrieval/names.py), read once for every stage.
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Vectors:
    """How the vector arm runs: the service's planner settings, the embedding model and the
    users' recent sizes (sizes.py); and where a user's read transactions run (`route`)."""

    engine: AsyncEngine  # its pool serves the read transactions (app/db.py)
    config: QueryConfig
    model: str
    sizes: SearchSizes
    # On Citus: the user's reads on the worker holding its shards (shards.py); None: `engine`.
    router: ShardRouter | None = None
    # The process's copies of small shared spaces (space_cache.py; None: spaces are read by
    # their statements).
    spaces: SpaceCache | None = None

    async def route(self, user_id: str) -> ShardRoute | None:
        """Where `user_id`'s read transactions run (None: on `engine`)."""
        return None if self.router is None else await self.router.route(user_id)


@dataclass(frozen=True)
class ArmHits:
    keyword: KeywordHits
    cosines: dict[Key, float]


@dataclass(frozen=True)
class Rows:
    """The ranking after the context stage, the fetched rows it can still be cut to, the
    seed messages' (previous, next) turns, and the stored vectors read with the rows (the
    first memories', when the topic links read every kind: `topic_vectors`)."""

    ranked: list[Ranked[Key]]
    candidates: dict[Key, Candidate]
    neighbours: dict[Key, tuple[Any, Any]]
    vectors: dict[Key, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Retrieved:
    """What `retrieve` hands the answer: the rows, the calibrated ranking, and for each
    possibly outdated memory the newer memory of its topic (app/retrieval/topics.py)."""

    candidates: dict[Key, Candidate]
    ranked: list[Ranked[Key]]
    newer: dict[Key, Key]
    # the shared space (1: the first the request named) of each candidate from one
    origin: dict[Key, int] = field(default_factory=dict)
    # the question model's confidence that the store answers (calibrate.question_confidence;
    # None: the best relevance is the confidence)
    confidence: float | None = None


@dataclass(frozen=True)
class Cut:
    kept: list[Ranked[Key]]  # passed both thresholds (and still has a row)
    top: list[Ranked[Key]]  # the first `limit` of them


def scope(
    request: QueryRequest,
    query: str,
    preset: RetrievalPreset,
    relevance: RelevanceModel,
    head: AnswerHead | None = None,
    verifier: Verifier | None = None,
    question: QuestionModel | None = None,
    revision: RevisionModel | None = None,
) -> Scope:
    return Scope(
        request,
        query,
        preset,
        relevance,
        n=max(preset.candidates, request.limit),
        memories="memory" in request.sources,
        # Messages carry no memory type nor tags: either filter restricts results to memories.
        messages="message" in request.sources and not request.types and not request.tags,
        head=head,
        verifier=verifier if preset.verify_depth > 0 else None,
        question=question if preset.question_model else None,
        revision=revision if preset.revision_threshold > 0.0 else None,
        names=tuple(query_names(query)),
    )


@dataclass(frozen=True)
class Gathered:
    """What the database stages (2 to 4) found for one owner: the arms' hits, the rows after
    the context stage, the stored vectors of the first candidates."""

    hits: ArmHits
    rows: Rows
    stored: Stored
    # With shared spaces (`joint`): which of them each of their candidates came from (1: the
    # first space the request named; the user's own are not in it).
    origin: dict[Key, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Stored:
    """The query vector and the stored vectors of the first candidates (`item_vectors`)."""

    query: Any | None
    items: dict[Key, Any]
    scored: list[Key]  # the candidates the answer head scores, in ranking order
