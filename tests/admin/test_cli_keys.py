"""`pgrecall keys` as an operator runs it (subprocesses, private database)."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

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


def test_outside_the_services_directory_it_refuses_a_database_that_does_not_exist(
    run, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """No service answers and the embedded database is not there: the command says so and
    creates nothing (it used to make a new ./.data and print a token no service knew)."""
    elsewhere = tmp_path / "elsewhere"
    result = run(
        "keys", "create", "--user", "u",
        env={"PGRECALL_DATABASE_URL": None, "PGRECALL_DATA_DIR": str(elsewhere)},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert f"there is no database in {elsewhere}" in result.stderr
    assert not elsewhere.exists()


async def test_on_the_database_it_names_the_database(run, private_db: str) -> None:  # type: ignore[no-untyped-def]
    created = run("keys", "create", "--user", f"keys-{uuid.uuid4()}")
    assert created.returncode == 0, created.stderr
    assert "no service answered at http://127.0.0.1:" in created.stderr
    assert "using postgresql" in created.stderr  # (a password would show as ***)
