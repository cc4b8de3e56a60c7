"""Stage 2, the arms: keyword (BM25 + PRF) and vector (exact or ANN) candidates, and the
search path a user's size picks; stage 3, their fusion into one ranking."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from app.db import read_transaction
from app.repositories.retrieval import (
    KeywordHits,
    RetrievalRepository,
    SearchSize,
    vector_search_settings,
)
from app.repositories.search_index import Source
from app.retrieval.scoring import Ranked, rank
from app.services.query.model import QueryConfig, QueryResult, ann_probes
from app.services.query.state import ArmHits, Embedding, Key, Scope, Vectors


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
        "names": s.names,
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
    route = await vectors.route(s.request.user_id)
    async with read_transaction(vectors.engine, s.request.scope, settings, route) as reads:
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
        plain=k.plain, model=s.relevance, has_names=bool(s.names),
        memories={key for key in (*k.scores, *hits.cosines) if key[0] is Source.MEMORY},
    )  # fmt: skip
