"""POST /v1/chat/completions: memories in, the model's answer out, both turns stored.

Identity: `X-User-Id` names the user, as on every /v1 route. The `Authorization` header goes to
the upstream (unless PGRECALL_CHAT_UPSTREAM_KEY is set), so the pgrecall service key travels
in `X-Pgrecall-Key`; with an upstream key configured, `Authorization: Bearer <service key>`
works as on the other routes.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response

from app.deadline import Deadline
from app.domain import MemoryScope
from app.errors import UpstreamError
from app.http.deps import CorrelationDep, ResourcesDep
from app.observability import correlation_id_var
from app.proxy import recall_tags
from app.proxy.auth import ProxyUserDep, UpstreamDep
from app.proxy.conversation_summary import SUMMARY_HEADER, summary_block, with_summary
from app.proxy.schemas import ChatRequest, answer_text, message_text, with_system_message
from app.proxy.stream import UPSTREAM_ENDINGS, OnEnd, Relay, RelayResponse
from app.proxy.tool_rounds import tool_round
from app.proxy.turns import IDEMPOTENCY_HEADER, Turns, answer_turn, idempotency_key, user_turn
from app.proxy.upstream import ChatUpstream
from app.runtime import Resources, query_request, query_service, user_transaction
from app.schemas.conversation import MessageCreate
from app.services.conversation import ConversationService
from app.services.prompt import format_for_prompt

log = logging.getLogger(__name__)
router = APIRouter(tags=["chat proxy"])

CONVERSATION_HEADER = "X-Pgrecall-Conversation-Id"
MEMORY_IDS_HEADER = "X-Pgrecall-Memory-Ids"
STORED_HEADER = "X-Pgrecall-Stored"
RECALL_ROUNDS_HEADER = "X-Pgrecall-Recall-Rounds"
RECALLED_IDS_HEADER = "X-Pgrecall-Recalled-Ids"


async def _memories(
    resources: Resources, scope: MemoryScope, body: ChatRequest, query: str
) -> tuple[str | None, list[str]]:
    options = body.memory
    if (options and options.off) or not query.strip():
        return None, []
    request = query_request(
        resources.query_config,
        scope,
        query,
        options,
        limit=options.top_k if options else None,
        min_score=options.min_relevance if options else None,
        token_budget=options.token_budget if options else None,
    )
    result = await query_service(resources).query(request, correlation_id=correlation_id_var.get())
    if not result.items:
        return None, []
    return format_for_prompt(result.items), [i.id for i in result.items]


def _with_memories(raw: dict[str, Any], block: str | None) -> dict[str, Any]:
    """The body for the upstream: `memory` removed, the block as its own system message after
    the caller's leading system messages (never merged into a user's text)."""
    forward = {k: v for k, v in raw.items() if k != "memory"}
    return forward if block is None else with_system_message(forward, block)


@router.post("/v1/chat/completions", include_in_schema=False)
async def chat_completions(
    body: ChatRequest,
    request: Request,
    scope: ProxyUserDep,
    resources: ResourcesDep,
    upstream: UpstreamDep,
    correlation: CorrelationDep,
    idempotency: Annotated[str | None, Header(alias=IDEMPOTENCY_HEADER)] = None,
) -> Response:
    """OpenAI-compatible chat completions with the user's memories injected and turns stored."""
    upstream.require()
    user_id = scope.user_id
    key = idempotency_key(idempotency)
    raw = await request.json()
    last = body.messages[-1]
    at = len(body.messages) - 1
    # Only a request that ends with the user's message has a new user turn (a tool-call loop
    # resends the same user message; it was stored the first time).
    new_turn = (
        user_turn(
            message_text(last), f"body.messages.{at}", (last.model_extra or {}).get("name"), key
        )
        if last.role == "user"
        else None
    )
    # A request that ends with tool results carries a tool round: stored before the answer.
    round_turns = tool_round(body.messages)
    latest_user = next((m for m in reversed(body.messages) if m.role == "user"), None)
    conversation_id = body.memory.conversation_id if body.memory else None
    if conversation_id is not None:
        async with user_transaction(resources.sessionmaker, scope) as session:
            await ConversationService(session, resources.embeddings).get(user_id, conversation_id)
    query = message_text(latest_user) if latest_user else ""
    title = (query.strip() or "chat")[:100]
    turns = Turns(resources, scope, correlation, title, conversation_id, new_turn, key, round_turns)
    await turns.resume()
    conversation_id = turns.conversation_id
    block, memory_ids = await _memories(resources, scope, body, query)
    forward = _with_memories(raw, block)
    headers = {MEMORY_IDS_HEADER: ",".join(memory_ids)}
    if body.memory and body.memory.summary:
        summary, headers[SUMMARY_HEADER] = await summary_block(resources, scope, conversation_id)
        forward = with_summary(forward, summary)
    upstream_headers = upstream.headers(request.headers)
    deadline = upstream.deadline()  # one, over everything this request asks the upstream
    if body.memory and body.memory.recall_tags:
        lookup = functools.partial(_memories, resources, scope, body)
        return await _recall_completion(
            turns, body, upstream, forward, upstream_headers, headers, lookup, deadline
        )

    try:
        response = await upstream.send(forward, upstream_headers, deadline)
        media_type = response.headers.get("content-type", "application/json")
        if response.status_code < 400 and body.stream:
            relay = Relay(response, _end(turns, body.model), deadline)
            return await _relay(turns, relay, headers)
        content = await upstream.read(response, deadline)
    except UpstreamError as exc:
        return await _upstream_failed(turns, exc, headers)
    if response.status_code >= 400:
        return await _upstream_refused(turns, response, content, headers)
    text = _assistant_text(content)
    if text is None:
        return await _upstream_failed(turns, _bad_answer(), headers)
    await _store_answer(turns, answer_turn(text, body.model, None), headers)
    return Response(content, response.status_code, headers, media_type)


