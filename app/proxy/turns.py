"""The turns a proxied request stores: the user's words always (marked when the upstream
failed), the model's answer when there is one, and never the user's turn twice for one
`Idempotency-Key`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.domain import MemoryScope
from app.errors import ValidationFailedError
from app.retrieval.speakers import usable_speaker
from app.runtime import Resources, user_transaction
from app.schemas.common import MAX_CONTENT_CHARS
from app.schemas.conversation import MessageCreate
from app.services.chat_turns import IDEMPOTENCY_KEY, ChatTurnService
from app.services.conversation import ConversationService
from app.services.session_state import SessionStateService

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
# metadata of a user turn whose request the upstream did not answer (e.g. "http_500").
UPSTREAM_ERROR = "upstream_error"


def idempotency_key(value: str | None) -> str | None:
    """The header's key: 1-255 printable ASCII characters (422 naming the header otherwise)."""
    if value is None:
        return None
    if not 0 < len(value) <= MAX_KEY_CHARS or not all(" " < c <= "~" for c in value):
        field = f"header.{IDEMPOTENCY_HEADER}"
        raise ValidationFailedError(
            f"{field}: 1-{MAX_KEY_CHARS} printable ASCII characters, no spaces", field=field
        )
    return value


def user_turn(text: str, at: str, name: object, key: str | None) -> MessageCreate:
    """The user turn to store (message `at`, e.g. `body.messages.0`); the message's OpenAI
    `name` (a participant) becomes its `metadata.speaker`, which ranking reads
    (docs/retrieval.md, named speakers)."""
    metadata: dict[str, Any] = {"source": "chat_proxy"}
    speaker = usable_speaker(name)
    if speaker is not None:
        metadata["speaker"] = speaker
    if key is not None:
        metadata[IDEMPOTENCY_KEY] = key
    try:
        return MessageCreate(role="user", content=text, metadata=metadata)
    except ValidationError as exc:
        error = exc.errors()[0]
        # The speaker is the only metadata from the body: a bad one is the message's `name`.
        field = f"{at}.name" if error["loc"][:1] == ("metadata",) else f"{at}.content"
        reason = error.get("msg", "invalid")
        raise ValidationFailedError(f"{field}: {reason}", field=field) from None


def answer_turn(text: str, model: str, incomplete: str | None) -> MessageCreate | None:
    """The assistant turn to store, None when the model said nothing storable."""
    meta: dict[str, Any] = {"source": "chat_proxy", "model": model}
    if incomplete:
        meta["incomplete"] = incomplete
    if len(text) > MAX_CONTENT_CHARS:
        text, meta["cut"] = text[:MAX_CONTENT_CHARS], True
    try:
        return MessageCreate(role="assistant", content=text, metadata=meta)
    except ValidationError:  # blank (e.g. a tool call only) or not storable text
        return None


@dataclass
class Turns:
    """One request's turns. `user` is None when the request has no new user turn (a tool-call
    round) or once it is stored; `rounds` is the request's trailing tool round (the assistant's
    tool calls and their results, app/proxy/tool_rounds.py), stored between the user turn and
    the answer; `conversation_id` None until there is a conversation."""

    resources: Resources
    scope: MemoryScope  # the user, and the agent and run the turns belong to
    correlation: uuid.UUID
    title: str
    conversation_id: uuid.UUID | None
    user: MessageCreate | None
    key: str | None
    rounds: list[MessageCreate] = field(default_factory=list)

    @property
    def user_id(self) -> str:
        return self.scope.user_id

    async def resume(self) -> None:
        """A retry of a request whose user turn is stored already: continue its conversation,
        and do not store the turn again."""
        if self.key is None or self.user is None:
            return
        async with user_transaction(self.resources.sessionmaker, self.scope) as session:
            found = await ChatTurnService(session).stored_turn(self.user_id, self.key)
        if found is not None:
            self.user, self.rounds, self.conversation_id = None, [], found

    async def ensure_conversation(self) -> uuid.UUID:
        """The conversation the turns go to, created now when absent (a stream names it in its
        headers before the turns exist)."""
        if self.conversation_id is None:
            async with user_transaction(self.resources.sessionmaker, self.scope) as session:
                conversations = ConversationService(session, self.resources.embeddings)
                self.conversation_id = (await conversations.create(self.user_id, self.title)).id
        return self.conversation_id

    async def store(
        self, answer: MessageCreate | None = None, failure: str | None = None
    ) -> uuid.UUID:
        """Create the conversation when absent, append the user turn (marked with `failure`)
        and the answer; committed when this returns."""
        resources = self.resources
        async with user_transaction(resources.sessionmaker, self.scope) as session:
            user = self.user
            if user is not None and self.key is not None:
                found = await ChatTurnService(session).claim(self.user_id, self.key)
                if found is not None:  # a concurrent attempt stored it meanwhile
                    user, self.rounds, self.conversation_id = None, [], found
            if user is not None and failure:
                user = user.model_copy(
                    update={"metadata": {**user.metadata, UPSTREAM_ERROR: failure}}
                )
            conversations = ConversationService(session, resources.embeddings)
            if self.conversation_id is None:
                self.conversation_id = (await conversations.create(self.user_id, self.title)).id
            turns_in = [t for t in (user, *self.rounds, answer) if t is not None]
            if turns_in:
                state = SessionStateService(
                    conversations, resources.cache, resources.session_messages
                )
                await state.append(
                    self.user_id,
                    self.conversation_id,
                    turns_in,
                    self.correlation,
                    extraction=resources.extraction_default,
                    passages=resources.message_passages,
                )
        self.user, self.rounds = None, []
        return self.conversation_id
