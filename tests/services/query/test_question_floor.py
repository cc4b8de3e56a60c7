"""The evidence floor where the question model reads (preset `question_vector_floor`, measured
and not taken: docs/retrieval.md), pure: a candidate with no keyword match and a cosine between
that floor and `vector_floor` is kept only when the question model reads the question (a model,
and a vector arm that found QUESTION_DEPTH items or more)."""

from __future__ import annotations

import uuid

from app.embedding_models import DEFAULT_MODEL_ID
from app.repositories.retrieval import KeywordHits
from app.repositories.search_index import Source
from app.retrieval.abstention import DEPTH, question_model_for
from app.retrieval.presets import PRESETS
from app.retrieval.relevance import load_model
from app.services.query.arms import fuse
from app.services.query.model import QueryRequest
from app.services.query.state import ArmHits, question_reads, scope

QUESTION = "Where's the adrenaline pen kept?"
FAINT = (Source.MEMORY, uuid.UUID(int=1))  # cosine 0.2: under 0.25, over 0.15


def hits(found: int) -> ArmHits:
    cosines = {(Source.MEMORY, uuid.UUID(int=n + 2)): 0.05 for n in range(found - 1)}
    return ArmHits(KeywordHits({}, 0.0), {FAINT: 0.2, **cosines})


def test_the_floor_is_lowered_only_where_the_question_model_reads() -> None:
    question = question_model_for(DEFAULT_MODEL_ID)
    assert question is not None
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    lowered = PRESETS["default"].with_(question_vector_floor=0.15)
    for preset, model, found, kept in (
        (lowered, question, DEPTH, True),
        (lowered, question, DEPTH - 1, False),  # a store smaller than it was fitted on
        (lowered, None, DEPTH, False),  # no question model
        (PRESETS["default"], question, DEPTH, False),  # the default: 0.25 everywhere
    ):
        s = scope(request, QUESTION, preset, load_model(), question=model)
        assert question_reads(s, hits(found)) == (model is not None and found >= DEPTH)
        keys = [r.key for r in fuse(s, hits(found))]
        assert (FAINT in keys) == kept, (preset.question_vector_floor, model, found)
        assert keys == [FAINT] or not kept  # the 0.05 ones carry nothing either way
