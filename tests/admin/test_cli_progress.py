"""Long commands piped (as in a script or CI): no progress bar on stderr, and a final one-line
summary with counts and seconds on stdout."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

SECONDS = r"\d+\.\d s$"


def _no_bar(stderr: str) -> None:
    # tqdm draws with carriage returns and "|" around the bar and rate ("it/s", "row/s").
    assert "\r" not in stderr and "%|" not in stderr and "/s]" not in stderr, stderr


def test_piped_long_commands_print_no_bar_and_end_with_a_summary(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    user = f"progress-{uuid.uuid4()}"
    rows = [
        {"user_id": user, "content": f"Remembers fact number {i}", "type": "fact"}
        for i in range(40)
    ]
    source = tmp_path / "rows.json"
    source.write_text(json.dumps(rows, indent=2))

    seeded = run("seed", str(source), "--batch-size", "8")
    assert seeded.returncode == 0, seeded.stderr
    _no_bar(seeded.stderr)
    last = seeded.stdout.splitlines()[-1]
    assert last.startswith("added 40, updated 0, skipped 0, invalid 0"), seeded.stdout
    assert re.search(r"; \d+\.\d s, \d+ items/s$", last), last

    keywords = run("rebuild-keywords", "--user", user)
    assert keywords.returncode == 0, keywords.stderr
    _no_bar(keywords.stderr)
    (line,) = keywords.stdout.splitlines()
    assert line.startswith("rebuilt keyword postings of 1 users (40 documents) in ")
    assert re.search(SECONDS, line), line

    reindexed = run("reindex")
    assert reindexed.returncode == 0, reindexed.stderr
    _no_bar(reindexed.stderr)
    last = reindexed.stdout.splitlines()[-1]
    assert re.fullmatch(
        r"reindex: \d of \d vector indexes rebuilt, \d+ per-user indexes built, \d+ dropped; "
        + SECONDS,
        last,
    ), reindexed.stdout

    exported = run("export", "--user", user, "-o", str(tmp_path / "out.jsonl"))
    assert exported.returncode == 0, exported.stderr
    _no_bar(exported.stderr)
    assert re.search(rf"exported {user}: .*memories 40.*; " + SECONDS, exported.stderr.strip())
    imported = run("import", str(tmp_path / "out.jsonl"), "--user", f"{user}-copy")
    assert imported.returncode == 0, imported.stderr
    _no_bar(imported.stderr)
    (line,) = imported.stdout.splitlines()
    assert line.startswith(f"imported into {user}-copy: ") and "memories 40" in line
    assert re.search(SECONDS, line), line
