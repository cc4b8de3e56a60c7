"""query_memory: embed -> candidates (keyword + vector) -> fuse and calibrate -> pack.

Fails closed: a database error gives an empty answer with `error` set, never a 500; an
embedder failure falls back to a cached query vector, else to keyword-only search.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import user_session
from app.errors import EmbeddingError
from app.repositories.maintenance import user_lists_for
from app.repositories.retrieval import (
    Candidate,
    KeywordHits,
    RetrievalRepository,
    TagFilter,
    TimeFilter,
)
from app.repositories.search_index import Source
from app.retrieval.budget import pack
from app.retrieval.dates import TimeWindow, parse_time_expression
from app.retrieval.names import query_names
from app.retrieval.presets import RetrievalPreset
from app.retrieval.relevance import features, load_model
from app.retrieval.rerank import rerank
from app.retrieval.scoring import (
    apply_thresholds,
    finalise,
    propagate,
    rank,
)
from app.services.embedding import EmbeddingService, Priority

if TYPE_CHECKING:
    from app.adapters.cache import Cache
    from app.retrieval.budget import Packed
    from app.retrieval.scoring import Ranked
    from app.services.usage import UsageRecorder

log = logging.getLogger(__name__)
audit = logging.getLogger("app.audit")

MAX_QUERY_CHARS = 8192
SourceName = Literal["memory", "message"]


@dataclass(frozen=True)
class QueryConfig:
    """Service-wide retrieval settings, built from Settings in app/main.py (defaults live there)."""

    preset: RetrievalPreset
    token_budget: int
    min_relevance: float
    max_results: int
    rate_limit_per_minute: int
    timeout_s: float
    exact_search_max_items: int
    ivfflat_probes: int
    ivfflat_max_probes: int
    ivfflat_probe_share: float
    hnsw_ef_search: int
    hnsw_max_scan_tuples: int


def ann_probes(items: int, probes: int, share: float) -> int:
    """ivfflat probes for a user with `items` indexed items on the ANN path: at least `probes`,
    and at least `share` of the lists of the user's own index (`pgrecall reindex` sizes it to
    user_lists_for(rows)), each of which holds that user's rows only. Real conversation turns
    need about half of them for recall@10 >= 0.95 (docs/performance.md, "Big users on real
    conversation turns"): the default share 0.5 probes 50 of a 50k-item user's 100 lists."""
    return max(probes, math.ceil(share * user_lists_for(items)))


@dataclass(frozen=True)
class QueryRequest:
    user_id: str
    query: str
    limit: int
    min_score: float
    types: tuple[str, ...] | None = None
    sources: tuple[SourceName, ...] = ("memory", "message")
    token_budget: int | None = None
    # Hard filters on event time (created_at), inclusive; as_of: nothing created after it.
    time_from: datetime | None = None
    time_to: datetime | None = None
    as_of: datetime | None = None
    # Only memories with any (or all) of these tags; messages have none.
    tags: tuple[str, ...] | None = None
    tags_match: Literal["any", "all"] = "any"
    # Recency weight w of this request (None: the preset's): score = (1 - w) x relevance
    # + w x exp(-age_days / half_life).
    recency: float | None = None

    @property
    def when(self) -> TimeFilter:
        return TimeFilter(self.time_from, self.time_to, self.as_of)

    @property
    def tag_filter(self) -> TagFilter | None:
        return TagFilter(self.tags, self.tags_match == "all") if self.tags else None


@dataclass(frozen=True)
class QueryItem:
    id: str
    source_kind: SourceName
    content: str
    type: str
    relevance_score: float
    keyword_score: float
    semantic_score: float
    source: str | None
    created_at: datetime
    importance: float | None
    role: str | None
    conversation_id: str | None
    tokens: int
    cut: bool


@dataclass
class QueryResult:
    items: list[QueryItem] = field(default_factory=list)
    total_count: int = 0
    query_embedding_ms: int = 0
    retrieval_ms: int = 0
    total_ms: float = 0.0
    token_count: int = 0
    truncated: bool = False
    degraded: str | None = None
    error: str | None = None
    rate_limited: bool = False
    cached: bool = False
    query_truncated: bool = False
    # The best relevance of any candidate, kept or not (0: nothing matched at all): how sure
    # the service is that the store holds an answer.
    confidence: float = 0.0

    def to_json(self) -> bytes:
        data = asdict(self)
        return json.dumps(data, default=str).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> QueryResult:
        data = json.loads(payload)
        items = [
            QueryItem(**{**i, "created_at": datetime.fromisoformat(i["created_at"])})
            for i in data.pop("items")
        ]
        return cls(items=items, **data)


@dataclass
class QueryTrace:
    """What the ranking did with every candidate of one query (the admin console explains it).

    Filled only when asked for (`QueryService.explain`); the ranking itself is the same code
    path as `query`, so an explanation never differs from what the agent would get.
    """

    bm25: dict[tuple[Source, Any], float] = field(default_factory=dict)  # raw keyword scores
    cosine: dict[tuple[Source, Any], float] = field(default_factory=dict)  # raw similarities
    ranked: list[Ranked[tuple[Source, Any]]] = field(default_factory=list)  # before thresholds
    # the relevance model's inputs per candidate (app/retrieval/relevance.FEATURES)
    features: dict[tuple[Source, Any], tuple[float, ...]] = field(default_factory=dict)
    kept: list[tuple[Source, Any]] = field(default_factory=list)  # passed both thresholds
    candidates: dict[tuple[Source, Any], Candidate] = field(default_factory=dict)
    packed: dict[tuple[Source, Any], Packed] = field(default_factory=dict)  # what the budget let in
    budget: int = 0


def query_hash(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()


def _cache_key(request: QueryRequest, preset: RetrievalPreset, budget: int) -> str:
    normalised = " ".join(request.query.lower().split())
    return json.dumps(
        [
            normalised,
            request.limit,
            request.min_score,
            request.types,
            request.sources,
            budget,
            preset.name,
            request.time_from,
            request.time_to,
            request.as_of,
            request.tags,
            request.tags_match,
            request.recency,
            # Relative time expressions ("yesterday") resolve against today's date.
            datetime.now(UTC).date() if request.as_of is None else None,
        ],
        default=str,
    )


class QueryService:
    """The read path of the product. Holds no per-request state."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        embeddings: EmbeddingService,
        cache: Cache,
        config: QueryConfig,
        slots: asyncio.Semaphore | None = None,
        usage: UsageRecorder | None = None,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.embeddings = embeddings
        self.cache = cache
        self.config = config
        # Queries admitted to the database stage at once (each may hold two connections).
        self.slots = slots or asyncio.Semaphore(1_000_000)
        # Notes which memories each answer returned; written after it (app/services/usage.py).
        self.usage = usage

    async def query(self, request: QueryRequest, *, correlation_id: str = "-") -> QueryResult:
        """Answer one query; never raises for database, Redis or embedder failures. The
        memories it returns get their usage stamped afterwards (with a UsageRecorder)."""
        result = await self._answer(request, correlation_id)
        if self.usage is not None:
            self.usage.answered(
                request.user_id,
                (uuid.UUID(i.id) for i in result.items if i.source_kind == "memory"),
            )
        return result

    async def _answer(self, request: QueryRequest, correlation_id: str) -> QueryResult:
        started = time.perf_counter()
        query_text = request.query
        query_cut = False
        if len(query_text) > MAX_QUERY_CHARS:
            log.warning("query of %d characters cut to %d", len(query_text), MAX_QUERY_CHARS)
            query_text, query_cut = query_text[:MAX_QUERY_CHARS], True
        budget = request.token_budget or self.config.token_budget
        preset = self.config.preset
        key = _cache_key(request, preset, budget)

        decision = await self.cache.hit_rate_limit(
            request.user_id, self.config.rate_limit_per_minute
        )
        if not decision.allowed:
            cached = await self.cache.get_query_result(request.user_id, key)
            result = QueryResult.from_json(cached) if cached else QueryResult()
            result.rate_limited, result.cached = True, cached is not None
            return self._finish(request, result, started, correlation_id)

        cached = await self.cache.get_query_result(request.user_id, key)
        if cached is not None:
            result = QueryResult.from_json(cached)
            result.cached = True
            return self._finish(request, result, started, correlation_id)

        result = await self._search(request, query_text, budget, preset)
        result.query_truncated = query_cut
        if result.error is None and result.degraded is None:
            await self.cache.set_query_result(request.user_id, key, result.to_json())
        return self._finish(request, result, started, correlation_id)

    async def explain(self, request: QueryRequest) -> tuple[QueryResult, QueryTrace]:
        """Answer like `query`, but fresh (no result cache, no rate limit) and with the trace of
        every candidate's scores and fate."""
        started = time.perf_counter()
        trace = QueryTrace()
        budget = request.token_budget or self.config.token_budget
        trace.budget = budget
        result = await self._search(
            request, request.query[:MAX_QUERY_CHARS], budget, self.config.preset, trace
        )
        result.query_truncated = len(request.query) > MAX_QUERY_CHARS
        return self._finish(request, result, started, "console"), trace

    async def _embed(self, query: str) -> tuple[Any | None, str | None, int]:
        """(vector, degraded flag, ms). EmbeddingService.embed asks the Redis cache before the
        embedder, so a cached query vector is used even when the embedder is down."""
        t0 = time.perf_counter()
        try:
            # Half of the query's time budget at most: the keyword fallback needs the rest.
            vectors = await asyncio.wait_for(
                self.embeddings.embed([query], priority=Priority.INTERACTIVE),
                self.config.timeout_s / 2,
            )
            return vectors[0], None, int((time.perf_counter() - t0) * 1000)
        except (EmbeddingError, TimeoutError) as exc:
            log.warning("query embedding failed (%s): keyword-only search", type(exc).__name__)
            return None, "keyword_only", int((time.perf_counter() - t0) * 1000)

    async def _search(
        self,
        request: QueryRequest,
        query: str,
        budget: int,
        preset: RetrievalPreset,
        trace: QueryTrace | None = None,
    ) -> QueryResult:
        result = QueryResult()
        # The query is embedded (in a worker thread) while the keyword arm runs in Postgres:
        # for a large store that hides most of the embedding time (docs/performance.md).
        embedding = asyncio.create_task(self._embed(query)) if preset.use_vector else None
        t0 = time.perf_counter()
        try:
            candidates, ranked = await asyncio.wait_for(
                self._candidates(request, query, embedding, preset, result, trace),
                self.config.timeout_s,
            )
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            log.error("retrieval failed closed: %s", type(exc).__name__)
            result.error = "retrieval_unavailable"
            result.retrieval_ms = int((time.perf_counter() - t0) * 1000)
            return result
        finally:
            if embedding is not None and not embedding.done():
                embedding.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await embedding
        result.retrieval_ms = int((time.perf_counter() - t0) * 1000)
        result.confidence = round(max((r.relevance for r in ranked), default=0.0), 4)

        kept = apply_thresholds(
            ranked, request.min_score, preset.relative_cutoff, preset.cutoff_exempt_ranks
        )
        kept = [r for r in kept if r.key in candidates]  # malformed/vanished rows are skipped
        result.total_count = len(kept)
        top = kept[: request.limit]
        packed = pack([candidates[r.key].content for r in top], budget)
        if trace is not None:
            trace.ranked, trace.kept, trace.candidates = ranked, [r.key for r in kept], candidates
            trace.packed = {top[p.index].key: p for p in packed.items}
        for p in packed.items:
            r, c = top[p.index], candidates[top[p.index].key]
            result.items.append(
                _item(c, r.relevance, r.keyword, r.semantic, p.text, p.tokens, p.cut)
            )
        result.token_count = packed.token_count
        result.truncated = packed.truncated or len(kept) > request.limit
        return result

    async def _candidates(
        self,
        request: QueryRequest,
        query: str,
        embedding: asyncio.Task[tuple[Any | None, str | None, int]] | None,
        preset: RetrievalPreset,
        result: QueryResult,
        trace: QueryTrace | None = None,
    ) -> tuple[dict[tuple[Source, Any], Candidate], list[Any]]:
        memories = "memory" in request.sources
        # Messages carry no memory type nor tags: either filter restricts results to memories.
        messages = "message" in request.sources and not request.types and not request.tags
        n = max(preset.candidates, request.limit)
        # Both connections carry the request's user: row-level security backs up the predicates.
        async with (
            self.slots,
            user_session(self.sessionmaker, request.user_id, custom_plans=True) as session,
            session.begin(),
        ):
            repo = RetrievalRepository(session)
            # The user's size picks exact or ANN search. A big user's arms run at once on two
            # connections: Postgres uses both cores, and the query pays max(keyword, embed +
            # vector) instead of the sum. A user on the exact path (a few thousand items, a
            # keyword arm that ends before the embedding) runs the vector statement on this
            # connection: three round trips fewer (docs/performance.md).
            items = await repo.item_count(request.user_id) if embedding is not None else 0
            exact = embedding is not None and items <= self.config.exact_search_max_items
            keyword = self._keyword_arm(repo, request, query, n, memories, messages, preset)
            if exact:
                hits = await keyword
                cosines = await self._nearest(
                    repo, request, embedding, n, memories, messages, result, preset, exact=True
                )
            else:
                hits, cosines = await asyncio.gather(
                    keyword,
                    self._vector_arm(
                        request, embedding, n, memories, messages, result, preset, items
                    ),
                )
            has_names = bool(query_names(query))
            ranked = rank(
                hits.scores, hits.max_score, cosines, preset, hits.expansion,
                plain=hits.plain, has_names=has_names,
            )  # fmt: skip
            neighbours: dict[tuple[Source, Any], tuple[Any, Any]] = {}
            depth = max(request.limit * 3, 30, preset.rerank_depth)
            seeds: list[Any] = []
            if messages and (preset.next_turn_weight > 0 or preset.previous_turn_weight > 0):
                seeds = [r.key for r in ranked if r.key[0] is Source.MESSAGE][
                    : preset.neighbour_seeds
                ]
            # One round trip for the seeds' neighbours and the content of every item that can
            # make the cut below: propagation only raises the neighbours, so the first `depth`
            # after it are among the first `depth` before it and the neighbours.
            around, fetched = await repo.fetch_around(
                request.user_id,
                [r.key for r in ranked[:depth]],
                [i for _, i in seeds],
                request.when,
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
                    neighbours,
                    next_weight=preset.next_turn_weight,
                    previous_weight=preset.previous_turn_weight,
                )
            keep = [r.key for r in ranked[:depth]]
            candidates = {k: fetched[k] for k in keep if k in fetched}
            if trace is not None:
                trace.bm25, trace.cosine = hits.scores, cosines
                trace.features = features(
                    hits.scores,
                    hits.plain or {},
                    hits.max_score,
                    cosines,
                    has_names,
                    load_model().neutral_cosine_z,
                )
        window = time_preference(query, request, preset)
        ranked = rerank(ranked, candidates, neighbours, query, window, preset)
        now = request.as_of or datetime.now(UTC)
        ages = {k: (now - c.created_at).total_seconds() / 86400 for k, c in candidates.items()}
        weight = preset.recency_weight if request.recency is None else request.recency
        return candidates, finalise(ranked, preset, ages, weight)

    @staticmethod
    async def _keyword_arm(
        repo: RetrievalRepository,
        request: QueryRequest,
        query: str,
        n: int,
        memories: bool,
        messages: bool,
        preset: RetrievalPreset,
    ) -> KeywordHits:
        """BM25 candidates on the request's main connection."""
        if not preset.use_keyword:
            return KeywordHits({}, 0.0)
        scope: dict[str, Any] = {
            "limit": n,
            "memories": memories,
            "messages": messages,
            "types": request.types,
            "tags": request.tag_filter,
            "k1": preset.bm25_k1,
            "b": preset.bm25_b,
            "when": request.when,
        }
        hits = await repo.keyword(request.user_id, query, **scope)
        if preset.prf_docs <= 0 or not hits.scores:
            return hits
        seeds = sorted(hits.scores, key=lambda k: -hits.scores[k])[: preset.prf_docs]
        expansion = await repo.expansion(
            request.user_id,
            query,
            [i for _, i in seeds],
            terms=preset.prf_terms,
            min_df=preset.prf_min_df,
            **scope,
        )
        return KeywordHits(hits.scores, hits.max_score, expansion, hits.plain)

    async def _vector_arm(
        self,
        request: QueryRequest,
        embedding: asyncio.Task[tuple[Any | None, str | None, int]] | None,
        n: int,
        memories: bool,
        messages: bool,
        result: QueryResult,
        preset: RetrievalPreset,
        items: int,
    ) -> dict[tuple[Source, Any], float]:
        """ANN search on a connection of its own. Its planner settings are made while the query
        is still being embedded, so only the vector statement waits for the embedding."""
        if embedding is None:
            return {}
        async with (
            user_session(self.sessionmaker, request.user_id, custom_plans=True) as session,
            session.begin(),
        ):
            return await self._nearest(
                RetrievalRepository(session),
                request,
                embedding,
                n,
                memories,
                messages,
                result,
                preset,
                exact=False,
                probes=ann_probes(
                    items, self.config.ivfflat_probes, self.config.ivfflat_probe_share
                ),
            )

    async def _nearest(
        self,
        repo: RetrievalRepository,
        request: QueryRequest,
        embedding: asyncio.Task[tuple[Any | None, str | None, int]],
        n: int,
        memories: bool,
        messages: bool,
        result: QueryResult,
        preset: RetrievalPreset,
        *,
        exact: bool,
        probes: int | None = None,
    ) -> dict[tuple[Source, Any], float]:
        """The vector search on `repo`'s connection, once the query vector is there."""
        await repo.set_vector_search(
            exact=exact,
            probes=probes or self.config.ivfflat_probes,
            max_probes=self.config.ivfflat_max_probes,
            ef_search=self.config.hnsw_ef_search,
            max_scan_tuples=self.config.hnsw_max_scan_tuples,
        )
        vector, result.degraded, result.query_embedding_ms = await embedding
        if vector is None:
            return {}
        return await repo.vector(
            request.user_id,
            vector,
            limit=n,
            memories=memories,
            messages=messages,
            types=request.types,
            tags=request.tag_filter,
            exact=exact,
            model=self.embeddings.model,
            when=request.when,
            passage_weight=preset.passage_weight,
        )

    def _finish(
        self, request: QueryRequest, result: QueryResult, started: float, correlation_id: str
    ) -> QueryResult:
        result.total_ms = (time.perf_counter() - started) * 1000
        audit.info(
            "memory retrieval",
            extra={
                "fields": {
                    "correlation_id": correlation_id,
                    "user_id": request.user_id,
                    "query_sha256": query_hash(request.query),
                    "result_count": len(result.items),
                    "latency_ms": round(result.total_ms, 2),
                    "degraded": result.degraded,
                    "error": result.error,
                    "rate_limited": result.rate_limited,
                    "cached": result.cached,
                }
            },
        )
        return result


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


def _item(
    c: Candidate,
    relevance: float,
    keyword: float,
    semantic: float,
    text: str,
    tokens: int,
    cut: bool,
) -> QueryItem:
    return QueryItem(
        id=str(c.id),
        source_kind="memory" if c.source is Source.MEMORY else "message",
        content=text,
        type=c.type or "message",
        relevance_score=round(relevance, 4),
        keyword_score=round(keyword, 4),
        semantic_score=round(semantic, 4),
        source=c.reference,
        created_at=c.created_at,
        importance=c.importance,
        role=c.role,
        conversation_id=str(c.conversation_id) if c.conversation_id else None,
        tokens=tokens,
        cut=cut,
    )
