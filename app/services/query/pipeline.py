"""The query pipeline: every stage of query_memory, in the order it runs.

    retrieve (under the query's time limit; the first four on the user's connection(s)):
      1. embed       the query vector (started by the service, in a worker thread)
      2. arms        keyword (BM25 + PRF) and vector (exact or ANN) candidates
      3. fuse        both arms' scores into one ranking (app/retrieval/scoring.rank)
      4. context     the rows of the first `depth` items and the turns around the seed
                     messages; neighbours raised (propagate)
      5. rerank      the stages that read the rows (app/retrieval/rerank.py)
      6. calibrate   relevance and recency (app/retrieval/scoring.finalise); with a preset
                     that reads it (`verified`), the answer verifier's probability for the
                     first candidates (`verify`); then newer wins on one topic
                     (app/retrieval/topics.py: the pair cosines of the first memories are read
                     with the context)
    answer:
      7. floor_and_cut  the score floor and relative cutoff, then the request's limit
      8. pack_items     the token budget (app/retrieval/budget.pack)

Each stage is a small function with a typed input and output; the arithmetic lives in the pure
modules of app/retrieval. QueryService (service.py) runs `retrieve` and `answer` and turns
failures into degraded or empty answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import weakref
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from app.db import read_transaction
from app.errors import EmbeddingError
from app.repositories.retrieval import (
    Candidate,
    KeywordHits,
    RetrievalRepository,
    SearchSize,
    vector_search_settings,
)
from app.repositories.search_index import Source
from app.retrieval.abstention import DEPTH as QUESTION_DEPTH
from app.retrieval.abstention import QuestionModel, question_features, rescaled
from app.retrieval.answer_head import AnswerHead
from app.retrieval.budget import PackResult, pack
from app.retrieval.dates import TimeWindow, parse_time_expression
from app.retrieval.names import query_names
from app.retrieval.phatic import acknowledges
from app.retrieval.presets import RetrievalPreset
from app.retrieval.relevance import SPEC_FLOOR, RelevanceModel, features
from app.retrieval.rerank import rerank
from app.retrieval.scoring import (
    Ranked,
    apply_thresholds,
    finalise,
    own_first,
    propagate,
    rank,
)
from app.retrieval.topics import Linked, link_topics
from app.retrieval.verdicts import apply_verified
from app.services.query.model import (
    QueryConfig,
    QueryItem,
    QueryRequest,
    QueryResult,
    QueryTrace,
    ann_probes,
)
from app.services.query.sizes import SearchSizes

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.adapters.verifier import Verifier

# The query package's logger: operators filter the query's warnings by it.
log = logging.getLogger("app.services.query")

Key = tuple[Source, Any]
Embedding = asyncio.Task[tuple[Any | None, str | None, int]]
# How the user's arms' hits become the ranking its context stage reads (`gather`): the hits
# of every owner the query reads, and their ranking.
Jointly = Callable[["ArmHits"], Awaitable[tuple["ArmHits", list[Ranked[Key]]]]]
# A query's second connection (`gather_shared`): the slot the query holds covers it.
NO_SLOT: AbstractAsyncContextManager[None] = contextlib.nullcontext()


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


@dataclass(frozen=True)
class Vectors:
    """How the vector arm runs: the service's planner settings, the embedding model and the
    users' recent sizes (sizes.py)."""

    engine: AsyncEngine  # its pool serves the read transactions (app/db.py)
    config: QueryConfig
    model: str
    sizes: SearchSizes


@dataclass(frozen=True)
class ArmHits:
    keyword: KeywordHits
    cosines: dict[Key, float]


@dataclass(frozen=True)
class Rows:
    """The ranking after the context stage, the fetched rows it can still be cut to, and the
    seed messages' (previous, next) turns."""

    ranked: list[Ranked[Key]]
    candidates: dict[Key, Candidate]
    neighbours: dict[Key, tuple[Any, Any]]


@dataclass(frozen=True)
class Retrieved:
    """What `retrieve` hands the answer: the rows, the calibrated ranking, and for each
    possibly outdated memory the newer memory of its topic (app/retrieval/topics.py)."""

    candidates: dict[Key, Candidate]
    ranked: list[Ranked[Key]]
    newer: dict[Key, Key]
    # the shared space (1: the first the request named) of each candidate from one
    origin: dict[Key, int] = field(default_factory=dict)


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
    )


