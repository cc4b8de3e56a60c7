"""The stages that read the candidates' rows: answers, time, "when" questions, named speakers,
session votes and diversification. Pure: the query pipeline (app/services/query/pipeline.py,
stage 5) fetches the rows and calls `rerank`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from datetime import datetime
from typing import Any, Protocol, TypeVar

from app.retrieval.dates import TimeWindow, asks_when, tells_time
from app.retrieval.phatic import asks
from app.retrieval.presets import RetrievalPreset
from app.retrieval.scoring import (
    Ranked,
    answers_inherit,
    boost,
    diversify,
    group_vote,
    prefer_window,
    propagate,
)
from app.retrieval.speakers import prefer_named, usable_speaker

K = TypeVar("K", bound=Hashable)


class Row(Protocol):
    """What the stages read of a candidate (app.repositories.retrieval.Candidate)."""

    @property
    def content(self) -> str: ...
    @property
    def role(self) -> str | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def speaker(self) -> str | None: ...
    @property
    def conversation_id(self) -> Any: ...


def answer_pairs(
    neighbours: Mapping[K, tuple[K | None, K | None]], rows: Mapping[K, Row]
) -> dict[K, K]:
    """question turn -> the turn answering it: the next turn, by the other speaker, of a seed
    turn that asks something (ends with '?')."""
    out: dict[K, K] = {}
    for seed, (_, following) in neighbours.items():
        asked, answer = rows.get(seed), rows.get(following) if following else None
        if (
            asked is not None
            and answer is not None
            and following is not None
            and asks(asked.content)
            and asked.role != answer.role
        ):
            out[seed] = following
    return out


def rerank(
    ranked: list[Ranked[K]],
    rows: Mapping[K, Row],
    neighbours: Mapping[K, tuple[K | None, K | None]],
    query: str,
    window: TimeWindow | None,
    preset: RetrievalPreset,
) -> list[Ranked[K]]:
    """The fetched candidates (`rows`) re-ranked by every stage the preset turns on; items
    without a row are dropped. `window` is the time the question names (None: none)."""
    ranked = [r for r in ranked if r.key in rows]
    if preset.answer_relevance > 0.0 or preset.answer_weight > 0.0:
        answers = answer_pairs(neighbours, rows)
        ranked = answers_inherit(ranked, answers, preset.answer_relevance)
        ranked = propagate(
            ranked,
            {q: (None, a) for q, a in answers.items()},
            next_weight=preset.answer_weight,
            previous_weight=0.0,
        )
    if preset.question_odds < 1.0:
        # After the answers inherited: a turn that asks is where a fact was wanted, not told.
        asking = {
            r.key for r in ranked if rows[r.key].role is not None and asks(rows[r.key].content)
        }
        ranked = boost(ranked, asking, preset.question_odds - 1.0, lower=True)
    ranked = prefer_window(
        ranked, {k: r.created_at for k, r in rows.items()}, window, preset.time_boost
    )
    if preset.when_boost > 0.0 and asks_when(query):
        depth = {r.key for r in ranked[: preset.rerank_depth]}
        telling = {k for k in depth if tells_time(rows[k].content)}
        ranked = boost(ranked, telling, preset.when_boost)
    speakers = {k: name for k, r in rows.items() if (name := usable_speaker(r.speaker))}
    ranked = prefer_named(ranked, speakers, query, preset.speaker_boost)
    conversations = {k: r.conversation_id for k, r in rows.items() if r.conversation_id}
    ranked = group_vote(ranked, conversations, preset.session_vote_weight, preset.rerank_depth)
    return diversify(ranked, conversations, preset.conversation_cap, preset.diversify_depth)
