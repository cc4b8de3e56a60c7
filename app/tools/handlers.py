"""What each catalog tool does: the services, through the runtime's unit of work.

The services own the side effects (write admission, cache invalidation after commit); a
handler only opens the transaction, calls them and shapes the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.runtime import (
    agent_memory_service,
    query_request,
    query_service,
    save_memory_for,
    user_transaction,
)
from app.runtime.query import read_fields, result_status
from app.schemas.agent import (
    ForgetMemoryArgs,
    ForgetMemoryResult,
    ListMemoriesArgs,
    MemoryOut,
    MemoryPage,
    MessageHit,
    MessageHits,
    RateMessageArgs,
    RateMessageResult,
    SaveMemoryArgs,
    SaveMemoryResult,
    SearchConversationsArgs,
)
from app.schemas.memory import QueryMemoryArgs, QueryMemoryResult
from app.services.agent_memory import search_messages
from app.services.prompt import tool_answer

if TYPE_CHECKING:
    from app.tools.call import ToolCall


async def query_memory(call: ToolCall, args: QueryMemoryArgs) -> QueryMemoryResult:
    config = call.resources.query_config
    request = query_request(config, call.caller.memory, args.query, args)
    result = await query_service(call.resources).query(request, correlation_id=call.correlation_id)
    return tool_answer(result, config.min_relevance)


async def save_memory(call: ToolCall, args: SaveMemoryArgs) -> SaveMemoryResult:
    async with user_transaction(call.resources.sessionmaker, call.caller.memory) as session:
        return await save_memory_for(call.resources, session, call.caller.user_id, args)


async def forget_memory(call: ToolCall, args: ForgetMemoryArgs) -> ForgetMemoryResult:
    user_id = call.caller.user_id
    async with user_transaction(call.resources.sessionmaker, call.caller.memory) as session:
        item = await agent_memory_service(call.resources, session).forget(user_id, args.id)
        return ForgetMemoryResult(id=item.id)


async def rate_message(call: ToolCall, args: RateMessageArgs) -> RateMessageResult:
    user_id = call.caller.user_id
    async with user_transaction(call.resources.sessionmaker, call.caller.memory) as session:
        agent = agent_memory_service(call.resources, session)
        rated = await agent.rate(user_id, args.message_id, args.vote)
        return RateMessageResult(
            message_id=rated.message_id,
            vote=args.vote,
            action=rated.action,  # type: ignore[arg-type]
            memory=MemoryOut.model_validate(rated.item) if rated.item is not None else None,
            removed=rated.removed,
        )


async def list_memories(call: ToolCall, args: ListMemoriesArgs) -> MemoryPage:
    user_id = call.caller.user_id
    async with user_transaction(call.resources.sessionmaker, call.caller.memory) as session:
        items, total = await agent_memory_service(call.resources, session).page(
            user_id, limit=args.limit, offset=args.offset, type=args.type
        )
        out = [MemoryOut.model_validate(i) for i in items]
    more = args.offset + len(out) < total
    return MemoryPage(
        items=out, total=total, next_offset=args.offset + args.limit if more else None
    )


async def search_conversations(call: ToolCall, args: SearchConversationsArgs) -> MessageHits:
    cfg = call.resources.query_config
    result = await search_messages(
        query_service(call.resources),
        call.caller.memory,
        args.query,
        limit=args.limit,
        min_score=cfg.min_relevance,
        token_budget=cfg.token_budget,
        after=args.after,
        before=args.before,
        correlation_id=call.correlation_id,
    )
    return MessageHits(
        messages=[read_fields(MessageHit, i, relevance="relevance_score") for i in result.items],
        **result_status(result),
    )
