"""Export one user's data to JSON Lines and import it back, exactly (app/schemas/portable.py).

Export reads everything of the user in one REPEATABLE READ transaction (one snapshot: a write
landing meanwhile is either wholly in the file or not at all) and yields one line per row.

Import validates the whole file first (header, every line, the end line's counts, references
between lines), then writes it in the caller's transaction: conversations, messages in order,
every memory version with its times and deleted/expired state, the supersession links, and
the keyword postings exactly as the write paths make them. Ids are kept when the file is
restored into the same user with none of them present; otherwise (another user, or the
target already holds data) every id is replaced by a fresh one, links remapped with it.
Vectors from the file are used when they come from the configured model; otherwise the
texts are embedded again. Services flush, never commit.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.cache import Cache
from app.db import user_session
from app.errors import ConflictError, ValidationFailedError
from app.models import Conversation, MemoryItem, Message
from app.models.base import EMBEDDING_DIMENSION
from app.repositories.passages import PassageRepository
from app.repositories.portable import PortableRepository
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.schemas.portable import (
    FORMAT,
    VERSION,
    ConversationLine,
    EndLine,
    HeaderLine,
    MemoryLine,
    MessageLine,
)
from app.services.conversation import conversation_documents
from app.services.effects import invalidate_after_commit
from app.services.embedding import EmbeddingService, Priority
from app.services.memory import content_hash
from app.services.passages import PassageSource, embed_passages

log = logging.getLogger(__name__)

_EMBED_BATCH = 256
Progress = Callable[[int], None]


def _vector(value: Any) -> list[float] | None:
    return None if value is None else [float(x) for x in np.asarray(value)]


# A line's field is the ORM attribute of the same name, but for these.
_ATTRIBUTES = {"metadata": "metadata_"}


def _line(model: type[BaseModel], row: Any, embeddings: bool) -> dict[str, Any]:
    """A stored row as its export line: every field of `model` read from the row's attribute
    (the kind is the model's own; the vector only with `embeddings`)."""
    names = set(model.model_fields) - {"kind", "embedding"}
    line = model(**{name: getattr(row, _ATTRIBUTES.get(name, name)) for name in names})
    out = line.model_dump(mode="json", exclude={"embedding"})
    if embeddings:
        out["embedding"] = _vector(row.embedding)
    return out


def conversation_line(c: Conversation) -> dict[str, Any]:
    return _line(ConversationLine, c, False)


def message_line(m: Message, embeddings: bool) -> dict[str, Any]:
    return _line(MessageLine, m, embeddings)


def memory_line(m: MemoryItem, embeddings: bool) -> dict[str, Any]:
    return _line(MemoryLine, m, embeddings)


async def open_export(
    sessionmaker: async_sessionmaker[AsyncSession], user_id: str, *, embeddings: bool = False
) -> AsyncIterator[str]:
    """The user's export as JSON Lines text, for a streamed HTTP answer (API and console).

    The snapshot is taken here, before the answer starts: a database failure is raised now
    (an error answer), not in the middle of a stream. Once streaming, a failure ends the stream
    without its end line, which tells the reader the export is incomplete. The session closes
    when the stream ends."""
    session = user_session(sessionmaker, user_id)
    try:
        await session.connection(execution_options=SNAPSHOT)
        await PortableRepository(session).counts(user_id)
    except BaseException:
        await session.close()
        raise
    return _json_lines(session, user_id, embeddings)


async def _json_lines(session: AsyncSession, user_id: str, embeddings: bool) -> AsyncIterator[str]:
    try:
        async for line in export_user(session, user_id, embeddings=embeddings):
            yield json.dumps(line, ensure_ascii=False) + "\n"
    except Exception:
        log.exception("export of a user failed mid-stream")
    finally:
        await session.close()


async def export_counts(session: AsyncSession, user_id: str) -> dict[str, int]:
    """Conversations, messages and memories the export will hold (in the session's snapshot)."""
    return await PortableRepository(session).counts(user_id)


async def export_user(
    session: AsyncSession,
    user_id: str,
    *,
    embeddings: bool = False,
    progress: Progress | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The user's export, line by line (header first, end line last). Begin the session's
    transaction with SNAPSHOT options for one consistent snapshot of the user's rows."""
    repo = PortableRepository(session)
    yield HeaderLine(
        user_id=user_id, exported_at=datetime.now(UTC), embeddings=embeddings
    ).model_dump(mode="json")
    counts = {"conversations": 0, "messages": 0, "memories": 0}
    async for c in repo.conversations(user_id):
        counts["conversations"] += 1
        yield conversation_line(c)
    async for m in repo.messages(user_id):
        counts["messages"] += 1
        yield message_line(m, embeddings)
        if progress:
            progress(1)
    async for item in repo.memories(user_id):
        counts["memories"] += 1
        yield memory_line(item, embeddings)
        if progress:
            progress(1)
    yield EndLine(counts=counts).model_dump(mode="json")


SNAPSHOT = {"isolation_level": "REPEATABLE READ"}


# -- import ------------------------------------------------------------------------------------


@dataclass
class ParsedExport:
    header: HeaderLine
    conversations: list[ConversationLine] = field(default_factory=list)
    messages: list[MessageLine] = field(default_factory=list)
    memories: list[MemoryLine] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {
            "conversations": len(self.conversations),
            "messages": len(self.messages),
            "memories": len(self.memories),
        }

    def ids(self) -> list[uuid.UUID]:
        return [x.id for x in [*self.conversations, *self.messages, *self.memories]]


_KINDS = {
    "conversation": ConversationLine,
    "message": MessageLine,
    "memory": MemoryLine,
}


def parse_export(lines: Iterable[str]) -> ParsedExport:
    """Validate a whole export; ValidationFailedError names the first bad line."""
    parsed: ParsedExport | None = None
    end: EndLine | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
            kind = data.get("kind") if isinstance(data, dict) else None
            if end is not None:
                raise ValueError("a line after the end line")
            if parsed is None:
                if kind != "header" or data.get("format") != FORMAT:
                    raise ValueError(f"the first line must be a {FORMAT} header")
                if data.get("version") != VERSION:
                    raise ValueError(f"format version {data.get('version')!r} is not {VERSION}")
                parsed = ParsedExport(HeaderLine.model_validate(data))
            elif kind == "end":
                end = EndLine.model_validate(data)
            elif kind in _KINDS:
                row = _KINDS[kind].model_validate(data)
                getattr(parsed, f"{kind}s" if kind != "memory" else "memories").append(row)
            else:
                raise ValueError(f"unknown kind {kind!r}")
        except (ValueError, ValidationError) as exc:
            message = str(exc).splitlines()[0] if isinstance(exc, ValidationError) else str(exc)
            raise ValidationFailedError(f"line {number}: {message}", f"line {number}") from None
    if parsed is None:
        raise ValidationFailedError("empty file: no header line", "line 1")
    if end is None:
        raise ValidationFailedError("no end line: the file is truncated")
    if end.counts != parsed.counts:
        raise ValidationFailedError(
            f"the end line counts {end.counts}, the file has {parsed.counts}"
        )
    _check_references(parsed)
    return parsed


def _check_references(p: ParsedExport) -> None:
    ids = p.ids()
    if len(set(ids)) != len(ids):
        raise ValidationFailedError("an id appears twice")
    conversations = {c.id for c in p.conversations}
    messages = {m.id for m in p.messages}
    memories = {m.id for m in p.memories}
    for m in p.messages:
        if m.conversation_id not in conversations:
            raise ValidationFailedError(f"message {m.id}: unknown conversation")
    olds = [m.supersedes_id for m in p.memories if m.supersedes_id is not None]
    if len(set(olds)) != len(olds):
        raise ValidationFailedError("a memory is superseded twice")
    for m in p.memories:
        if m.supersedes_id is not None and m.supersedes_id not in memories:
            raise ValidationFailedError(f"memory {m.id}: supersedes an unknown memory")
        if m.source_message_id is not None and m.source_message_id not in messages:
            raise ValidationFailedError(f"memory {m.id}: unknown source message")


@dataclass(frozen=True)
class ImportReport:
    user_id: str
    counts: dict[str, int]
    ids_kept: bool
    reembedded: int

    def summary(self) -> str:
        rows = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        ids = "ids kept" if self.ids_kept else "new ids"
        return f"imported into {self.user_id}: {rows}; {ids}; {self.reembedded} texts embedded"


async def import_export(
    session: AsyncSession,
    parsed: ParsedExport,
    embeddings: EmbeddingService,
    *,
    user_id: str | None = None,
    allow_non_empty: bool = False,
    progress: Progress | None = None,
    passages: bool = True,
    cache: Cache | None = None,
) -> ImportReport:
    """Write a parsed export into `user_id` (default: the exported user); `passages` makes the
    messages' sentence passages as the write path does (PGRECALL_MESSAGE_PASSAGES). With
    `cache`, the user's cached query results are dropped once the import commits."""
    target = user_id or parsed.header.user_id
    invalidate_after_commit(session, cache, target)
    repo = PortableRepository(session)
    held = await repo.counts(target)
    if any(held.values()) and not allow_non_empty:
        raise ConflictError(f"user {target} already has data ({held}); refusing to import")
    keep = target == parsed.header.user_id and not any(held.values())
    if keep and await repo.existing_ids(target, parsed.ids()):
        keep = False
    new_id: dict[uuid.UUID, uuid.UUID] = {i: (i if keep else uuid.uuid4()) for i in parsed.ids()}

    def remap(value: uuid.UUID | None) -> uuid.UUID | None:
        return None if value is None else new_id[value]

    def usable(line: MessageLine | MemoryLine) -> bool:
        """The file's vector is of the configured model and width."""
        return (
            line.embedding is not None
            and line.embedding_model == embeddings.model
            and len(line.embedding) == EMBEDDING_DIMENSION
        )

    texts = [x.content for x in [*parsed.messages, *parsed.memories] if not usable(x)]
    fresh: list[Any] = []
    for start in range(0, len(texts), _EMBED_BATCH):
        batch = texts[start : start + _EMBED_BATCH]
        fresh.extend(await embeddings.embed(batch, priority=Priority.BULK))
        if progress:
            progress(len(batch))
    vectors = iter(fresh)

    def vector(line: MessageLine | MemoryLine) -> tuple[Any, str]:
        if usable(line):
            return np.asarray(line.embedding, dtype=np.float32), embeddings.model
        return next(vectors), embeddings.model

    await repo.insert_conversations(
        [
            {
                "id": new_id[c.id],
                "user_id": target,
                "title": c.title,
                "created_at": c.created_at,
                "updated_at": c.updated_at,
                "agent_id": c.agent_id,
                "run_id": c.run_id,
            }
            for c in parsed.conversations
        ]
    )
    message_rows = []
    for m in parsed.messages:
        vec, model = vector(m)
        message_rows.append(
            {
                "id": new_id[m.id],
                "conversation_id": new_id[m.conversation_id],
                "user_id": target,
                "role": m.role,
                "content": m.content,
                "created_at": m.created_at,
                "correlation_id": m.correlation_id,
                "metadata_": m.metadata,
                "embedding": vec,
                "embedding_model": model,
                "agent_id": m.agent_id,
                "run_id": m.run_id,
            }
        )
    await repo.insert_messages(message_rows)
    # Passages are derived data (not in the file): made again as the write paths make them.
    if passages:
        sentences = await embed_passages(
            embeddings,
            [PassageSource(new_id[m.id], m.content, m.metadata) for m in parsed.messages],
            priority=Priority.BULK,
        )
        await PassageRepository(session).insert(target, embeddings.model, sentences)
    memory_rows = []
    for item in parsed.memories:
        vec, model = vector(item)
        memory_rows.append(
            {
                "id": new_id[item.id],
                "user_id": target,
                "content": item.content,
                "content_hash": content_hash(item.content),
                "type": item.type,
                "importance": item.importance,
                "source": item.source,
                "source_message_id": remap(item.source_message_id),
                "created_at": item.created_at,
                "updated_at": item.updated_at,
                "expires_at": item.expires_at,
                "deleted_at": item.deleted_at,
                "valid_from": item.valid_from,
                "valid_to": item.valid_to,
                "metadata_": item.metadata,
                "embedding": vec,
                "embedding_model": model,
                "tags": list(item.tags),
                "agent_id": item.agent_id,
                "run_id": item.run_id,
                "last_retrieved_at": item.last_retrieved_at,
                "times_retrieved": item.times_retrieved,
            }
        )
    await repo.insert_memories(memory_rows)
    await repo.link_memories(
        target,
        [
            (new_id[m.id], new_id[m.supersedes_id])
            for m in parsed.memories
            if m.supersedes_id is not None
        ],
    )
    await _index(session, target, parsed, new_id)
    return ImportReport(target, parsed.counts, keep, len(texts))


async def _index(
    session: AsyncSession, user_id: str, p: ParsedExport, new_id: dict[uuid.UUID, uuid.UUID]
) -> None:
    """Keyword postings as the write paths make them: a memory's own text; a turn's text with
    its neighbours in the conversation (app/services/conversation.py::conversation_documents)."""
    docs = [Document(new_id[m.id], Source.MEMORY, m.content) for m in p.memories]
    by_conversation: dict[uuid.UUID, list[MessageLine]] = {}
    for m in p.messages:
        by_conversation.setdefault(m.conversation_id, []).append(m)
    turns = [
        (new_id[m.id], m.conversation_id, m.content, m.metadata)
        for lines in by_conversation.values()
        for m in lines
    ]
    docs += conversation_documents(turns)
    await SearchIndexRepository(session).index(user_id, docs)
