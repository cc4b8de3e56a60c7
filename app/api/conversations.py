"""Conversations and messages: /v1/conversations."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import ValidationFailedError
from app.http.deps import (
    CorrelationDep,
    ResourcesDep,
    SessionDep,
    UserDep,
    WriteUserDep,
)
from app.models import Conversation
from app.runtime import Resources
from app.schemas.common import Seq
from app.schemas.conversation import (
    ConversationCreate,
    ConversationOut,
    ConversationPage,
    ConversationUpdate,
    MessageBulkCreate,
    MessageCreate,
    MessageList,
    MessageOut,
    MessagePage,
    MessagePopped,
    MessagesCleared,
    SessionGoal,
    SessionOut,
)
from app.services.conversation import ConversationService
from app.services.embedding import Priority
from app.services.session_state import SessionStateService
from app.services.summary import read_summary

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])


async def _store(
    resources: ResourcesDep,
    session: SessionDep,
    user_id: str,
    conversation_id: uuid.UUID,
    messages: list[MessageCreate],
    correlation: uuid.UUID,
    priority: Priority,
) -> list[MessageOut]:
    stored = await _session_state(resources, session).append(
        user_id,
        conversation_id,
        messages,
        correlation,
        priority=priority,
        extraction=resources.extraction_default,
        passages=resources.message_passages,
        write_gate=resources.bulk_writes if priority is Priority.BULK else None,
    )
    return [MessageOut.model_validate(m) for m in stored.messages]


def _session_state(resources: ResourcesDep, session: AsyncSession) -> SessionStateService:
    """Message writes and session reads: the service refreshes the cached copy after commit."""
    conversations = ConversationService(session, resources.embeddings)
    return SessionStateService(conversations, resources.cache, resources.session_messages)


def _conversation_out(conversation: Conversation, resources: Resources) -> ConversationOut:
    out = ConversationOut.model_validate(conversation)
    default = resources.extraction_default
    active = default is not None and (
        conversation.extraction if conversation.extraction is not None else default
    )
    return out.model_copy(update={"extraction_active": active})


_LOCATION = {
    "description": "Where the new conversation lives: /v1/conversations/{id}",
    "schema": {"type": "string"},
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ConversationOut,
    responses={201: {"headers": {"Location": _LOCATION}}},
)
async def create_conversation(
    body: ConversationCreate,
    user_id: WriteUserDep,
    session: SessionDep,
    resources: ResourcesDep,
    response: Response,
) -> ConversationOut:
    """Start a conversation owned by the calling user."""
    conversation = await ConversationService(session, resources.embeddings).create(
        user_id, body.title
    )
    response.headers["Location"] = f"{router.prefix}/{conversation.id}"
    return _conversation_out(conversation, resources)


@router.get("", response_model=ConversationPage)
async def list_conversations(
    user_id: UserDep,
    session: SessionDep,
    resources: ResourcesDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> ConversationPage:
    """The caller's conversations, most recently updated first."""
    rows = await ConversationService(session, resources.embeddings).list(
        user_id, limit=limit + 1, offset=offset
    )
    items = [_conversation_out(c, resources) for c in rows[:limit]]
    return ConversationPage(items=items, next_offset=offset + limit if len(rows) > limit else None)


@router.get("/{conversation_id}", response_model=ConversationOut)
async def get_conversation(
    conversation_id: uuid.UUID, user_id: UserDep, session: SessionDep, resources: ResourcesDep
) -> ConversationOut:
    """One of the caller's conversations (404 for anyone else's)."""
    conversation = await ConversationService(session, resources.embeddings).get(
        user_id, conversation_id
    )
    return _conversation_out(conversation, resources)


@router.patch("/{conversation_id}", response_model=ConversationOut)
async def update_conversation(
    conversation_id: uuid.UUID,
    body: ConversationUpdate,
    user_id: WriteUserDep,
    session: SessionDep,
    resources: ResourcesDep,
) -> ConversationOut:
    """Change the title and/or the conversation's LLM extraction setting (`extraction`:
    true/false override the service default for its next user turns, null follows it)."""
    values = {name: getattr(body, name) for name in body.model_fields_set}
    if not values:
        raise ValidationFailedError("body: give title and/or extraction", field="body")
    conversation = await ConversationService(session, resources.embeddings).update(
        user_id, conversation_id, values
    )
    return _conversation_out(conversation, resources)


