"""POST /v1/chat/completions: memories in, the model's answer out, both turns stored.

Identity: `X-User-Id` names the user, as on every /v1 route. The `Authorization` header goes to
the upstream (unless PGRECALL_CHAT_UPSTREAM_KEY is set), so the pgrecall service key travels
in `X-Pgrecall-Key`; with an upstream key configured, `Authorization: Bearer <service key>`
works as on the other routes.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.errors import AuthenticationError, PermissionDeniedError, ValidationFailedError
from app.observability import correlation_id_var
from app.proxy import recall_tags
from app.proxy.conversation_summary import SUMMARY_HEADER, summary_block, with_summary
from app.proxy.schemas import ChatRequest, message_text
from app.proxy.stream import Relay, RelayResponse
from app.proxy.tool_rounds import tool_round
from app.proxy.upstream import ChatUpstream
from app.retrieval.speakers import usable_speaker
from app.runtime import Resources, query_request, query_service, user_transaction
from app.runtime.identity import validate_user_id
from app.schemas.common import MAX_CONTENT_CHARS
from app.schemas.conversation import MessageCreate
from app.services.conversation import ConversationService
from app.services.prompt import format_for_prompt
from app.services.session_state import SessionStateService

log = logging.getLogger(__name__)
router = APIRouter(tags=["chat proxy"])

CONVERSATION_HEADER = "X-Pgrecall-Conversation-Id"
MEMORY_IDS_HEADER = "X-Pgrecall-Memory-Ids"
STORED_HEADER = "X-Pgrecall-Stored"
KEY_HEADER = "X-Pgrecall-Key"
RECALL_ROUNDS_HEADER = "X-Pgrecall-Recall-Rounds"
RECALLED_IDS_HEADER = "X-Pgrecall-Recalled-Ids"


def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


def correlation_id() -> uuid.UUID:
    """The request's correlation id (set by the middleware)."""
    return uuid.UUID(correlation_id_var.get())


CorrelationDep = Annotated[uuid.UUID, Depends(correlation_id)]


def get_upstream(request: Request) -> ChatUpstream:
    return request.app.state.chat_upstream  # type: ignore[no-any-return]


UpstreamDep = Annotated[ChatUpstream, Depends(get_upstream)]


