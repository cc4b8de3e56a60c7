"""eval.fit_relevance's pure parts: the evidence the service requires, what the tool keeps of
an answer at an operating point, and the choice of that point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.retrieval.presets import DEFAULT
from app.retrieval.relevance import FEATURES, ITEM_FEATURES, RelevanceModel
from eval.fit_relevance import Question, _kept, choose_floor, evidence, fit, load, logits, save


def _row(cosine: float, best: float, plain: float = 0.0) -> list[float]:
    values = dict.fromkeys(FEATURES, 0.0)
    values.update(cosine_gap=cosine - best, best_cosine=best, plain=plain, keyword=plain)
    return [values[name] for name in FEATURES]


def test_evidence_is_the_default_presets() -> None:
    """The candidates eval.fit_relevance scores are those the default preset ranks: its own
    two floors, whatever their values."""
    floor, keyword_floor = DEFAULT.vector_floor, DEFAULT.keyword_cosine_floor
    assert keyword_floor < floor
    x = np.array(
        [
            _row(floor + 0.01, 0.40),  # cosine over vector_floor
            _row(floor, 0.40),  # at it, no keyword
            _row(keyword_floor + 0.01, 0.40, plain=0.1),  # keyword, cosine over its floor
            _row(keyword_floor, 0.40, plain=0.1),  # keyword in an unrelated item (at the floor)
        ]
    )
    assert evidence(x).tolist() == [True, False, True, False]


def test_kept_applies_the_floor_to_the_best_and_the_cut_relative_to_it() -> None:
    assert _kept(0.2, 0.2, 0.09)  # the best, over the operating point
    assert not _kept(0.05, 0.05, 0.09)  # the best, under it
    # a second answer: relevance best ** gamma * (p / best) ** 0.25 against 0.6 x the best's
    assert _kept(0.1, 0.2, 0.09)  # (1/2) ** 0.25 = 0.84
    assert not _kept(0.002, 0.2, 0.09)  # (1/100) ** 0.25 = 0.32


def test_choose_floor_misses_fewest_targets_then_least() -> None:
    rows = {
        "0.05": {"present": 0.9, "paraphrase_kept": 0.90, "answerable_empty": 0.0,
                 "no_answer_answered": 0.95},
        "0.09": {"present": 0.8, "paraphrase_kept": 0.86, "answerable_empty": 0.01,
                 "no_answer_answered": 0.90},
        "0.20": {"present": 0.5, "paraphrase_kept": 0.60, "answerable_empty": 0.30,
                 "no_answer_answered": 0.40},
    }  # fmt: skip
    assert choose_floor(rows) == 0.09
    assert choose_floor({}) == 0.3


def test_fit_calibrates_on_the_ranking_score_alone_by_default() -> None:
    rng = np.random.default_rng(29)
    questions = []
    for i in range(40):
        x = np.array([_row(c, 0.6) for c in rng.uniform(0.1, 0.6, 8)])
        x[:, FEATURES.index("cosine_z")] = rng.uniform(1, 4)
        y = (x[:, 0] == x[:, 0].max()).astype(float)
        questions.append(Question("curated", f"u{i % 5}", f"q{i}", "paraphrase", x, y))
    model = fit(questions)
    assert model.weights[FEATURES.index("cosine_gap")] > 0
    assert model.weights[FEATURES.index("cosine_z")] == 0.0
    assert model.weights[FEATURES.index("best_cosine")] == 0.0
    with_query = fit(questions, query_features=True)
    assert with_query.weights[FEATURES.index("cosine_z")] != 0.0


def test_memories_get_their_own_weights_on_the_shared_calibration() -> None:
    # turns: the answer is the keyword match; memories: the answer is the best cosine and the
    # keyword match is incidental. One weight vector must compromise; per kind it need not.
    rng = np.random.default_rng(29)
    questions = []
    for i in range(60):
        memory = i % 2 == 0
        cos = rng.uniform(0.1, 0.6, 8)
        kw = np.zeros(8)
        answer = int(np.argmax(cos)) if memory else int(rng.integers(8))
        kw[answer if not memory else (answer + 1) % 8] = rng.uniform(0.3, 0.8)
        x = np.array([_row(c, cos.max(), plain=k) for c, k in zip(cos, kw, strict=True)])
        y = np.zeros(8)
        y[answer] = 1.0
        m = np.full(8, float(memory))
        questions.append(
            Question("curated" if memory else "locomo", f"g{i % 6}", f"q{i}", "x", x, y, memory=m)
        )
    shared = fit(questions, memory_l2=0.0)
    assert shared.memory_weights == ()
    kinds = fit(questions)
    assert len(kinds.memory_weights) == len(ITEM_FEATURES)
    kw = ITEM_FEATURES.index("keyword")
    assert kinds.memory_weights[kw] < 0 < kinds.weights[kw]  # memories trust keywords less

    def first(model: RelevanceModel) -> float:
        return float(np.mean([q.y[np.argmax(logits(model, q))] for q in questions]))

    assert first(kinds) > first(shared)
    # the vectorised logits are RelevanceModel.logit
    q = questions[0]
    assert logits(kinds, q).tolist() == [
        pytest.approx(kinds.logit(tuple(row), memory=True)) for row in q.x
    ]


def test_a_dump_is_refitted_only_for_the_embedder_it_was_collected_with(tmp_path: Path) -> None:
    q = Question("curated", "u1", "q1", "paraphrase", np.array([_row(0.4, 0.4)]), np.array([1.0]))
    path = tmp_path / "fit.dump"
    save([q], path, "all-mpnet-base-v2-int8")
    [again] = load(path, "all-mpnet-base-v2-int8")
    assert again.qid == "q1" and again.x.tolist() == q.x.tolist()
    with pytest.raises(SystemExit, match="collected with embedder all-mpnet-base-v2-int8"):
        load(path, "all-MiniLM-L6-v2-onnx-dq8")
