"""`pgrecall spaces` against a running service: answered over its admin API, quietly, without
importing the database stack; and `pgrecall keys create --agent` there. The database path when
nothing answers is tests/admin/test_cli_spaces.py's."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.cli.test_keys_served import ROOT, _env, _keys
from tests.served import Served, serving


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-spaces-") as running:
        yield running


def _spaces(*args: str, served: Served) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "spaces", *args, "--server", served.base],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _recall(served: Served, user: str, space: str) -> list[dict[str, str]]:
    r = httpx.post(
        f"{served.base}/v1/memory/query",
        json={"query": "when does the on-call rotation start", "min_score": 0.0},
        headers={"X-User-Id": user, "X-Spaces": space},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return [i for i in r.json()["items"] if "rotation" in i["content"]]


def test_create_grant_list_revoke_delete_through_the_service(served: Served) -> None:
    space = f"team-{uuid.uuid4().hex[:8]}"
    writer, reader = f"gil-{uuid.uuid4()}", f"hal-{uuid.uuid4()}"
    created = _spaces("create", space, "--description", "the on-call team", served=served)
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"created space {space}\n" and created.stderr == ""
    again = _spaces("create", space, served=served)
    assert again.returncode == 1 and "409" in again.stderr

    listed = _spaces("list", served=served)
    assert listed.returncode == 0, listed.stderr
    (line,) = [x for x in listed.stdout.splitlines() if x.startswith(f"{space} ")]
    assert line.endswith("the on-call team")
    assert listed.stderr.endswith(" spaces\n")

    for user, access in ((writer, "write"), (reader, "read")):
        granted = _spaces("grant", space, user, "--access", access, served=served)
        assert granted.returncode == 0, granted.stderr
        assert granted.stdout == f"granted {user} {access} access to space {space}\n"
    members = _spaces("members", space, served=served)
    assert members.returncode == 0, members.stderr
    rows = sorted(tuple(x.split()[:2]) for x in members.stdout.splitlines())
    assert rows == sorted([(writer, "write"), (reader, "read")])
    assert members.stderr == "2 members\n"

    saved = httpx.post(
        f"{served.base}/v1/spaces/{space}/memories",
        json={"content": "The team's on-call rotation starts on Mondays", "type": "fact"},
        headers={"X-User-Id": writer},
        timeout=30,
    )
    assert saved.status_code == 201, saved.text
    assert [i["space"] for i in _recall(served, reader, space)] == [space]

    revoked = _spaces("revoke", space, reader, served=served)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout == f"revoked {reader}'s access to space {space}\n"
    assert _recall(served, reader, space) == []  # the next request reads nothing of it
    not_member = _spaces("revoke", space, reader, served=served)
    assert not_member.returncode == 1 and "404" in not_member.stderr

    deleted = _spaces("delete", space, served=served)
    assert deleted.returncode == 0, deleted.stderr
    assert _recall(served, writer, space) == []
    gone = _spaces("members", space, served=served)
    assert gone.returncode == 1 and f"pgrecall: {served.base}: 404 " in gone.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("create", "Team"),
        ("create", "t", "--description", "x" * 1001),
        ("grant", "team", "has space", "--access", "read"),
        ("grant", "team", "u1", "--access", "admin"),
        ("revoke", "_team", "u1"),
    ],
)
def test_bad_arguments_exit_2_before_asking(served: Served, args: tuple[str, ...]) -> None:
    result = _spaces(*args, served=served)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""


def test_keys_bound_to_an_agent(served: Served) -> None:
    user = f"agent-key-{uuid.uuid4()}"
    created = _keys(
        "create", "--user", user, "--agent", "mail", "--server", served.base, env=_env()
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert f"for user {user}, agent mail, scope write" in created.stderr
    listed = _keys("list", "--user", user, "--server", served.base, env=_env())
    (line,) = listed.stdout.splitlines()
    assert " agent mail " in line
    other = httpx.post(
        f"{served.base}/v1/tools/query_memory",
        json={"query": "x"},
        headers={"Authorization": f"Bearer {token}", "X-Agent-Id": "calendar"},
        timeout=30,
    )
    assert other.status_code == 403, other.text
    bad = _keys("create", "--user", user, "--agent", "has space", env=_env())
    assert bad.returncode == 2 and bad.stderr.startswith("pgrecall: --agent: ")


def test_access_words_agree_with_the_service() -> None:
    """The command checks --access against app.domain's words, which the schema uses too."""
    from app.domain import SPACE_ACCESS
    from app.schemas.spaces import MemberGrant

    for access in SPACE_ACCESS:
        assert MemberGrant(access=access).access == access
