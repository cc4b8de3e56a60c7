"""What a running pgrecall holds once (engine, sessions, Redis, the embedder) and how Settings
become it. Every door reads these; none constructs them itself."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.adapters.cache import Cache
from app.adapters.embedder import Embedder, build_embedder
from app.adapters.judge import JudgeLLM
from app.adapters.local_models import OnnxSentenceEmbedder
from app.adapters.verifier import verifier_for
from app.config import EmbeddingProvider, ExtractionMode, JudgeMode, Settings
from app.db import create_engine, create_sessionmaker
from app.embedding_models import OPTIONAL_LOCAL_MODELS
from app.roles import database_urls, prepare_database, read_scope_key, warn_unless_rls_binds
from app.runtime.query import query_config
from app.schemas.agent import SaveMemoryArgs, SaveMemoryResult
from app.services.agent_memory import AgentMemoryService
from app.services.api_keys import KeyAuthenticator
from app.services.embedding import EmbeddingService
from app.services.query import QueryConfig, QueryService
from app.services.query.judge import QueryJudge
from app.services.query.shards import ShardRouter
from app.services.query.sizes import SearchSizes
from app.services.query.space_cache import SpaceCache, space_cache
from app.services.reembed import other_models
from app.services.usage import UsageRecorder

log = logging.getLogger(__name__)
# The admin engine's connections (admin routes, console, extraction claims, start-up checks):
# each extraction worker's claim holds one briefly; admin requests are few.
ADMIN_POOL_SIZE = 4


@dataclass
class Resources:
    """Everything the process creates once and every request shares."""

    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    embeddings: EmbeddingService
    cache: Cache
    query_config: QueryConfig
    api_key: str | None
    admin_api_key: str | None
    session_messages: int
    # A query holds two connections at once (keyword and vector arms); admitting at most half
    # the pool's connections' worth of queries means none ever waits holding one (no deadlock).
    query_slots: asyncio.Semaphore
    # Bulk imports write one at a time: each parses millions of characters into postings in
    # its backend, and ten at once would take both cores from everyone's queries.
    bulk_writes: asyncio.Semaphore
    # Per-user API keys (table api_keys), looked up by hash through a short in-process cache.
    keys: KeyAuthenticator
    write_rate_limit_per_minute: int = 0
    # PGRECALL_MAX_ENTRIES_PER_USER: save_memory evicts beyond it (0 = no cap).
    max_entries_per_user: int = 0
    # Stamps the memories query_memory returned, after answering (None: not recorded).
    usage: UsageRecorder | None = None
    # Users' sizes from their last seconds of queries (app/services/query/sizes.py).
    search_sizes: SearchSizes | None = None
    # The process's copies of small shared spaces (app/services/query/space_cache.py).
    space_copies: SpaceCache | None = None
    # LLM extraction (PGRECALL_EXTRACTION=llm): stored user turns are queued for it. The
    # pipeline itself is the app's (app.main starts it), not a resource every door shares.
    extract_turns: bool = False
    # PGRECALL_EXTRACTION_DEFAULT: conversations without their own setting are extracted.
    extraction_default_on: bool = True
    # PGRECALL_EXTRACTION_SUMMARY_TOKENS: the rolling conversation summary's size (0: none).
    summary_tokens: int = 0
    # PGRECALL_MESSAGE_PASSAGES: the write paths embed messages' sentences too.
    message_passages: bool = True
    # PGRECALL_JUDGE=llm: the LLM judge of query_memory (its client closes with the resources).
    judge: QueryJudge | None = None
    # On Citus: the query path's reads on each user's worker (closes with the resources).
    shard_router: ShardRouter | None = None

    @property
    def extraction_default(self) -> bool | None:
        """Whether a conversation without its own setting is extracted; None: no model."""
        return self.extraction_default_on if self.extract_turns else None


def agent_memory_service(resources: Resources, session: AsyncSession) -> AgentMemoryService:
    """The agent write tools' service in `session`, with the process's write admission (rate
    limit, per-user cap)."""
    return AgentMemoryService(
        session,
        resources.embeddings,
        resources.cache,
        write_limit_per_minute=resources.write_rate_limit_per_minute,
        max_entries=resources.max_entries_per_user,
    )


async def save_memory_for(
    resources: Resources, session: AsyncSession, owner: str, args: SaveMemoryArgs
) -> SaveMemoryResult:
    """The save_memory tool's write of `args` for `owner`: the caller, or a shared space it may
    write (POST /v1/spaces/{id}/memories)."""
    saved = await agent_memory_service(resources, session).save(
        owner,
        args.content,
        args.type,
        importance=args.importance,
        expires_at=args.expires_at,
        supersedes=args.supersedes,
        tags=args.tags,
    )
    return saved.result()


def query_service(resources: Resources) -> QueryService:
    """The query service over the process's resources (its admission slots included)."""
    return QueryService(
        resources.engine,
        resources.embeddings,
        resources.cache,
        resources.query_config,
        slots=resources.query_slots,
        usage=resources.usage,
        sizes=resources.search_sizes,
        spaces=resources.space_copies,
        judge=resources.judge,
        router=resources.shard_router,
    )


