"""The rows of the chosen candidates: content and metadata (`fetch`), and with them the turns
around seed messages (`fetch_around`, one round trip on the query path)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from app.repositories.retrieval.common import (
    NO_TIME_FILTER,
    Candidate,
    Row,
    SessionBound,
    TimeFilter,
    memory_valid,
)
from app.repositories.search_index import Source
from app.vectors import decode_halfvec, stored_vector

_MESSAGE_COLUMNS = (
    "m.id, m.content, m.role, m.created_at, m.conversation_id, m.seq, "
    "CASE WHEN jsonb_typeof(m.metadata -> 'speaker') = 'string' "
    "THEN m.metadata ->> 'speaker' END AS speaker"
)

# (previous, next) turn of each seed message in its own conversation: one ordered range of
# idx_messages_user_conversation_seq each (migration 0016).
_NEIGHBOURS_SQL = """
    SELECT c.id,
           (SELECT p.id FROM messages AS p
             WHERE p.conversation_id = c.conversation_id AND p.user_id = :user_id
               AND p.seq < c.seq ORDER BY p.seq DESC LIMIT 1) AS previous_id,
           (SELECT n.id FROM messages AS n
             WHERE n.conversation_id = c.conversation_id AND n.user_id = :user_id
               AND n.seq > c.seq ORDER BY n.seq LIMIT 1) AS next_id
    FROM messages AS c
    WHERE c.user_id = :user_id AND c.id = ANY(CAST(:seeds AS uuid[]))
"""


# A chosen memory's row (`memory_candidate`), and which rows: the user's `:ids`, visible and
# valid (in the time filter).
MEMORY_COLUMNS = "id, content, type, importance, created_at, source, source_message_id"


def memory_rows_sql(when: TimeFilter) -> str:
    """FROM ... WHERE of the user's memories `:ids` that are visible and valid (`when`)."""
    return (
        "FROM memory_items WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[])) "
        "AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > now())"
        + when.sql("memory_items")
        + memory_valid("memory_items", when)
    )


def memory_candidate(r: Row) -> Candidate:
    message = r["source_message_id"]
    reference = r["source"] or (f"message:{message}" if message else None)
    return Candidate(
        Source.MEMORY,
        r["id"],
        r["content"],
        r["type"],
        r["importance"],
        r["created_at"],
        reference,
        None,
        None,
    )


def _message_candidate(r: Row) -> Candidate:
    return Candidate(
        Source.MESSAGE,
        r["id"],
        r["content"],
        None,
        None,
        r["created_at"],
        f"conversation:{r['conversation_id']}#{r['seq']}",
        r["conversation_id"],
        r["role"],
        r["speaker"],
    )


Key = tuple[Source, uuid.UUID]


class Around(NamedTuple):
    """`fetch_around`'s answer: each seed's (previous, next) turn, the rows, and the stored
    vectors asked for with them."""

    neighbours: dict[uuid.UUID, tuple[uuid.UUID | None, uuid.UUID | None]]
    candidates: dict[Key, Candidate]
    vectors: dict[Key, npt.NDArray[np.float32]]


