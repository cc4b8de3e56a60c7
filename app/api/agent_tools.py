"""The agent's write tools over HTTP: save_memory, forget_memory, rate_message.

Each write is counted against the user's write limit (Redis; off without it), runs in the
request's transaction, and is committed before the response; the user's cached query results
are invalidated after the commit.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import ResourcesDep, SessionDep, WriteUserDep, invalidate_after_commit
from app.schemas.agent import (
    MAX_SAVE_CHARS,
    ForgetMemoryArgs,
    ForgetMemoryResult,
    MemoryOut,
    RateMessageArgs,
    RateMessageResult,
    SaveMemoryArgs,
    SaveMemoryResult,
)
from app.services.agent_memory import AgentMemoryService, admit_write

router = APIRouter(tags=["tools"])

_TYPES = ["fact", "preference", "decision", "note"]

WRITE_TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "save_memory",
            "description": "Remember something lasting about the user: a fact, preference, "
            "decision or note, stated as one self-contained sentence. A near-identical memory "
            "is updated instead of duplicated. Use supersedes to replace a memory that is no "
            "longer true.",
            "parameters": {
                "type": "object",
                "properties": {
                    "content": {
                        "type": "string",
                        "description": "The memory, one self-contained statement "
                        f"(at most {MAX_SAVE_CHARS} characters).",
                    },
                    "type": {"type": "string", "enum": _TYPES},
                    "importance": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 1,
                        "description": "How much it matters, 0..1 (default 0.5)",
                    },
                    "expires_at": {
                        "type": "string",
                        "format": "date-time",
                        "description": "ISO 8601 time with offset after which it no longer holds",
                    },
                    "supersedes": {
                        "type": "string",
                        "format": "uuid",
                        "description": "id of the user's memory this one replaces",
                    },
                },
                "required": ["content", "type"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "forget_memory",
            "description": "Forget one of the user's memories (by the id query_memory "
            "returned), e.g. when the user asks you to forget it or it proved wrong.",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "string", "format": "uuid"}},
                "required": ["id"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "rate_message",
            "description": "Record the user's vote on a past message: up keeps it (with the "
            "question it answered) as a note; down removes the note an upvote kept.",
            "parameters": {
                "type": "object",
                "properties": {
                    "message_id": {"type": "string", "format": "uuid"},
                    "vote": {"type": "string", "enum": ["up", "down"]},
                },
                "required": ["message_id", "vote"],
                "additionalProperties": False,
            },
        },
    },
]

WRITE_TOOLS_PROMPT = """

When to write memory:
- The user states a lasting fact, preference or decision, or asks you to remember something: \
save_memory with one self-contained statement
- The user corrects something remembered: save_memory with supersedes set to the old id
- The user asks you to forget something: forget_memory with the id query_memory returned
- Never save secrets (passwords, keys, tokens) or guesses the user did not state"""


def _service(session: SessionDep, resources: ResourcesDep) -> AgentMemoryService:
    return AgentMemoryService(session, resources.embeddings)


async def _admit(resources: ResourcesDep, session: SessionDep, user_id: str) -> None:
    await admit_write(resources.cache, user_id, resources.write_rate_limit_per_minute)
    invalidate_after_commit(session, resources.cache, user_id)


@router.post("/v1/tools/save_memory", response_model=SaveMemoryResult)
async def save_memory(
    args: SaveMemoryArgs, user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> SaveMemoryResult:
    """Store a memory for the user (near-duplicates update the stored one); committed first."""
    await _admit(resources, session, user_id)
    saved = await _service(session, resources).save(
        user_id,
        args.content,
        args.type,
        importance=args.importance,
        expires_at=args.expires_at,
        supersedes=args.supersedes,
    )
    return saved.result()


@router.post("/v1/tools/forget_memory", response_model=ForgetMemoryResult)
async def forget_memory(
    args: ForgetMemoryArgs, user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> ForgetMemoryResult:
    """Soft-delete one of the caller's memories; 404 for any id that is not theirs."""
    await _admit(resources, session, user_id)
    item = await _service(session, resources).forget(user_id, args.id)
    return ForgetMemoryResult(id=item.id)


@router.post("/v1/tools/rate_message", response_model=RateMessageResult)
async def rate_message(
    args: RateMessageArgs, user_id: WriteUserDep, session: SessionDep, resources: ResourcesDep
) -> RateMessageResult:
    """Upvote keeps a message as a note linked to it; downvote removes that note (idempotent)."""
    await _admit(resources, session, user_id)
    rated = await _service(session, resources).rate(user_id, args.message_id, args.vote)
    return RateMessageResult(
        message_id=rated.message_id,
        vote=args.vote,
        action=rated.action,  # type: ignore[arg-type]
        memory=MemoryOut.model_validate(rated.item) if rated.item is not None else None,
        removed=rated.removed,
    )
