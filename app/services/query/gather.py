"""Stages 2 to 4, the database stages, in one read transaction: the arms, the fusion, the
context, and the stored vectors the later stages read (`gather`); with shared spaces, the user's
and the spaces' at once, ranked as one set (`gather_shared`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
import weakref
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.db import read_transaction
from app.repositories.retrieval import KeywordHits, RetrievalRepository, SearchSize
from app.repositories.retrieval.common import Candidate, TimeFilter
from app.repositories.retrieval.shared import SpaceRows
from app.repositories.search_index import Source
from app.retrieval.relevance import features
from app.retrieval.scoring import Ranked
from app.services.query import space_cache
from app.services.query.arms import (
    SearchPath,
    arms,
    fuse,
    path_settings,
    planned_settings,
    size_cap,
)
from app.services.query.calibrate import item_vectors
from app.services.query.context import context, context_depth
from app.services.query.model import QueryConfig, QueryResult, QueryTrace
from app.services.query.space_cache import Scoring, SpaceCopy, Version
from app.services.query.state import (
    ArmHits,
    Embedding,
    Gathered,
    Jointly,
    Key,
    Rows,
    Scope,
    Stored,
    Vectors,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.domain import MemoryScope


# A query's second connection (`gather_shared`): the slot the query holds covers it.
NO_SLOT: AbstractAsyncContextManager[None] = contextlib.nullcontext()


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
    route = await vectors.route(user_id)
    async with slots, read_transaction(vectors.engine, s.request.scope, settings, route) as reads:
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
                bool(s.names),
                s.relevance.neutral_cosine_z,
            )
    return Gathered(hits, rows, stored)


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

        copied: Copied | None = None

        async def shared_arms() -> list[ArmHits]:
            nonlocal copied
            copied = await read_copies(repo, spaces[0], owners, vectors, split)
            hits = await copied_arms(spaces[0], copied, embedding, vectors.model)
            rest = [n for n in range(len(owners)) if n not in hits]
            if rest:
                read = [owners[n] for n in rest]
                sizes = [items[n] for n in rest] if settings is not None else []
                if settings is None:
                    sizes = await space_sizes(repo, read, vectors, split)
                    await repo.set_vector_search(space_settings(sizes, vectors.config, split))
                found = await space_arms(repo, spaces[0], read, sizes, embedding, vectors, split)
                hits |= dict(zip(rest, found, strict=True))
            return [hits[n] for n in range(len(owners))]

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
            asked = [k[1] for k in vector_keys(s, ranked) if k in origin]
            fetched = copied_rows(copied, wanted, asked, s.request.when)
            for n in copied.copies if copied is not None else ():
                wanted[n] = []  # read from its copy
            more = await repo.rows_each(owners, wanted, asked, when=s.request.when, split=split)
            fetched = SpaceRows(
                fetched.candidates | more.candidates, fetched.vectors | more.vectors
            )
            user = await own
        finally:
            await stopped(own, shared)
    rows = user.rows
    candidates = rows.candidates | fetched.candidates
    keep = [r.key for r in rows.ranked[: context_depth(s)]]
    rows = Rows(
        rows.ranked,
        {k: candidates[k] for k in keep if k in candidates},
        rows.neighbours,
        rows.vectors,
    )
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
        "names": p.names,
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


@dataclass(frozen=True)
class Copied:
    """The copies of the spaces a query reads from memory (`n`: the space's place in the
    request), the query's lexemes and its names', and the transaction's now()."""

    copies: dict[int, SpaceCopy]
    lexemes: list[str]
    names: list[str]
    now: datetime


