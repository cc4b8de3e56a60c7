"""Key-addressable memories: memory_items rows with a (store_namespace, store_key) address."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    Float,
    Update,
    case,
    extract,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from app.models import MemoryItem

# Distinct namespaces read for one listing, at most (a user's namespaces are few).
MAX_NAMESPACES = 10_000


def _like_prefix(namespace: str) -> str:
    escaped = namespace.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + ".%"


# metadata keys of a store item: its TTL in minutes, and that it is left out of search by meaning.
TTL = "ttl"
UNINDEXED = "unindexed"


def _live() -> ColumnElement[bool]:
    """Not expired (an expired item is gone for reads before a sweep deletes it)."""
    return or_(MemoryItem.expires_at.is_(None), MemoryItem.expires_at > func.now())


def _update_undeleted(user_id: str, *where: ColumnElement[bool]) -> Update:
    """An UPDATE of the user's items that are not deleted and match `where` (the ORM session's
    objects are not synchronised)."""
    return (
        update(MemoryItem)
        .where(MemoryItem.user_id == user_id, MemoryItem.deleted_at.is_(None), *where)
        .execution_options(synchronize_session=False)
    )


def expiry(ttl: float | None) -> Any:
    """The expires_at of an item written now with this TTL in minutes (the database's clock)."""
    return None if ttl is None else func.now() + timedelta(minutes=ttl)


def _jsonb(value: Any) -> Any:
    return func.cast(value, JSONB)


def _operator(field: Any, op: str, operand: Any) -> ColumnElement[bool]:
    """One LangGraph filter operator on a top-level field of the value. As InMemoryStore: $ne
    holds for a missing field; an order operator compares numbers numerically, strings as
    text, and never holds across kinds."""
    if op == "$eq":
        return field == _jsonb(operand)
    if op == "$ne":
        return field.is_distinct_from(_jsonb(operand))
    if isinstance(operand, str):
        kind, right = "string", operand
        left: Any = case((func.jsonb_typeof(field) == kind, field.astext))
    else:
        # CASE, not AND: only a number reaches the cast.
        kind, right = "number", float(operand)
        left = case((func.jsonb_typeof(field) == kind, func.cast(field.astext, Float)))
    compare: ColumnElement[bool] = {
        "$gt": left > right,
        "$gte": left >= right,
        "$lt": left < right,
        "$lte": left <= right,
    }[op]
    return compare


def value_conditions(value_filter: dict[str, Any]) -> list[ColumnElement[bool]]:
    """The filter as SQL conditions on the stored value (schema-checked operators)."""
    conditions: list[ColumnElement[bool]] = []
    for name, wanted in value_filter.items():
        field = MemoryItem.metadata_["value"][name]
        if isinstance(wanted, dict) and any(k.startswith("$") for k in wanted):
            conditions.extend(_operator(field, op, operand) for op, operand in wanted.items())
        elif isinstance(wanted, dict):
            conditions.append(field.op("@>")(_jsonb(wanted)))
        else:
            conditions.append(field == _jsonb(wanted))
    return conditions


class StoreRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(
        self, user_id: str, namespace: str, key: str, *, include_deleted: bool = False
    ) -> MemoryItem | None:
        stmt = select(MemoryItem).where(
            MemoryItem.user_id == user_id,
            MemoryItem.store_namespace == namespace,
            MemoryItem.store_key == key,
            MemoryItem.valid_to.is_(None),  # closed versions are history, not the item
            *MemoryItem.in_this_scope(),  # an address holds one item per scope
        )
        if not include_deleted:
            stmt = stmt.where(MemoryItem.deleted_at.is_(None), _live())
        # populate_existing: a row replaced by upsert in this session is read afresh.
        stmt = stmt.execution_options(populate_existing=True)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def upsert(
        self, user_id: str, namespace: str, key: str, fields: dict[str, Any]
    ) -> tuple[uuid.UUID, bool]:
        """Insert the item at its address, or replace the one there (reviving a deleted one).

        The row's id and whether it was inserted. One statement, so two concurrent puts on a new
        address end as one row (the later value wins) instead of a unique violation.
        """
        row = {
            "id": uuid.uuid4(),
            "user_id": user_id,
            "store_namespace": namespace,
            "store_key": key,
            **fields,
        }
        stmt = insert(MemoryItem).values(**row)
        columns = MemoryItem.__mapper__.attrs
        changed = {
            columns[name].columns[0].name: stmt.excluded[columns[name].columns[0].name]
            for name in fields
        }
        # xmax is 0 on a freshly inserted row version, set on one ON CONFLICT updated.
        stmt = stmt.on_conflict_do_update(
            index_elements=["user_id", "store_namespace", "store_key", "agent_id", "run_id"],
            index_where=MemoryItem.store_key.is_not(None) & MemoryItem.valid_to.is_(None),
            # EXCLUDED.updated_at: the proposed row's default, now(). Citus refuses a function
            # call in DO UPDATE SET on a distributed table (docs/scaling.md).
            set_={**changed, "deleted_at": None, "updated_at": stmt.excluded.updated_at},
        ).returning(MemoryItem.id, literal_column("xmax = 0").label("inserted"))
        result = (await self.session.execute(stmt)).one()
        return result.id, bool(result.inserted)

    async def close_current(self, user_id: str, namespace: str, key: str) -> uuid.UUID | None:
        """End the validity of the version at the address (deleted or not) now; its id, None
        when there is none. The row lock makes a concurrent put wait, then find no current
        version to close."""
        return await self._set_on_current(user_id, namespace, key, live_only=False, valid_to=True)

    async def delete(self, user_id: str, namespace: str, key: str) -> uuid.UUID | None:
        """Soft-delete the live item at the address; its id, None when there was none."""
        return await self._set_on_current(user_id, namespace, key, live_only=True, valid_to=False)

    async def _set_on_current(
        self, user_id: str, namespace: str, key: str, *, live_only: bool, valid_to: bool
    ) -> uuid.UUID | None:
        """Stamp now() on the current version at the address: its valid_to (closing it) or its
        deleted_at (only if it is not deleted already)."""
        stmt = update(MemoryItem).where(
            MemoryItem.user_id == user_id,
            MemoryItem.store_namespace == namespace,
            MemoryItem.store_key == key,
            MemoryItem.valid_to.is_(None),
            *MemoryItem.in_this_scope(),  # an address holds one item per scope
        )
        if live_only:
            stmt = stmt.where(MemoryItem.deleted_at.is_(None))
        stamp = {"valid_to": func.now()} if valid_to else {"deleted_at": func.now()}
        stmt = stmt.values(**stamp, updated_at=func.now()).returning(MemoryItem.id)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    def _within(self, user_id: str, prefix: str, value_filter: dict[str, Any] | None) -> Any:
        stmt = select(MemoryItem).where(
            MemoryItem.user_id == user_id,
            MemoryItem.store_key.is_not(None),
            MemoryItem.deleted_at.is_(None),
            MemoryItem.valid_to.is_(None),
            _live(),
        )
        if prefix:
            stmt = stmt.where(
                (MemoryItem.store_namespace == prefix)
                | MemoryItem.store_namespace.like(_like_prefix(prefix), escape="\\")
            )
        if value_filter:
            stmt = stmt.where(*value_conditions(value_filter))
        # A second read after a TTL refresh sees the new expires_at.
        return stmt.execution_options(populate_existing=True)

    async def newest(
        self,
        user_id: str,
        prefix: str,
        value_filter: dict[str, Any] | None,
        *,
        limit: int,
        offset: int,
    ) -> Sequence[MemoryItem]:
        """Items under the namespace prefix, most recently updated first."""
        stmt = self._within(user_id, prefix, value_filter)
        stmt = stmt.order_by(MemoryItem.updated_at.desc(), MemoryItem.id).limit(limit)
        return (await self.session.execute(stmt.offset(offset))).scalars().all()

    async def nearest(
        self,
        user_id: str,
        prefix: str,
        value_filter: dict[str, Any] | None,
        vector: Any,
        model: str,
        *,
        limit: int,
        offset: int,
    ) -> list[tuple[MemoryItem, float]]:
        """Items under the prefix by cosine similarity to `vector`, best first (exact scan:
        `+ 0` keeps the ANN index out, which filters by user only after its scan)."""
        distance = MemoryItem.embedding.cosine_distance(vector)
        stmt = self._within(user_id, prefix, value_filter).where(
            MemoryItem.embedding_model == model,
            ~MemoryItem.metadata_.has_key(UNINDEXED),  # put with index=False
        )
        stmt = (
            stmt.add_columns((1 - distance).label("similarity"))
            .order_by(distance + 0, MemoryItem.id)
            .limit(limit)
            .offset(offset)
        )
        return [(row[0], float(row[1])) for row in (await self.session.execute(stmt)).all()]

    async def namespaces(self, user_id: str) -> list[str]:
        """The user's distinct live namespaces (joined), sorted."""
        stmt = (
            select(MemoryItem.store_namespace)
            .where(
                MemoryItem.user_id == user_id,
                MemoryItem.store_key.is_not(None),
                MemoryItem.deleted_at.is_(None),
                MemoryItem.valid_to.is_(None),
                _live(),
            )
            .distinct()
            .order_by(MemoryItem.store_namespace)
            .limit(MAX_NAMESPACES)
        )
        return [str(n) for n in (await self.session.execute(stmt)).scalars().all()]

    async def refresh_ttl(self, user_id: str, ids: Sequence[uuid.UUID]) -> None:
        """Restart the TTL of the items that have one (now + their TTL), as a read with
        refresh_ttl does. The new expiry is epoch seconds (the clock read alone, then
        arithmetic with the row's TTL): `now() + make_interval(...)` of a column is STABLE
        timestamptz arithmetic, which a Citus coordinator refuses in an UPDATE
        (tests/citus_rules.py)."""
        if not ids:
            return
        minutes = func.cast(MemoryItem.metadata_[TTL].astext, Float)
        expires = func.to_timestamp(extract("epoch", func.now()) + minutes * 60)
        stmt = _update_undeleted(
            user_id, MemoryItem.id.in_(ids), MemoryItem.metadata_.has_key(TTL), _live()
        ).values(expires_at=expires)
        await self.session.execute(stmt)

    async def sweep(self, user_id: str) -> int:
        """Delete (softly, as a delete) the user's expired store items; how many."""
        stmt = (
            _update_undeleted(
                user_id,
                MemoryItem.store_key.is_not(None),
                MemoryItem.valid_to.is_(None),
                MemoryItem.expires_at <= func.now(),
            )
            .values(deleted_at=func.now(), updated_at=func.now())
            .returning(MemoryItem.id)
        )
        return len((await self.session.execute(stmt)).all())
