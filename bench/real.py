"""The real-conversation workload: LoCoMo dialogues replicated across users, and a floor.

`python -m bench.real --messages 10k` (also run by `make bench`):

- **Corpus**: the 5 LoCoMo development conversations (../shared/datasets/locomo/). Every stored
  item is a dialogue turn (a message), as in docs/retrieval.md's LoCoMo protocol. Users get
  copies with light perturbation: speaker names swapped for other first names, every number
  shifted by the copy's index, questions shuffled. **The vectors of a perturbed turn are those of
  its base text** (the 2,7xx base turns are embedded once for real, cached in
  bench/out/cache/): embedding every perturbed copy is not feasible on 2 cores. Keyword postings
  are computed from the perturbed text by the service's own code.
- **Users** in today's bench mix: one big user per 250k items with big_size items (at 10k:
  5,000; at 100k: 50,000, which takes the ANN path), the rest one conversation copy each
  (369-663 turns, close to the synthetic median of 300).
- **Load**: through `ConversationService.append` (the service's own insert + postings path,
  with the turn-context documents), as the owner in the admin mode, one LoCoMo session per
  call; then ANALYZE and VACUUM (a settled store).
- **Drive**: `pgrecall serve` on the store; the users' own perturbed questions through
  `/v1/tools/query_memory` at concurrency 1 and 8 (20% from big users), `/v1/memory/query` at
  concurrency 1 for the embedding/database split and for the floor comparison.
- **Floor**: the same questions in-process: the query embedded by the same local model, then
  ONE SQL statement (both keyword and vector arms, the neighbour turns and the content fetch)
  on one connection, and the service's own ranking functions. Its top 10 is compared with the
  service's; pgrecall's p50/p95 are printed as a ratio over the floor's.
- **Just imported**: one more user is imported over HTTP (`messages:bulk`, real embeddings)
  and asked its questions at once; its latency is printed beside the settled small users'.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import asyncpg
import numpy as np
import typer

from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import (
    READ_PATH_SETTINGS,
    admin_sessions,
    create_engine,
    create_sessionmaker,
    positional,
)
from app.embedding_models import DEFAULT_MODEL_ID
from app.migrate import upgrade_head
from app.observability import configure_logging
from app.repositories.maintenance import user_index_name
from app.repositories.retrieval import (
    BM25_SQL,
    NO_TIME_FILTER,
    Candidate,
    SearchSize,
    Source,
    ann_settings,
    memory_valid,
    memory_visible,
    passage_messages_sql,
    source_filter,
)
from app.retrieval.names import query_names
from app.retrieval.passages import passages
from app.retrieval.presets import get_preset
from app.retrieval.relevance import model_for
from app.retrieval.rerank import rerank
from app.retrieval.scoring import (
    apply_thresholds,
    finalise,
    propagate,
    rank,
)
from app.retrieval.speakers import usable_speaker
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user
from app.schemas.conversation import MessageCreate
from app.services.conversation import ConversationService
from app.services.embedding import EmbeddingService, Priority
from app.services.query import QueryRequest, ann_probes, informative, time_preference
from app.services.query.arms import SearchPath
from app.vectors import QUERY_VECTOR, query_vector, vector_literal
from bench.drive import BenchQuery, percentiles, run_alternately, run_level, timing_breakdown
from bench.fresh import import_conversation
from bench.options import ROOT, MessagesOption, SetOption, parse_levels, parse_settings, parse_size
from bench.run import measured_level
from bench.server import start_server
from bench.store import Database, _schema_fingerprint, create_database, database
from bench.vocabulary import PEOPLE
from eval.datasets.locomo import Conversation, Turn, load_locomo
from pgrecall.client import NO_RETRY, AsyncClient

log = logging.getLogger("bench")
LOCOMO = ROOT.parent / "shared/datasets/locomo/locomo-dev.json"
_NUMBER = re.compile(r"\d+")


# ---------------------------------------------------------------- corpus and perturbation


@dataclass(frozen=True)
class Copy:
    """One perturbed copy of a LoCoMo conversation."""

    conv: Conversation
    index: int
    names: dict[str, str]

    def text(self, value: str) -> str:
        for old, new in self.names.items():
            value = re.sub(rf"\b{re.escape(old)}\b", new, value)
        if self.index:
            value = _NUMBER.sub(lambda m: str(int(m.group()) + self.index), value)
        return value


def make_copy(conv: Conversation, index: int, rng: random.Random) -> Copy:
    speakers = sorted({t.speaker for t in conv.turns})
    if index == 0:
        return Copy(conv, 0, {})
    pool = [p for p in PEOPLE if p not in speakers]
    return Copy(conv, index, dict(zip(speakers, rng.sample(pool, len(speakers)), strict=True)))


def base_vectors(conversations: Sequence[Conversation], cache: Path) -> dict[str, np.ndarray]:
    """Real embeddings of every base turn text and of its passages (cached by content)."""
    texts = sorted(
        {t.content for c in conversations for t in c.turns}
        | {p for c in conversations for t in c.turns for p in passages(t.content)}
    )
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = cache / f"locomo-turns-{digest}.npy"
    cache.mkdir(parents=True, exist_ok=True)
    if path.exists():
        matrix = np.load(path)
    else:
        log.info("embedding %d LoCoMo turns once", len(texts))
        matrix = LocalEmbedder(threads=2).embed_sync(texts)
        np.save(path, matrix)
    return dict(zip(texts, matrix, strict=True))


class BaseVectorEmbedder:
    """Looks up the real vector of a turn's base text (perturbed copies reuse it)."""

    model = DEFAULT_MODEL_ID
    dimension = 384

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.base: dict[str, str] = {}

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[self.base[t]] for t in texts])

    embed_background = embed