async def proxy_user(
    resources: ResourcesDep,
    upstream: UpstreamDep,
    x_user_id: Annotated[str, Header(alias="X-User-Id")],
    x_pgrecall_key: Annotated[str | None, Header(alias=KEY_HEADER)] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> str:
    """The service key from X-Pgrecall-Key (or Authorization when it does not go upstream)."""
    if resources.api_key is not None:
        presented = x_pgrecall_key
        if presented is None and upstream.key is not None and authorization:
            scheme, _, token = authorization.partition(" ")
            presented = token.strip() if scheme.lower() == "bearer" else None
        if not presented:
            raise AuthenticationError(f"missing {KEY_HEADER}: <service key>")
        keys = [k for k in (resources.api_key, resources.admin_api_key) if k]
        if not any(hmac.compare_digest(presented.encode(), k.encode()) for k in keys):
            raise PermissionDeniedError("invalid API key")
    return validate_user_id(x_user_id)


ProxyUserDep = Annotated[str, Depends(proxy_user)]


def _storable(text: str, field: str, name: object = None) -> MessageCreate:
    """The user turn to store; the message's OpenAI `name` (a participant) becomes its
    `metadata.speaker`, which ranking reads (docs/retrieval.md, named speakers)."""
    metadata: dict[str, Any] = {"source": "chat_proxy"}
    speaker = usable_speaker(name)
    if speaker is not None:
        metadata["speaker"] = speaker
    try:
        return MessageCreate(role="user", content=text, metadata=metadata)
    except ValidationError as exc:
        reason = exc.errors()[0].get("msg", "invalid")
        raise ValidationFailedError(f"{field}: {reason}", field=field) from None


def _answer(text: str, model: str, incomplete: str | None) -> MessageCreate | None:
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


async def _memories(
    resources: Resources, user_id: str, body: ChatRequest, query: str
) -> tuple[str | None, list[str]]:
    options = body.memory
    if (options and options.off) or not query.strip():
        return None, []
    result = await query_service(resources).query(
        query_request(
            resources.query_config,
            user_id,
            query,
            limit=options.top_k if options and options.top_k else None,
            min_score=options.min_relevance if options else None,
            token_budget=options.token_budget if options else None,
            recency=options.recency if options else None,
        ),
        correlation_id=correlation_id_var.get(),
    )
    if not result.items:
        return None, []
    return format_for_prompt(result.items), [i.id for i in result.items]


def _with_memories(raw: dict[str, Any], block: str | None) -> dict[str, Any]:
    """The body for the upstream: `memory` removed, the block as its own system message after
    the caller's leading system messages (never merged into a user's text)."""
    forward = {k: v for k, v in raw.items() if k != "memory"}
    if block is None:
        return forward
    messages = list(forward["messages"])
    at = 0
    while at < len(messages) and messages[at].get("role") in {"system", "developer"}:
        at += 1
    messages.insert(at, {"role": "system", "content": block})
    forward["messages"] = messages
    return forward


async def _store(
    resources: Resources,
    user_id: str,
    conversation_id: uuid.UUID | None,
    turns: list[MessageCreate],
    correlation: uuid.UUID,
    title: str,
) -> uuid.UUID:
    """Create the conversation when absent, append the turns; committed when this returns."""
    async with user_transaction(resources.sessionmaker, user_id) as session:
        conversations = ConversationService(session, resources.embeddings)
        if conversation_id is None:
            conversation_id = (await conversations.create(user_id, title)).id
        if turns:
            state = SessionStateService(conversations, resources.cache, resources.session_messages)
            await state.append(
                user_id,
                conversation_id,
                turns,
                correlation,
                extraction=resources.extraction_default,
                passages=resources.message_passages,
            )
    return conversation_id


@router.post("/v1/chat/completions", include_in_schema=False)
async def chat_completions(
    body: ChatRequest,
    request: Request,
    user_id: ProxyUserDep,
    resources: ResourcesDep,
    upstream: UpstreamDep,
    correlation: CorrelationDep,
) -> Response:
    """OpenAI-compatible chat completions with the user's memories injected and turns stored."""
    upstream.require()
    raw = await request.json()
    last = body.messages[-1]
    # Only a request that ends with the user's message has a new user turn (a tool-call loop
    # resends the same user message; it was stored the first time).
    user_turn = (
        _storable(
            message_text(last),
            f"body.messages.{len(body.messages) - 1}.content",
            (last.model_extra or {}).get("name"),
        )
        if last.role == "user"
        else None
    )
    # A request that ends with tool results carries a tool round: stored before the answer.
    round_turns = tool_round(body.messages)
    latest_user = next((m for m in reversed(body.messages) if m.role == "user"), None)
    conversation_id = body.memory.conversation_id if body.memory else None
    if conversation_id is not None:
        async with user_transaction(resources.sessionmaker, user_id) as session:
            await ConversationService(session, resources.embeddings).get(user_id, conversation_id)
    query = message_text(latest_user) if latest_user else ""
    block, memory_ids = await _memories(resources, user_id, body, query)
    title = (query.strip() or "chat")[:100]
    forward = _with_memories(raw, block)
    headers = {MEMORY_IDS_HEADER: ",".join(memory_ids)}
    if body.memory and body.memory.summary:
        summary, headers[SUMMARY_HEADER] = await summary_block(resources, user_id, conversation_id)
        forward = with_summary(forward, summary)
    if body.memory and body.memory.recall_tags:
        turn = _Turn(resources, user_id, body, user_turn, conversation_id, correlation, title)
        return await _recall_completion(
            turn, upstream, forward, upstream.headers(request.headers), headers
        )

    response = await upstream.send(forward, upstream.headers(request.headers))
    media_type = response.headers.get("content-type", "application/json")
    if response.status_code >= 400 or not body.stream:
        content = await upstream.read(response)
        if response.status_code >= 400:
            if "retry-after" in response.headers:
                headers["Retry-After"] = response.headers["retry-after"]
            return Response(content, response.status_code, headers, media_type)
        text = _assistant_text(content)
        answer = _answer(text, body.model, None)
        turns = [t for t in (user_turn, *round_turns, answer) if t is not None]
        try:
            conversation_id = await _store(
                resources, user_id, conversation_id, turns, correlation, title
            )
            headers[STORED_HEADER] = "true"
        except Exception:
            # The answer exists and is returned; the header says it was not stored.
            log.warning("storing chat turns failed", exc_info=True)
            headers[STORED_HEADER] = "false"
        if conversation_id is not None:
            headers[CONVERSATION_HEADER] = str(conversation_id)
        return Response(content, response.status_code, headers, media_type)

    try:
        conversation_id = await _store(resources, user_id, conversation_id, [], correlation, title)
    except BaseException:
        await response.aclose()
        raise
    headers[CONVERSATION_HEADER] = str(conversation_id)
    target = conversation_id

    async def on_end(text: str, incomplete: str | None) -> None:
        answer = _answer(text, body.model, incomplete)
        turns = [t for t in (user_turn, *round_turns, answer) if t is not None]
        await _store(resources, user_id, target, turns, correlation, title)

    return RelayResponse(Relay(response, on_end), headers, media_type)


def _assistant_text(content: bytes) -> str:
    try:
        data = json.loads(content)
        text = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return text if isinstance(text, str) else ""


# --- recall tags (memory.recall_tags): app/proxy/recall_tags.py runs the rounds -------------


@dataclass(frozen=True)
class _Turn:
    """What storing this request's turns needs."""

    resources: Resources
    user_id: str
    body: ChatRequest
    user_turn: MessageCreate | None
    conversation_id: uuid.UUID | None
    correlation: uuid.UUID
    title: str

    async def store(self, text: str, incomplete: str | None) -> uuid.UUID:
        answer = _answer(text, self.body.model, incomplete)
        turns = [t for t in (self.user_turn, answer) if t is not None]
        return await _store(
            self.resources,
            self.user_id,
            self.conversation_id,
            turns,
            self.correlation,
            self.title,
        )

    async def lookup(self, query: str) -> tuple[str | None, list[str]]:
        return await _memories(self.resources, self.user_id, self.body, query)


async def _recall_completion(
    turn: _Turn,
    upstream: ChatUpstream,
    forward: dict[str, Any],
    upstream_headers: dict[str, str],
    headers: dict[str, str],
) -> Response:
    """The request with recall tags on: one answer to the client over every round."""
    options = turn.body.memory
    assert options is not None
    if not turn.body.stream:
        done = await recall_tags.complete(
            upstream, forward, upstream_headers, turn.lookup, options.recall_rounds
        )
        media_type = done.response.headers.get("content-type", "application/json")
        if done.response.status_code >= 400:
            if "retry-after" in done.response.headers:
                headers["Retry-After"] = done.response.headers["retry-after"]
            return Response(done.content, done.response.status_code, headers, media_type)
        headers[RECALL_ROUNDS_HEADER] = str(done.transcript.rounds)
        headers[RECALLED_IDS_HEADER] = ",".join(done.transcript.memory_ids)
        conversation_id = turn.conversation_id
        try:
            conversation_id = await turn.store(done.transcript.text(show_tags=False), None)
            headers[STORED_HEADER] = "true"
        except Exception:
            log.warning("storing chat turns failed", exc_info=True)
            headers[STORED_HEADER] = "false"
        if conversation_id is not None:
            headers[CONVERSATION_HEADER] = str(conversation_id)
        content = recall_tags.finished_content(done, options.show_tags)
        return Response(content, done.response.status_code, headers, media_type)

    response = await upstream.send(recall_tags.with_instructions(forward), upstream_headers)
    media_type = response.headers.get("content-type", "application/json")
    if response.status_code >= 400:
        content = await upstream.read(response)
        if "retry-after" in response.headers:
            headers["Retry-After"] = response.headers["retry-after"]
        return Response(content, response.status_code, headers, media_type)
    try:
        conversation_id = await _store(
            turn.resources, turn.user_id, turn.conversation_id, [], turn.correlation, turn.title
        )
    except BaseException:
        await response.aclose()
        raise
    headers[CONVERSATION_HEADER] = str(conversation_id)
    target = dataclasses.replace(turn, conversation_id=conversation_id)

    async def on_end(text: str, incomplete: str | None) -> None:
        await target.store(text, incomplete)

    relay = recall_tags.RecallRelay(
        upstream,
        response,
        recall_tags.with_instructions(forward),
        upstream_headers,
        turn.lookup,
        options.recall_rounds,
        options.show_tags,
        on_end,
    )
    return RelayResponse(relay, headers, media_type)
