"""Acceptance: 10,000 memories for 100 users from a generated file, in a private database.

Prints the load rate (run with -s to see it). Embedding 10k texts with the local model takes
most of the time (about 30-40 s on two cores).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.embedder import LocalEmbedder
from app.repositories.maintenance import IndexState, MaintenanceRepository
from app.services.embedding import EmbeddingService
from app.services.seed import SeedOptions, seed_file

Sessions = async_sessionmaker[AsyncSession]
USERS = 100
PER_USER = 100

_TEMPLATES = [
    ("preference", "{name} prefers {thing} when {activity}"),
    ("preference", "For {activity}, {name} likes to use {thing}"),
    ("fact", "{name} has been {activity} since {year} and owns {thing}"),
    ("fact", "{name}'s {relative} lives in {city} and works on {topic}"),
    ("decision", "The team decided that {name} will lead {topic} starting in {month}"),
    ("decision", "{name} chose {thing} over the alternatives for {topic}"),
    ("note", "Remember to ask {name} about {topic} before the {month} review"),
    ("note", "{name} mentioned a trip to {city} in {month} for {activity}"),
]
_WORDS = {
    "thing": [
        "a mechanical keyboard",
        "green tea",
        "dark mode",
        "a standing desk",
        "noise-cancelling headphones",
        "paper notebooks",
        "the Rust compiler",
        "a Kindle",
        "an e-bike",
        "a cast-iron pan",
    ],
    "activity": [
        "cooking",
        "running",
        "writing reports",
        "reviewing code",
        "travelling",
        "gardening",
        "playing chess",
        "learning Japanese",
        "climbing",
        "painting",
    ],
    "year": [str(y) for y in range(2005, 2025)],
    "relative": ["sister", "brother", "mother", "father", "cousin", "partner"],
    "city": ["Lisbon", "Kyoto", "Nairobi", "Montreal", "Oslo", "Valparaiso", "Hanoi", "Tbilisi"],
    "topic": [
        "the billing migration",
        "the mobile app",
        "the data warehouse",
        "the hiring plan",
        "the security audit",
        "the pricing page",
        "the onboarding flow",
        "the API redesign",
    ],
    "month": ["January", "March", "May", "July", "September", "November"],
}


def _generate(users: int, per_user: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for u in range(users):
        user, name = f"seed-user-{seed}-{u:03d}", f"Person{u}"
        seen: set[str] = set()
        while len(seen) < per_user:
            kind, template = rng.choice(_TEMPLATES)
            content = template.format(name=name, **{k: rng.choice(v) for k, v in _WORDS.items()})
            if content in seen:
                continue
            seen.add(content)
            rows.append(
                {
                    "user_id": user,
                    "content": content,
                    "type": kind,
                    "importance": round(rng.uniform(0.1, 1.0), 2),
                }
            )
    rng.shuffle(rows)
    return rows


async def _count(sessions: Sessions, prefix: str) -> int:
    async with sessions() as s:
        return int(
            await s.scalar(
                text("SELECT count(*) FROM memory_items WHERE user_id LIKE :p"), {"p": f"{prefix}%"}
            )
        )


@pytest.mark.slow
async def test_seed_10k_memories_for_100_users(
    tmp_path: Path, private_sessions: Sessions, embedder: LocalEmbedder
) -> None:
    rows = _generate(USERS, PER_USER, seed=1)
    path = tmp_path / "memories.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    embeddings = EmbeddingService(embedder)

    report = await seed_file(path, private_sessions, embeddings, options=SeedOptions())
    print(f"\nseed 10k: {report.summary()}")
    assert (report.added, report.updated, report.skipped, report.invalid) == (10_000, 0, 0, 0)
    assert await _count(private_sessions, "seed-user-1-") == 10_000
    async with private_sessions() as s:
        users = await s.scalar(text("SELECT count(DISTINCT user_id) FROM memory_items"))
        postings = await s.scalar(text("SELECT count(DISTINCT item_id) FROM search_postings"))
        state = await MaintenanceRepository(s).index_state("memory_items")
    assert users == USERS and postings == 10_000
    # The table grew from empty: the ivfflat index was rebuilt for 10k rows.
    assert report.reindex is not None and report.reindex.rebuilt
    assert state == IndexState(lists=10, built_rows=10_000)
    assert report.items_per_second > 0

    again = await seed_file(path, private_sessions, embeddings, options=SeedOptions())
    print(f"seed 10k again: {again.summary()}")
    assert (again.added, again.updated, again.skipped) == (0, 0, 10_000)
    assert again.reindex is None
    assert await _count(private_sessions, "seed-user-1-") == 10_000

    # 1,001 new rows with one broken row in the middle: nothing written, the line is named.
    fresh = _generate(11, 91, seed=2)[:1001]
    fresh[500]["type"] = "opinion"
    broken = tmp_path / "broken.csv"
    with broken.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["user_id", "content", "type", "importance"])
        writer.writeheader()
        writer.writerows(fresh)
    failed = await seed_file(broken, private_sessions, embeddings, options=SeedOptions())
    print(f"broken file: {failed.errors[0]}")
    assert not failed.written and failed.added == 0
    assert [str(e) for e in failed.errors] == [
        "line 502: type: Input should be 'fact', 'preference', 'decision' or 'note'"
    ]
    assert await _count(private_sessions, "seed-user-2-") == 0