async def retrieve(
    s: Scope,
    embedding: Embedding | None,
    vectors: Vectors,
    slots: asyncio.Semaphore,
    result: QueryResult,
    trace: QueryTrace | None = None,
    spaces: Sequence[Scope] = (),
) -> Retrieved:
    """Stages 2 to 6: the rows and the calibrated ranking. `spaces`: the scopes of the shared
    spaces the request reads besides (the same request, owned by `space:<id>`): their
    candidates are ranked with the user's as one set (`gather_shared`), so a shared memory
    stands on the same relevance scale as the user's own."""
    if not spaces:
        gathered = await gather(s, embedding, vectors, slots, result, trace)
    else:
        gathered = await gather_shared(s, spaces, embedding, vectors, slots, result, trace)
    if s.verifier is None:
        return ranking(s, gathered, trace)
    ranked = scored(s, gathered, trace)
    verified = await verify(s, ranked, gathered, result)
    return linked(s, gathered, apply_verified(ranked, verified))


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


async def gather(
    s: Scope,
    embedding: Embedding | None,
    vectors: Vectors,
    slots: AbstractAsyncContextManager[Any],
    result: QueryResult,
    trace: QueryTrace | None = None,
    jointly: Jointly | None = None,
) -> Gathered:
    """Stages 2 to 4 for the request's user. `jointly`: how its arms' hits become the ranking
    the context stage reads, when shared spaces are read besides (`gather_shared`): the hits
    of all, fused as one; else they are fused alone."""
    user_id = s.request.user_id
    # A size seen a few seconds ago skips search_size: its plans and the vector statement's
    # settings are made with the user, at the transaction's start.
    known = vectors.sizes.get(user_id, size_cap(s, vectors)) if embedding is not None else None
    settings = planned_settings(known, vectors) if known is not None else None
    # Both connections carry the request's user: row-level security backs up the predicates.
    # The transaction runs through the driver (app/db.py, ReadTransaction).
    async with slots, read_transaction(vectors.engine, s.request.scope, settings) as reads:
        repo = RetrievalRepository(reads)
        hits = await arms(repo, s, embedding, vectors, result, known)
        if jointly is None:
            ranked = fuse(s, hits)
        else:
            hits, ranked = await jointly(hits)
        rows = await context(repo, s, ranked)
        stored = await item_vectors(repo, s, rows, embedding)
        if trace is not None:
            trace.bm25, trace.cosine = hits.keyword.scores, hits.cosines
            trace.features = features(
                hits.keyword.scores,
                hits.keyword.plain or {},
                hits.keyword.max_score,
                hits.cosines,
                bool(query_names(s.query)),
                s.relevance.neutral_cosine_z,
            )
    return Gathered(hits, rows, stored)


def ranking(s: Scope, gathered: Gathered, trace: QueryTrace | None = None) -> Retrieved:
    """Stages 5 and 6 over what the database stages found: the answer head, the rerank, the
    calibration, newer wins on one topic."""
    return linked(s, gathered, scored(s, gathered, trace))


def scored(s: Scope, gathered: Gathered, trace: QueryTrace | None = None) -> list[Ranked[Key]]:
    """The answer head, the rerank and the calibration."""
    rows, stored = gathered.rows, gathered.stored
    head = answer_logits(s, stored)
    if trace is not None:
        trace.head = head
    rows = replace(rows, ranked=with_answer_head(s, rows.ranked, head))
    ranked = calibrate(s, rerank_rows(s, rows), rows.candidates)
    return answerable(s, ranked, gathered.hits, head)


def answerable(
    s: Scope, ranked: list[Ranked[Key]], hits: ArmHits, head: dict[Key, float]
) -> list[Ranked[Key]]:
    """The question model (app/retrieval/abstention.py; a preset with `question_model`): the
    best item's relevance becomes P(the store answers the question) on the spec's scale (with
    `question_caps`, at most its own), every other item's stays in its ratio to the best. The
    order is unchanged. Not for a question without a vector (keyword only) or one whose vector
    arm found fewer than QUESTION_DEPTH items, unlike those it was fitted on."""
    model = s.question  # None unless the preset reads it (`scope`)
    if model is None or not ranked:
        return ranked
    if len(hits.cosines) < QUESTION_DEPTH:
        # Keyword only (no query vector), or a store of fewer items than the candidates it
        # reads: fitted on stores of ~40 memories, it has not learned what a best cosine's
        # standing among a handful of items says.
        return ranked
    has_names = bool(query_names(s.query))
    by_key = features(
        hits.keyword.scores,
        hits.keyword.plain or {},
        hits.keyword.max_score,
        hits.cosines,
        has_names,
        s.relevance.neutral_cosine_z,
    )
    first = [r.key for r in ranked if r.key in by_key][:QUESTION_DEPTH]
    if not first:
        return ranked
    x = question_features(
        [s.relevance.logit(by_key[k], k[0] is Source.MEMORY) for k in first],
        [by_key[k] for k in first],
        [head[k] for k in first if k in head],
    )
    reported = model.relevance(model.probability(x))
    if s.preset.question_caps:  # it may only lower the best (abstain), not raise it
        reported = min(reported, max(r.relevance for r in ranked))
    relevances = rescaled([r.relevance for r in ranked], reported)
    return [
        replace(r, relevance=v, fused=r.fused * v / r.relevance if r.relevance > 0 else r.fused)
        for r, v in zip(ranked, relevances, strict=True)
    ]