def embedder_from_settings(settings: Settings) -> Embedder:
    optional = OPTIONAL_LOCAL_MODELS.get(settings.embedding_model)
    if settings.embedding_provider is EmbeddingProvider.LOCAL and optional is not None:
        # An opt-in local model (`make model-mpnet`), read from the model cache directory.
        return OnnxSentenceEmbedder(optional, threads=settings.embedding_threads)
    return build_embedder(
        settings.embedding_provider.value,
        model=settings.embedding_model,
        dimension=settings.embedding_dimension,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key.get_secret_value() if settings.openai_api_key else None,
        timeout_s=settings.embedding_timeout_s,
        threads=settings.embedding_threads,
    )


def judge_from_settings(settings: Settings, cache: Cache) -> QueryJudge | None:
    """The LLM judge (PGRECALL_JUDGE=llm) on its endpoint (Settings.judge_endpoint), else None."""
    if settings.judge != JudgeMode.LLM:
        return None
    llm = JudgeLLM(**asdict(settings.judge_endpoint), timeout_s=settings.judge_timeout_s)
    return QueryJudge(
        llm,
        cache,
        candidates=settings.judge_candidates,
        floor=settings.min_relevance,
        ttl_s=settings.judge_cache_ttl_s,
    )


def resources_from(
    settings: Settings,
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
    cache: Cache,
    *,
    query_slots: int | None = None,
) -> Resources:
    """Resources over an engine someone else opened (the CLI's, a test's); the engine is the
    sessionmaker's. `query_slots` defaults to the pool size, as the server's."""
    engine = sessionmaker.kw["bind"]
    return Resources(
        engine=engine,
        sessionmaker=sessionmaker,
        embeddings=embeddings,
        cache=cache,
        query_config=query_config(settings),
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        admin_api_key=settings.admin_api_key.get_secret_value() if settings.admin_api_key else None,
        session_messages=settings.session_messages,
        query_slots=asyncio.Semaphore(max(1, query_slots or settings.db_pool_size)),
        bulk_writes=asyncio.Semaphore(1),
        keys=KeyAuthenticator(sessionmaker, ttl_s=settings.key_cache_ttl_s),
        write_rate_limit_per_minute=settings.write_rate_limit_per_minute,
        max_entries_per_user=settings.max_entries_per_user,
        usage=UsageRecorder(sessionmaker),
        search_sizes=SearchSizes(settings.search_size_ttl_s),
        space_copies=space_cache(
            settings.space_cache_mb, settings.space_copy_max_items, settings.exact_search_max_items
        ),
        extract_turns=settings.extraction == ExtractionMode.LLM,
        extraction_default_on=settings.extraction_default,
        summary_tokens=(
            settings.extraction_summary_tokens if settings.extraction == ExtractionMode.LLM else 0
        ),
        message_passages=settings.message_passages,
        judge=judge_from_settings(settings, cache),
    )


