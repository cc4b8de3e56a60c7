"""Start-up with an external Postgres: migrations and grants as the owner, requests as the
service role; a missing service role stops start-up with one readable line."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.adapters.embedder import LocalEmbedder
from app.config import Settings
from app.embedded import EmbeddedPostgres
from app.main import create_app
from app.roles import (
    DEFAULT_APP_ROLE,
    RoleSetupError,
    ensure_service_role,
    policy_rewrites,
    with_user,
)
from tests.helpers import headers


@pytest.fixture
async def fresh_db(pg: EmbeddedPostgres) -> AsyncIterator[str]:
    """An empty database on the test server (no migrations, no grants yet); the owner's URL."""
    name = f"pgr_roles_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(pg.url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield pg.url.replace("@/postgres?", f"@/{name}?")
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


async def test_start_up_migrates_as_the_owner_and_grants_the_service_role(
    fresh_db: str, embedder: LocalEmbedder, user_id: str
) -> None:
    settings = Settings(
        database_url=with_user(fresh_db, DEFAULT_APP_ROLE),
        migration_database_url=fresh_db,
        rate_limit_per_minute=0,
    )
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            response = await client.post("/v1/conversations", json={}, headers=headers(user_id))
            assert response.status_code == 201, response.text
            assert (await client.get("/ready")).status_code == 200
        async with app.state.resources.engine.connect() as conn:
            assert await conn.scalar(text("SELECT current_user")) == DEFAULT_APP_ROLE


async def test_a_missing_service_role_is_named(fresh_db: str) -> None:
    with pytest.raises(RoleSetupError, match="pgrecall_nobody does not exist"):
        await ensure_service_role(fresh_db, "pgrecall_nobody", create=False)


async def test_creating_the_role_twice_is_harmless_and_resets_bypassrls(fresh_db: str) -> None:
    from app.migrate import upgrade_head

    await asyncio.to_thread(upgrade_head, fresh_db)
    role = f"pgr_test_{uuid.uuid4().hex[:8]}"
    await ensure_service_role(fresh_db, role, create=True)
    owner = create_async_engine(fresh_db)
    try:
        async with owner.begin() as conn:
            await conn.execute(text(f"ALTER ROLE {role} BYPASSRLS"))
        await ensure_service_role(fresh_db, role, create=True)
        async with owner.begin() as conn:
            bypass = await conn.scalar(
                text("SELECT rolbypassrls FROM pg_roles WHERE rolname = :r"), {"r": role}
            )
            assert bypass is False
            await conn.execute(text(f"DROP OWNED BY {role}"))
            await conn.execute(text(f"DROP ROLE {role}"))
    finally:
        await owner.dispose()


@pytest.mark.parametrize(
    ("grant", "revoke", "problem"),
    [
        (None, None, None),
        (
            "GRANT TRUNCATE ON memory_items TO {role}",
            "REVOKE TRUNCATE ON memory_items FROM {role}",
            "TRUNCATE on memory_items",
        ),
        ("GRANT postgres TO {role}", "REVOKE postgres FROM {role}", "may SET ROLE to postgres"),
        (
            "ALTER TABLE messages NO FORCE ROW LEVEL SECURITY",
            "ALTER TABLE messages FORCE ROW LEVEL SECURITY",
            "messages without forced row-level security",
        ),
        ("ALTER ROLE {role} BYPASSRLS", "ALTER ROLE {role} NOBYPASSRLS", "a BYPASSRLS role"),
    ],
)
async def test_rls_status_names_what_lets_the_role_escape(
    fresh_db: str, grant: str | None, revoke: str | None, problem: str | None
) -> None:
    from app.migrate import upgrade_head
    from app.roles import rls_status

    await asyncio.to_thread(upgrade_head, fresh_db)
    role = f"pgr_test_{uuid.uuid4().hex[:8]}"
    await ensure_service_role(fresh_db, role, create=True)
    owner = create_async_engine(fresh_db)
    service = create_async_engine(with_user(fresh_db, role))
    try:
        if grant:
            async with owner.begin() as conn:
                await conn.execute(text(grant.format(role=role)))
        async with service.connect() as conn:
            ok, message = await rls_status(conn)
        if problem is None:
            assert ok, message
        else:
            assert not ok and problem in message, message
    finally:
        await service.dispose()
        async with owner.begin() as conn:
            if revoke:
                await conn.execute(text(revoke.format(role=role)))
            await conn.execute(text(f"DROP OWNED BY {role}"))
            await conn.execute(text(f"DROP ROLE {role}"))
        await owner.dispose()


