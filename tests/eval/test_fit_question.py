"""The question model's fit (eval.fit_question): numpy only, on synthetic data where the truth
is known."""

from __future__ import annotations

import numpy as np
import pytest

from app.retrieval.abstention import QUESTION_FEATURES
from app.retrieval.relevance import DEFAULT_EMBEDDER, FEATURES, model_for
from eval.fit_question import _fit, candidate_texts, fit
from eval.fit_relevance import Question
from tests.eval.test_locomo import LOCOMO_DEV


def data(seed: int = 45) -> tuple[np.ndarray, np.ndarray]:
    """y depends on +x0 and -x1; x2 is noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2000, 3))
    p = 1.0 / (1.0 + np.exp(-(2.0 * x[:, 0] - 1.5 * x[:, 1])))
    return x, (rng.random(2000) < p).astype(float)


def test_an_unconstrained_fit_finds_both_signs() -> None:
    x, y = data()
    w = _fit(x, y)
    assert w[0] > 1.5 and w[1] < -1.0 and abs(w[2]) < 0.2


def test_a_forbidden_sign_is_held_at_zero_and_the_rest_refitted() -> None:
    x, y = data()
    w = _fit(x, y, signs=[1, 1, 0])  # x1's weight may not be negative
    assert w[1] == 0.0 and w[0] > 1.0
    held = _fit(x, y, held=[0])
    assert held[0] == 0.0 and held[1] < -0.5


def questions(dataset: str, count: int, surety: float, seed: int) -> list[Question]:
    """`count` synthetic questions of a dump's `dataset`, each with three candidates whose
    FEATURES hold a best cosine that stands `surety` higher where the question has an answer
    (the embedder's own train people: higher than a new user's)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        answerable = i % 4 != 0
        x = np.zeros((3, len(FEATURES)))
        x[:, FEATURES.index("cosine_gap")] = [0.0, -0.1, -0.2]
        best = rng.normal(0.4, 0.1) + (surety if answerable else 0.0)
        x[:, FEATURES.index("best_cosine")] = best
        x[:, FEATURES.index("cosine_z")] = rng.normal(3.0, 0.5)
        y = np.array([1.0 if answerable else 0.0, 0.0, 0.0])
        group, keys = f"{dataset}-{i % 7}", ("c0", "c1", "c2")
        out.append(Question(dataset, group, f"{dataset}-q{i}", "paraphrase", x, y, keys, "?"))
    return out


DUMP = (
    questions("curated", 400, 0.4, 1)
    + questions("calibration", 200, 0.1, 2)
    + questions("validation", 100, 0.1, 3)
)
# Their candidates' texts: none holds a value these questions ask for ("?" asks for none).
TEXTS = {(q.group, k): "" for q in DUMP for k in q.keys}


def test_the_question_model_is_fitted_on_the_calibration_people_by_default() -> None:
    model = model_for(DEFAULT_EMBEDDER)
    calibrated, on_train = fit(DUMP, model, TEXTS), fit(DUMP, model, TEXTS, fit_on="curated")
    assert len(calibrated.train[1]) == 200 and len(on_train.train[1]) == 400
    assert len(calibrated.validation[1]) == len(on_train.validation[1]) == 100
    # The train people's answers stand far above their no-answer questions: a model fitted on
    # them sees a cosine of a new user's answer as a near miss.
    cosine = QUESTION_FEATURES.index("best_cosine")
    answer = np.array([0.0] * len(QUESTION_FEATURES))
    answer[cosine] = 0.5  # a new user's answer
    for i, name in enumerate(QUESTION_FEATURES):
        if name != "best_cosine":
            answer[i] = calibrated.model.mean[i]
    assert calibrated.model.probability(answer) > on_train.model.probability(answer) + 0.2


def test_an_operating_point_given_as_a_probability_reads_its_share_back() -> None:
    """`--floor-empty` and `--floor-probability` name one point two ways: the probability
    under which a share of the validation people's answerable questions falls, and that share
    read back from the probability."""
    f = fit(DUMP, model_for(DEFAULT_EMBEDDER), TEXTS)
    answerable = int(f.validation[1].sum())
    for empty in (0.05, 0.10, 0.20):
        assert f.under(f.floor_at(empty)) == int(empty * answerable) / answerable
    assert f.under(0.0) == 0.0 and f.under(1.0) == 1.0


def test_a_dump_without_the_people_to_fit_on_is_refused() -> None:
    model = model_for(DEFAULT_EMBEDDER)
    with pytest.raises(SystemExit, match="no calibration people"):
        fit([q for q in DUMP if q.dataset != "calibration"], model, TEXTS)
    with pytest.raises(ValueError, match="fit_on"):
        fit(DUMP, model, TEXTS, fit_on="test")


def test_the_answer_type_features_read_each_candidates_text_from_the_corpus() -> None:
    """The dump keeps keys: the fit reads their texts (the corpus's, LoCoMo's) and refuses a
    dump whose candidates the corpus does not hold."""
    texts = candidate_texts(locomo=LOCOMO_DEV)
    assert texts[("cp-plumber", "m01")].startswith("I've run my own plumbing")
    if LOCOMO_DEV.exists():
        assert any(group.startswith("conv-") for group, _ in texts)  # LoCoMo's turns
    q = questions("calibration", 1, 0.1, 4)[0]
    q = Question(q.dataset, "cp-plumber", q.qid, q.shape, q.x, q.y, ("m01", "m02", "m99"), "?")
    with pytest.raises(SystemExit, match="m99"):
        fit([q, *DUMP], model_for(DEFAULT_EMBEDDER), texts | TEXTS)
    # A dump that kept no keys is refused, not read as candidates without text.
    keyless = Question(q.dataset, q.group, q.qid, q.shape, q.x, q.y)
    with pytest.raises(SystemExit, match="no candidate keys"):
        fit([keyless, *DUMP], model_for(DEFAULT_EMBEDDER), TEXTS)