class ContextReads(SessionBound):
    async def fetch(
        self,
        user_id: str,
        keys: Sequence[tuple[Source, uuid.UUID]],
        when: TimeFilter = NO_TIME_FILTER,
    ) -> dict[tuple[Source, uuid.UUID], Candidate]:
        """Content and metadata of the chosen items (still scoped by user and time filter)."""
        out: dict[tuple[Source, uuid.UUID], Candidate] = {}
        memory_ids = [i for s, i in keys if s is Source.MEMORY]
        message_ids = [i for s, i in keys if s is Source.MESSAGE]
        if memory_ids:
            out, _ = await self._memories(user_id, memory_ids, when)
        if message_ids:
            rows = await self._rows(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages AS m "
                "WHERE m.user_id = :user_id AND m.id = ANY(CAST(:ids AS uuid[]))" + when.sql("m"),
                {"user_id": user_id, "ids": message_ids, **when.params()},
            )
            for r in rows:
                out[(Source.MESSAGE, r["id"])] = _message_candidate(r)
        return out

    async def vectors(
        self, user_id: str, keys: Sequence[tuple[Source, uuid.UUID]]
    ) -> dict[tuple[Source, uuid.UUID], npt.NDArray[np.float32]]:
        """The stored vectors of these items of the user (float32), in one statement: the
        answer head and the topic links read them (app/services/query/calibrate.py), as
        halfvec's binary form (app/vectors.py, `decode_halfvec`)."""
        memory_ids = [i for s, i in keys if s is Source.MEMORY]
        message_ids = [i for s, i in keys if s is Source.MESSAGE]
        if not keys:
            return {}
        rows = await self._rows(
            f"SELECT 0 AS source, id, {stored_vector('embedding')} AS v FROM memory_items "
            "WHERE user_id = :user_id AND id = ANY(CAST(:memories AS uuid[])) "
            "UNION ALL "
            f"SELECT 1, id, {stored_vector('embedding')} FROM messages "
            "WHERE user_id = :user_id AND id = ANY(CAST(:messages AS uuid[]))",
            {"user_id": user_id, "memories": memory_ids, "messages": message_ids},
        )
        return {
            (Source(r["source"]), r["id"]): decode_halfvec(r["v"])
            for r in rows
            if r["v"] is not None
        }

    async def _memories(
        self,
        user_id: str,
        ids: Sequence[uuid.UUID],
        when: TimeFilter,
        vectors: Sequence[uuid.UUID] = (),
    ) -> tuple[dict[Key, Candidate], dict[Key, npt.NDArray[np.float32]]]:
        """The rows of these memories, and the stored vectors of those in `vectors` with them
        (app/vectors.py's binary form: the topic links read them without a statement of their
        own)."""
        vector = (
            f"CASE WHEN id = ANY(CAST(:vectors AS uuid[])) THEN {stored_vector('embedding')} END"
            if vectors
            else "NULL::bytea"
        )
        rows = await self._rows(
            f"SELECT {MEMORY_COLUMNS}, {vector} AS v {memory_rows_sql(when)}",
            {"user_id": user_id, "ids": list(ids), "vectors": list(vectors), **when.params()},
        )
        candidates: dict[Key, Candidate] = {}
        stored: dict[Key, npt.NDArray[np.float32]] = {}
        for r in rows:
            key = (Source.MEMORY, r["id"])
            candidates[key] = memory_candidate(r)
            if r["v"] is not None:
                stored[key] = decode_halfvec(r["v"])
        return candidates, stored

    async def fetch_around(
        self,
        user_id: str,
        keys: Sequence[tuple[Source, uuid.UUID]],
        seeds: Sequence[uuid.UUID],
        when: TimeFilter = NO_TIME_FILTER,
        vectors: Sequence[uuid.UUID] = (),
    ) -> Around:
        """(previous, next) message of each seed in its own conversation, and `fetch` of the keys
        and of those neighbours, with one statement for the messages (one round trip on the
        query path); the memories as in `fetch`, with the stored vectors of the memories in
        `vectors` (the topic links' input) in the same statement. The wanted ids reach the
        messages' primary key as one array (`= ANY(ARRAY(...))`): as `IN (SELECT ...)` the
        planner, which estimates a user's rows low under row-level security, joined every
        message of the user first.
        The messages are read by their primary key alone: the foreign key (user_id,
        conversation_id) already holds each to a conversation of the same user, and a join to
        conversations let the generic plan read the user's messages conversation by
        conversation (`python -m bench.stages`: 0.68 -> 0.39 ms of Postgres per query for
        small users, docs/performance.md)."""
        out: dict[tuple[Source, uuid.UUID], Candidate] = {}
        memory_ids = [i for s, i in keys if s is Source.MEMORY]
        message_ids = [i for s, i in keys if s is Source.MESSAGE]
        around: dict[uuid.UUID, tuple[uuid.UUID | None, uuid.UUID | None]] = {}
        stored: dict[Key, npt.NDArray[np.float32]] = {}
        if memory_ids:
            out, stored = await self._memories(user_id, memory_ids, when, vectors)
        if not message_ids and not seeds:
            return Around(around, out, stored)
        rows = await self._rows(
            f"""
            WITH nb AS MATERIALIZED ({_NEIGHBOURS_SQL}), wanted AS (
                SELECT unnest(CAST(:ids AS uuid[])) AS id
                UNION SELECT previous_id FROM nb UNION SELECT next_id FROM nb
            )
            SELECT true AS seed, nb.id, nb.previous_id, nb.next_id, NULL AS content,
                   NULL AS role, NULL::timestamptz AS created_at, NULL::uuid AS conversation_id,
                   NULL::bigint AS seq, NULL AS speaker
            FROM nb
            UNION ALL
            SELECT false, m.id, NULL, NULL, {_MESSAGE_COLUMNS.replace("m.id, ", "")}
            FROM messages AS m
            WHERE m.user_id = :user_id AND m.id = ANY(ARRAY(SELECT id FROM wanted)){when.sql("m")}
            """,
            {"user_id": user_id, "ids": message_ids, "seeds": list(seeds), **when.params()},
        )
        for r in rows:
            if r["seed"]:
                around[r["id"]] = (r["previous_id"], r["next_id"])
            else:
                out[(Source.MESSAGE, r["id"])] = _message_candidate(r)
        return Around(around, out, stored)