async def warn_of_other_models(sessionmaker: async_sessionmaker[AsyncSession], model: str) -> None:
    """One log line at start-up when stored vectors come from another embedding model (an
    upgrade that changed the default model, or a changed setting): until `pgrecall reembed`
    moves them, those rows are found by their keywords only."""
    try:
        found = await other_models(sessionmaker, model)
    except (SQLAlchemyError, OSError) as exc:  # serving starts anyway; /ready reports the DB
        log.warning("could not check the stored vectors' models at start: %s", type(exc).__name__)
        return
    if found:
        where = "; ".join(f"{table}: {', '.join(sorted(m))}" for table, m in found.items())
        log.warning(
            "stored vectors of another embedding model (%s); the service embeds with %s and "
            "never compares the two, so those rows are found by keywords only until "
            "`pgrecall reembed` moves them (resumable)",
            where,
            model,
        )


@asynccontextmanager
async def open_resources(
    settings: Settings, *, embedder: Embedder | None = None
) -> AsyncIterator[Resources]:
    """Prepare the database (migrations, roles), open the engine, Redis and the embedder, and
    close them again. `embedder` (tests, eval) is used as given and left open."""
    urls = await asyncio.to_thread(database_urls, settings)
    # As the owner; requests run as the service role, admin work as the admin role, which
    # alone reads the key every user scope is signed with (app/roles.py).
    await prepare_database(urls, migrate=settings.migrate_on_start)
    timeout_ms = int(settings.query_timeout_s * 1000) + 3000
    admin_engine = create_engine(
        urls.admin_url, pool_size=ADMIN_POOL_SIZE, statement_timeout_ms=timeout_ms
    )
    try:
        scope_key = await read_scope_key(admin_engine)
    except BaseException:
        await admin_engine.dispose()
        raise
    engine = create_engine(
        urls.service,
        pool_size=settings.db_pool_size,
        statement_timeout_ms=timeout_ms,
        scope_key=scope_key,
    )
    cache = Cache.from_url(settings.redis_url)
    the_embedder: Embedder | None = None
    resources: Resources | None = None
    try:
        await warn_unless_rls_binds(engine)
        if not cache.enabled:
            log.info(
                "no PGRECALL_REDIS_URL: embedding cache, session cache and rate limits are off"
            )
        elif not await cache.ping():
            log.warning("Redis unreachable at start: serving without caches until it is back")
        the_embedder = embedder or await asyncio.to_thread(embedder_from_settings, settings)
        if not settings.auth_enabled:
            log.warning("no PGRECALL_API_KEY: authentication is off (listening on loopback only)")
        embeddings = EmbeddingService(the_embedder, cache if cache.enabled else None)
        sessionmaker = create_sessionmaker(engine, admin_engine)
        resources = resources_from(settings, sessionmaker, embeddings, cache)
        if settings.citus_direct_reads_ttl_s > 0:
            # Does nothing but on a Citus coordinator (one catalog read tells, at first query).
            resources.shard_router = ShardRouter(
                engine,
                pool_size=settings.db_pool_size,
                statement_timeout_ms=timeout_ms,
                ttl_s=settings.citus_direct_reads_ttl_s,
            )
        if resources.query_config.preset.verify_depth > 0:
            # A preset that reads the answer verifier does not start without it: a clear
            # LocalModelMissingError now, not a failing query later (loaded once per process).
            await asyncio.to_thread(verifier_for, the_embedder.model)
        await warn_of_other_models(resources.sessionmaker, the_embedder.model)
        yield resources
    finally:
        if resources is not None and resources.usage is not None:
            await resources.usage.drain()  # the usage data of answers already given
        if resources is not None and resources.judge is not None:
            await resources.judge.aclose()
        if resources is not None and resources.shard_router is not None:
            await resources.shard_router.close()
        if resources is not None and resources.space_copies is not None:
            await resources.space_copies.aclose()  # the copies being read
        await cache.aclose()
        close = getattr(the_embedder, "aclose", None)
        if close is not None and embedder is None:
            await close()
        await engine.dispose()
        await admin_engine.dispose()
