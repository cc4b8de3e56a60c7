"""LoCoMo through the service's API: load every turn as a message, ask every question."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from eval.datasets.locomo import CATEGORY_NAMES, Conversation, Question, load_locomo
from eval.harness import Harness
from eval.metrics import CaseResult

TOKEN_BUDGET_FOR_RANKING = 4000  # ten dialogue turns fit easily; the budget is not what is measured


IMPORTS = ("sessions", "single")


async def load_into(
    harness: Harness, conversations: Sequence[Conversation], mode: str = "sessions"
) -> dict[str, dict[str, str]]:
    """Store each sample's turns as its user's messages; message id -> dia_id by user.

    mode "sessions" (what docs/retrieval.md describes): one conversation per session, each
    turn with `metadata.speaker`. mode "single": the whole sample as one conversation without
    speaker metadata (what a plain transcript import gives).
    """
    if mode not in IMPORTS:
        raise ValueError(f"unknown LoCoMo import {mode!r}; known: {IMPORTS}")
    id_to_dia: dict[str, dict[str, str]] = {}
    for conv in tqdm(conversations, desc="loading conversations", unit="conv"):
        mapping: dict[str, str] = {}
        speakers: dict[str, str] = {}
        by_session: dict[int, list] = {}
        for turn in conv.turns:
            by_session.setdefault(turn.session if mode == "sessions" else 0, []).append(turn)
        for session, turns in sorted(by_session.items()):
            messages = []
            for turn in turns:
                role = speakers.setdefault(turn.speaker, "user" if not speakers else "assistant")
                # The turn's speaker, as any multi-party import would name it.
                meta = {"dia_id": turn.dia_id}
                if mode == "sessions":
                    meta["speaker"] = turn.speaker
                messages.append(
                    {
                        "role": role,
                        "content": turn.content,
                        "created_at": turn.created_at.isoformat(),
                        "metadata": meta,
                    }
                )
            title = f"session {session}" if mode == "sessions" else conv.sample_id
            stored = await harness.add_conversation(conv.user_id, messages, title=title)
            for row, turn in zip(stored, turns, strict=True):
                mapping[row["id"]] = turn.dia_id
        id_to_dia[conv.user_id] = mapping
    return id_to_dia


async def ask_all(
    harness: Harness,
    conversations: Sequence[Conversation],
    id_to_dia: dict[str, dict[str, str]],
    *,
    min_score: float = 0.0,
    progress: bool = True,
    tool_results: list[CaseResult] | None = None,
    tool_budget: int = 1000,
) -> list[CaseResult]:
    """One /v1/memory/query per question, scoped to the conversation's user.

    With `tool_results` (a list to fill) each question is also asked through the agent tool,
    POST /v1/tools/query_memory, which applies the service's relevance floor, relative cut,
    result limit and token budget: what an agent actually gets.
    """
    results: list[CaseResult] = []
    total = sum(len(c.questions) for c in conversations)
    bar = tqdm(total=total, desc="querying", unit="q", disable=not progress)
    for conv in conversations:
        mapping = id_to_dia[conv.user_id]
        for q in conv.questions:
            t0 = time.perf_counter()
            body = await harness.query(
                conv.user_id,
                q.question,
                limit=10,
                min_score=min_score,
                token_budget=TOKEN_BUDGET_FOR_RANKING,
            )
            latency = (time.perf_counter() - t0) * 1000
            results.append(
                _case(
                    conv.sample_id,
                    q,
                    [i["id"] for i in body["items"]],
                    mapping,
                    latency,
                    body["token_count"],
                    TOKEN_BUDGET_FOR_RANKING,
                    body.get("error"),
                )
            )
            if tool_results is not None:
                t0 = time.perf_counter()
                tool = await harness.tool_query(conv.user_id, q.question)
                latency = (time.perf_counter() - t0) * 1000
                tool_results.append(
                    _case(
                        conv.sample_id,
                        q,
                        [m["id"] for m in tool["memories"]],
                        mapping,
                        latency,
                        tool["metadata"]["token_count"],
                        tool_budget,
                        tool["metadata"].get("error"),
                    )
                )
            bar.update(1)
    bar.close()
    return results


def _case(
    sample_id: str,
    question: Question,
    ids: Sequence[str],
    mapping: dict[str, str],
    latency_ms: float,
    token_count: int,
    token_budget: int,
    error: str | None,
) -> CaseResult:
    """One question's answer as a case: returned ids mapped to dialogue ids ("foreign:" when
    an id is none of this user's turns, which counts as a cross-user leak)."""
    ranked = tuple(mapping.get(i, "foreign:" + i) for i in ids)
    return CaseResult(
        case_id=f"{sample_id}-q{question.qa_index}",
        category=CATEGORY_NAMES[question.category],
        ranked=ranked,
        relevant=frozenset(question.evidence),
        latency_ms=latency_ms,
        token_count=token_count,
        token_budget=token_budget,
        cross_user_leak=any(r.startswith("foreign:") for r in ranked),
        error=error,
    )


def load(path: Path | str) -> list[Conversation]:
    return load_locomo(path)
