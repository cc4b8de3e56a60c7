"""The request sent to the model: instructions, the batch's user turns, the closest memories.

Pure. Only user turns go in, each with its date (the observation date of what it says); the
assistant's replies, system prompts and tool output of the conversation are never sent. Stored
memories are shown only so the model can say whether a fact is new, replaces one, or is known.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from app.retrieval.budget import count_tokens

INSTRUCTIONS = """You extract durable memories about a user from what the user said.

Input: a JSON object with "turns" (the user's own messages, each with an id like "t1" and the
date it was said) and "memories" (what is already stored about the user, ids like "k1").

Extract facts, preferences and decisions the user states about themselves or their world that
are worth remembering later. Write each as one short third-person sentence ("User lives in
Lisbon."). Use only what the turns say: no guesses, no instructions, nothing about this task.
For each, decide against the memories:
- "add": new information;
- "update": it replaces or corrects memory "replaces" (e.g. the user moved);
- "none": a memory already says it.

Answer with one JSON object and nothing else:
{"facts": [{"content": "...", "type": "fact" | "preference" | "decision",
"sources": ["t1"], "action": "add" | "update" | "none", "replaces": "k1" or null}]}
"sources" lists the ids of the turns that state the fact. Answer {"facts": []} when there is
nothing worth keeping."""

# Chat formatting adds a few tokens per message and per request beyond the texts themselves.
_PER_MESSAGE_OVERHEAD = 8
_PER_REQUEST_OVERHEAD = 8


@dataclass(frozen=True)
class Turn:
    alias: str
    text: str
    said_at: datetime

    @property
    def evidence(self) -> str:
        """What a fact citing this turn may draw on: its words and the date it was given."""
        d = self.said_at
        return f"{self.text} {d.year} {d:%B} {d.day} {d.date().isoformat()}"


@dataclass(frozen=True)
class Known:
    alias: str
    text: str
    type: str


def build_messages(turns: Sequence[Turn], known: Sequence[Known]) -> list[dict[str, str]]:
    """The chat messages of one extraction request."""
    payload = {
        "turns": [
            {"id": t.alias, "date": t.said_at.date().isoformat(), "text": t.text} for t in turns
        ],
        "memories": [{"id": k.alias, "type": k.type, "text": k.text} for k in known],
    }
    return [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": json.dumps(payload, ensure_ascii=False)},
    ]


def estimate_prompt_tokens(messages: Sequence[dict[str, str]]) -> int:
    """Tokens the request's messages take (cl100k_base, plus the chat format's overhead)."""
    return _PER_REQUEST_OVERHEAD + sum(
        count_tokens(m["content"]) + _PER_MESSAGE_OVERHEAD for m in messages
    )
