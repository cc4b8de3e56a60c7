"""Check a curated-format file (eval/curated_dev.json, eval/corpus/*.json) as a writer would:
the loader's schema rules, then the lexical rule of each shape with Postgres' own English
stemmer (a paraphrase shares no to_tsvector('english') lexeme with any of its answers; a
shared_word question shares at least one). Prints every offending question and exits 1 if any.

    python -m eval.corpus_check eval/corpus/personas-1.json [more files]
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

import asyncpg

from app.embedded import EmbeddedPostgres
from eval.datasets.curated import CuratedDataset, load_curated


async def lexemes(dsn: str, texts: list[str]) -> dict[str, frozenset[str]]:
    """Each text's lexemes under to_tsvector('english', ...), from the server at `dsn`."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT t, tsvector_to_array(to_tsvector('english', t)) AS l "
            "FROM unnest($1::text[]) AS t",
            texts,
        )
    finally:
        await conn.close()
    return {r["t"]: frozenset(r["l"]) for r in rows}


def problems(dataset: CuratedDataset, lexemes: dict[str, frozenset[str]]) -> list[str]:
    """The questions that break their shape's lexical rule."""
    found = []
    for user in dataset.users:
        for q in user.questions:
            shared = set()
            for key in q.answers:
                shared |= lexemes[q.query] & lexemes[user.memory(key).content]
            if q.shape == "paraphrase" and shared:
                found.append(f"{q.id}: paraphrase shares {sorted(shared)} with its answer")
            if q.shape == "shared_word" and not shared:
                found.append(f"{q.id}: shared_word shares no stem with its answer")
    return found


def main(paths: list[str]) -> int:
    datasets = [load_curated(Path(p)) for p in paths]  # schema errors raise, naming the entry
    texts = sorted(
        {m.content for d in datasets for u in d.users for m in u.memories}
        | {q.query for d in datasets for u in d.users for q in u.questions}
    )
    directory = Path(tempfile.mkdtemp(prefix="pgr-check-"))
    directory.chmod(0o755)
    server = EmbeddedPostgres(directory)
    server.start()
    try:
        found = asyncio.run(lexemes(server.dsn, texts))
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    bad = [p for d in datasets for p in problems(d, found)]
    for line in bad:
        print(line)
    users = sum(len(d.users) for d in datasets)
    questions = sum(len(u.questions) for d in datasets for u in d.users)
    print(f"{users} users, {questions} questions, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
