"""The admin commands end to end, as an operator runs them (subprocesses, private database)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path


def test_seed_list_and_purge_from_the_command_line(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    user = f"cli-{uuid.uuid4()}"
    rows = [
        {"user_id": user, "content": "Takes the 7:40 train to work", "type": "fact"},
        {"user_id": user, "content": "Wants invoices in PDF, not HTML", "type": "preference"},
        {"user_id": user, "content": "Chose Hetzner for the staging cluster", "type": "decision"},
    ]
    good = tmp_path / "good.json"
    good.write_text(json.dumps(rows, indent=2))
    seeded = run("scripts/seed_memories.py", str(good))
    assert seeded.returncode == 0, seeded.stderr
    assert "added 3, updated 0, skipped 0, invalid 0" in seeded.stdout
    assert "items/s" in seeded.stdout
    assert "rebuilt memory_items vector index: lists 10 for 3 rows" in seeded.stdout

    broken = tmp_path / "broken.csv"
    broken.write_text(
        "user_id,content,type\n"
        f"{user},Reads on Sundays,note\n"
        f"{user},Likes jazz,opinion\n"
        f"{user},Drinks oat milk,preference\n"
    )
    refused = run("seed", str(broken))
    assert refused.returncode == 1
    assert "line 3: type: Input should be" in refused.stderr
    assert "nothing written" in refused.stderr

    listed = run("memories", "list", "--user", user, "--type", "preference")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("\n") == 1 and "Wants invoices in PDF" in listed.stdout

    declined = run("purge-user", user, stdin="n\n")
    assert declined.returncode == 1 and "aborted; nothing deleted" in declined.stderr
    assert "memory_items 3" in declined.stdout  # the prompt shows what would go

    purged = run("purge-user", user, "--yes")
    assert purged.returncode == 0, purged.stderr
    assert f"purged user {user}: memory_items 3, messages 0, conversations 0" in purged.stdout