@dataclass
class User:
    user_id: str
    copies: list[Copy]
    big: bool

    @property
    def size(self) -> int:
        return sum(len(c.conv.turns) for c in self.copies)


def make_users(
    conversations: list[Conversation], items: int, big_size: int, seed: int
) -> list[User]:
    """Big users (one per 250k items, big_size turns) and one-copy small users up to `items`."""
    rng = random.Random(seed)
    users: list[User] = []
    copy_index = 0
    total = 0

    def next_copy() -> Copy:
        nonlocal copy_index
        conv = conversations[copy_index % len(conversations)]
        copy = make_copy(conv, copy_index, rng)
        copy_index += 1
        return copy

    for b in range(max(1, items // 250_000)):
        user = User(f"real-big-{b}", [], True)
        while user.size < big_size:
            user.copies.append(next_copy())
        users.append(user)
        total += user.size
    n = 0
    while total < items:
        user = User(f"real-small-{n}", [next_copy()], False)
        users.append(user)
        total += user.size
        n += 1
    return users


def questions(users: list[User], count: int, big_share: float, seed: int) -> list[BenchQuery]:
    rng = random.Random(seed + 1)
    big = [u for u in users if u.big]
    small = [u for u in users if not u.big] or big
    out = []
    for _ in range(count):
        user = rng.choice(big) if big and rng.random() < big_share else rng.choice(small)
        copy = rng.choice(user.copies)
        question = rng.choice(copy.conv.questions)
        out.append(BenchQuery(user.user_id, copy.text(question.question), user.big))
    return out


def default_big_size(items: int) -> int:
    """Turns of the big user when --big-size is not given."""
    return 5_000 if items <= 10_000 else 50_000


def workload(
    conversations: list[Conversation], items: int, big_size: int, seed: int
) -> tuple[list[User], list[BenchQuery]]:
    """The store's users and the questions asked of them: the same for the same arguments, so
    two stores built with them (bench.compare's two checkouts) hold the same turns."""
    users = make_users(conversations, items, big_size, seed)
    return users, questions(users, 2000, 0.2, seed)


# ---------------------------------------------------------------- load


async def load_store(db_url: str, users: list[User], vectors: dict[str, np.ndarray]) -> float:
    started = time.perf_counter()
    embedder = BaseVectorEmbedder(vectors)
    engine = create_engine(db_url, pool_size=1, statement_timeout_ms=600_000)
    sessions = admin_sessions(create_sessionmaker(engine), "bench load")
    embeddings = EmbeddingService(embedder)  # type: ignore[arg-type]
    try:
        for user in users:
            for copy in user.copies:
                by_session: dict[int, list[Turn]] = {}
                for turn in copy.conv.turns:
                    by_session.setdefault(turn.session, []).append(turn)
                async with sessions() as session, session.begin():
                    service = ConversationService(session, embeddings)
                    for number, turns in sorted(by_session.items()):
                        conversation = await service.create(user.user_id, f"session {number}")
                        messages = []
                        for t in turns:
                            content = copy.text(t.content)
                            embedder.base[content] = t.content
                            # A copy's sentences reuse the base sentences' vectors (the
                            # whole turn's where the perturbation split them otherwise).
                            mine, theirs = passages(content), passages(t.content)
                            if len(mine) != len(theirs):
                                theirs = [t.content] * len(mine)
                            embedder.base.update(zip(mine, theirs, strict=True))
                            messages.append(
                                MessageCreate(role="user", content=content, created_at=t.created_at)
                            )
                        await service.append(
                            user.user_id,
                            conversation.id,
                            messages,
                            uuid.uuid4(),
                            priority=Priority.BULK,
                        )
            log.info("loaded %s (%d turns)", user.user_id, user.size)
    finally:
        await engine.dispose()
    return time.perf_counter() - started


async def passage_counts(dsn: str) -> dict[str, int]:
    """Passages per user (with the turns, what the exact vector statement scores)."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT user_id, count(*) AS n FROM message_passages GROUP BY user_id"
        )
    finally:
        await conn.close()
    return {r["user_id"]: int(r["n"]) for r in rows}


async def settle(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for table in (
            "memory_items",
            "messages",
            "message_passages",
            "conversations",
            "search_postings",
        ):
            await conn.execute(f"VACUUM (ANALYZE) {table}")
        await conn.execute("ANALYZE search_stats")
    finally:
        await conn.close()


# ---------------------------------------------------------------- the floor


# The service's own visibility rules (deleted, expired, superseded), on alias t.
_VISIBLE_MEMORY = memory_visible(None).replace("m.", "t.") + memory_valid("t", NO_TIME_FILTER)


def floor_sql(exact: bool, rescore: bool = False, indexed: bool = False) -> str:
    """Both arms, the neighbours of every message candidate and every candidate's content, in
    one statement (the default preset: no type or time filter, no PRF). rescore: the messages
    branch as the service runs it for a user of few turns and many passages; indexed (exact
    path): the messages branch read through the user's own index, as the service reads it."""
    bm25 = BM25_SQL.format(
        source_filter=source_filter(True, True, None, NO_TIME_FILTER),
        expansion="",
        terms="idf",
    )
    order = f"(t.embedding <=> {QUERY_VECTOR})" + (" + 0" if exact else "")
    sql = f"""
WITH kw AS ({bm25}),
vm AS (
    SELECT t.id, 1 - (t.embedding <=> {QUERY_VECTOR}) AS cosine FROM memory_items AS t
    WHERE {_VISIBLE_MEMORY} AND t.embedding_model = :model ORDER BY {order} LIMIT :limit
), vmsg AS (
    -- The service's own messages branch: each turn's cosine mixed with its best passage's.
    SELECT pm.id, pm.cosine FROM {
        passage_messages_sql(exact and not indexed, "", rescore=rescore and not indexed)
    } AS pm
), message_keys AS (
    SELECT item_id AS id FROM kw WHERE source = 1 UNION SELECT id FROM vmsg
), nb AS (
    SELECT c.id,
           (SELECT p.id FROM messages AS p WHERE p.conversation_id = c.conversation_id
              AND p.user_id = :user_id AND p.seq < c.seq ORDER BY p.seq DESC LIMIT 1) AS prev,
           (SELECT n.id FROM messages AS n WHERE n.conversation_id = c.conversation_id
              AND n.user_id = :user_id AND n.seq > c.seq ORDER BY n.seq LIMIT 1) AS next
    FROM messages AS c WHERE c.user_id = :user_id AND c.id IN (SELECT id FROM message_keys)
), all_messages AS (
    SELECT id FROM message_keys UNION SELECT prev FROM nb WHERE prev IS NOT NULL
    UNION SELECT next FROM nb WHERE next IS NOT NULL
)
SELECT 'kw' AS arm, s.source, s.item_id AS id, s.score, s.max_score, NULL::uuid AS prev,
       NULL::uuid AS next, NULL AS content, NULL AS type, NULL::float8 AS importance,
       NULL::timestamptz AS created_at, NULL AS ref, NULL::uuid AS conversation_id,
       NULL::bigint AS seq, NULL AS role, s.plain, NULL AS speaker
FROM kw AS s
UNION ALL SELECT 'vm', 0, id, cosine, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL FROM vm
UNION ALL SELECT 'vmsg', 1, id, cosine, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL FROM vmsg
UNION ALL SELECT 'nb', 1, id, NULL, NULL, prev, next, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL FROM nb
UNION ALL SELECT 'mem', 0, t.id, NULL, NULL, NULL, NULL, t.content, t.type, t.importance,
       t.created_at, coalesce(t.source, 'message:' || t.source_message_id::text), NULL, NULL,
       NULL, NULL, NULL
FROM memory_items AS t
WHERE {_VISIBLE_MEMORY} AND t.id IN (SELECT item_id FROM kw WHERE source = 0 UNION
                                     SELECT id FROM vm)
UNION ALL SELECT 'msg', 1, m.id, NULL, NULL, NULL, NULL, m.content, NULL, NULL, m.created_at,
       NULL, m.conversation_id, m.seq, m.role, NULL,
       CASE WHEN jsonb_typeof(m.metadata -> 'speaker') = 'string' THEN m.metadata ->> 'speaker' END
FROM messages AS m WHERE m.user_id = :user_id AND m.id IN (SELECT id FROM all_messages)
"""
    return sql


async def floor_query(
    conn: asyncpg.Connection,
    embedder: LocalEmbedder,
    user_id: str,
    query: str,
    exact: bool,
    limit: int = 10,
    rescore: bool = False,
    indexed: bool = False,
) -> tuple[list[str], float, float]:
    """Top ids the service's ranking gives over one statement's rows; (ids, embed ms, total ms)."""
    preset = get_preset("default")
    relevance = model_for(embedder.model)
    # The service's plan for a re-scoring user (RetrievalRepository.set_vector_search), set
    # outside the floor's time.
    await conn.execute(f"SET enable_seqscan = {'off' if rescore else 'on'}")
    started = time.perf_counter()
    vector = (await asyncio.to_thread(embedder.embed_sync, [query]))[0]
    embedded = time.perf_counter()
    n = max(preset.candidates, limit)
    values = {
        "user_id": user_id,
        "query": query,
        "limit": n,
        "k1": preset.bm25_k1,
        "b": preset.bm25_b,
        "q": query_vector(vector),
        "model": DEFAULT_MODEL_ID,
        "w": preset.passage_weight,
        "names": " ".join(query_names(query)),
    }
    sql, names = positional(floor_sql(exact, rescore, indexed))  # the service's :name -> $n
    rows = await conn.fetch(sql, *[values[name] for name in names])
    scores: dict[tuple[Source, Any], float] = {}
    plain: dict[tuple[Source, Any], float] = {}
    max_score = 0.0
    cosines: dict[tuple[Source, Any], float] = {}
    around: dict[Any, tuple[Any, Any]] = {}
    content: dict[tuple[Source, Any], Candidate] = {}
    for r in rows:
        key = (Source(r["source"]), r["id"])
        if r["arm"] == "kw":
            scores[key] = float(r["score"])
            plain[key] = float(r["plain"])
            max_score = float(r["max_score"])
        elif r["arm"] in ("vm", "vmsg"):
            cosines[key] = float(r["score"])
        elif r["arm"] == "nb":
            around[r["id"]] = (r["prev"], r["next"])
        elif r["arm"] == "mem":
            content[key] = Candidate(
                Source.MEMORY,
                r["id"],
                r["content"],
                r["type"],
                r["importance"],
                r["created_at"],
                r["ref"],
                None,
                None,
            )
        else:
            content[key] = Candidate(
                Source.MESSAGE,
                r["id"],
                r["content"],
                None,
                None,
                r["created_at"],
                f"conversation:{r['conversation_id']}#{r['seq']}",
                r["conversation_id"],
                r["role"],
                usable_speaker(r["speaker"]),
            )
    # From here on the service's own steps (the stages of app/services/query/pipeline.py), with
    # the learned relevance model of the embedder, as the service ranks.
    ranked = rank(
        scores, max_score, cosines, preset, None, plain=plain, model=relevance,
        has_names=bool(query_names(query)),
        memories={key for key in (*scores, *cosines) if key[0] is Source.MEMORY},
    )  # fmt: skip
    seeds = [r.key for r in ranked if r.key[0] is Source.MESSAGE][: preset.neighbour_seeds]
    neighbours = {
        key: (
            (Source.MESSAGE, around[key[1]][0]) if around[key[1]][0] else None,
            (Source.MESSAGE, around[key[1]][1]) if around[key[1]][1] else None,
        )
        for key in seeds
        if key[1] in around
    }
    ranked = propagate(
        ranked,
        informative(neighbours, content),
        next_weight=preset.next_turn_weight,
        previous_weight=preset.previous_turn_weight,
    )
    keep = [r.key for r in ranked[: max(limit * 3, 30, preset.rerank_depth)]]
    candidates = {k: content[k] for k in keep if k in content}
    window = time_preference(query, QueryRequest(user_id, query, limit, 0.0), preset)
    ranked = rerank(ranked, candidates, neighbours, query, window, preset)
    now = datetime.now(UTC)
    ages = {k: (now - c.created_at).total_seconds() / 86400 for k, c in candidates.items()}
    ranked = finalise(ranked, preset, ages, preset.recency_weight, relevance)
    kept = apply_thresholds(ranked, 0.0, preset.relative_cutoff, preset.cutoff_exempt_ranks)
    ids = [str(r.key[1]) for r in kept[:limit]]
    done = time.perf_counter()
    return ids, (embedded - started) * 1000, (done - started) * 1000


async def floor_connection(dsn: str, ann: dict[str, str] | None = None) -> asyncpg.Connection:
    """A floor connection with the planner settings the service sets per transaction: the read
    path's (app/db.py), and on the ANN path the vector statement's (`ann`: ann_settings)."""
    return await asyncpg.connect(dsn, server_settings=READ_PATH_SETTINGS | (ann or {}))


async def ann_recall(
    conn: asyncpg.Connection,
    embedder: LocalEmbedder,
    users: list[User],
    qs: list[BenchQuery],
    sizes: dict[str, int],
    k: int = 10,
    limit: int = 50,
) -> dict[str, Any]:
    """The messages vector arm as the service runs it for big users (ANN, or the user's own
    HNSW index under the threshold) vs exact, top k; and the index the first statement read."""
    recalls, short = [], 0
    read: str | None = None
    for q in qs:
        vec = vector_literal((await asyncio.to_thread(embedder.embed_sync, [q.text]))[0])
        base = (
            "SELECT t.id, t.embedding <=> CAST($2 AS halfvec) AS d FROM messages AS t "
            "WHERE t.user_id = $1 AND t.embedding IS NOT NULL ORDER BY {o} LIMIT $3"
        )
        ann_sql = base.format(o="t.embedding <=> CAST($2 AS halfvec)")
        if read is None:
            plan = "\n".join(
                r[0] for r in await conn.fetch("EXPLAIN " + ann_sql, q.user_id, vec, limit)
            )
            used = re.search(r"Index (?:Only )?Scan using (\S+)", plan)
            read = used.group(1) if used else "none (exact plan)"
        ann = await conn.fetch(ann_sql, q.user_id, vec, limit)
        exact = await conn.fetch(
            base.format(o="(t.embedding <=> CAST($2 AS halfvec)) + 0"), q.user_id, vec, limit
        )
        ann_sorted = sorted(float(r["d"]) for r in ann)[:k]
        cut = float(exact[min(k, len(exact)) - 1]["d"]) if exact else 0.0
        recalls.append(sum(1 for d in ann_sorted if d <= cut + 1e-9) / min(k, len(exact) or 1))
        short += len(ann) < min(limit, sizes[q.user_id])
    return {
        "queries": len(qs),
        "recall_at_10": round(float(np.mean(recalls)), 3) if recalls else None,
        "short_result_sets": short,
        "index": read,
    }


# ---------------------------------------------------------------- run


async def _service_ids(client: AsyncClient, q: BenchQuery) -> tuple[list[str], float]:
    t = time.perf_counter()
    answer = await client.as_user(q.user_id).memory_query(q.text, limit=10, min_score=0.0)
    return [i.id for i in answer.items], (time.perf_counter() - t) * 1000


async def real_store(
    server_url: str, items: int, out: Path, seed: int, big_size: int
) -> tuple[Database, list[User], list[BenchQuery], float | None]:
    """The bench_real_<items> database on the server (loaded unless a store made with the same
    arguments and schema is there), its users, their questions, and the load's seconds (None:
    reused)."""
    conversations = load_locomo(LOCOMO)
    vectors = base_vectors(conversations, out / "cache")
    users, qs = workload(conversations, items, big_size, seed)
    db = database(server_url, f"bench_real_{items}")
    marker = out / f"{db.name}.json"
    meta = {"items": items, "seed": seed, "users": len(users), "big_size": big_size, "v": 1}
    meta["schema"] = _schema_fingerprint()
    admin = database(server_url, "postgres").dsn
    reuse = marker.exists() and json.loads(marker.read_text()) == meta
    if reuse and not await create_database(admin, db.name, replace=False):
        return db, users, qs, None
    marker.unlink(missing_ok=True)
    await create_database(admin, db.name, replace=True)
    await asyncio.to_thread(upgrade_head, db.url)
    load_s = round(await load_store(db.url, users, vectors), 1)
    if items > 10_000:
        from app.services.reindex import reindex

        engine = create_engine(db.url, pool_size=1, statement_timeout_ms=3_600_000)
        try:
            async with create_sessionmaker(engine)() as s, s.begin():
                await reindex(s, "messages")
        finally:
            await engine.dispose()
    await settle(db.dsn)
    marker.write_text(json.dumps(meta))
    return db, users, qs, load_s


async def run(
    items: int,
    levels: list[tuple[int, int]],
    samples: int,
    out: Path,
    settings: dict[str, str],
    seed: int = 42,
    big_size: int | None = None,
) -> dict[str, Any]:
    from app.embedded import EmbeddedPostgres

    big_size = big_size or default_big_size(items)
    cfg = load_settings(**settings)
    pg = EmbeddedPostgres(out / "pg")
    server_url = await asyncio.to_thread(pg.start)
    embedder = LocalEmbedder(threads=cfg.embedding_threads)
    try:
        db, users, qs, load_s = await real_store(server_url, items, out, seed, big_size)
        sizes = {u.user_id: u.size for u in users}
        result: dict[str, Any] = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "items": items,
            "stored_turns": sum(sizes.values()),
            "users": len(users),
            "big_users": [u.size for u in users if u.big],
        }
        if load_s is not None:
            result["load_s"] = load_s
        from bench.run import user_indexes

        result["user_vector_indexes"] = await user_indexes(
            db.url, cfg, ("memory_items", "messages")
        )
        log.info("per-user vector indexes %s", result["user_vector_indexes"])
        await ensure_service_role(db.url, DEFAULT_APP_ROLE, create=True)
        server = await start_server(
            with_user(db.url, DEFAULT_APP_ROLE), out / f"server-real-{items}.log", settings
        )
        try:
            async with AsyncClient(
                server.base_url, timeout=30.0, retry=NO_RETRY, max_connections=64
            ) as client:
                await run_level(
                    client, qs, concurrency=1, requests=30, time_cap_s=60, offset=len(qs) // 2
                )
                result["breakdown_c1"] = await timing_breakdown(
                    client,
                    qs[-samples:],
                    samples,
                    limit=cfg.max_results,
                    min_score=cfg.min_relevance,
                )
                result["levels"] = []
                for concurrency, requests in levels:
                    load = os.getloadavg()[0]
                    level = await measured_level(
                        client, server, db.dsn, qs,
                        concurrency=concurrency, requests=requests, time_cap_s=120,
                    )  # fmt: skip
                    level["loadavg_1m_before"] = round(load, 2)
                    result["levels"].append(level)
                    log.info("real %d c=%d %s", items, concurrency, level["latency_ms"])
                # Service vs floor, interleaved query by query (same load for both).
                # The service's probes for the big user (the other users take the exact path).
                probes = ann_probes(big_size, cfg.ivfflat_probes, cfg.ivfflat_probe_share)
                conn = await floor_connection(db.dsn)
                ann_conn = await floor_connection(
                    db.dsn,
                    ann_settings(
                        probes=probes,
                        max_probes=cfg.ivfflat_max_probes,
                        ef_search=cfg.hnsw_ef_search,
                        max_scan_tuples=cfg.hnsw_max_scan_tuples,
                    ),
                )
                # The path the service takes for each user (arms.SearchPath, from what
                # search_size reads): the exact or ANN statement, passages re-scoring the turns
                # found, the user's own index (bench.run.user_indexes above, found by name as
                # the service finds it). The floor takes the same one.
                passages = await passage_counts(db.dsn)
                with_index: set[str] = set()
                for user in sizes:
                    name = user_index_name("messages", user)
                    if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", name):
                        with_index.add(user)

                def path(user_id: str) -> SearchPath:
                    own = frozenset({Source.MESSAGE}) if user_id in with_index else frozenset()
                    size = SearchSize(sizes[user_id], passages.get(user_id, 0), indexed=own)
                    return SearchPath.of(size, cfg.exact_search_max_items)

                try:
                    service_ms, floor_ms, floor_embed, same = [], [], [], 0
                    compared = qs[:samples]
                    for q in compared:
                        ids, ms = await _service_ids(client, q)
                        taken = path(q.user_id)
                        fids, emb, fms = await floor_query(
                            conn if taken.exact and not taken.indexed else ann_conn,
                            embedder,
                            q.user_id,
                            q.text,
                            taken.exact,
                            rescore=taken.rescore,
                            indexed=bool(taken.indexed),
                        )
                        service_ms.append(ms)
                        floor_ms.append(fms)
                        floor_embed.append(emb)
                        same += ids == fids[: len(ids)]
                    result["floor"] = {
                        "queries": len(compared),
                        "same_top10": same,
                        "service_memory_query_ms": percentiles(service_ms),
                        "floor_ms": percentiles(floor_ms),
                        "floor_embedding_ms": percentiles(floor_embed),
                        "load": round(os.getloadavg()[0], 2),
                    }
                    big = [q for q in qs if q.big][:100]
                    result["ann"] = (
                        await ann_recall(ann_conn, embedder, users, big, sizes)
                        if big
                        and (big_size > cfg.exact_search_max_items or path(big[0].user_id).indexed)
                        else {
                            "note": "no big user above exact_search_max_items or with an own "
                            "index: exact path only"
                        }
                    )
                finally:
                    await conn.close()
                    await ann_conn.close()
                # A user imported over HTTP (real embeddings), asked at once.
                conv = load_locomo(LOCOMO)[2]
                fresh_user = f"real-fresh-{int(time.time())}"
                import_s = await import_conversation(client, fresh_user, conv)
                fresh_q = [BenchQuery(fresh_user, q.question, False) for q in conv.questions]
                settled_q = [q for q in qs if not q.big] or qs
                # Asked alternately (until 2026-11-28 the fresh user's questions came first and
                # the settled users' after: the import's autovacuum and the machine's drift
                # then fell on one side only).
                fresh, settled = await run_alternately(
                    client, fresh_q, settled_q, requests=min(80, len(fresh_q))
                )
                result["just_imported"] = {
                    "import_s": round(import_s, 1),
                    "fresh": fresh,
                    "settled_small": settled,
                    "asked": "alternately",
                    "load": round(os.getloadavg()[0], 2),
                }
        finally:
            server.stop()
    finally:
        if pg.started_here:
            await asyncio.to_thread(pg.stop)
    path = out / f"results-real-{items}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    return result


def report(result: dict[str, Any]) -> str:
    f = result["floor"]
    s50, s95 = f["service_memory_query_ms"]["p50"], f["service_memory_query_ms"]["p95"]
    f50, f95 = f["floor_ms"]["p50"], f["floor_ms"]["p95"]
    lines = [
        f"real workload: {result['stored_turns']:,} LoCoMo-derived turns, {result['users']} users"
        f" (big: {result['big_users']})",
        "",
        "| conc | p50 | p95 | p99 | small p95 | big p95 | req/s | CPU ms/req | client CPU ms/req "
        "| load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lvl in result["levels"]:
        lat, cpu = lvl["latency_ms"], lvl["cpu_ms_per_request"]
        lines.append(
            f"| {lvl['concurrency']} | {lat['p50']} | {lat['p95']} | {lat['p99']} "
            f"| {lvl['small_user_latency_ms'].get('p95', '-')} "
            f"| {lvl['big_user_latency_ms'].get('p95', '-')} | {lvl['throughput_rps']} "
            f"| {cpu['total']} | {cpu.get('load_generator', '-')} | {lvl['loadavg_1m_before']} |"
        )
    b = result["breakdown_c1"]
    j = result["just_imported"]
    lines += [
        "",
        f"split at c=1 (/v1/memory/query, mean ms): total {b['mean_total_ms']}, embedding "
        f"{b['mean_embedding_ms']}, database {b['mean_retrieval_ms']}, other "
        f"{b['mean_other_ms']}",
        f"floor (embedding + 1 SQL statement, same ranking code): p50 {f50} / p95 {f95} ms "
        f"(embedding p50 {f['floor_embedding_ms']['p50']}); service /v1/memory/query p50 {s50} "
        f"/ p95 {s95} ms -> ratio p50 {s50 / f50:.2f}x, p95 {s95 / f95:.2f}x; same top 10 in "
        f"{f['same_top10']}/{f['queries']} queries; load {f['load']}",
        f"ANN (messages, big users): {result['ann']}",
        f"just imported ({j['import_s']} s import): p50 {j['fresh']['p50']} / p95 "
        f"{j['fresh']['p95']} ms vs settled small users p50 {j['settled_small']['p50']} / p95 "
        f"{j['settled_small']['p95']} ms -> p50 ratio "
        f"{j['fresh']['p50'] / j['settled_small']['p50']:.2f}"
        f" ({j.get('asked', 'fresh first')}); load {j['load']}",
    ]
    return "\n".join(lines)


def side_by_side(real: dict[str, Any], synthetic: list[dict[str, Any]]) -> str:
    """Real vs synthetic workload per concurrency level (both from this run)."""
    lines = [
        "| workload | items | conc | p50 | p95 | p99 | CPU ms/req | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [("real (LoCoMo)", real["stored_turns"], real["levels"])]
    rows += [("synthetic", r["store"]["items"], r["levels"]) for r in synthetic]
    for name, items, levels in rows:
        for lvl in levels:
            lat = lvl["latency_ms"]
            lines.append(
                f"| {name} | {items:,} | {lvl['concurrency']} | {lat['p50']} | {lat['p95']} "
                f"| {lat['p99']} | {lvl['cpu_ms_per_request']['total']} "
                f"| {lvl['loadavg_1m_before']} |"
            )
    return "\n".join(lines)


cli = typer.Typer(add_completion=False, help=__doc__)


@cli.command()
def main(
    messages: MessagesOption = "10k",
    levels: Annotated[str, typer.Option(help="concurrency:requests")] = "1:300,8:600",
    samples: Annotated[int, typer.Option(help="queries for the split and the floor")] = 100,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
    set_: SetOption = None,
    big_size: Annotated[int | None, typer.Option(help="turns of the big user")] = None,
) -> None:
    configure_logging("INFO", "text")
    result = asyncio.run(
        run(
            parse_size(messages),
            parse_levels(levels),
            samples,
            out,
            parse_settings(set_ or []),
            big_size=big_size,
        )
    )
    typer.echo(report(result))


if __name__ == "__main__":
    cli()
