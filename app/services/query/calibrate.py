"""Stage 6, the calibration: the answer head, the relevance and recency (app/retrieval/scoring
.finalise), the question model (`answerable`), the answer verifier (`verify`, presets that read
it) and newer wins on one topic (app/retrieval/topics.py)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from app.errors import EmbeddingError
from app.repositories.retrieval import Candidate, RetrievalRepository
from app.repositories.search_index import Source
from app.retrieval.abstention import DEPTH as QUESTION_DEPTH
from app.retrieval.abstention import question_features, rescaled
from app.retrieval.relevance import MIN_SPREAD, SPEC_FLOOR, features
from app.retrieval.revision import MemoryText, memory_text, revision_features
from app.retrieval.scoring import Ranked, finalise, own_first
from app.retrieval.subjects import off_subject
from app.retrieval.topics import Linked, Revision, link_topics
from app.services.query.context import rerank_rows, topic_vectors_read
from app.services.query.model import QueryResult, QueryTrace
from app.services.query.state import (
    ArmHits,
    Embedding,
    Gathered,
    Key,
    Retrieved,
    Rows,
    Scope,
    Stored,
)

# The query package's logger: operators filter the query's warnings by it.
log = logging.getLogger("app.services.query")


def scored(
    s: Scope, gathered: Gathered, trace: QueryTrace | None = None
) -> tuple[list[Ranked[Key]], float | None]:
    """The answer head, the rerank and the calibration; and the question's confidence where
    the question model reads (`question_confidence`; None: the best relevance says it)."""
    rows, stored = gathered.rows, gathered.stored
    head = answer_logits(s, stored)
    if trace is not None:
        trace.head = head
    rows = replace(rows, ranked=with_answer_head(s, rows.ranked, head))
    ranked = calibrate(s, rerank_rows(s, rows), rows.candidates)
    reported = question_probability(s, ranked, gathered.hits, head, rows.candidates)
    ranked = answerable(s, ranked, reported)
    subject = on_subject(s, ranked, rows.candidates, gathered.hits)
    return subject, question_confidence(reported, ranked, subject)


def question_confidence(
    reported: float | None, before: list[Ranked[Key]], after: list[Ranked[Key]]
) -> float | None:
    """The question's confidence that the store answers it: the question model's probability
    on the spec's scale (uncapped: a capping preset lowers the items' relevance with it, not
    the other way round), lowered as the subject rule lowered the best item (a question whose
    best matches are about someone else). None without the model."""
    if reported is None:
        return None
    best_before = max((r.relevance for r in before), default=0.0)
    best_after = max((r.relevance for r in after), default=0.0)
    return reported * (best_after / best_before if best_before > 0.0 else 1.0)


def name_share(hits: ArmHits) -> float:
    """The share of the items the arms searched whose keyword score owes something to a name
    of the question (app/retrieval/names.py): of a store of fewer items than the arms return,
    the share of the store that carries the question's names."""
    k = hits.keyword
    plain = k.plain or {}
    named = sum(1 for key, v in k.scores.items() if v - plain.get(key, v) > 1e-9)
    searched = len(set(k.scores) | set(hits.cosines))
    return named / searched if searched else 0.0


def on_subject(
    s: Scope, ranked: list[Ranked[Key]], candidates: dict[Key, Candidate], hits: ArmHits
) -> list[Ranked[Key]]:
    """Who the question is about (app/retrieval/subjects.py; a preset with `subject_cap`): a
    memory about none of the subjects the question names, when the store knows them (a
    keyword match on one of the names, or a fetched candidate naming one), reports at most
    `subject_cap` (its ranking score scaled with it) and moves down to where that score
    stands; the others keep their order."""
    cap = s.preset.subject_cap
    if cap <= 0.0 or not ranked:
        return ranked
    texts = {k: c.content for k, c in candidates.items()}
    memories = [r.key for r in ranked if r.key[0] is Source.MEMORY and r.key in texts]
    off = off_subject(s.query, texts, memories, name_share(hits))
    if not off:
        return ranked
    kept = [r for r in ranked if r.key not in off]
    for r in ranked:
        if r.key not in off:
            continue
        ratio = min(1.0, cap / r.relevance) if r.relevance > 0.0 else 1.0
        capped = replace(r, relevance=r.relevance * ratio, fused=r.fused * ratio)
        at = next((n for n, k in enumerate(kept) if k.fused < capped.fused), len(kept))
        kept.insert(at, capped)
    return kept


