"""query_memory: the service around the pipeline (pipeline.py): result cache, rate limit,
the query's time limit and its audit line.

Fails closed: a database error gives an empty answer with `error` set, never a 500; an
embedder failure falls back to a cached query vector, else to keyword-only search.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.adapters.verifier import verifier_for
from app.domain import space_owner
from app.errors import EmbeddingError
from app.retrieval.abstention import question_model_for
from app.retrieval.answer_head import head_for
from app.retrieval.frames import core_question
from app.retrieval.presets import RetrievalPreset
from app.retrieval.relevance import model_for
from app.retrieval.revision import revision_model_for
from app.services.embedding import EmbeddingService, Priority
from app.services.query.model import (
    MAX_QUERY_CHARS,
    QueryConfig,
    QueryRequest,
    QueryResult,
    QueryTrace,
    _cache_key,
    query_hash,
)
from app.services.query.pipeline import answer, item, retrieve
from app.services.query.sizes import SearchSizes
from app.services.query.space_cache import SpaceCache, space_cache
from app.services.query.state import Vectors, scope

if TYPE_CHECKING:
    from app.adapters.cache import Admission, Cache
    from app.services.query.judge import QueryJudge
    from app.services.query.shards import ShardRouter
    from app.services.usage import UsageRecorder

# The package's name: operators (and tests) filter the query's warnings by it.
log = logging.getLogger("app.services.query")
audit = logging.getLogger("app.audit")


class QueryService:
    """The read path of the product. Holds no per-request state."""

    def __init__(
        self,
        engine: AsyncEngine,
        embeddings: EmbeddingService,
        cache: Cache,
        config: QueryConfig,
        slots: asyncio.Semaphore | None = None,
        usage: UsageRecorder | None = None,
        sizes: SearchSizes | None = None,
        judge: QueryJudge | None = None,
        router: ShardRouter | None = None,
        spaces: SpaceCache | None = None,
    ) -> None:
        # Its pool serves the query's read transactions (app/db.py, read_transaction).
        self.engine = engine
        self.embeddings = embeddings
        self.cache = cache
        self.config = config
        # Queries admitted to the database stage at once (each may hold two connections).
        self.slots = slots or asyncio.Semaphore(1_000_000)
        # Notes which memories each answer returned; written after it (app/services/usage.py).
        self.usage = usage
        # The relevance model fitted on this embedder's cosines (the default's when it has none:
        # model_for warns once).
        variant = config.preset.relevance_model if config is not None else ""
        self.relevance = model_for(embeddings.model, variant=variant)
        # The answer head trained on this embedder's vectors (None: it has none).
        self.head = head_for(embeddings.model)
        # The question-level abstention model over this embedder and relevance model (None:
        # it has none).
        self.question = question_model_for(embeddings.model, variant)
        # The pair model of newer wins on one topic over this embedder's cosines, when the
        # preset reads it (revision_threshold; None: it does not, or the embedder has none).
        self.revision = (
            revision_model_for(embeddings.model)
            if config is not None and config.preset.revision_threshold > 0.0
            else None
        )
        # The answer verifier, when the preset reads it (verify_depth; app/adapters/verifier.py).
        self.verifier = (
            verifier_for(embeddings.model)
            if config is not None and config.preset.verify_depth > 0
            else None
        )
        # Users' sizes from their last seconds of queries (sizes.py): the process's, shared by
        # every request's service, else this service's own.
        self.sizes = sizes if sizes is not None else SearchSizes(config.search_size_ttl_s)
        # The copies of small shared spaces (space_cache.py): the process's, else this
        # service's own (None: PGRECALL_SPACE_CACHE_MB=0).
        self.spaces = (
            spaces
            if spaces is not None
            else space_cache(
                config.space_cache_mb, config.space_copy_max_items, config.exact_search_max_items
            )
            if config is not None
            else None
        )
        # The optional LLM judge (judge.py; PGRECALL_JUDGE=llm), else None.
        self.judge = judge
        # On Citus: reads on the worker that holds each user's shards (shards.py), else None.
        self.router = router

    async def query(self, request: QueryRequest, *, correlation_id: str = "-") -> QueryResult:
        """Answer one query; never raises for database, Redis or embedder failures. The
        memories it returns get their usage stamped afterwards (with a UsageRecorder)."""
        result = await self._answer(request, correlation_id)
        if self.usage is not None:
            self.usage.answered(
                request.user_id,
                # the user's own memories: a shared space's are no user's to stamp
                (
                    uuid.UUID(i.id)
                    for i in result.items
                    if i.source_kind == "memory" and i.space is None
                ),
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
        if self.judge is not None:  # a judged answer is not the local ranking's
            key += ":judged"

        # One round trip: the rate limit, a cached answer, a cached vector of the query.
        admission = await self.cache.admit_query(
            request.user_id,
            self.config.rate_limit_per_minute,
            key,
            self.embeddings.model,
            core_question(query_text),  # the text whose vector is cached (`_embed`)
        )
        cached = admission.answer
        if not admission.decision.allowed:
            result = QueryResult.from_json(cached) if cached else QueryResult()
            result.rate_limited, result.cached = True, cached is not None
            return self._finish(request, result, started, correlation_id)

        if cached is not None:
            result = QueryResult.from_json(cached)
            result.cached = True
            return self._finish(request, result, started, correlation_id)

        result = await self._search(request, query_text, budget, preset, admission=admission)
        result.query_truncated = query_cut
        # Not a fallback answer either: the next identical query asks the judge again. Nor one
        # that read shared spaces: a grant revoked, or another member's write, counts at once.
        fresh = (
            result.error is None
            and result.degraded is None
            and result.judge != "fallback"
            and result.verifier != "fallback"
        )
        if fresh and not request.scope.spaces:
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

    async def _embed(
        self, query: str, admission: Admission | None = None
    ) -> tuple[Any | None, str | None, int]:
        """(vector, degraded flag, ms). A vector the admission found in the Redis cache is used
        as it is (EmbeddingService.embed asks the cache otherwise), so a cached query vector is
        used even when the embedder is down; after a miss the embedder's vector is cached."""
        t0 = time.perf_counter()
        if admission is not None and admission.vector is not None:
            return admission.vector, None, 0
        looked_up = admission is not None and admission.looked_up
        try:
            # Half of the query's time budget at most: the keyword fallback needs the rest.
            vectors = await asyncio.wait_for(
                self.embeddings.embed(
                    [query], priority=Priority.INTERACTIVE, read_cache=not looked_up
                ),
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
        *,
        admission: Admission | None = None,
    ) -> QueryResult:
        """The pipeline's stages (pipeline.py), in order, failing closed."""
        result = QueryResult()
        s = scope(
            request,
            query,
            preset,
            self.relevance,
            self.head,
            self.verifier,
            self.question,
            self.revision,
        )
        # 1. The query is embedded (in a worker thread) while the keyword arm runs in Postgres:
        # for a large store that hides most of the embedding time (docs/performance.md).
        embedding = (
            # Embedded without a frame addressed to the assistant (app/retrieval/frames.py).
            asyncio.create_task(self._embed(core_question(query), admission))
            if preset.use_vector
            else None
        )
        vectors = Vectors(
            self.engine, self.config, self.embeddings.model, self.sizes, self.router, self.spaces
        )
        # The shared spaces the request reads besides the user's memory: each is its own owner
        # (`space:<id>` rows), read signed as the user (row-level security checks the grant).
        spaces = request.scope.spaces
        shared = [
            scope(
                # a space holds memories only: no message arm, passages or neighbours
                replace(request, user_id=space_owner(space), sources=("memory",)),
                query,
                preset,
                self.relevance,
                self.head,
            )
            for space in spaces
        ]
        t0 = time.perf_counter()
        try:
            retrieved = await asyncio.wait_for(
                retrieve(s, embedding, vectors, self.slots, result, trace, shared),
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
        candidates, ranked = retrieved.candidates, retrieved.ranked
        # The optional LLM judge (judge.py): may lower or raise the first items' relevance;
        # falls back to this ranking on any failure, within its own deadline.
        confidence = retrieved.confidence  # the question model's (calibrate.question_confidence)
        if self.judge is not None:
            ranked = await self.judge.review(request, query, ranked, candidates, result)
            confidence = None  # the judge's relevance says it
        if confidence is None:
            confidence = max((r.relevance for r in ranked), default=0.0)
        result.confidence = round(confidence, 4)

        cut, packed = answer(s, ranked, candidates, budget)
        result.total_count = len(cut.kept)
        if trace is not None:
            trace.ranked, trace.candidates = ranked, candidates
            trace.kept = [r.key for r in cut.kept]
            trace.packed = {cut.top[p.index].key: p for p in packed.items}
        for p in packed.items:
            r = cut.top[p.index]
            newer = retrieved.newer.get(r.key)
            origin = retrieved.origin.get(r.key)
            space = spaces[origin - 1] if origin else None
            result.items.append(
                item(candidates[r.key], r, p.text, p.tokens, p.cut, newer, space=space)
            )
        result.token_count = packed.token_count
        result.truncated = packed.truncated or len(cut.kept) > request.limit
        return result

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