def linked(s: Scope, gathered: Gathered, ranked: list[Ranked[Key]]) -> Retrieved:
    """Newer wins on one topic; the user's own first on a tie."""
    candidates = gathered.rows.candidates
    topics = newer_wins(s, ranked, candidates, topic_pairs(s, ranked, gathered.stored.items))
    ranked = own_first(topics.ranked, gathered.origin)
    return Retrieved(candidates, ranked, topics.newer, gathered.origin)


async def verify(
    s: Scope, ranked: list[Ranked[Key]], gathered: Gathered, result: QueryResult
) -> dict[Key, float]:
    """The answer verifier's probability for each of the first `verify_depth` candidates with a
    row and a stored vector (its second input is the pair's cosine). Nothing when the query has
    no vector (keyword only) or the verifier fails: the calibrated ranking then stands, and the
    result says `verifier = "fallback"`."""
    verifier, stored = s.verifier, gathered.stored
    if verifier is None or stored.query is None:
        return {}
    candidates = gathered.rows.candidates
    keys = [r.key for r in ranked if r.key in candidates and r.key in stored.items]
    keys = keys[: s.preset.verify_depth]
    if not keys:
        return {}
    query = np.asarray(stored.query, dtype=np.float32)
    cosines = [float(np.dot(query, np.asarray(stored.items[k], dtype=np.float32))) for k in keys]
    try:
        logits = await verifier.logits(s.query, [candidates[k].content for k in keys], cosines)
    except EmbeddingError as exc:
        log.warning("answer verifier failed (%s): the calibrated ranking stands", exc)
        result.verifier = "fallback"
        return {}
    result.verifier = "local"
    return dict(zip(keys, verifier.probabilities(logits).tolist(), strict=True))


async def gather_shared(
    s: Scope,
    spaces: Sequence[Scope],
    embedding: Embedding | None,
    vectors: Vectors,
    slots: asyncio.Semaphore,
    result: QueryResult,
    trace: QueryTrace | None = None,
) -> Gathered:
    """Stages 2 to 4 for the user and the shared spaces it reads, at once: the user's on its
    own connection (`gather`; the query holds one slot for both), the spaces' on this one,
    with one statement per stage for all of them (app/repositories/retrieval/shared.py; one
    per space on Citus, where each statement then routes to its space's shard). Once both
    arms are in, the candidates are fused once, as one set (`joint`); then the user's context
    stage and the read of the spaces' candidates that can make the cut (their rows and stored
    vectors, one statement) run at once."""
    owners = [p.request.user_id for p in spaces]
    known = [vectors.sizes.get(owner, 0) for owner in owners]
    items = [size.items for size in known if size is not None]
    citus = _CITUS.get(vectors.engine)
    settings = space_settings(items, vectors.config, citus) if len(items) == len(owners) else None
    async with slots, read_transaction(vectors.engine, s.request.scope, settings) as reads:
        repo = RetrievalRepository(reads)
        split = await on_citus(repo, vectors.engine)

        async def shared_arms() -> list[ArmHits]:
            sizes = items
            if settings is None:
                sizes = await space_sizes(repo, owners, vectors, split)
                await repo.set_vector_search(space_settings(sizes, vectors.config, split))
            return await space_arms(repo, spaces[0], owners, sizes, embedding, vectors, split)

        fused: asyncio.Future[tuple[list[Ranked[Key]], dict[Key, int]]]
        fused = asyncio.get_running_loop().create_future()
        shared = asyncio.ensure_future(shared_arms())

        async def jointly(hits: ArmHits) -> tuple[ArmHits, list[Ranked[Key]]]:
            ranked, merged, origin = joint(s, hits, await shared)
            fused.set_result((ranked, origin))
            return merged, ranked

        own = asyncio.ensure_future(gather(s, embedding, vectors, NO_SLOT, result, trace, jointly))
        try:
            await asyncio.wait((own, fused), return_when=asyncio.FIRST_COMPLETED)
            if not fused.done():
                await own  # failed before the joint ranking: its error is the query's
            ranked, origin = fused.result()
            keep = [r.key for r in ranked[: context_depth(s)]]
            wanted = [[k[1] for k in keep if origin.get(k) == n + 1] for n in range(len(owners))]
            fetched = await repo.rows_each(
                owners, wanted, [k[1] for k in vector_keys(s, ranked) if k in origin],
                when=s.request.when, split=split,
            )  # fmt: skip
            user = await own
        finally:
            await stopped(own, shared)
    rows = user.rows
    candidates = rows.candidates | fetched.candidates
    keep = [r.key for r in rows.ranked[: context_depth(s)]]
    rows = Rows(rows.ranked, {k: candidates[k] for k in keep if k in candidates}, rows.neighbours)
    stored = user.stored.items | fetched.vectors
    query = user.stored.query
    scored = [r.key for r in rows.ranked if r.key in rows.candidates and r.key in stored]
    depth = s.preset.answer_depth if s.head is not None and query is not None else 0
    return Gathered(user.hits, rows, Stored(query, stored, scored[:depth]), origin)


