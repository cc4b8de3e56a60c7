"""POST /v1/chat/completions: memories in, the model's answer out, both turns stored.

Identity (app/proxy/auth.py): a per-user key in `X-Pgrecall-Key` or as `Authorization: Bearer
pgr_...`, or the service key in `X-Pgrecall-Key` with `X-User-Id`. The user's turn is stored
whatever the upstream does (app/proxy/turns.py): with the answer, or alone and marked with
`metadata.upstream_error` when there is no answer; an `Idempotency-Key` stores it once across
retries.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response

from app.api.deps import CorrelationDep, Resources, ResourcesDep
from app.errors import UpstreamError
from app.observability import correlation_id_var
from app.proxy.auth import ProxyUserDep, UpstreamDep
from app.proxy.schemas import ChatRequest, message_text
from app.proxy.stream import Relay, RelayResponse
from app.proxy.turns import (
    IDEMPOTENCY_HEADER,
    Turns,
    answer_turn,
    idempotency_key,
    transaction,
    user_turn,
)
from app.services.conversation import ConversationService
from app.services.prompt import format_for_prompt
from app.services.query import QueryRequest, QueryService

log = logging.getLogger(__name__)
router = APIRouter(tags=["chat proxy"])

CONVERSATION_HEADER = "X-Pgrecall-Conversation-Id"
MEMORY_IDS_HEADER = "X-Pgrecall-Memory-Ids"
STORED_HEADER = "X-Pgrecall-Stored"
# Stream endings that are the upstream's fault (a client that went away is not).
_UPSTREAM_ENDINGS = {"upstream_dropped", "upstream_timeout", "no_answer"}


async def _memories(
    resources: Resources, user_id: str, body: ChatRequest, query: str
) -> tuple[str | None, list[str]]:
    options = body.memory
    if (options and options.off) or not query.strip():
        return None, []
    cfg = resources.query_config
    result = await QueryService(
        resources.sessionmaker,
        resources.embeddings,
        resources.cache,
        cfg,
        slots=resources.query_slots,
    ).query(
        QueryRequest(
            user_id=user_id,
            query=query,
            limit=options.top_k if options and options.top_k else cfg.max_results,
            min_score=options.min_relevance
            if options and options.min_relevance is not None
            else cfg.min_relevance,
            token_budget=options.token_budget if options else None,
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


@router.post("/v1/chat/completions", include_in_schema=False)
async def chat_completions(
    body: ChatRequest,
    request: Request,
    user_id: ProxyUserDep,
    resources: ResourcesDep,
    upstream: UpstreamDep,
    correlation: CorrelationDep,
    idempotency: Annotated[str | None, Header(alias=IDEMPOTENCY_HEADER)] = None,
) -> Response:
    """OpenAI-compatible chat completions with the user's memories injected and turns stored."""
    upstream.require()
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
    latest_user = next((m for m in reversed(body.messages) if m.role == "user"), None)
    conversation_id = body.memory.conversation_id if body.memory else None
    if conversation_id is not None:
        async with transaction(resources, user_id) as session:
            await ConversationService(session, resources.embeddings).get(user_id, conversation_id)
    query = message_text(latest_user) if latest_user else ""
    title = (query.strip() or "chat")[:100]
    turns = Turns(resources, user_id, correlation, title, conversation_id, new_turn, key)
    await turns.resume()
    block, memory_ids = await _memories(resources, user_id, body, query)
    headers = {MEMORY_IDS_HEADER: ",".join(memory_ids)}

    try:
        response = await upstream.send(
            _with_memories(raw, block), upstream.headers(request.headers)
        )
        media_type = response.headers.get("content-type", "application/json")
        if response.status_code < 400 and body.stream:
            return await _relay(turns, response, body.model, headers, media_type)
        content = await upstream.read(response)
    except UpstreamError as exc:
        await _keep_turn(turns, exc.reason or "failed", headers)
        error = {"error": type(exc).__name__, "detail": exc.message}
        return JSONResponse(error, exc.status_code, headers)
    if response.status_code >= 400:
        if "retry-after" in response.headers:
            headers["Retry-After"] = response.headers["retry-after"]
        await _keep_turn(turns, f"http_{response.status_code}", headers)
        return Response(content, response.status_code, headers, media_type)
    text = _assistant_text(content)
    if text is None:
        await _keep_turn(turns, "bad_answer", headers)
        detail = "the chat upstream answered 200 with a body that is not a chat completion"
        return JSONResponse({"error": "UpstreamError", "detail": detail}, 502, headers)
    try:
        await turns.store(answer_turn(text, body.model, None))
        headers[STORED_HEADER] = "true"
    except Exception:
        # The answer exists and is returned; the header says it was not stored.
        log.warning("storing chat turns failed", exc_info=True)
        headers[STORED_HEADER] = "false"
    if turns.conversation_id is not None:
        headers[CONVERSATION_HEADER] = str(turns.conversation_id)
    return Response(content, response.status_code, headers, media_type)


async def _keep_turn(turns: Turns, failure: str, headers: dict[str, str]) -> None:
    """The upstream gave no answer: store the user's turn alone, marked with why. Its error is
    what the client gets either way; the headers say whether the turn is kept."""
    try:
        if turns.user is not None:  # none new (a tool-call round), or stored by an earlier try
            await turns.store(None, failure)
        headers[STORED_HEADER] = "true"
    except Exception:
        log.warning("storing the user turn of a failed chat request failed", exc_info=True)
        headers[STORED_HEADER] = "false"
    if turns.conversation_id is not None:
        headers[CONVERSATION_HEADER] = str(turns.conversation_id)


async def _relay(
    turns: Turns,
    response: Any,
    model: str,
    headers: dict[str, str],
    media_type: str,
) -> Response:
    try:
        conversation_id = await turns.ensure_conversation()
    except BaseException:
        await response.aclose()
        raise
    headers[CONVERSATION_HEADER] = str(conversation_id)

    async def on_end(text: str, incomplete: str | None) -> None:
        failure = incomplete if incomplete in _UPSTREAM_ENDINGS else None
        await turns.store(answer_turn(text, model, incomplete), failure)

    return RelayResponse(Relay(response, on_end), headers, media_type)


def _assistant_text(content: bytes) -> str | None:
    """The answer's text ("" for one without text, e.g. tool calls only); None when the body
    is not a chat completion at all."""
    try:
        data = json.loads(content)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    text = message.get("content")
    return text if isinstance(text, str) else ""
