"""The pipeline's question-model stage (app/services/query/calibrate.py `answerable`), pure: the
best item's relevance becomes the question's probability on the spec's scale, the others keep
their ratio to it, the order is unchanged, and a preset without the model is left alone."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime

import pytest

from app.repositories.retrieval import Candidate, KeywordHits
from app.repositories.search_index import Source
from app.retrieval.abstention import DEPTH as QUESTION_DEPTH
from app.retrieval.abstention import QUESTION_FEATURES, QuestionModel
from app.retrieval.presets import PRESETS
from app.retrieval.relevance import MIN_SPREAD, load_model
from app.retrieval.scoring import Ranked
from app.services.query.calibrate import answerable, question_confidence, question_probability
from app.services.query.model import QueryRequest
from app.services.query.state import ArmHits, scope

QUESTION = "What is my blood type?"


def key(n: int) -> tuple[Source, uuid.UUID]:
    return (Source.MEMORY, uuid.UUID(int=n))


def hits(items: int = QUESTION_DEPTH + 5) -> ArmHits:
    """The arms' hits of a store of `items` memories: a keyword match on the first, and every
    memory's cosine (the vector arm reads them all)."""
    keys = [key(n) for n in range(items)]
    return ArmHits(
        KeywordHits({key(0): 2.0}, 4.0, plain={key(0): 2.0}),
        {k: 0.7 - 0.02 * n for n, k in enumerate(keys)},
    )


def ranked() -> list[Ranked[tuple[Source, uuid.UUID]]]:
    return [Ranked(key(n), r, r, 0.0, 0.0) for n, r in enumerate((0.8, 0.4, 0.2))]


def question_model(bias: float) -> QuestionModel:
    n = len(QUESTION_FEATURES)
    return QuestionModel((0.0,) * n, (1.0,) * n, (0.0,) * n, bias, floor_probability=0.1)


@pytest.mark.parametrize("bias", [-3.0, 0.0, 3.0])
def test_the_best_reports_the_questions_probability_and_the_rest_their_ratio(bias: float) -> None:
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    model = question_model(bias)
    s = scope(request, QUESTION, PRESETS["answers"], load_model(), question=model)
    out = answerable(s, ranked(), question_probability(s, ranked(), hits(), {}, {}))
    reported = model.relevance(1 / (1 + math.exp(-bias)))
    assert [r.key for r in out] == [key(0), key(1), key(2)]
    assert [r.relevance for r in out] == pytest.approx([reported, reported / 2, reported / 4])


def test_a_preset_without_the_question_model_is_left_alone() -> None:
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    s = scope(request, QUESTION, PRESETS["learned"], load_model(), question=question_model(3.0))
    assert s.question is None
    before = ranked()
    assert answerable(s, before, question_probability(s, before, hits(), {}, {})) is before


@pytest.mark.parametrize("items", [0, MIN_SPREAD - 1])
def test_keyword_only_and_a_store_of_a_handful_are_left_alone(items: int) -> None:
    # No vector (keyword only), or too few memories for a best cosine's standing to say anything.
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    s = scope(request, QUESTION, PRESETS["answers"], load_model(), question=question_model(-3.0))
    before = ranked()
    assert answerable(s, before, question_probability(s, before, hits(items), {}, {})) is before


@pytest.mark.parametrize("bias", [-3.0, 3.0])
def test_the_default_preset_caps_the_best_and_never_raises_it(bias: float) -> None:
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    model = question_model(bias)
    s = scope(request, QUESTION, PRESETS["default"], load_model(), question=model)
    assert s.preset.question_caps
    out = answerable(s, ranked(), question_probability(s, ranked(), hits(), {}, {}))
    best = min(0.8, model.relevance(1 / (1 + math.exp(-bias))))
    assert [r.key for r in out] == [key(0), key(1), key(2)]
    assert [r.relevance for r in out] == pytest.approx([best, best / 2, best / 4])


@pytest.mark.parametrize("bias", [-3.0, 3.0])
def test_the_confidence_is_the_questions_probability_uncapped(bias: float) -> None:
    """The default caps the items' relevance at the question's probability, but the question's
    confidence is that probability itself, above the best item's or under it."""
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    model = question_model(bias)
    s = scope(request, QUESTION, PRESETS["default"], load_model(), question=model)
    reported = question_probability(s, ranked(), hits(), {}, {})
    assert reported == pytest.approx(model.relevance(1 / (1 + math.exp(-bias))))
    out = answerable(s, ranked(), reported)
    assert question_confidence(reported, out, out) == pytest.approx(reported)
    assert max(r.relevance for r in out) == pytest.approx(min(0.8, reported))


def test_the_confidence_falls_as_the_subject_rule_lowers_the_best() -> None:
    """A question whose best match the subject rule put under its cap (about someone else):
    the confidence falls in the same ratio as the best relevance."""
    before = ranked()
    after = [Ranked(key(1), 0.4, 0.4, 0.0, 0.0), Ranked(key(0), 0.2, 0.2, 0.0, 0.0)]
    assert question_confidence(0.6, before, after) == pytest.approx(0.6 * 0.4 / 0.8)
    assert question_confidence(0.6, before, before) == pytest.approx(0.6)
    assert question_confidence(None, before, after) is None  # without the model: the best relevance


@pytest.mark.parametrize("items", [0, MIN_SPREAD - 1])
def test_no_question_probability_where_the_model_does_not_read(items: int) -> None:
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    s = scope(request, QUESTION, PRESETS["default"], load_model(), question=question_model(3.0))
    assert question_probability(s, ranked(), hits(items), {}, {}) is None


@pytest.mark.parametrize("items", [MIN_SPREAD, QUESTION_DEPTH - 1, QUESTION_DEPTH + 5])
def test_a_new_users_store_of_five_or_more_is_read(items: int) -> None:
    """A store smaller than the candidates the model reads (a new user's) is read too."""
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    s = scope(request, QUESTION, PRESETS["default"], load_model(), question=question_model(3.0))
    reported = question_probability(s, ranked(), hits(items), {}, {})
    assert reported == pytest.approx(question_model(3.0).relevance(1 / (1 + math.exp(-3.0))))


def test_the_question_model_reads_the_best_candidates_text() -> None:
    """The answer-type features read the text of the candidate of the best logit: a price
    asked of a memory without one lowers P(an answer); the same memory with a price does not."""
    weights = [0.0] * len(QUESTION_FEATURES)
    weights[QUESTION_FEATURES.index("type_missing")] = -2.0
    n = len(QUESTION_FEATURES)
    model = QuestionModel((0.0,) * n, (1.0,) * n, tuple(weights), 1.0, floor_probability=0.5)
    query = "How much did the deck oven cost?"
    request = QueryRequest(user_id="alice", query=query, limit=5, min_score=0.0)
    s = scope(request, query, PRESETS["default"], load_model(), question=model)
    now = datetime(2026, 12, 5, tzinfo=UTC)

    def rows(text: str) -> dict[tuple[Source, uuid.UUID], Candidate]:
        return {
            key(n): Candidate(Source.MEMORY, uuid.UUID(int=n), text, "fact", 0.5, now, *[None] * 3)
            for n in range(3)
        }

    lacking = question_probability(s, ranked(), hits(), {}, rows("The deck oven came from Perth."))
    priced = question_probability(s, ranked(), hits(), {}, rows("The deck oven cost £4,500."))
    assert lacking is not None and priced is not None
    assert lacking < model.relevance(0.5) < priced