async def stopped(*tasks: asyncio.Future[Any]) -> None:
    """Cancel the tasks that are still running and wait until they are done."""
    for task in tasks:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def vector_keys(s: Scope, ranked: list[Ranked[Key]]) -> set[Key]:
    """The candidates whose stored vectors the later stages may read (`item_vectors`): the
    first `answer_depth` (when the answer head is on) and the first `topic_depth` memories
    (when topics are linked)."""
    keys: set[Key] = set()
    if s.head is not None and s.preset.answer_depth > 0:
        keys |= {r.key for r in ranked[: s.preset.answer_depth]}
    if s.preset.links_topics and s.memories:
        memories = [r.key for r in ranked if r.key[0] is Source.MEMORY]
        keys |= set(memories[: s.preset.topic_depth])
    return keys


# The engines whose database runs Citus (read once per engine by the first query of spaces).
_CITUS: weakref.WeakKeyDictionary[AsyncEngine, bool] = weakref.WeakKeyDictionary()


async def on_citus(repo: RetrievalRepository, engine: AsyncEngine) -> bool:
    """Whether `engine`'s database is a Citus cluster (asked once per engine)."""
    known = _CITUS.get(engine)
    if known is None:
        known = _CITUS[engine] = await repo.citus_loaded()
    return known


async def space_arms(
    repo: RetrievalRepository,
    p: Scope,
    owners: Sequence[str],
    items: Sequence[int],
    embedding: Embedding | None,
    vectors: Vectors,
    split: bool,
) -> list[ArmHits]:
    """Both arms over the spaces' memories (`p`: the first space's scope; the others differ
    only by owner), each space over its own corpus: its BM25 statistics and PRF seeds, exact
    or ANN search by its own size (`items`)."""
    request, preset = p.request, p.preset
    arm: dict[str, Any] = {
        "limit": p.n,
        "memories": True,
        "messages": False,
        "types": request.types,
        "tags": request.tag_filter,
        "k1": preset.bm25_k1,
        "b": preset.bm25_b,
        "when": request.when,
        "names": query_names(p.query),
    }
    keyword = [KeywordHits({}, 0.0) for _ in owners]
    if preset.use_keyword:
        keyword = await repo.keyword_each(owners, p.query, split=split, **arm)
    if preset.use_keyword and preset.prf_docs > 0 and any(k.scores for k in keyword):
        seeds = [
            [i for _, i in sorted(k.scores, key=lambda key: -k.scores[key])[: preset.prf_docs]]
            for k in keyword
        ]
        more = await repo.keyword_each(
            owners, p.query, seeds, terms=preset.prf_terms, min_df=preset.prf_min_df,
            split=split, **arm,
        )  # fmt: skip
        keyword = [
            KeywordHits(k.scores, k.max_score, e.scores if k.scores else None, k.plain)
            for k, e in zip(keyword, more, strict=True)
        ]
    cosines: list[dict[Key, float]] = [{} for _ in owners]
    vector = (await embedding)[0] if embedding is not None else None
    if vector is not None:
        exact = [n <= vectors.config.exact_search_max_items for n in items]
        cosines = await repo.vector_each(
            owners, vector, exact=exact, limit=p.n, model=vectors.model,
            types=request.types, tags=request.tag_filter, when=request.when, split=split,
        )  # fmt: skip
    return [ArmHits(k, c) for k, c in zip(keyword, cosines, strict=True)]


