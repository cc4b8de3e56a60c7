"""The question-level abstention model (app/retrieval/abstention.py), pure."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from app.embedding_models import TRAINED_MODEL_ID
from app.retrieval.abstention import (
    NO_HEAD,
    QUESTION_FEATURES,
    QuestionModel,
    question_features,
    question_model_for,
    rescaled,
)
from app.retrieval.relevance import FEATURES, SPEC_FLOOR


def feature_row(**values: float) -> list[float]:
    row = [0.0] * len(FEATURES)
    for name, value in values.items():
        row[FEATURES.index(name)] = value
    return row


def model(floor: float = 0.1) -> QuestionModel:
    n = len(QUESTION_FEATURES)
    return QuestionModel((0.0,) * n, (1.0,) * n, (1.0,) + (0.0,) * (n - 1), 0.0, floor)


def test_features_read_the_best_of_the_first_candidates() -> None:
    rows = [
        feature_row(best_cosine=0.6, cosine_z=2.0, keyword=0.1, plain=0.1),
        feature_row(best_cosine=0.6, cosine_z=2.0, keyword=0.4, plain=0.0, name_missing=1.0),
    ]
    texts = ["Best 5 km: 22:48, in August.", "Electricity bill in August: 18,000 yen."]
    x = question_features([-1.0, 0.5], rows, [0.2, 1.5, -3.0], "What was my 10 km time?", texts)
    assert dict(zip(QUESTION_FEATURES, x, strict=True)) == {
        "best_logit": 0.5,
        "best_cosine": 0.6,
        "cosine_z": 2.0,
        "best_head": 1.5,
        "second_head": 0.2,
        "best_keyword": 0.4,
        "best_plain": 0.1,
        "name_missing": 1.0,
        "type_missing": 0.0,  # a run's time is not a kind these features read
        "qualifier_conflict": 0.0,  # the best by logit (the bill) names no distance
    }


def test_the_answer_type_features_read_the_candidate_of_the_best_logit() -> None:
    rows = [feature_row(), feature_row()]
    texts = ["Best 5 km: 22:48, in August.", "Electricity bill in August: 18,000 yen."]
    time = question_features([2.0, 0.5], rows, [], "What was my 10 km time?", texts)
    named = dict(zip(QUESTION_FEATURES, time, strict=True))
    assert named["type_missing"] == 0.0 and named["qualifier_conflict"] == 1.0
    money = question_features([0.5, 2.0], rows, [], "How much was the bill in August?", texts)
    named = dict(zip(QUESTION_FEATURES, money, strict=True))
    assert named["type_missing"] == 0.0 and named["qualifier_conflict"] == 0.0
    dock = [
        "Agia Marina goes into dry dock at Elefsina on 10 March.",
        "Dry dock quote: 48,000 euros.",
    ]
    for logits, missing in (([2.0, 0.5], 1.0), ([0.5, 2.0], 0.0)):
        x = question_features(logits, rows, [], "How much will the dry dock cost?", dock)
        assert dict(zip(QUESTION_FEATURES, x, strict=True))["type_missing"] == missing
    with pytest.raises(ValueError, match="texts"):
        question_features([0.0, 1.0], rows, [], "What was my 10 km time?", texts[:1])


def test_a_question_without_head_logits_reads_as_the_head_saying_no() -> None:
    x = question_features([0.0], [feature_row()], [], "What is my diet?", ["Alice is vegetarian"])
    assert x[QUESTION_FEATURES.index("best_head")] == NO_HEAD
    with pytest.raises(ValueError):
        question_features([], [], [], "What is my diet?", [])


def test_probability_is_the_logistic_of_the_standardised_features() -> None:
    n = len(QUESTION_FEATURES)
    m = QuestionModel(
        (1.0, 0.0) + (0.0,) * (n - 2),
        (2.0,) + (1.0,) * (n - 1),
        (4.0, -1.0) + (0.0,) * (n - 3) + (-2.0,),
        0.5,
        0.1,
    )
    x = [3.0, 1.0] + [5.0] * (n - 3) + [1.0]
    z = 0.5 + 4.0 - 1.0 - 2.0
    assert m.probability(x) == pytest.approx(1 / (1 + math.exp(-z)))
    with pytest.raises(ValueError):
        m.probability([1.0])


def test_the_operating_point_reports_the_spec_floor() -> None:
    m = model(floor=0.1275)
    assert m.relevance(0.1275) == pytest.approx(SPEC_FLOOR)
    assert m.relevance(0.5) > SPEC_FLOOR > m.relevance(0.05)
    assert m.relevance(1.0) == pytest.approx(1.0)


def test_rescaled_puts_the_best_at_the_question_probability_and_keeps_ratios() -> None:
    assert rescaled([0.8, 0.4, 0.2], 0.5) == pytest.approx([0.5, 0.25, 0.125])
    assert rescaled([0.0, 0.0], 0.9) == [0.0, 0.0]


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=10), st.floats(0.0, 1.0))
@example([5e-324], 0.7)  # a subnormal best (hypothesis found it once in a fresh clone's run)
@example([1e-310, 5e-311, 0.0], 0.3)
def test_rescaled_keeps_the_order(relevances: list[float], reported: float) -> None:
    out = rescaled(relevances, reported)
    assert len(out) == len(relevances)
    if max(relevances) > 0:
        assert max(out) == pytest.approx(reported)
        order = sorted(range(len(relevances)), key=lambda i: -relevances[i])
        assert all(out[a] >= out[b] for a, b in itertools.pairwise(order))


def test_json_round_trip_and_a_foreign_feature_list_is_refused() -> None:
    n = len(QUESTION_FEATURES)
    m = QuestionModel((0.1,) * n, (1.0,) * n, (0.5,) * n, -0.2, 0.1275, "v1")
    assert QuestionModel.from_json(m.to_json()) == m
    with pytest.raises(ValueError):
        QuestionModel.from_json(m.to_json().replace('"best_head"', '"other"'))
    # A file fitted before the answer-type features (their two names missing) is refused too.
    older = m.to_json().replace(',\n    "type_missing",\n    "qualifier_conflict"', "")
    assert '"type_missing"' not in older
    with pytest.raises(ValueError, match="not this code's"):
        QuestionModel.from_json(older)


def test_the_trained_embedder_has_a_committed_model_and_the_default_none() -> None:
    committed = question_model_for(TRAINED_MODEL_ID, "answers")
    assert committed is not None and 0.0 < committed.floor_probability < 1.0
    assert len(committed.weights) == len(QUESTION_FEATURES)  # answers' reads every one too
    default = question_model_for(TRAINED_MODEL_ID)  # the default preset's: every feature
    assert default is not None and len(default.weights) == len(QUESTION_FEATURES)
    assert default.weights[QUESTION_FEATURES.index("type_missing")] < 0.0
    assert question_model_for("all-MiniLM-L6-v2-onnx-dq8") is None
    assert question_model_for("all-MiniLM-L6-v2-onnx-dq8", "answers") is None
