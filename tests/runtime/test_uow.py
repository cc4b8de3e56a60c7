"""The unit of work: after-commit hooks run once the transaction commits, never after a
rollback, and a failing hook does not undo or fail the committed write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from app.db import after_commit
from app.runtime import user_transaction

INSERT = text("INSERT INTO conversations (id, user_id, title) VALUES (gen_random_uuid(), :u, :t)")


async def test_hooks_run_after_the_commit_only(
    make_client: Callable[..., Any], user_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    async with make_client() as (_, app):
        sessionmaker = app.state.resources.sessionmaker

        async def seen_committed() -> None:
            # The hook runs outside the transaction: a new one sees the committed row.
            async with user_transaction(sessionmaker, user_id) as session:
                count = await session.scalar(
                    text("SELECT count(*) FROM conversations WHERE user_id = :u"), {"u": user_id}
                )
            ran.append(f"committed {count}")

        async with user_transaction(sessionmaker, user_id) as session:
            await session.execute(INSERT, {"u": user_id, "t": "x"})
            after_commit(session, seen_committed)
            assert ran == []
        assert ran == ["committed 1"]

        with pytest.raises(RuntimeError):
            async with user_transaction(sessionmaker, user_id) as session:
                after_commit(session, seen_committed)
                raise RuntimeError("the handler failed")
        assert ran == ["committed 1"]

        async def broken() -> None:
            raise OSError("redis went away")

        async with user_transaction(sessionmaker, user_id) as session:
            await session.execute(INSERT, {"u": user_id, "t": "y"})
            after_commit(session, broken)
            after_commit(session, seen_committed)
        assert ran == ["committed 1", "committed 2"]
        assert "after-commit hook failed" in caplog.text
