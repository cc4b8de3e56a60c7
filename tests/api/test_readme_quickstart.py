"""The README's quick start, step by step, on the real service (issue 29 item 6).

The steps are read from README.md itself (its curl lines: route and JSON body), so the test runs
what a new user copies, and fails when the README or the ranking stops making it true.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import headers

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart_steps() -> list[tuple[str, dict[str, Any]]]:
    """(path, body) of each `curl -s -XPOST localhost:8000/...` in the README's first bash block
    of the "Using it" section, in order."""
    text = README.read_text()
    section = text[text.index("## Using it") :]
    block = section[section.index("```bash") + len("```bash") : section.index("```\n", 10)]
    commands = re.sub(r"\\\n\s*", " ", block)
    steps = []
    for line in commands.splitlines():
        if "curl " not in line:
            continue
        words = shlex.split(line)
        url = next(w for w in words if w.startswith("localhost:8000"))
        body = json.loads(words[words.index("-d") + 1])
        steps.append((url.removeprefix("localhost:8000"), body))
    return steps


def test_the_readme_commands_run_as_pasted() -> None:
    """No word of a command is a shell redirect: `<id>` in a path was read by bash as "input from
    the file id" (`bash: id: No such file or directory`, issue 41)."""
    text = README.read_text()
    section = text[text.index("## Using it") :]
    block = section[section.index("```bash") + len("```bash") : section.index("```\n", 10)]
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        if line.strip().startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        assert not {"<", ">", ">>"} & set(lexer), line
    assert "bash: " not in subprocess.run(
        ["bash", "-n", "-c", block], capture_output=True, text=True, check=False
    ).stderr


def test_the_readme_has_the_three_steps() -> None:
    paths = [p for p, _ in quickstart_steps()]
    assert paths == [
        "/v1/conversations",
        "/v1/conversations/$id/messages",
        "/v1/tools/query_memory",
    ]


async def test_the_quick_start_returns_the_memory_it_stores(
    make_client: Callable[..., Any], user_id: str
) -> None:
    (create, _), (append, message), (ask, question) = [(p, b) for p, b in quickstart_steps()]
    async with make_client() as (client, _):
        made = await client.post(create, json={"title": "setup"}, headers=headers(user_id))
        assert made.status_code == 201, made.text
        path = append.replace("$id", made.json()["id"])
        stored = await client.post(path, json=message, headers=headers(user_id))
        assert stored.status_code == 201, stored.text
        answer = await client.post(ask, json=question, headers=headers(user_id))
        assert answer.status_code == 200, answer.text
        data = answer.json()
        assert [m["content"] for m in data["memories"]] == [message["content"]]
        assert data["metadata"]["supported"] is True
        assert data["metadata"]["confidence"] == data["memories"][0]["relevance"]