def space_settings(items: Sequence[int], config: QueryConfig, citus: bool | None) -> dict[str, str]:
    """The planner settings of the spaces' transaction, as a user's of their size
    (planned_settings): generic plans when every space is small (never on Citus, nor before
    the server is known not to run it), the vector statement's settings of the exact path when
    every space is on it, else the ANN path's for the biggest."""
    biggest = max(items, default=0)
    generic = citus is False and biggest <= config.generic_plan_max_items
    settings = {"plan_cache_mode": "force_generic_plan"} if generic else {}
    exact = biggest <= config.exact_search_max_items
    return settings | path_settings(SearchPath(biggest, exact, False), config)


async def space_sizes(
    repo: RetrievalRepository, owners: Sequence[str], vectors: Vectors, split: bool
) -> list[int]:
    """Each space's items, from the sizes of the last seconds (sizes.py) or read now."""
    items: dict[str, int] = {}
    for owner in owners:
        size = vectors.sizes.get(owner, 0)
        if size is not None:
            items[owner] = size.items
    missing = [owner for owner in owners if owner not in items]
    if missing:
        for owner, n in zip(missing, await repo.sizes(missing, split=split), strict=True):
            vectors.sizes.put(owner, 0, SearchSize(n, 0, False))
            items[owner] = n
    return [items[owner] for owner in owners]


def joint(
    s: Scope, user: ArmHits, spaces: Sequence[ArmHits]
) -> tuple[list[Ranked[Key]], ArmHits, dict[Key, int]]:
    """The user's candidates and the shared spaces' as one ranking: the arms' hits merged,
    each owner's keyword scores put on one scale (BM25 of its own corpus over that corpus'
    ideal score, times the largest ideal score), fused once. Also the merged hits, and which
    space (1: the first the request named) each space candidate came from."""
    parts = [user, *spaces]
    ideal = max((p.keyword.max_score for p in parts), default=0.0)
    scores: dict[Key, float] = {}
    plain: dict[Key, float] = {}
    expansion: dict[Key, float] = {}
    cosines: dict[Key, float] = {}
    origin: dict[Key, int] = {}
    for n, part in enumerate(parts):
        k = part.keyword
        if n:
            origin |= {key: n for key in (*k.scores, *part.cosines) if key not in origin}
        factor = ideal / k.max_score if k.max_score > 0 else 0.0
        scores |= {key: v * factor for key, v in k.scores.items()}
        plain |= {key: v * factor for key, v in (k.plain or {}).items()}
        expansion |= {key: v * factor for key, v in (k.expansion or {}).items()}
        cosines |= part.cosines
    hits = ArmHits(KeywordHits(scores, ideal, expansion or None, plain), cosines)
    return fuse(s, hits), hits, origin


def answer(
    s: Scope, ranked: list[Ranked[Key]], candidates: dict[Key, Candidate], budget: int
) -> tuple[Cut, PackResult]:
    """Stages 7 and 8: what the agent gets of the calibrated ranking."""
    cut = floor_and_cut(s, ranked, candidates)
    return cut, pack_items(cut, candidates, budget)


# -- 2. arms ------------------------------------------------------------------------------------


def size_cap(s: Scope, vectors: Vectors) -> int:
    """How far search_size counts passages: past the exact threshold, when passages score."""
    passages = s.messages and s.preset.passage_weight > 0
    return vectors.config.exact_search_max_items + 1 if passages else 0


@dataclass(frozen=True)
class SearchPath:
    """How a user of this size is searched (arms says why)."""

    items: int
    # At most the threshold: the vector statement runs on the request's connection and scores
    # every vector of the user, but for the sources in `indexed`. Above it: ANN on its own.
    exact: bool
    rescore: bool  # on the exact path: passages re-score the messages found exactly
    # On the exact path: the sources whose table holds an index of the user's own (an HNSW
    # index `pgrecall reindex` built for a user of several thousand items): read through it.
    indexed: frozenset[Source] = frozenset()

    @classmethod
    def of(cls, size: SearchSize, threshold: int) -> SearchPath:
        exact = size.items <= threshold
        indexed = size.indexed if exact else frozenset()
        rescore = size.items + size.passages > threshold and Source.MESSAGE not in indexed
        return cls(size.items, exact, rescore, indexed)


def path_settings(path: SearchPath, config: QueryConfig) -> dict[str, str]:
    """The vector statement's planner settings on this path (vector_search_settings)."""
    return vector_search_settings(
        exact=path.exact,
        probes=ann_probes(path.items, config.ivfflat_probes, config.ivfflat_probe_share),
        max_probes=config.ivfflat_max_probes,
        ef_search=config.hnsw_ef_search,
        max_scan_tuples=config.hnsw_max_scan_tuples,
        rescore_passages=path.rescore,
        indexed=bool(path.indexed),
    )


