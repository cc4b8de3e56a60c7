"""The shared spaces a query reads besides the user's memory (issue 43, docs/agents.md): each
stage's statement for every space at once.

A space is an owner of its own (`space:<id>` rows: its own keyword statistics, sizes and
plans), so each statement here is the user's statement of that stage once per space, as
UNION ALL branches tagged with the space's place in the list (`owner`): each branch keeps its
own statistics, LIMIT and order, so the result is the one a statement per space would give.
One round trip per stage instead of one per stage and space (`python -m bench.spaces`).

`split=True` sends one statement per space instead: on a Citus cluster each space is its own
distribution key, and a statement that names one routes to that space's shard alone
(docs/scaling.md). Row-level security decides which spaces the signed user reads
(`<table>_space_read`); a space it may not read has no rows here.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt

from app.repositories.retrieval.common import (
    NO_TIME_FILTER,
    SOURCES,
    Candidate,
    Row,
    SessionBound,
    TagFilter,
    TimeFilter,
    _scope_params,
)
from app.repositories.retrieval.context import MEMORY_COLUMNS, memory_candidate, memory_rows_sql
from app.repositories.retrieval.keyword import KeywordHits, KeywordScope, bm25_statement
from app.repositories.retrieval.vector import memory_vectors_sql, nearest_sql
from app.repositories.search_index import Source
from app.vectors import QUERY_VECTOR, decode_halfvec, query_vector, stored_vector

Key = tuple[Source, uuid.UUID]


def per_owner(sql: str, owners: Sequence[int], names: Sequence[str] = ()) -> str:
    """One owner's statement once per owner in `owners` (their places), as UNION ALL branches
    with the owner's place as the `owner` column; in branch n, `:user_id` and each of the
    owner's own parameters in `names` are `:<name>_<n>`. Made once per statement, places and
    names (a query of spaces sends a few kilobytes of SQL per stage)."""
    return _per_owner(sql, tuple(owners), tuple(names))


@functools.lru_cache(maxsize=128)
def _per_owner(sql: str, owners: tuple[int, ...], names: tuple[str, ...]) -> str:
    own = re.compile(rf":({'|'.join(('user_id', *names))})\b")
    branches = []
    for n in owners:
        branch = own.sub(lambda m, n=n: f":{m.group(1)}_{n}", sql)
        branches.append(f"(SELECT {n} AS owner, x.* FROM ({branch}) AS x)")
    return " UNION ALL ".join(branches)


@dataclass(frozen=True)
class SpaceRows:
    """The rows of the spaces' chosen candidates, and the stored vectors of those asked for."""

    candidates: dict[Key, Candidate]
    vectors: dict[Key, npt.NDArray[np.float32]]


