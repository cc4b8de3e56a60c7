"""Conversation persistence: messages are stored with their embedding and keyword postings."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypedDict

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import NotFoundError, found
from app.models import Conversation, Message
from app.repositories.conversation import ConversationRepository, NewMessage
from app.repositories.conversation_settings import ConversationSettingsRepository
from app.repositories.extraction import ExtractionRepository
from app.repositories.passages import NewPassage, PassageRepository
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.retrieval.speakers import named_speakers, usable_speaker
from app.schemas.conversation import MessageCreate
from app.services.embedding import EmbeddingService, Priority, Vectors
from app.services.passages import PassageSource, embed_passages

# A batch this large waits for the write gate (the bulk import path's): parsing it into
# postings is seconds of a backend's CPU, and ten such at once starve everyone's queries.
GATED_WRITE_CHARS = 20_000


def turn_document(
    message_id: uuid.UUID,
    content: str,
    previous: str | None,
    following: str | None,
    metadata: Mapping[str, Any] | None = None,
) -> Document:
    """A turn's keyword document: its own words plus (weighted) the turns either side of it.

    Answers in a dialogue often only make sense with the question that prompted them
    ("Yes, last Tuesday" after "Did you visit the museum?"). Measured on LoCoMo this lifted the
    keyword arm's Recall@5 noticeably (docs/retrieval.md); the vector text stays the turn alone.
    A turn whose metadata names its speaker is also found by that name ("What does Tim
    play?"), unless its words already hold it.
    """
    speaker = usable_speaker((metadata or {}).get("speaker"))
    if speaker is not None and not named_speakers(content, [speaker]):
        content = f"{speaker}: {content}"
    return Document(message_id, Source.MESSAGE, content, previous or "", following or "")


def conversation_documents(
    turns: Sequence[tuple[uuid.UUID, uuid.UUID, str, Mapping[str, Any] | None]],
) -> list[Document]:
    """Keyword documents of (id, conversation_id, content, metadata) turns given in
    conversation order: each with its neighbours in its own conversation, as the write path
    makes them (imports and rebuilds use this too)."""
    documents: list[Document] = []
    for i, (item_id, conversation_id, content, metadata) in enumerate(turns):
        before = turns[i - 1] if i > 0 and turns[i - 1][1] == conversation_id else None
        after = turns[i + 1] if i + 1 < len(turns) and turns[i + 1][1] == conversation_id else None
        documents.append(
            turn_document(
                item_id,
                content,
                before[2] if before else None,
                after[2] if after else None,
                metadata,
            )
        )
    return documents


@dataclass(frozen=True)
class StoredMessages:
    conversation: Conversation
    messages: Sequence[Message]
    # The conversation's last message before these (None: these are its first messages).
    previous_id: uuid.UUID | None = None


class AppendOptions(TypedDict, total=False):
    """ConversationService.append's keyword options, for the services that pass them on."""

    priority: Priority
    extraction: bool | None
    passages: bool
    write_gate: AbstractAsyncContextManager[object] | None


class ConversationService:
    def __init__(self, session: AsyncSession, embeddings: EmbeddingService) -> None:
        self.session = session
        self.repo = ConversationRepository(session)
        self.index = SearchIndexRepository(session)
        self.embeddings = embeddings

    async def create(self, user_id: str, title: str | None) -> Conversation:
        """Start a conversation for this user."""
        return await self.repo.create(user_id, title)

    async def get(self, user_id: str, conversation_id: uuid.UUID) -> Conversation:
        """The user's conversation, or NotFoundError (also for other users' ids)."""
        return found(await self.repo.get(user_id, conversation_id), "conversation")

    async def set_goal(
        self, user_id: str, conversation_id: uuid.UUID, goal: str | None
    ) -> Conversation:
        """Set (None: clear) the conversation's session goal, or NotFoundError."""
        conversation = await self.repo.set_goal(user_id, conversation_id, goal)
        if conversation is None:
            raise NotFoundError("conversation not found")
        return conversation

    async def update(
        self, user_id: str, conversation_id: uuid.UUID, values: dict[str, object]
    ) -> Conversation:
        """Set the title and/or the extraction setting; NotFoundError for others' ids."""
        conversation = await ConversationSettingsRepository(self.session).update(
            user_id, conversation_id, values
        )
        if conversation is None:
            raise NotFoundError("conversation not found")
        return conversation

    async def list(self, user_id: str, *, limit: int, offset: int) -> Sequence[Conversation]:
        """The user's conversations, most recently updated first."""
        return await self.repo.list(user_id, limit=limit, offset=offset)

    async def append(
        self,
        user_id: str,
        conversation_id: uuid.UUID,
        messages: Sequence[MessageCreate],
        correlation_id: uuid.UUID,
        *,
        priority: Priority = Priority.INTERACTIVE,
        extraction: bool | None = None,
        passages: bool = True,
        write_gate: AbstractAsyncContextManager[object] | None = None,
    ) -> StoredMessages:
        """Embed, then store the messages in order with their keyword postings and (`passages`)
        their sentence passages. `extraction` is the service's extraction default (None: no
        extraction model); the conversation's own setting overrides it, and when the result is
        on the user turns are queued for LLM extraction in the same transaction (one INSERT).
        `write_gate` is held from the row lock to the last insert when the batch has at least
        GATED_WRITE_CHARS characters (imports: one at a time; a small batch never waits).
        """
        # Embed before taking the row lock: the lock is held only for the inserts.
        await self.get(user_id, conversation_id)
        vectors = await self.embeddings.embed([m.content for m in messages], priority=priority)
        ids = [uuid.uuid4() for _ in messages]
        sources = [
            PassageSource(i, m.content, m.metadata) for i, m in zip(ids, messages, strict=True)
        ]
        sentences = (
            await embed_passages(self.embeddings, sources, priority=priority) if passages else []
        )
        large = sum(len(m.content) for m in messages) >= GATED_WRITE_CHARS
        async with write_gate if write_gate is not None and large else contextlib.nullcontext():
            return await self._insert(
                user_id,
                conversation_id,
                messages,
                correlation_id,
                ids,
                vectors,
                sentences,
                extraction,
            )

    async def _insert(
        self,
        user_id: str,
        conversation_id: uuid.UUID,
        messages: Sequence[MessageCreate],
        correlation_id: uuid.UUID,
        ids: list[uuid.UUID],
        vectors: Vectors,
        sentences: list[NewPassage],
        extraction: bool | None,
    ) -> StoredMessages:
        conversation = await self.repo.get(user_id, conversation_id, lock=True)
        if conversation is None:
            raise NotFoundError("conversation not found")
        tail = await self.repo.last_messages(user_id, conversation_id, 2)
        new = [
            NewMessage(
                id=ids[i],
                role=m.role,
                content=m.content,
                embedding=vectors[i],
                embedding_model=self.embeddings.model,
                correlation_id=correlation_id,
                created_at=m.created_at,
                metadata=m.metadata,
            )
            for i, m in enumerate(messages)
        ]
        # A conversation's turns are in its agent's and run's scope (else the writer's).
        scope = (conversation.agent_id, conversation.run_id)
        stored = await self.repo.insert_messages(user_id, conversation_id, new, scope=scope)
        await PassageRepository(self.repo.session).insert(user_id, self.embeddings.model, sentences)
        contents = [m.content for m in new]
        previous = tail[0].content if tail else None
        documents = [
            turn_document(
                m.id,
                m.content,
                previous if i == 0 else contents[i - 1],
                contents[i + 1] if i + 1 < len(contents) else None,
                m.metadata,
            )
            for i, m in enumerate(new)
        ]
        await self.index.index(user_id, documents)
        if tail:
            # The conversation's last turn now has a following turn: refresh its context.
            before = tail[1].content if len(tail) > 1 else None
            await self.index.reindex(
                user_id,
                [
                    turn_document(
                        tail[0].id, tail[0].content, before, contents[0], tail[0].metadata_
                    )
                ],
            )
        await self.repo.touch(conversation_id, user_id)
        if extraction is not None and (
            conversation.extraction if conversation.extraction is not None else extraction
        ):
            turns = [m.id for m in new if m.role == "user"]
            await ExtractionRepository(self.repo.session).enqueue(user_id, conversation_id, turns)
        return StoredMessages(conversation, stored, previous_id=tail[0].id if tail else None)

    async def delete_last(self, user_id: str, conversation_id: uuid.UUID) -> Message | None:
        """Delete the newest message (None when there is none) and its keyword postings."""
        await self._locked(user_id, conversation_id)
        deleted = await self.repo.delete_last_message(user_id, conversation_id)
        if deleted is None:
            return None
        await self.index.unindex(user_id, [deleted.id])
        tail = await self.repo.last_messages(user_id, conversation_id, 2)
        if tail:
            # The new last turn loses its following turn: refresh its keyword context.
            before = tail[1].content if len(tail) > 1 else None
            await self.index.reindex(
                user_id,
                [turn_document(tail[0].id, tail[0].content, before, None, tail[0].metadata_)],
            )
        await self.repo.touch(conversation_id, user_id)
        return deleted

    async def delete_all(self, user_id: str, conversation_id: uuid.UUID) -> int:
        """Delete every message of the conversation (it stays, empty); how many there were."""
        await self._locked(user_id, conversation_id)
        ids = await self.repo.delete_messages(user_id, conversation_id)
        await self.index.unindex(user_id, ids)
        await self.repo.touch(conversation_id, user_id)
        return len(ids)

    async def _locked(self, user_id: str, conversation_id: uuid.UUID) -> Conversation:
        # The same row lock appends take: a delete and an append never interleave.
        conversation = await self.repo.get(user_id, conversation_id, lock=True)
        if conversation is None:
            raise NotFoundError("conversation not found")
        return conversation

    async def messages(
        self, user_id: str, conversation_id: uuid.UUID, *, after: int | None, limit: int
    ) -> Sequence[Message]:
        """A page of the conversation's messages in order."""
        await self.get(user_id, conversation_id)
        return await self.repo.list_messages(user_id, conversation_id, after=after, limit=limit)

    async def last_message_id(self, user_id: str, conversation_id: uuid.UUID) -> uuid.UUID | None:
        """Id of the conversation's newest message, None when it has none."""
        rows = await self.repo.last_messages(user_id, conversation_id, 1)
        return rows[0].id if rows else None

    async def recent(
        self, user_id: str, conversation_id: uuid.UUID, limit: int
    ) -> Sequence[Message]:
        """The last `limit` messages, oldest first."""
        return await self.repo.recent_messages(user_id, conversation_id, limit)
