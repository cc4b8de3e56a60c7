"""`pgrecall spaces` on the database itself (no service answers: subprocesses, private
database), and `pgrecall keys create --agent` there."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine


async def test_create_grant_members_revoke_delete(run, private_db: str) -> None:  # type: ignore[no-untyped-def]
    space = f"fam-{uuid.uuid4().hex[:8]}"
    user = f"mia-{uuid.uuid4()}"
    created = run("spaces", "create", space, "--description", "the household")
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"created space {space}\n"
    assert "no service answered at http://127.0.0.1:" in created.stderr
    again = run("spaces", "create", space)
    assert again.returncode == 1 and f"space {space} exists" in again.stderr

    listed = run("spaces", "list")
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    assert line.startswith(f"{space}  created ") and line.endswith("the household")

    granted = run("spaces", "grant", space, user, "--access", "read")
    assert granted.returncode == 0, granted.stderr
    changed = run("spaces", "grant", space, user, "--access", "write")
    assert changed.stdout == f"granted {user} write access to space {space}\n"
    members = run("spaces", "members", space)
    (row,) = members.stdout.splitlines()
    assert row.split()[:2] == [user, "write"]

    engine = create_async_engine(private_db)
    try:
        async with engine.connect() as conn:
            stored = await conn.scalar(
                text("SELECT access FROM space_members WHERE space_id = :s AND user_id = :u"),
                {"s": space, "u": user},
            )
            assert stored == "write"
            revoked = run("spaces", "revoke", space, user)
            assert revoked.returncode == 0, revoked.stderr
            assert (
                await conn.scalar(
                    text("SELECT count(*) FROM space_members WHERE space_id = :s"), {"s": space}
                )
                == 0
            )
            missing = run("spaces", "revoke", space, user)
            assert missing.returncode == 1 and "no such member" in missing.stderr
            deleted = run("spaces", "delete", space)
            assert deleted.returncode == 0, deleted.stderr
            assert (
                await conn.scalar(text("SELECT count(*) FROM spaces WHERE id = :s"), {"s": space})
                == 0
            )
    finally:
        await engine.dispose()
    unknown = run("spaces", "members", space)
    assert unknown.returncode == 1 and "space not found" in unknown.stderr
    ungranted = run("spaces", "grant", space, user, "--access", "read")
    assert ungranted.returncode == 1 and "space not found" in ungranted.stderr


async def test_keys_create_with_an_agent(run, private_db: str) -> None:  # type: ignore[no-untyped-def]
    user = f"keys-{uuid.uuid4()}"
    created = run("keys", "create", "--user", user, "--agent", "support")
    assert created.returncode == 0, created.stderr
    assert f"for user {user}, agent support, scope write" in created.stderr
    listed = run("keys", "list", "--user", user)
    (line,) = listed.stdout.splitlines()
    assert " agent support " in line
    plain = run("keys", "create", "--user", user)
    assert plain.returncode == 0, plain.stderr
    rows = run("keys", "list", "--user", user).stdout.splitlines()
    assert sorted(" agent - " in r for r in rows) == [False, True]