# --- when the upstream gives no answer: the user's turn is kept, marked with why -------------
# Both paths (plain and recall tags) end here, so a failure is stored the same way.


def _bad_answer() -> UpstreamError:
    return UpstreamError(
        "the chat upstream answered 200 with a body that is not a chat completion "
        "(or one with neither content nor tool calls)",
        502,
        "bad_answer",
    )


async def _upstream_failed(turns: Turns, exc: UpstreamError, headers: dict[str, str]) -> Response:
    """Unreachable, timed out, dropped or not a completion: the error as JSON."""
    await _keep_turn(turns, exc.reason or "failed", headers)
    error = {"error": exc.name, "detail": exc.message}
    return JSONResponse(error, exc.status_code, headers)


async def _upstream_refused(
    turns: Turns, response: httpx.Response, content: bytes, headers: dict[str, str]
) -> Response:
    """The upstream's error status and body, passed on as they came."""
    if "retry-after" in response.headers:
        headers["Retry-After"] = response.headers["retry-after"]
    await _keep_turn(turns, f"http_{response.status_code}", headers)
    media_type = response.headers.get("content-type", "application/json")
    return Response(content, response.status_code, headers, media_type)


async def _store_answer(
    turns: Turns, answer: MessageCreate | None, headers: dict[str, str]
) -> None:
    """Store the user turn and the answer; the answer is returned either way, the headers say
    whether it was stored."""
    await _stored(turns, turns.store(answer), headers, "storing chat turns failed")


async def _keep_turn(turns: Turns, failure: str, headers: dict[str, str]) -> None:
    """The upstream gave no answer: store the user's turn alone, marked with why. Its error is
    what the client gets either way; the headers say whether the turn is kept."""
    # None new (a tool-call round), or stored by an earlier try: nothing to store.
    store = turns.store(None, failure) if turns.user is not None else None
    await _stored(turns, store, headers, "storing the user turn of a failed chat request failed")