def planned_settings(known: SearchSize, vectors: Vectors) -> dict[str, str]:
    """The settings the request's transaction starts with for a user of a known size: its
    generic plans (search_size) and, on the exact path, the vector statement's (custom plans
    when it reads the user's own index: they override the generic ones)."""
    config = vectors.config
    path = SearchPath.of(known, config.exact_search_max_items)
    settings = {"plan_cache_mode": "force_generic_plan"} if known.generic_plans else {}
    if path.exact:
        settings |= path_settings(path, config)
    return settings


async def arms(
    repo: RetrievalRepository,
    s: Scope,
    embedding: Embedding | None,
    vectors: Vectors,
    result: QueryResult,
    known: SearchSize | None = None,
) -> ArmHits:
    """The user's size picks exact or ANN search. A big user's arms run at once on two
    connections: Postgres uses both cores, and the query pays max(keyword, embed + vector)
    instead of the sum. A user on the exact path (a few thousand items, a keyword arm that ends
    before the embedding) runs the vector statement on this connection: three round trips
    fewer (docs/performance.md).

    Passages: on the exact path every passage of the user is scored with the messages. A user
    whose items fit under the threshold but whose items and passages do not (5,520 turns and
    10,512 passages: 16,032 vectors, 19 ms of Postgres CPU per statement) keeps the exact
    search of the messages, and their passages re-score the messages found, as on the ANN path
    (4 ms; docs/performance.md, "Half the CPU per query").

    Own indexes: a user under the threshold whose messages (or memories) have an HNSW index of
    their own (`pgrecall reindex`, users of more than user_hnsw_min_items vectors) reads it on
    this connection instead of scoring each vector; the passages re-score the messages found
    (docs/performance.md, "An HNSW index of their own").

    `known`: the user's size from a query a few seconds ago (sizes.py), whose settings this
    transaction started with (planned_settings); else it is read now."""
    path = SearchPath(0, False, False)
    if embedding is not None:
        size = known
        if size is None:
            cap = size_cap(s, vectors)
            size = await repo.search_size(
                s.request.user_id, up_to=cap, generic_max=vectors.config.generic_plan_max_items
            )
            vectors.sizes.put(s.request.user_id, cap, size)
        path = SearchPath.of(size, vectors.config.exact_search_max_items)
    keyword = keyword_arm(repo, s)
    if path.exact:
        assert embedding is not None
        hits = await keyword
        cosines = await nearest(repo, s, embedding, vectors, result, path, known is not None)
    else:
        hits, cosines = await asyncio.gather(
            keyword, vector_arm(s, embedding, vectors, result, path.items)
        )
    return ArmHits(hits, cosines)


async def keyword_arm(repo: RetrievalRepository, s: Scope) -> KeywordHits:
    """BM25 candidates on the request's main connection."""
    request, preset = s.request, s.preset
    if not preset.use_keyword:
        return KeywordHits({}, 0.0)
    arm: dict[str, Any] = {
        "limit": s.n,
        "memories": s.memories,
        "messages": s.messages,
        "types": request.types,
        "tags": request.tag_filter,
        "k1": preset.bm25_k1,
        "b": preset.bm25_b,
        "when": request.when,
        "names": query_names(s.query),
    }
    hits = await repo.keyword(request.user_id, s.query, **arm)
    if preset.prf_docs <= 0 or not hits.scores:
        return hits
    seeds = sorted(hits.scores, key=lambda k: -hits.scores[k])[: preset.prf_docs]
    expansion = await repo.expansion(
        request.user_id,
        s.query,
        [i for _, i in seeds],
        terms=preset.prf_terms,
        min_df=preset.prf_min_df,
        **arm,
    )
    return KeywordHits(hits.scores, hits.max_score, expansion, hits.plain)


async def vector_arm(
    s: Scope, embedding: Embedding | None, vectors: Vectors, result: QueryResult, items: int
) -> dict[Key, float]:
    """ANN search on a connection of its own. Its planner settings are made with the user,
    while the query is still being embedded, so only the vector statement waits for it."""
    if embedding is None:
        return {}
    path = SearchPath(items, exact=False, rescore=False)
    settings = path_settings(path, vectors.config)
    async with read_transaction(vectors.engine, s.request.scope, settings) as reads:
        return await nearest(RetrievalRepository(reads), s, embedding, vectors, result, path, True)


