"""The query pipeline: every stage of query_memory, in the order it runs.

    retrieve (under the query's time limit; the first four on the user's connection(s)):
      1. embed       the query vector (started by the service, in a worker thread)
      2. arms        keyword (BM25 + PRF) and vector (exact or ANN) candidates
      3. fuse        both arms' scores into one ranking (app/retrieval/scoring.rank)
      4. context     the rows of the first `depth` items and the turns around the seed
                     messages; neighbours raised (propagate)
      5. rerank      the stages that read the rows (app/retrieval/rerank.py)
      6. calibrate   relevance and recency (app/retrieval/scoring.finalise); the question
                     model (`answerable`: the best relevance at most P(the store answers));
                     a memory about none of the people the question names under the floor
                     (`on_subject`, app/retrieval/subjects.py); with a preset that reads it
                     (`verified`), the answer verifier's probability for the first candidates
                     (`verify`); then newer wins on one topic (app/retrieval/topics.py: the
                     pair cosines of the first memories are read with the context)
    answer:
      7. floor_and_cut  the score floor and relative cutoff, then the request's limit
      8. pack_items     the token budget (app/retrieval/budget.pack)

Where each lives: the values the stages hand each other, state.py; stages 2 to 4 in one read
transaction (and with shared spaces, the user's and the spaces' at once), gather.py; the arms
and the fusion, arms.py; the context and the rerank, context.py; the calibration, calibrate.py;
`retrieve` and the answer (7 and 8), here. Each stage is a small function with a typed input
and output; the arithmetic lives in the pure modules of app/retrieval. QueryService
(service.py) runs `retrieve` and `answer` and turns failures into degraded or empty answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.repositories.retrieval import Candidate
from app.repositories.search_index import Source
from app.retrieval.budget import PackResult, pack
from app.retrieval.scoring import Ranked, apply_thresholds
from app.retrieval.verdicts import apply_verified
from app.services.query.calibrate import linked, scored, verify
from app.services.query.gather import gather, gather_shared
from app.services.query.model import QueryItem, QueryResult, QueryTrace
from app.services.query.state import Cut, Embedding, Gathered, Key, Retrieved, Scope, Vectors


async def retrieve(
    s: Scope,
    embedding: Embedding | None,
    vectors: Vectors,
    slots: asyncio.Semaphore,
    result: QueryResult,
    trace: QueryTrace | None = None,
    spaces: Sequence[Scope] = (),
) -> Retrieved:
    """Stages 2 to 6: the rows and the calibrated ranking. `spaces`: the scopes of the shared
    spaces the request reads besides (the same request, owned by `space:<id>`): their
    candidates are ranked with the user's as one set (`gather_shared`), so a shared memory
    stands on the same relevance scale as the user's own."""
    if not spaces:
        gathered = await gather(s, embedding, vectors, slots, result, trace)
    else:
        gathered = await gather_shared(s, spaces, embedding, vectors, slots, result, trace)
    if s.verifier is None:
        return ranking(s, gathered, trace)
    ranked, _ = scored(s, gathered, trace)  # the verifier's probabilities say the confidence
    verified = await verify(s, ranked, gathered, result)
    return linked(s, gathered, apply_verified(ranked, verified))


def ranking(s: Scope, gathered: Gathered, trace: QueryTrace | None = None) -> Retrieved:
    """Stages 5 and 6 over what the database stages found: the answer head, the rerank, the
    calibration, newer wins on one topic."""
    ranked, confidence = scored(s, gathered, trace)
    return linked(s, gathered, ranked, confidence)


def answer(
    s: Scope, ranked: list[Ranked[Key]], candidates: dict[Key, Candidate], budget: int
) -> tuple[Cut, PackResult]:
    """Stages 7 and 8: what the agent gets of the calibrated ranking."""
    cut = floor_and_cut(s, ranked, candidates)
    return cut, pack_items(cut, candidates, budget)


# -- 7. floor and cut ---------------------------------------------------------------------------


def floor_and_cut(s: Scope, ranked: list[Ranked[Key]], candidates: dict[Key, Candidate]) -> Cut:
    request, preset = s.request, s.preset
    kept = apply_thresholds(
        ranked, request.min_score, preset.relative_cutoff, preset.cutoff_exempt_ranks
    )
    kept = [r for r in kept if r.key in candidates]  # malformed/vanished rows are skipped
    return Cut(kept, kept[: request.limit])


# -- 8. pack ------------------------------------------------------------------------------------


def pack_items(cut: Cut, candidates: dict[Key, Candidate], budget: int) -> PackResult:
    return pack([candidates[r.key].content for r in cut.top], budget)


def item(
    c: Candidate,
    r: Ranked[Key],
    text: str,
    tokens: int,
    cut: bool,
    newer: Key | None = None,
    *,
    space: str | None = None,
) -> QueryItem:
    """One packed item as the agent gets it (scores rounded to 4 places); `newer`: the newer
    memory of its topic, when it may be outdated; `space`: the shared space it lives in."""
    return QueryItem(
        id=str(c.id),
        source_kind="memory" if c.source is Source.MEMORY else "message",
        content=text,
        type=c.type or "message",
        relevance_score=round(r.relevance, 4),
        keyword_score=round(r.keyword, 4),
        semantic_score=round(r.semantic, 4),
        source=c.reference,
        created_at=c.created_at,
        importance=c.importance,
        role=c.role,
        conversation_id=str(c.conversation_id) if c.conversation_id else None,
        tokens=tokens,
        cut=cut,
        newer_id=str(newer[1]) if newer is not None else None,
        space=space,
    )