class SharedReads(SessionBound):
    """The spaces' statements of one query: each returns one result per owner, in order."""

    async def _per_owner(
        self,
        sql: str,
        owners: Sequence[str],
        params: dict[str, Any],
        split: bool,
        **per: Sequence[Any],
    ) -> list[list[Row]]:
        """Run `sql` for every owner (one statement, or one per owner when `split`); `per`:
        each owner's own value of a parameter. The rows of each owner, in the owners' order."""
        out: list[list[Row]] = [[] for _ in owners]
        groups = [[n] for n in range(len(owners))] if split else [list(range(len(owners)))]
        for group in groups:
            bound = dict(params)
            for n in group:
                bound[f"user_id_{n}"] = owners[n]
                bound |= {f"{name}_{n}": values[n] for name, values in per.items()}
            for row in await self._rows(per_owner(sql, group, list(per)), bound):
                out[row["owner"]].append(row)
        return out

    async def citus_loaded(self) -> bool:
        """Whether the server runs Citus (its settings exist only where it is loaded)."""
        (row,) = await self._rows(
            "SELECT current_setting('citus.propagate_set_commands', true) IS NOT NULL AS citus",
            {},
        )
        return bool(row["citus"])

    async def sizes(self, owners: Sequence[str], *, split: bool = False) -> list[int]:
        """Each owner's indexed items (0 for one that has none, or that the user cannot read)."""
        rows = await self._per_owner(
            "SELECT doc_count FROM search_stats WHERE user_id = :user_id", owners, {}, split
        )
        return [int(r[0]["doc_count"] or 0) if r else 0 for r in rows]

    async def keyword_each(
        self,
        owners: Sequence[str],
        query: str,
        seeds: Sequence[Sequence[uuid.UUID]] | None = None,
        *,
        terms: int = 0,
        min_df: int = 0,
        split: bool = False,
        **scope: Unpack[KeywordScope],
    ) -> list[KeywordHits]:
        """KeywordArm.keyword for every owner (or, with `seeds`, its expansion over each
        owner's own seeds: an owner without seeds gets no hits), each over its own corpus."""
        kept = list(range(len(owners)))
        expansion: dict[str, Any] | None = None
        if seeds is not None:
            kept = [n for n, s in enumerate(seeds) if s]
            expansion = {"terms": terms, "min_df": min_df}
            if not kept or terms <= 0:
                return [KeywordHits({}, 0.0) for _ in owners]
        statement = bm25_statement(query, scope, expansion)
        hits = [KeywordHits({}, 0.0) for _ in owners]
        if statement is None:
            return hits
        sql, params = statement
        per = {"seeds": [list(seeds[n]) for n in kept]} if seeds is not None else {}
        rows = await self._per_owner(sql, [owners[n] for n in kept], params, split, **per)
        for n, owner_rows in zip(kept, rows, strict=True):
            keys = [(SOURCES[r["source"]], r["item_id"]) for r in owner_rows]
            scores = {k: float(r["score"]) for k, r in zip(keys, owner_rows, strict=True)}
            plain = {k: float(r["plain"]) for k, r in zip(keys, owner_rows, strict=True)}
            top = float(owner_rows[0]["max_score"]) if owner_rows else 0.0
            hits[n] = KeywordHits(scores, top, plain=plain)
        return hits

    async def vector_each(
        self,
        owners: Sequence[str],
        embedding: Any,
        *,
        exact: Sequence[bool],
        limit: int,
        model: str,
        types: Sequence[str] | None = None,
        tags: TagFilter | None = None,
        when: TimeFilter = NO_TIME_FILTER,
        split: bool = False,
    ) -> list[dict[Key, float]]:
        """VectorArm.vector over every owner's memories: exactly for the owners marked
        `exact` (every vector scored), else through the index (the transaction's ANN
        settings); each owner's `limit` nearest."""
        base = memory_vectors_sql(types, tags, when)
        branches = {
            flag: nearest_sql(Source.MEMORY, base, order)
            for flag, order in (
                (True, f"(t.embedding <=> {QUERY_VECTOR}) + 0"),
                (False, f"t.embedding <=> {QUERY_VECTOR}"),
            )
        }
        params = {
            "q": query_vector(embedding),
            "limit": limit,
            "model": model,
            **when.params(),
            **_scope_params(types, tags),
        }
        out: list[dict[Key, float]] = [{} for _ in owners]
        for flag in (True, False):
            group = [n for n in range(len(owners)) if exact[n] is flag]
            if not group:
                continue
            rows = await self._per_owner(branches[flag], [owners[n] for n in group], params, split)
            for n, owner_rows in zip(group, rows, strict=True):
                out[n] = {(Source.MEMORY, r["id"]): float(r["cosine"]) for r in owner_rows}
        return out

    async def rows_each(
        self,
        owners: Sequence[str],
        ids: Sequence[Sequence[uuid.UUID]],
        vectors: Sequence[uuid.UUID] = (),
        *,
        when: TimeFilter = NO_TIME_FILTER,
        split: bool = False,
    ) -> SpaceRows:
        """The rows of these memories of each owner (`ids[n]`: owner n's), as ContextReads.fetch
        reads them, and the stored vectors of those in `vectors`, in one statement."""
        kept = [n for n, i in enumerate(ids) if i]
        if not kept:
            return SpaceRows({}, {})
        sql = (
            f"SELECT {MEMORY_COLUMNS}, CASE WHEN id = ANY(CAST(:vectors AS uuid[])) "
            f"THEN {stored_vector('embedding')} END AS v {memory_rows_sql(when)}"
        )
        params = {"vectors": list(vectors), **when.params()}
        owned = [list(ids[n]) for n in kept]
        rows = await self._per_owner(sql, [owners[n] for n in kept], params, split, ids=owned)
        candidates: dict[Key, Candidate] = {}
        stored: dict[Key, npt.NDArray[np.float32]] = {}
        for r in (r for owner_rows in rows for r in owner_rows):
            key = (Source.MEMORY, r["id"])
            candidates[key] = memory_candidate(r)
            if r["v"] is not None:
                stored[key] = decode_halfvec(r["v"])
        return SpaceRows(candidates, stored)

    async def space_versions(
        self, owners: Sequence[str], query: str, names: str
    ) -> tuple[list[str], list[str], datetime, list[Row]]:
        """What a query's copies of spaces (app/services/query/space_cache.py) need of the
        database, in one statement: the query's lexemes and its names' (as the keyword
        statement parses them), the transaction's now(), and the `search_stats` row (`owner`:
        the place in `owners`; version, document count, total length) of each of `owners` the
        signed user may read: row-level security leaves out every other."""
        stats = per_owner(SPACE_STATS_SQL, range(len(owners)))
        params: dict[str, Any] = {"query": query, "names": names}
        params |= {f"user_id_{n}": owner for n, owner in enumerate(owners)}
        rows = await self._rows(SPACE_VERSIONS_SQL.format(stats=stats), params)
        first = rows[0]
        found = [r for r in rows if r["owner"] is not None]
        return list(first["q"]), list(first["nq"]), first["now"], found

    async def space_items(self, owner: str) -> Sequence[Row]:
        """A space's memories that are not deleted, each with what a query may read of it."""
        return await self._rows(SPACE_ITEMS_SQL, {"user_id": owner})

    async def space_postings(self, owner: str) -> Sequence[Row]:
        """A space's keyword postings, one row per lexeme, in the database's order of them."""
        return await self._rows(SPACE_POSTINGS_SQL, {"user_id": owner})


SPACE_STATS_SQL = (
    "SELECT version, doc_count, total_length FROM search_stats WHERE user_id = :user_id"
)

SPACE_VERSIONS_SQL = """
SELECT l.q, l.nq, l.now, s.owner, s.version, s.doc_count, s.total_length
FROM (SELECT ARRAY(SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', :query)) AS u) AS q,
             ARRAY(SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', :names)) AS u) AS nq,
             now() AS now) AS l
LEFT JOIN ({stats}) AS s ON true
"""

SPACE_ITEMS_SQL = f"""
SELECT {MEMORY_COLUMNS}, tags, expires_at, valid_to, embedding_model,
       {stored_vector("embedding")} AS v
FROM memory_items WHERE user_id = :user_id AND deleted_at IS NULL
"""

# ORDER BY lexeme: the order the feedback round's ties are broken in (keyword.py, `expansion`).
SPACE_POSTINGS_SQL = """
SELECT lexeme, array_agg(item_id) AS items, array_agg(source) AS sources,
       array_agg(tf) AS tf, array_agg(dl) AS dl
FROM search_postings WHERE user_id = :user_id GROUP BY lexeme ORDER BY lexeme
"""