def question_probability(
    s: Scope,
    ranked: list[Ranked[Key]],
    hits: ArmHits,
    head: dict[Key, float],
    candidates: Mapping[Key, Candidate],
) -> float | None:
    """The question model's P(the store answers the question) on the spec's scale
    (app/retrieval/abstention.py; a preset with `question_model`), or None where it does not
    read: no model, nothing ranked, a question without a vector (keyword only) or one whose
    vector arm found fewer than MIN_SPREAD items (where a best cosine's standing among the
    others says nothing)."""
    model = s.question  # None unless the preset reads it (`scope`)
    if model is None or not ranked:
        return None
    if len(hits.cosines) < MIN_SPREAD:
        # Keyword only (no query vector), or a store of a handful of items: fitted on stores of
        # ~40 memories, it reads a best cosine's standing among the others (cosine_z), which
        # among four or fewer says nothing. From five on it reads as well as on forty
        # (docs/retrieval.md, "A new user's store").
        return None
    has_names = bool(s.names)
    found = hits.keyword.scores.keys() | hits.cosines.keys()
    first = [r.key for r in ranked if r.key in found][:QUESTION_DEPTH]
    if not first:
        return None
    by_key = features(
        hits.keyword.scores,
        hits.keyword.plain or {},
        hits.keyword.max_score,
        hits.cosines,
        has_names,
        s.relevance.neutral_cosine_z,
        first,
    )
    x = question_features(
        [s.relevance.logit(by_key[k], k[0] is Source.MEMORY) for k in first],
        [by_key[k] for k in first],
        [head[k] for k in first if k in head],
        s.query,
        [_content(candidates, k) for k in first],
    )
    return model.relevance(model.probability(x))


def answerable(s: Scope, ranked: list[Ranked[Key]], reported: float | None) -> list[Ranked[Key]]:
    """The question model's probability (`question_probability`; None: it does not read) as
    the best item's relevance (with `question_caps`, at most its own); every other item's
    stays in its ratio to the best. The order is unchanged."""
    if reported is None or not ranked:
        return ranked
    if s.preset.question_caps:  # it may only lower the best (abstain), not raise it
        reported = min(reported, max(r.relevance for r in ranked))
    relevances = rescaled([r.relevance for r in ranked], reported)
    return [
        replace(r, relevance=v, fused=r.fused * v / r.relevance if r.relevance > 0 else r.fused)
        for r, v in zip(ranked, relevances, strict=True)
    ]


def linked(
    s: Scope, gathered: Gathered, ranked: list[Ranked[Key]], confidence: float | None = None
) -> Retrieved:
    """Newer wins on one topic; the user's own first on a tie. `confidence`: scored's (None: the
    best relevance says it)."""
    candidates = gathered.rows.candidates
    topics = newer_wins(s, ranked, candidates, topic_pairs(s, ranked, gathered.stored.items))
    ranked = own_first(topics.ranked, gathered.origin)
    return Retrieved(candidates, ranked, topics.newer, gathered.origin, confidence)