async def read_copies(
    repo: RetrievalRepository, p: Scope, owners: Sequence[str], vectors: Vectors, split: bool
) -> Copied | None:
    """The copies of the spaces of `owners` the signed user reads, where the cache holds the
    space's version; a space the cache takes but holds no copy of (none yet, or a write moved
    its version) is read again in the background (space_cache.py). None without a cache, on
    Citus (each space's statements route to its own shard there) and in `own` mode.

    A copy holds the rows every member reads: a space's memories belong to no agent or run
    (migration 0024's CHECK), and the policies' scope match shows such a row to every request
    but one in `own` mode."""
    cache, scope = vectors.spaces, p.request.scope
    # A request for an agent's (run's) own memory reads no space's row (the policies' scope
    # match hides the unscoped rows every space holds): its statements decide, and find none.
    if cache is None or split or scope.own:
        return None
    lexemes, names, now, found = await repo.space_versions(owners, p.query, " ".join(p.names))
    copies: dict[int, SpaceCopy] = {}
    for r in found:
        stamp = Version(int(r["version"]), int(r["doc_count"] or 0), float(r["total_length"]))
        # Version 0: a row no trigger versions (migration 0024's are not made on Citus).
        if stamp.version == 0 or not cache.takes(stamp):
            continue
        n = r["owner"]
        copy = cache.get(owners[n], stamp)
        if copy is None:
            load = functools.partial(read_copy, vectors.engine, scope, owners[n], stamp)
            cache.refresh(owners[n], load)
            continue  # read by its statements this time
        copies[n] = copy
    return Copied(copies, lexemes, names, now)


async def read_copy(
    engine: AsyncEngine, scope: MemoryScope, owner: str, stamp: Version
) -> SpaceCopy:
    """A space's copy, read in a transaction of its own signed as the query's user (row-level
    security: the user reads the space; every member reads the same rows, migration 0024), and
    built in a worker thread (read and built: 31 ms for 300 memories, 1 s for 9,000:
    docs/agents.md).
    The stamp is the one the query read before: what is read is as new or newer, and a newer
    write has moved the version, so the copy is read again at the next query."""
    async with read_transaction(engine, scope) as reads:
        repo = RetrievalRepository(reads)
        items, postings = await repo.space_items(owner), await repo.space_postings(owner)
    return await asyncio.to_thread(SpaceCopy.build, owner, stamp, items, postings)


async def copied_arms(
    p: Scope, copied: Copied | None, embedding: Embedding | None, model: str
) -> dict[int, ArmHits]:
    """`space_arms` over the copied spaces, each over its own corpus, as its statements would
    (space_cache.py)."""
    if copied is None or not copied.copies:
        return {}
    request, preset = p.request, p.preset
    scoring = Scoring(preset.bm25_k1, preset.bm25_b, p.n, copied.lexemes, frozenset(copied.names))
    vector = (await embedding)[0] if embedding is not None else None
    hits: dict[int, ArmHits] = {}
    for n, copy in copied.copies.items():
        mask = copy.visible(copied.now, request.when, request.types, request.tag_filter)
        keyword = KeywordHits({}, 0.0)
        if preset.use_keyword:
            keyword = space_cache.keyword(copy, scoring, mask)
        if preset.use_keyword and preset.prf_docs > 0 and keyword.scores:
            ordered = sorted(keyword.scores, key=lambda key: -keyword.scores[key])
            seeds = [i for _, i in ordered[: preset.prf_docs]]
            more = space_cache.expansion(
                copy, scoring, mask, seeds, terms=preset.prf_terms, min_df=preset.prf_min_df
            )
            keyword = KeywordHits(keyword.scores, keyword.max_score, more, keyword.plain)
        cosines = {} if vector is None else space_cache.nearest(copy, vector, model, p.n, mask)
        hits[n] = ArmHits(keyword, cosines)
    return hits


def copied_rows(
    copied: Copied | None,
    wanted: Sequence[Sequence[uuid.UUID]],
    vectors: Sequence[uuid.UUID],
    when: TimeFilter,
) -> SpaceRows:
    """`rows_each` over the copied spaces: the rows of their candidates `wanted[n]` still
    visible, and the stored vectors of those in `vectors`."""
    candidates: dict[Key, Candidate] = {}
    stored: dict[Key, Any] = {}
    if copied is None:
        return SpaceRows(candidates, stored)
    for n, copy in copied.copies.items():
        rows, kept = space_cache.rows(copy, wanted[n], vectors, copy.visible(copied.now, when))
        candidates |= rows
        stored |= kept
    return SpaceRows(candidates, stored)


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