async def nearest(
    repo: RetrievalRepository,
    s: Scope,
    embedding: Embedding,
    vectors: Vectors,
    result: QueryResult,
    path: SearchPath,
    planned: bool = False,
) -> dict[Key, float]:
    """The vector search on `repo`'s connection, once the query vector is there (stage 1 ends
    here: its degraded flag and time go to `result`). `planned`: the transaction started with
    the statement's settings (path_settings), else they are made here."""
    if not planned:
        await repo.set_vector_search(path_settings(path, vectors.config))
    vector, result.degraded, result.query_embedding_ms = await embedding
    if vector is None:
        return {}
    return await repo.vector(
        s.request.user_id,
        vector,
        limit=s.n,
        memories=s.memories,
        messages=s.messages,
        types=s.request.types,
        tags=s.request.tag_filter,
        exact=path.exact,
        model=vectors.model,
        when=s.request.when,
        passage_weight=s.preset.passage_weight,
        rescore_passages=path.rescore,
        indexed=path.indexed,
    )


# -- 3. fuse ------------------------------------------------------------------------------------


def fuse(s: Scope, hits: ArmHits) -> list[Ranked[Key]]:
    k = hits.keyword
    return rank(
        k.scores, k.max_score, hits.cosines, s.preset, k.expansion,
        plain=k.plain, model=s.relevance, has_names=bool(query_names(s.query)),
        memories={key for key in (*k.scores, *hits.cosines) if key[0] is Source.MEMORY},
    )  # fmt: skip


# -- 4. context ---------------------------------------------------------------------------------


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
            informative(neighbours, fetched),
            next_weight=preset.next_turn_weight,
            previous_weight=preset.previous_turn_weight,
        )
    keep = [r.key for r in ranked[:depth]]
    return Rows(ranked, {k: fetched[k] for k in keep if k in fetched}, neighbours)


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


# -- 5. rerank ----------------------------------------------------------------------------------


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


# -- 6. calibrate -------------------------------------------------------------------------------


def calibrate(
    s: Scope, ranked: list[Ranked[Key]], candidates: dict[Key, Candidate]
) -> list[Ranked[Key]]:
    """Relevance (the learned model or the preset's fusion) and the recency weight."""
    request = s.request
    now = request.as_of or datetime.now(UTC)
    ages = {k: (now - c.created_at).total_seconds() / 86400 for k, c in candidates.items()}
    weight = s.preset.recency_weight if request.recency is None else request.recency
    return finalise(ranked, s.preset, ages, weight, s.relevance)


@dataclass(frozen=True)
class Stored:
    """The query vector and the stored vectors of the first candidates (`item_vectors`)."""

    query: Any | None
    items: dict[Key, Any]
    scored: list[Key]  # the candidates the answer head scores, in ranking order


async def item_vectors(
    repo: RetrievalRepository, s: Scope, rows: Rows, embedding: Embedding | None
) -> Stored:
    """The stored vectors of the ranking's first `answer_depth` candidates with a row (the
    answer head's input) and of its first `topic_depth` memories (the topic links'), in one
    statement; nothing when neither stage is on or the query has no vector (keyword only)."""
    query = None
    if embedding is not None and embedding.done() and not embedding.cancelled():
        query = embedding.result()[0]
    preset = s.preset
    wanted: list[Key] = []
    if s.head is not None and preset.answer_depth > 0 and query is not None:
        wanted = [r.key for r in rows.ranked if r.key in rows.candidates][: preset.answer_depth]
    scored = list(wanted)
    if preset.links_topics and s.memories:
        memories = [r.key for r in rows.ranked if r.key[0] is Source.MEMORY]
        first = memories[: preset.topic_depth]
        if preset.topic_link <= 0.0:  # decisions alone: none to read unless two are here
            decisions = [k for k in first if _kind(rows.candidates, k) == DECISION]
            first = decisions if len(decisions) > 1 else []
        wanted += [k for k in first if k not in wanted]
    if not wanted:
        return Stored(query, {}, [])
    return Stored(query, await repo.vectors(s.request.user_id, wanted), scored)


def answer_logits(s: Scope, stored: Stored) -> dict[Key, float]:
    """The answer head's logit of each of the first candidates (app/retrieval/answer_head.py)."""
    if s.head is None or stored.query is None or s.preset.answer_depth <= 0:
        return {}
    keys = [k for k in stored.scored if k in stored.items]
    if not keys:
        return {}
    items = np.stack([stored.items[k] for k in keys])
    logits = s.head.logits(np.asarray(stored.query, dtype=np.float32), items)
    return {k: float(v) for k, v in zip(keys, logits, strict=True)}