async def _stored(
    turns: Turns, store: Awaitable[object] | None, headers: dict[str, str], failed: str
) -> None:
    """Run `store` (best effort: `failed` is logged) and say in the headers whether the turns
    are stored and in which conversation."""
    try:
        if store is not None:
            await store
        headers[STORED_HEADER] = "true"
    except Exception:
        log.warning(failed, exc_info=True)
        headers[STORED_HEADER] = "false"
    if turns.conversation_id is not None:
        headers[CONVERSATION_HEADER] = str(turns.conversation_id)


def _end(turns: Turns, model: str) -> OnEnd:
    """What a stream does when it ends, however: store the turns; an upstream that failed
    marks the user's turn."""

    async def on_end(text: str, incomplete: str | None) -> None:
        failure = incomplete if incomplete in UPSTREAM_ENDINGS else None
        await turns.store(answer_turn(text, model, incomplete), failure)

    return on_end


async def _relay(turns: Turns, relay: Relay, headers: dict[str, str]) -> Response:
    """Stream the answer; the conversation is named in the headers, so it exists first."""
    try:
        conversation_id = await turns.ensure_conversation()
    except BaseException:
        await relay.response.aclose()
        raise
    headers[CONVERSATION_HEADER] = str(conversation_id)
    media_type = relay.response.headers.get("content-type", "application/json")
    return RelayResponse(relay, headers, media_type)


def _assistant_text(content: bytes) -> str | None:
    """The answer's text ("" for tool calls only, the refusal for a refusal); None when the body
    is not a chat completion or its message says nothing (`content` null and no tool call:
    no answer, which a 200 must not pass off as one)."""
    try:
        data = json.loads(content)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return answer_text(message)


# --- recall tags (memory.recall_tags): app/proxy/recall_tags.py runs the rounds -------------


async def _recall_completion(
    turns: Turns,
    body: ChatRequest,
    upstream: ChatUpstream,
    forward: dict[str, Any],
    upstream_headers: dict[str, str],
    headers: dict[str, str],
    lookup: recall_tags.Lookup,
    deadline: Deadline,
) -> Response:
    """The request with recall tags on: one answer to the client over every round; its turns
    are kept as on the plain path, failures included."""
    options = body.memory
    assert options is not None
    if not body.stream:
        try:
            done = await recall_tags.complete(
                upstream, forward, upstream_headers, lookup, options.recall_rounds, deadline
            )
        except UpstreamError as exc:
            return await _upstream_failed(turns, exc, headers)
        if done.response.status_code >= 400:
            return await _upstream_refused(turns, done.response, done.content, headers)
        if not done.answered:
            return await _upstream_failed(turns, _bad_answer(), headers)
        headers[RECALL_ROUNDS_HEADER] = str(done.transcript.rounds)
        headers[RECALLED_IDS_HEADER] = ",".join(done.transcript.memory_ids)
        answer = answer_turn(done.transcript.text(show_tags=False), body.model, None)
        await _store_answer(turns, answer, headers)
        content = recall_tags.finished_content(done, options.show_tags)
        media_type = done.response.headers.get("content-type", "application/json")
        return Response(content, done.response.status_code, headers, media_type)

    with_instructions = recall_tags.with_instructions(forward)
    try:
        response = await upstream.send(with_instructions, upstream_headers, deadline)
        if response.status_code >= 400:
            content = await upstream.read(response, deadline)
            return await _upstream_refused(turns, response, content, headers)
    except UpstreamError as exc:
        return await _upstream_failed(turns, exc, headers)
    relay = recall_tags.RecallRelay(
        upstream,
        response,
        with_instructions,
        upstream_headers,
        lookup,
        options.recall_rounds,
        options.show_tags,
        _end(turns, body.model),
        deadline,
    )
    return await _relay(turns, relay, headers)