async def verify(
    s: Scope, ranked: list[Ranked[Key]], gathered: Gathered, result: QueryResult
) -> dict[Key, float]:
    """The answer verifier's probability for each of the first `verify_depth` candidates with a
    row and a stored vector (its second input is the pair's cosine). Nothing when the query has
    no vector (keyword only) or the verifier fails: the calibrated ranking then stands, and the
    result says `verifier = "fallback"`."""
    verifier, stored = s.verifier, gathered.stored
    if verifier is None or stored.query is None:
        return {}
    candidates = gathered.rows.candidates
    keys = [r.key for r in ranked if r.key in candidates and r.key in stored.items]
    keys = keys[: s.preset.verify_depth]
    if not keys:
        return {}
    query = np.asarray(stored.query, dtype=np.float32)
    cosines = [float(np.dot(query, np.asarray(stored.items[k], dtype=np.float32))) for k in keys]
    try:
        logits = await verifier.logits(s.query, [candidates[k].content for k in keys], cosines)
    except EmbeddingError as exc:
        log.warning("answer verifier failed (%s): the calibrated ranking stands", exc)
        result.verifier = "fallback"
        return {}
    result.verifier = "local"
    return dict(zip(keys, verifier.probabilities(logits).tolist(), strict=True))


def calibrate(
    s: Scope, ranked: list[Ranked[Key]], candidates: dict[Key, Candidate]
) -> list[Ranked[Key]]:
    """Relevance (the learned model or the preset's fusion) and the recency weight."""
    request = s.request
    now = request.as_of or datetime.now(UTC)
    ages = {k: (now - c.created_at).total_seconds() / 86400 for k, c in candidates.items()}
    weight = s.preset.recency_weight if request.recency is None else request.recency
    return finalise(ranked, s.preset, ages, weight, s.relevance)


async def item_vectors(
    repo: RetrievalRepository, s: Scope, rows: Rows, embedding: Embedding | None
) -> Stored:
    """The stored vectors of the ranking's first `answer_depth` candidates with a row (the
    answer head's input; none when the query has no vector) and of its first `topic_depth`
    memories (the topic links'): those read with the rows, the rest in one statement."""
    query = None
    if embedding is not None and embedding.done() and not embedding.cancelled():
        query = embedding.result()[0]
    preset = s.preset
    head: list[Key] = []
    if s.head is not None and preset.answer_depth > 0 and query is not None:
        head = [r.key for r in rows.ranked if r.key in rows.candidates][: preset.answer_depth]
    topic: list[Key] = []
    if preset.links_topics and s.memories and not topic_vectors_read(preset):
        # Decisions alone: none to read unless two are among the first memories.
        first = [r.key for r in rows.ranked if r.key[0] is Source.MEMORY][: preset.topic_depth]
        decisions = [k for k in first if _kind(rows.candidates, k) == DECISION]
        topic = decisions if len(decisions) > 1 else []
    # The first memories' vectors came with their rows when the links read every kind
    # (context.topic_vectors); a statement reads the rest of the user's own. A shared space's
    # come with the spaces' rows, and a memory read with its row but without a vector has none.
    read = dict(rows.vectors)
    ask = [k for k in dict.fromkeys(head + topic) if k in rows.candidates and k not in read]
    if ask:
        read |= await repo.vectors(s.request.user_id, ask)
    return Stored(query, read, head)


def answer_logits(s: Scope, stored: Stored) -> dict[Key, float]:
    """The answer head's logit of each of the first candidates (app/retrieval/answer_head.py)."""
    if s.head is None or stored.query is None or s.preset.answer_depth <= 0:
        return {}
    keys = [k for k in stored.scored if k in stored.items]
    if not keys:
        return {}
    items = np.stack([stored.items[k] for k in keys])
    logits = s.head.logits(np.asarray(stored.query, dtype=np.float32), items)
    return {k: float(v) for k, v in zip(keys, logits, strict=True)}


def with_answer_head(
    s: Scope, ranked: list[Ranked[Key]], head: dict[Key, float]
) -> list[Ranked[Key]]:
    """Learned fusion: each candidate's odds x exp(head_weight x its head logit), the second
    half of the relevance model's logit (RelevanceModel.head_weight); a candidate past the
    head's depth counts as the lowest logit it gave. The ranking is re-sorted."""
    weight = s.relevance.head_weight
    if not head or weight == 0.0 or s.preset.fusion != "learned":
        return ranked
    floor = min(head.values())
    out = [replace(r, fused=r.fused * math.exp(weight * head.get(r.key, floor))) for r in ranked]
    out.sort(key=lambda r: (-r.fused, -r.relevance))
    return out


