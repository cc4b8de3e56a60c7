"""Copies of small shared spaces in the service's memory, scored there (issue 43).

A query that reads shared spaces searches each space over its own corpus: its keyword
statement (BM25 over the space's postings, one round of pseudo-relevance feedback), its vector
statement (every memory's cosine: spaces this small are on the exact path) and the rows of its
candidates. Those statements cost Postgres about what the user's own cost, whatever the space's
size (docs/agents.md, "Cost"). A space is written rarely and read by every member's queries,
so each service process keeps a copy of the spaces it reads of at most `space_copy_max_items`
memories (their text, times, tags, vectors and keyword postings) and computes the same three
results from it.

What keeps a copy exact: the one statement a query still sends for its spaces
(`SharedReads.space_versions`) reads each space's `search_stats` row under row-level security,
so Postgres decides on every request which spaces the signed user reads (a revoked grant reads
nothing on its next request), and returns the row's `version`, which every write of the space
moves in the same transaction (migration 0024's triggers). A copy is used only while it is the
version, document count and total length it was read at; else the space is read again. The same
statement gives the query's lexemes (`to_tsvector`, as the keyword statement parses them) and
the transaction's `now()`, so expiry is decided on the database's clock, as in the statements.

The results are the statements': the same visibility and validity rules (`visible`), the same
BM25 arithmetic in float8 over the same postings (`keyword`, `expansion`; the feedback terms
tie-broken in the database's collation order of the lexemes, read with the postings) and the
cosine of the same half-precision vectors (`nearest`). Candidates of equal score may come in
another order. tests/services/test_space_cache.py compares both ways over random spaces and
filters.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt

from app.repositories.retrieval import KeywordHits
from app.repositories.retrieval.common import Candidate, Row, TagFilter, TimeFilter
from app.repositories.retrieval.context import memory_candidate
from app.repositories.search_index import Source
from app.vectors import decode_halfvec

log = logging.getLogger(__name__)

Key = tuple[Source, uuid.UUID]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
NEVER = np.iinfo(np.int64).max  # a time no limit reaches: no expiry, still valid
_ROW_BYTES = 512  # a memory's Python objects besides its text and vector (an estimate)
_POSTING_BYTES = 80


def micros(t: datetime) -> int:
    """A timestamptz as whole microseconds since the epoch (exact: Postgres keeps microseconds)."""
    return (t - _EPOCH) // _US


@dataclass(frozen=True)
class Postings:
    """One lexeme's postings in a space: item places (-1: not a memory of the copy), tf, dl.
    Python lists: a space's lexeme has a few to a few hundred postings, fewer than a numpy
    call's overhead is worth."""

    items: list[int]
    tf: list[float]
    dl: list[float]
    order: int  # the lexeme's place in the database's collation order


@dataclass(frozen=True)
class Version:
    """What a space's `search_stats` row said when it was read."""

    version: int
    doc_count: int
    total_length: float