@router.post(
    "/{conversation_id}/messages", status_code=status.HTTP_201_CREATED, response_model=MessageOut
)
async def append_message(
    conversation_id: uuid.UUID,
    body: MessageCreate,
    user_id: WriteUserDep,
    session: SessionDep,
    resources: ResourcesDep,
    correlation: CorrelationDep,
) -> MessageOut:
    """Store one message with its embedding; 201 only once it is committed."""
    (stored,) = await _store(
        resources, session, user_id, conversation_id, [body], correlation, Priority.INTERACTIVE
    )
    return stored


@router.post(
    "/{conversation_id}/messages:bulk",
    status_code=status.HTTP_201_CREATED,
    response_model=MessageList,
)
async def append_messages_bulk(
    conversation_id: uuid.UUID,
    body: MessageBulkCreate,
    user_id: WriteUserDep,
    session: SessionDep,
    resources: ResourcesDep,
    correlation: CorrelationDep,
) -> MessageList:
    """Import up to 1000 messages in order, all or nothing (history imports)."""
    # Bulk priority: an import is embedded in small chunks behind everyone's queries.
    items = await _store(
        resources, session, user_id, conversation_id, body.messages, correlation, Priority.BULK
    )
    return MessageList(items=items)


@router.get("/{conversation_id}/messages", response_model=MessagePage)
async def list_messages(
    conversation_id: uuid.UUID,
    user_id: UserDep,
    session: SessionDep,
    resources: ResourcesDep,
    after: Annotated[Seq | None, Query(description="seq of the last message seen")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> MessagePage:
    """The conversation's messages in order, paginated by `seq`."""
    rows = await ConversationService(session, resources.embeddings).messages(
        user_id, conversation_id, after=after, limit=limit + 1
    )
    items = [MessageOut.model_validate(m) for m in rows[:limit]]
    return MessagePage(items=items, next_after=items[-1].seq if len(rows) > limit else None)


@router.delete("/{conversation_id}/messages/last", response_model=MessagePopped)
async def delete_last_message(
    conversation_id: uuid.UUID, user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> MessagePopped:
    """Delete the conversation's newest message and return it (null when it has none)."""
    deleted = await _session_state(resources, session).delete_last(user_id, conversation_id)
    return MessagePopped(message=MessageOut.model_validate(deleted) if deleted else None)


@router.delete("/{conversation_id}/messages", response_model=MessagesCleared)
async def delete_messages(
    conversation_id: uuid.UUID, user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> MessagesCleared:
    """Delete every message of the conversation; the conversation itself stays."""
    deleted = await _session_state(resources, session).delete_all(user_id, conversation_id)
    return MessagesCleared(deleted=deleted)


@router.get("/{conversation_id}/session", response_model=SessionOut)
async def get_session_state(
    conversation_id: uuid.UUID, user_id: UserDep, session: SessionDep, resources: ResourcesDep
) -> SessionOut:
    """Session state (last N messages, goal) from Redis, rebuilt from Postgres when missing."""
    view = await _session_state(resources, session).read(user_id, conversation_id)
    summary = await read_summary(
        session,
        user_id,
        conversation_id,
        extraction_default=resources.extraction_default,
        summary_tokens=resources.summary_tokens,
    )
    return SessionOut(
        conversation_id=conversation_id,
        messages=view.messages,
        goal=view.goal,
        source=view.source,
        summary=summary.text,
        summary_updated_at=summary.updated_at,
        summary_state=summary.state,
    )


@router.put("/{conversation_id}/session", response_model=SessionOut)
async def set_session_goal(
    conversation_id: uuid.UUID,
    body: SessionGoal,
    user_id: WriteUserDep,
    session: SessionDep,
    resources: ResourcesDep,
) -> SessionOut:
    """Set or clear the session's current goal (session state lives in Redis, 24 h)."""
    view = await _session_state(resources, session).set_goal(user_id, conversation_id, body.goal)
    return SessionOut(
        conversation_id=conversation_id, messages=view.messages, goal=view.goal, source=view.source
    )
