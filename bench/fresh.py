"""Just-imported users vs settled ones: LoCoMo turns via `messages:bulk`, queried at once.

`python -m bench.fresh` starts the embedded Postgres of the benchmark (bench/out/pg), a
database `bench_fresh` migrated by the real scripts, and `pgrecall serve` on it. A few LoCoMo
users are imported and ANALYZEd first (the tables have statistics, as in a running service).
Then each measured user is imported over HTTP (`/v1/conversations` + `messages:bulk`, one call
per LoCoMo session, as an agent would) and its own questions are asked through
`/v1/memory/query` at once ("fresh"), then again after `ANALYZE` ("settled"). The ratio of the
two, per stage, is the figure: it is measured in one run, so machine load cancels out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import statistics
import time
from pathlib import Path
from typing import Annotated, Any

import asyncpg
import typer

from app.migrate import upgrade_head
from app.observability import configure_logging
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user
from bench.options import ROOT, SetOption
from bench.server import start_server
from bench.store import create_database, database
from eval.datasets.locomo import Conversation, load_locomo
from pgrecall.client import NO_RETRY, AsyncClient

log = logging.getLogger("bench")
LOCOMO = ROOT.parent / "shared/datasets/locomo/locomo-dev.json"
TABLES = ("memory_items", "messages", "conversations", "search_postings", "search_stats")


async def import_conversation(client: AsyncClient, user_id: str, conv: Conversation) -> float:
    """Each LoCoMo session as a conversation of `user_id`, turns via messages:bulk; seconds."""
    started = time.perf_counter()
    user = client.as_user(user_id)
    sessions: dict[int, list[Any]] = {}
    for turn in conv.turns:
        sessions.setdefault(turn.session, []).append(turn)
    speakers: dict[str, str] = {}
    for number, turns in sorted(sessions.items()):
        conversation = await user.create_conversation(f"session {number}")
        messages = [
            {
                "role": speakers.setdefault(t.speaker, "user" if not speakers else "assistant"),
                "content": t.content,
                "created_at": t.created_at.isoformat(),
                "metadata": {"dia_id": t.dia_id},
            }
            for t in turns
        ]
        await user.import_messages(conversation.id, messages)
    return time.perf_counter() - started


async def ask(client: AsyncClient, user_id: str, questions: list[str]) -> dict[str, list[float]]:
    """/v1/memory/query per question, one client with keep-alive: latency and the stages."""
    out: dict[str, list[float]] = {"total": [], "embedding": [], "database": []}
    user = client.as_user(user_id)
    for q in questions:
        t = time.perf_counter()
        answer = await user.memory_query(q, limit=10)
        out["total"].append((time.perf_counter() - t) * 1000)
        out["embedding"].append(float(answer.query_embedding_ms))
        out["database"].append(float(answer.retrieval_ms))
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def summary(samples: dict[str, list[float]]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(samples["total"]), 1),
        "p95": round(percentile(samples["total"], 95), 1),
        "embedding_p50": round(statistics.median(samples["embedding"]), 1),
        "database_p50": round(statistics.median(samples["database"]), 1),
        "database_p95": round(percentile(samples["database"], 95), 1),
    }


async def analyze(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for table in TABLES:
            await conn.execute(f"ANALYZE {table}")
    finally:
        await conn.close()


# The df step before it was rewritten per lexeme (kept to measure the two in one run).
OLD_DF = """), df AS (
    SELECT p.lexeme, count(*)::float8 AS df
    FROM search_postings AS p JOIN q ON q.lexeme = p.lexeme
    WHERE p.user_id = :user_id
    GROUP BY p.lexeme
), idf AS ("""
_DF = re.compile(r"\), df AS \(.*?\), idf AS \(", re.DOTALL)


async def _bm25_statement(session: Any, user_id: str, query: str) -> tuple[str, dict[str, Any]]:
    """The service's own BM25 statement and parameters for this query (captured, not run)."""
    from app.repositories.retrieval import RetrievalRepository
    from app.retrieval.names import query_names

    captured: list[tuple[str, dict[str, Any]]] = []

    class Capture:
        async def execute(self, statement: Any, params: Any = None) -> Any:
            captured.append((str(statement), dict(params or {})))

            class Empty:
                def all(self) -> list[Any]:
                    return []

            return Empty()

    await RetrievalRepository(Capture()).keyword(  # type: ignore[arg-type]
        user_id, query, limit=40, memories=True, messages=True, types=None, k1=1.2, b=0.75,
        names=query_names(query),
    )
    return captured[0]


async def bm25_plans(dsn: str, user_id: str, questions: list[str]) -> dict[str, Any]:
    """For a user before ANALYZE: EXPLAIN ANALYZE of the current BM25 statement and of the old
    df step, and both timed, interleaved, over the same questions (one run, same load)."""
    from sqlalchemy import text as sql_text

    from app.db import create_engine, create_sessionmaker

    engine = create_engine(dsn.replace("postgresql://", "postgresql+asyncpg://", 1), pool_size=1)
    times: dict[str, list[float]] = {"current": [], "old_df": []}
    plans: dict[str, str] = {}
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            for i, question in enumerate(questions):
                sql, params = await _bm25_statement(session, user_id, question)
                variants = {"current": sql, "old_df": _DF.sub(lambda _: OLD_DF, sql, count=1)}
                for name, statement in variants.items():
                    t = time.perf_counter()
                    await session.execute(sql_text(statement), params)
                    times[name].append((time.perf_counter() - t) * 1000)
                    if i == 0:
                        rows = await session.execute(
                            sql_text("EXPLAIN (ANALYZE, TIMING OFF) " + statement), params
                        )
                        plans[name] = "\n".join(r[0] for r in rows)
    finally:
        await engine.dispose()
    return {
        "current_p50_ms": round(statistics.median(times["current"]), 2),
        "old_df_p50_ms": round(statistics.median(times["old_df"]), 2),
        "plans": plans,
    }


async def _run(users: int, questions: int, out: Path, settings: dict[str, str]) -> dict[str, Any]:
    from app.embedded import EmbeddedPostgres

    conversations = load_locomo(LOCOMO)
    pg = EmbeddedPostgres(out / "pg")
    server_url = await asyncio.to_thread(pg.start)
    db = database(server_url, "bench_fresh")
    try:
        await create_database(database(server_url, "postgres").dsn, db.name, replace=True)
        await asyncio.to_thread(upgrade_head, db.url)
        await ensure_service_role(db.url, DEFAULT_APP_ROLE, create=True)
        server = await start_server(
            with_user(db.url, DEFAULT_APP_ROLE), out / "server-fresh.log", settings
        )
        try:
            async with AsyncClient(server.base_url, timeout=60.0, retry=NO_RETRY) as client:
                # Background users with statistics, as in a service that has been running.
                for conv in conversations[:2]:
                    await import_conversation(client, f"settled-{conv.sample_id}", conv)
                await analyze(db.dsn)
                rng = random.Random(7)
                rows = []
                for i in range(users):
                    conv = conversations[i % len(conversations)]
                    user = f"fresh-{conv.sample_id}-{i}"
                    asked = [q.question for q in conv.questions]
                    rng.shuffle(asked)
                    asked = asked[:questions]
                    seconds = await import_conversation(client, user, conv)
                    fresh = await ask(client, user, asked)
                    statements = await bm25_plans(db.dsn, user, asked)
                    await analyze(db.dsn)
                    settled = await ask(client, user, asked)
                    row = {
                        "user": user,
                        "turns": len(conv.turns),
                        "import_s": round(seconds, 1),
                        "fresh": summary(fresh),
                        "settled": summary(settled),
                        "load": round(os.getloadavg()[0], 2),
                    }
                    row["bm25_before_analyze"] = {
                        k: v for k, v in statements.items() if k != "plans"
                    }
                    row["ratio_p50"] = round(row["fresh"]["p50"] / row["settled"]["p50"], 2)
                    row["ratio_db_p50"] = round(
                        row["fresh"]["database_p50"] / max(row["settled"]["database_p50"], 0.1), 2
                    )
                    rows.append(row)
                    log.info("%s", json.dumps(row))
                    if i == 0:
                        for name, plan in statements["plans"].items():
                            (out / f"fresh-bm25-plan-{name}.txt").write_text(plan)
        finally:
            server.stop()
    finally:
        if pg.started_here:
            await asyncio.to_thread(pg.stop)
    return {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "settings": settings, "users": rows}


def table(result: dict[str, Any]) -> str:
    lines = [
        "| user | turns | fresh p50 / p95 | settled p50 / p95 | fresh db p50 / p95 "
        "| settled db p50 / p95 | embed p50 (f/s) | fresh/settled p50 | db p50 ratio "
        "| BM25 fresh: now / old df (ms) | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["users"]:
        f, s, b = r["fresh"], r["settled"], r["bm25_before_analyze"]
        lines.append(
            f"| {r['user']} | {r['turns']} | {f['p50']} / {f['p95']} | {s['p50']} / {s['p95']} "
            f"| {f['database_p50']} / {f['database_p95']} "
            f"| {s['database_p50']} / {s['database_p95']} "
            f"| {f['embedding_p50']} / {s['embedding_p50']} | {r['ratio_p50']} "
            f"| {r['ratio_db_p50']} | {b['current_p50_ms']} / {b['old_df_p50_ms']} "
            f"| {r['load']} |"
        )
    return "\n".join(lines)


cli = typer.Typer(add_completion=False, help=__doc__)


@cli.command()
def main(
    users: Annotated[int, typer.Option(help="users imported and measured")] = 3,
    questions: Annotated[int, typer.Option(help="questions asked per user and pass")] = 80,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
    tag: Annotated[str, typer.Option(help="results file suffix")] = "",
    set_: SetOption = None,
) -> None:
    configure_logging("INFO", "text")
    settings = dict(s.split("=", 1) for s in set_ or [])
    result = asyncio.run(_run(users, questions, out, settings))
    path = out / f"results-fresh{'-' + tag if tag else ''}.json"
    path.write_text(json.dumps(result, indent=1))
    typer.echo(table(result))


if __name__ == "__main__":
    cli()