def with_answer_head(
    s: Scope, ranked: list[Ranked[Key]], head: dict[Key, float]
) -> list[Ranked[Key]]:
    """Learned fusion: each candidate's odds x exp(head_weight x its head logit), the second
    half of the relevance model's logit (RelevanceModel.head_weight); a candidate past the
    head's depth counts as the lowest logit it gave. The ranking is re-sorted."""
    weight = s.relevance.head_weight
    if not head or weight == 0.0 or s.preset.fusion != "learned":
        return ranked
    floor = min(head.values())
    out = [replace(r, fused=r.fused * math.exp(weight * head.get(r.key, floor))) for r in ranked]
    out.sort(key=lambda r: (-r.fused, -r.relevance))
    return out


def topic_pairs(
    s: Scope, ranked: list[Ranked[Key]], vectors: dict[Key, Any]
) -> dict[tuple[Key, Key], float]:
    """The cosines between the stored vectors of the ranking's first `topic_depth` memories
    (none when the preset does not link topics)."""
    if not s.preset.links_topics or not s.memories:
        return {}
    keys = [r.key for r in ranked if r.key[0] is Source.MEMORY and r.key in vectors]
    keys = keys[: s.preset.topic_depth]
    return {
        (a, b): float(np.dot(vectors[a], vectors[b]))
        for i, a in enumerate(keys)
        for b in keys[i + 1 :]
    }


def newer_wins(
    s: Scope,
    ranked: list[Ranked[Key]],
    candidates: dict[Key, Candidate],
    pairs: dict[tuple[Key, Key], float],
) -> Linked[Key]:
    """Two memories of one topic: the newer ranks at least where the older stood, and the
    older is marked possibly outdated (app/retrieval/topics.py)."""
    linked_keys = {k for pair in pairs for k in pair}
    created = {k: candidates[k].created_at for k in linked_keys if k in candidates}
    # A decision is linked as one only when it would be returned on its own (its relevance at
    # the spec's floor): a newer decision on a neighbouring matter ("the worktop" for a
    # question about "the cabinets") is not lifted over the one that answers.
    relevance = {r.key: r.relevance for r in ranked}
    kinds = {
        k: _kind(candidates, k) if relevance.get(k, 0.0) >= SPEC_FLOOR else None
        for k in linked_keys
    }
    decisions = {DECISION: s.preset.decision_link} if s.preset.decision_link > 0.0 else {}
    return link_topics(ranked, created, pairs, s.preset.topic_link, kinds, decisions)


DECISION = "decision"


def _kind(candidates: dict[Key, Candidate], key: Key) -> str | None:
    """A memory's type (None for a turn, or an item without a row)."""
    candidate = candidates.get(key)
    return candidate.type if candidate is not None and key[0] is Source.MEMORY else None


# -- 7. floor and cut ---------------------------------------------------------------------------


def floor_and_cut(s: Scope, ranked: list[Ranked[Key]], candidates: dict[Key, Candidate]) -> Cut:
    request, preset = s.request, s.preset
    kept = apply_thresholds(
        ranked, request.min_score, preset.relative_cutoff, preset.cutoff_exempt_ranks
    )
    kept = [r for r in kept if r.key in candidates]  # malformed/vanished rows are skipped
    return Cut(kept, kept[: request.limit])


# -- 8. pack ------------------------------------------------------------------------------------


def pack_items(cut: Cut, candidates: dict[Key, Candidate], budget: int) -> PackResult:
    return pack([candidates[r.key].content for r in cut.top], budget)


def item(
    c: Candidate,
    r: Ranked[Key],
    text: str,
    tokens: int,
    cut: bool,
    newer: Key | None = None,
    *,
    space: str | None = None,
) -> QueryItem:
    """One packed item as the agent gets it (scores rounded to 4 places); `newer`: the newer
    memory of its topic, when it may be outdated; `space`: the shared space it lives in."""
    return QueryItem(
        id=str(c.id),
        source_kind="memory" if c.source is Source.MEMORY else "message",
        content=text,
        type=c.type or "message",
        relevance_score=round(r.relevance, 4),
        keyword_score=round(r.keyword, 4),
        semantic_score=round(r.semantic, 4),
        source=c.reference,
        created_at=c.created_at,
        importance=c.importance,
        role=c.role,
        conversation_id=str(c.conversation_id) if c.conversation_id else None,
        tokens=tokens,
        cut=cut,
        newer_id=str(newer[1]) if newer is not None else None,
        space=space,
    )