def topic_pairs(
    s: Scope, ranked: list[Ranked[Key]], vectors: dict[Key, Any]
) -> dict[tuple[Key, Key], float]:
    """The cosines between the stored vectors of the ranking's first `topic_depth` memories
    (none when the preset does not link topics)."""
    if not s.preset.links_topics or not s.memories:
        return {}
    keys = [r.key for r in ranked if r.key[0] is Source.MEMORY and r.key in vectors]
    keys = keys[: s.preset.topic_depth]
    return {
        (a, b): float(np.dot(vectors[a], vectors[b]))
        for i, a in enumerate(keys)
        for b in keys[i + 1 :]
    }


def newer_wins(
    s: Scope,
    ranked: list[Ranked[Key]],
    candidates: dict[Key, Candidate],
    pairs: dict[tuple[Key, Key], float],
) -> Linked[Key]:
    """Two memories of one topic: the newer ranks at least where the older stood, and the
    older is marked possibly outdated (app/retrieval/topics.py)."""
    linked_keys = {k for pair in pairs for k in pair}
    created = {k: candidates[k].created_at for k in linked_keys if k in candidates}
    # A decision is linked as one only when it would be returned on its own (its relevance at
    # the spec's floor): a newer decision on a neighbouring matter ("the worktop" for a
    # question about "the cabinets") is not lifted over the one that answers.
    relevance = {r.key: r.relevance for r in ranked}
    kinds = {
        k: _kind(candidates, k) if relevance.get(k, 0.0) >= SPEC_FLOOR else None
        for k in linked_keys
    }
    decisions = {DECISION: s.preset.decision_link} if s.preset.decision_link > 0.0 else {}
    tie = (s.preset.tie_link, s.preset.tie_ratio) if s.preset.tie_link > 0.0 else None
    revises = _revises(s, candidates, relevance) if s.revision is not None else None
    return link_topics(ranked, created, pairs, s.preset.topic_link, kinds, decisions, tie, revises)


def _revises(
    s: Scope, candidates: dict[Key, Candidate], relevance: dict[Key, float]
) -> Callable[[Key, Key, float], Revision | None]:
    """Whether the newer of a pair revises the older that ranks above it: the embedder's
    revision model (app/retrieval/revision.py) at the preset's `revision_threshold` (the newer
    first) and `revision_outdates` (the older reported possibly outdated too)."""
    assert s.revision is not None
    model, threshold = s.revision, s.preset.revision_threshold
    outdates = s.preset.revision_outdates
    texts: dict[Key, MemoryText] = {}

    def text(key: Key) -> MemoryText:
        """A linked memory's words, read when one of its pairs is asked about (few are)."""
        if key not in texts:
            texts[key] = memory_text(_content(candidates, key), _kind(candidates, key))
        return texts[key]

    def revises(old: Key, new: Key, cosine: float) -> Revision | None:
        older, newer = text(old), text(new)
        if not model.reads(older.words, newer.words):
            return None  # longer than any memory it was fitted on
        x = revision_features(
            cosine, relevance.get(old, 0.0), relevance.get(new, 0.0), older, newer
        )
        p = model.probability(x)
        if 0.0 < outdates <= p:
            return "outdates"
        return "precedes" if p >= threshold else None

    return revises


DECISION = "decision"


def _content(candidates: Mapping[Key, Candidate], key: Key) -> str:
    """An item's text ("" for an item without a row)."""
    candidate = candidates.get(key)
    return candidate.content if candidate is not None else ""


def _kind(candidates: dict[Key, Candidate], key: Key) -> str | None:
    """A memory's type (None for a turn, or an item without a row)."""
    candidate = candidates.get(key)
    return candidate.type if candidate is not None and key[0] is Source.MEMORY else None