@dataclass(frozen=True)
class SpaceCopy:
    """One space's memories (not deleted) and keyword postings, as read at `stamp`."""

    owner: str
    stamp: Version
    ids: list[uuid.UUID]
    keys: list[Key]  # (Source.MEMORY, id) of each
    place: dict[uuid.UUID, int]  # a memory's row in the arrays below
    candidates: list[Candidate]
    types: npt.NDArray[np.object_]
    tags: list[frozenset[str]]
    created: npt.NDArray[np.int64]
    expires: npt.NDArray[np.int64]
    valid_to: npt.NDArray[np.int64]
    models: npt.NDArray[np.object_]
    vectors: npt.NDArray[np.float32]  # one row per memory: its stored half-precision values
    unit: npt.NDArray[np.float32]  # the same, each of length 1 (the cosine's)
    postings: dict[str, Postings]
    lexemes: list[list[str]]  # each memory's lexemes (the feedback round's seed terms)
    nbytes: int
    _models: dict[str, npt.NDArray[np.bool_]] = field(default_factory=dict, compare=False)

    @classmethod
    def build(
        cls, owner: str, stamp: Version, items: Sequence[Row], postings: Sequence[Row]
    ) -> SpaceCopy:
        """A copy from `SharedReads.space_items` and `space_postings` (lexemes in order)."""
        place = {r["id"]: n for n, r in enumerate(items)}
        vectors = [decode_halfvec(r["v"]) for r in items]
        dimension = len(vectors[0]) if vectors else 0
        matrix = np.zeros((len(items), dimension), dtype=np.float32)
        for n, v in enumerate(vectors):
            matrix[n] = v
        lists: dict[str, Postings] = {}
        lexemes: list[list[str]] = [[] for _ in items]
        count = 0
        for order, r in enumerate(postings):
            where = [
                place.get(i, -1) if s == int(Source.MEMORY) else -1
                for i, s in zip(r["items"], r["sources"], strict=True)
            ]
            lists[r["lexeme"]] = Postings(
                where, [float(x) for x in r["tf"]], [float(x) for x in r["dl"]], order
            )
            for n in where:
                if n >= 0:
                    lexemes[n].append(r["lexeme"])
            count += len(where)
        text = sum(len(r["content"]) for r in items)
        return cls(
            owner=owner,
            stamp=stamp,
            ids=[r["id"] for r in items],
            keys=[(Source.MEMORY, r["id"]) for r in items],
            place=place,
            candidates=[memory_candidate(r) for r in items],
            types=np.asarray([r["type"] for r in items], dtype=object),
            tags=[frozenset(r["tags"] or ()) for r in items],
            created=np.asarray([micros(r["created_at"]) for r in items], dtype=np.int64),
            expires=_times([r["expires_at"] for r in items]),
            valid_to=_times([r["valid_to"] for r in items]),
            models=np.asarray([r["embedding_model"] for r in items], dtype=object),
            vectors=matrix,
            unit=matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-30),
            postings=lists,
            lexemes=lexemes,
            # the vectors twice: as stored (the rows' stage) and of unit length (the cosine)
            nbytes=2 * matrix.nbytes + text + _ROW_BYTES * len(items) + _POSTING_BYTES * count,
        )

    def of_model(self, model: str) -> npt.NDArray[np.bool_]:
        """Which memories hold a vector of `model` (another model's live in another space)."""
        found = self._models.get(model)
        if found is None:
            found = self._models[model] = self.models == model
        return found

    def visible(
        self,
        now: datetime,
        when: TimeFilter,
        types: Sequence[str] | None = None,
        tags: TagFilter | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Which memories a statement of this query may return: not expired at `now`, within
        the time filter, valid (now, or at `as_of`), of `types` and `tags` when given (the
        rows' statement applies neither: `memory_rows_sql`)."""
        mask = self.expires > micros(now)
        if when.time_from is not None:
            mask &= self.created >= micros(when.time_from)
        if when.time_to is not None:
            mask &= self.created <= micros(when.time_to)
        if when.as_of is not None:
            mask &= self.created <= micros(when.as_of)
            mask &= self.valid_to > micros(when.as_of)
        else:
            mask &= self.valid_to == NEVER
        if types:
            mask &= np.isin(self.types, list(types))
        if tags is not None and tags.tags:
            wanted = frozenset(tags.tags)
            match = wanted.issubset if tags.all_ else (lambda have: not wanted.isdisjoint(have))
            mask &= np.fromiter((match(t) for t in self.tags), dtype=bool, count=len(self.tags))
        elif tags is not None and not tags.all_:
            mask &= False  # `tags && '{}'` holds for no row
        return mask


def _times(values: Sequence[datetime | None]) -> npt.NDArray[np.int64]:
    return np.asarray([NEVER if v is None else micros(v) for v in values], dtype=np.int64)


@dataclass(frozen=True)
class Scoring:
    """BM25's parameters, how many hits each arm returns, and the query's lexemes."""

    k1: float
    b: float
    limit: int
    lexemes: Sequence[str]
    names: frozenset[str]


def _corpus(copy: SpaceCopy) -> tuple[float, float]:
    """The keyword statement's `st`: the corpus size and average length."""
    n = float(max(copy.stamp.doc_count, 1))
    return n, max(copy.stamp.total_length / max(copy.stamp.doc_count, 1), 1.0)


def _idf(n: float, df: float) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _bm25(
    copy: SpaceCopy,
    terms: Sequence[tuple[str, float]],
    s: Scoring,
    mask: npt.NDArray[np.bool_],
) -> tuple[dict[Key, float], dict[Key, float]]:
    """Each visible memory's BM25 over `terms` (lexeme, idf), and over those that are not
    names; the first `s.limit` by score. Each posting's part is the keyword statement's
    `idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`, summed per memory."""
    _, avgdl = _corpus(copy)
    k1, b = s.k1, s.b
    visible = mask.tolist()
    score: dict[int, float] = {}
    plain: dict[int, float] = {}
    for lexeme, idf in terms:
        p = copy.postings[lexeme]
        name = lexeme in s.names
        for item, tf, dl in zip(p.items, p.tf, p.dl, strict=True):
            if item < 0 or not visible[item]:
                continue
            part = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl))
            score[item] = score.get(item, 0.0) + part
            if not name:
                plain[item] = plain.get(item, 0.0) + part
    best = heapq.nlargest(s.limit, score, key=score.__getitem__)
    keys = copy.keys
    return {keys[i]: score[i] for i in best}, {keys[i]: plain.get(i, 0.0) for i in best}