async def test_rls_status_at_a_url(pg: EmbeddedPostgres) -> None:
    from app.roles import rls_status_at

    ok, message = await rls_status_at(with_user(pg.url, DEFAULT_APP_ROLE))
    assert ok, message
    ok, message = await rls_status_at(pg.url)
    assert not ok and "superuser" in message
    ok, message = await rls_status_at(with_user(pg.url, "pgrecall_nobody"))
    assert not ok and "cannot connect as pgrecall_nobody" in message


async def test_service_role_status_for_doctor(pg: EmbeddedPostgres) -> None:
    from app.roles import service_role_status

    nobody = with_user(pg.url, "pgrecall_nobody")
    ok, message = await service_role_status(  # type: ignore[misc]
        pg.url, nobody, created_at_start=False, migrate_on_start=True
    )
    assert not ok and "role pgrecall_nobody does not exist" in message
    ok, message = await service_role_status(  # type: ignore[misc]
        pg.url, nobody, created_at_start=True, migrate_on_start=True
    )
    assert ok and "start-up creates it" in message
    ok, message = await service_role_status(  # type: ignore[misc]
        pg.url, with_user(pg.url, DEFAULT_APP_ROLE), created_at_start=True, migrate_on_start=True
    )
    assert ok and "no BYPASSRLS" in message


def test_policy_rewrites_move_each_setting_call_into_a_subquery_and_back() -> None:
    user = "((user_id)::text = current_setting('pgrecall.user_id'::text, true))"
    admin = "(current_setting('pgrecall.admin'::text, true) = 'on'::text)"
    policies = [
        ("messages", "messages_user", user, user),
        ("messages", "messages_admin", admin, None),
        ("other", "plain", "(owner = 'x'::text)", None),  # no setting: left alone
    ]
    once = policy_rewrites(policies, once=True)
    assert once == [
        # the column without Postgres' printed cast: written back, `(user_id)::text` is an
        # explicit cast, which Citus' router planner does not take as the distribution column
        'ALTER POLICY "messages_user" ON messages USING ((user_id = (SELECT '
        "current_setting('pgrecall.user_id'::text, true)))) WITH CHECK ((user_id = "
        "(SELECT current_setting('pgrecall.user_id'::text, true))))",
        'ALTER POLICY "messages_admin" ON messages USING (((SELECT '
        "current_setting('pgrecall.admin'::text, true)) = 'on'::text))",
    ]
    assert policy_rewrites(policies, once=False) == []  # already per row
    # As Postgres prints the subquery form back: the per-row form again.
    printed = (
        "((user_id)::text = ( SELECT current_setting('pgrecall.user_id'::text, true)"
        " AS current_setting))"
    )
    per_row = "(user_id = current_setting('pgrecall.user_id'::text, true))"
    assert policy_rewrites([("messages", "messages_user", printed, printed)], once=False) == [
        f'ALTER POLICY "messages_user" ON messages USING ({per_row}) WITH CHECK ({per_row})'
    ]
    assert policy_rewrites([("messages", "messages_user", printed, None)], once=True) == []


def test_the_scope_key_signs_with_standard_hmac_sha256() -> None:
    """app/db.py and migration 0018's SQL compute HMAC from stored pads; both must agree with the
    standard construction, for keys of a block or less and longer ones (hashed first)."""
    import hashlib
    import hmac

    from app.db import ScopeKey, scope_key_pads

    for key in (b"k" * 32, b"\x00\xff" * 32, b"x" * 100):
        signer = ScopeKey(*scope_key_pads(key))
        for user in ("alice", "o'brien", "ünïcode-ユーザー"):
            expected = hmac.new(key, user.encode(), hashlib.sha256).hexdigest()
            assert signer.sign(user) == expected
    assert "k" not in repr(ScopeKey(*scope_key_pads(b"k" * 32)))  # never the key in a log
