"""`pgrecall keys` as an operator runs it (subprocesses, private database)."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine


async def test_create_list_revoke(run, private_db: str) -> None:  # type: ignore[no-untyped-def]
    user = f"keys-{uuid.uuid4()}"
    created = run("keys", "create", "--user", user, "--scope", "read", "--expires", "30d")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("pgr_") and "\n" not in token
    assert f"for user {user}, scope read" in created.stderr

    listed = run("keys", "list", "--user", user)
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    key_id = line.split()[0]
    assert token not in listed.stdout
    assert f"{token[:12]}..." in line and " read " in line and " active " in line

    engine = create_async_engine(private_db)
    try:
        async with engine.connect() as conn:
            stored = await conn.scalar(
                text("SELECT key_hash FROM api_keys WHERE id = CAST(:id AS uuid)"), {"id": key_id}
            )
    finally:
        await engine.dispose()
    assert stored == hashlib.sha256(token.encode()).hexdigest()

    revoked = run("keys", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert " revoked " in run("keys", "list", "--user", user).stdout

    unknown = run("keys", "revoke", str(uuid.uuid4()))
    assert unknown.returncode == 1
    assert "key not found" in unknown.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--user", "has space"),
        ("--user", "u", "--scope", "admin"),
        ("--user", "u", "--expires", "forever"),
    ],
)
def test_create_rejects_bad_options(run, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    result = run("keys", "create", *args)
    assert result.returncode == 2
    assert result.stdout == ""