def keyword(copy: SpaceCopy, s: Scoring, mask: npt.NDArray[np.bool_]) -> KeywordHits:
    """The keyword statement's hits (KeywordArm.keyword) over the copy."""
    n, _ = _corpus(copy)
    df = {q: len(copy.postings[q].items) for q in s.lexemes if q in copy.postings}
    terms = [(q, _idf(n, d)) for q, d in df.items()]
    scores, plain = _bm25(copy, terms, s, mask)
    if not scores:
        return KeywordHits({}, 0.0, plain={})
    ideal = sum(_idf(n, float(df.get(q, 0))) for q in s.lexemes) * (s.k1 + 1.0)
    return KeywordHits(scores, ideal, plain=plain)


def expansion(
    copy: SpaceCopy,
    s: Scoring,
    mask: npt.NDArray[np.bool_],
    seeds: Sequence[uuid.UUID],
    *,
    terms: int,
    min_df: int,
) -> dict[Key, float]:
    """The feedback round's hits (KeywordArm.expansion): BM25 over the seeds' rarest lexemes
    the query lacks, each in at least `min_df` memories."""
    if not seeds or terms <= 0:
        return {}
    n, _ = _corpus(copy)
    place = copy.place
    seeded = {x for i in seeds if i in place for x in copy.lexemes[place[i]]} - set(s.lexemes)
    chosen = []
    for lexeme in seeded:
        p = copy.postings[lexeme]
        if len(p.items) >= min_df:
            chosen.append((_idf(n, float(len(p.items))), p.order, lexeme))
    chosen.sort(key=lambda t: (-t[0], t[1]))
    scores, _ = _bm25(copy, [(lexeme, idf) for idf, _, lexeme in chosen[:terms]], s, mask)
    return scores


def nearest(
    copy: SpaceCopy,
    query: npt.NDArray[np.float32],
    model: str,
    limit: int,
    mask: npt.NDArray[np.bool_],
) -> dict[Key, float]:
    """The vector statement's exact path: the `limit` visible memories of `model` of highest
    cosine with the query (as halfvec), best first."""
    use = mask & copy.of_model(model)
    places = np.flatnonzero(use)
    if not len(places) or limit <= 0:
        return {}
    q = np.asarray(query, dtype=np.float32).astype(np.float16).astype(np.float32)
    cosine = (copy.unit @ (q / np.linalg.norm(q)))[places]
    if len(places) > limit:
        top = np.argpartition(-cosine, limit - 1)[:limit]
        order = top[np.argsort(-cosine[top], kind="stable")]
    else:
        order = np.argsort(-cosine, kind="stable")
    keys, values = copy.keys, cosine.tolist()
    return {keys[places[k]]: values[k] for k in order.tolist()}


def rows(
    copy: SpaceCopy,
    ids: Sequence[uuid.UUID],
    vectors: Sequence[uuid.UUID],
    mask: npt.NDArray[np.bool_],
) -> tuple[dict[Key, Candidate], dict[Key, npt.NDArray[np.float32]]]:
    """The rows' statement (`SharedReads.rows_each`) over the copy: the candidates of `ids`
    still visible, and the stored vectors of those in `vectors`."""
    place = copy.place
    asked = set(vectors)
    candidates: dict[Key, Candidate] = {}
    stored: dict[Key, npt.NDArray[np.float32]] = {}
    for i in ids:
        k = place.get(i)
        if k is None or not mask[k]:
            continue
        key = (Source.MEMORY, i)
        candidates[key] = copy.candidates[k]
        if i in asked:
            stored[key] = copy.vectors[k].copy()
    return candidates, stored


class SpaceCache:
    """The copies of one service process, least recently used dropped past `max_bytes`; and
    the copies being read (`refresh`), one per space at a time, off the queries' path."""

    def __init__(self, max_bytes: int, max_items: int) -> None:
        self.max_bytes = max_bytes
        self.max_items = max_items
        self._copies: OrderedDict[str, SpaceCopy] = OrderedDict()
        self._bytes = 0
        self._loading: dict[str, asyncio.Task[None]] = {}

    def takes(self, stamp: Version) -> bool:
        """Whether a space of this size is copied at all."""
        return self.max_bytes > 0 and stamp.doc_count <= self.max_items

    def get(self, owner: str, stamp: Version) -> SpaceCopy | None:
        """The copy of `owner` read at `stamp`, if there is one."""
        copy = self._copies.get(owner)
        if copy is None or copy.stamp != stamp:
            return None
        self._copies.move_to_end(owner)
        return copy

    def refresh(self, owner: str, read: Callable[[], Awaitable[SpaceCopy]]) -> None:
        """Read `owner`'s copy again in a task of its own (`read`), unless one is under way.
        The query that asks goes on without it: its space is read by its statements. A read
        that fails is logged; the next query of the space asks again."""
        if owner in self._loading:
            return

        async def load() -> None:
            try:
                self.put(await read())
            except Exception:
                log.warning("reading the copy of %s failed", owner, exc_info=True)

        task = asyncio.get_running_loop().create_task(load())
        self._loading[owner] = task
        # Done, failed or cancelled (also before it ran): no longer under way.
        task.add_done_callback(lambda _: self._loading.pop(owner, None))

    async def settled(self) -> None:
        """Wait until the copies being read are in (tests, benchmarks)."""
        while self._loading:
            await asyncio.gather(*self._loading.values(), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the reads under way (the process is closing its engine)."""
        tasks = list(self._loading.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def put(self, copy: SpaceCopy) -> None:
        """Keep `copy` (replacing the space's older one), unless it alone is over the limit."""
        self._drop(copy.owner)
        if copy.nbytes > self.max_bytes:
            return
        self._copies[copy.owner] = copy
        self._bytes += copy.nbytes
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._copies)))

    def _drop(self, owner: str) -> None:
        old = self._copies.pop(owner, None)
        if old is not None:
            self._bytes -= old.nbytes

    def __len__(self) -> int:
        return len(self._copies)

    @property
    def nbytes(self) -> int:
        return self._bytes


def space_cache(megabytes: int, max_items: int, exact_max_items: int) -> SpaceCache | None:
    """The copies a process keeps: `megabytes` MiB of spaces of at most `max_items` memories,
    and only of spaces on the exact path (`exact_max_items`): a copy is searched exactly, as
    their statements are (None when nothing would be kept: spaces are read by their
    statements)."""
    biggest = min(max_items, exact_max_items)
    if megabytes <= 0 or biggest <= 0:
        return None
    return SpaceCache(megabytes * 1024 * 1024, biggest)
