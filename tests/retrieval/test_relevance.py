"""The learned relevance (app/retrieval/relevance.py), names in questions and the final order."""

from __future__ import annotations

import math

import pytest

from app.retrieval.names import query_names
from app.retrieval.presets import CONVEX, LEARNED
from app.retrieval.relevance import (
    FEATURES,
    RelevanceModel,
    blend,
    features,
    load_model,
    odds,
    parse_model,
    probability_of,
)
from app.retrieval.scoring import Ranked, apply_thresholds, finalise, rank


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("What's Sam's job?", ["Sam"]),
        ("Leo's favourite video game?", ["Leo"]),
        ("Where did I do my doctorate?", []),
        ("Which model have I picked to replace the Volvo?", ["Volvo"]),
        ("which package manager should I use?", []),
        ("When did Melanie paint a sunrise? And Tim?", ["Melanie", "Tim"]),
        ("Where is Ana\u2019s flat?", ["Ana"]),
        ("WHERE DOES SAM WORK?", []),
        ("It's late. What did I cook?", []),
    ],
)
def test_names_are_capitalised_words_that_do_not_open_a_sentence(
    question: str, names: list[str]
) -> None:
    assert query_names(question) == names


def test_name_flags_and_plain_share() -> None:
    x = features(
        keyword_scores={"sam": 2.0, "job": 3.0},
        plain_scores={"sam": 0.0, "job": 3.0},
        max_bm25=6.0,
        cosines={"sam": 0.5, "other": 0.2},
        has_names=True,
    )
    row = dict(zip(FEATURES, x["sam"], strict=True))
    assert row["name_only"] == 1.0 and row["plain"] == 0.0 and row["name_missing"] == 0.0
    assert row["keyword"] == pytest.approx(2.0 / 6.0)
    assert row["keyword_top"] == pytest.approx(2.0 / 3.0)
    assert row["cosine_gap"] == 0.0 and row["best_cosine"] == 0.5
    job = dict(zip(FEATURES, x["job"], strict=True))
    # not returned by the vector arm: the lowest cosine it returned
    assert job["cosine_gap"] == pytest.approx(0.2 - 0.5)
    assert job["name_only"] == 0.0 and job["name_missing"] == 1.0  # Sam is not in it
    other = dict(zip(FEATURES, x["other"], strict=True))
    assert other["keyword"] == 0.0 and other["cosine_gap"] == pytest.approx(-0.3)
    # two cosines have no spread to speak of: the neutral value
    assert [r[FEATURES.index("cosine_z")] for r in x.values()] == [0.0] * 3
    five = features(
        {}, {}, 0.0, dict(zip("abcde", [0.9, 0.5, 0.5, 0.5, 0.1], strict=True)), False, 3.0
    )
    # the same for every candidate of the question: (best - mean) / standard deviation
    mean, sd = 0.5, (0.32 / 5) ** 0.5
    z = (0.9 - mean) / sd
    assert [r[FEATURES.index("cosine_z")] for r in five.values()] == pytest.approx([z] * 5)
    assert features({}, {}, 0.0, {"a": 0.4}, False, 3.0)["a"][-1] == 3.0


def test_the_features_of_some_candidates_are_theirs_among_all() -> None:
    """`only`: the named candidates' rows, as among all candidates (the question's own values,
    best cosine, cosine_z and best BM25, are of all of them), in the order named."""
    cosines = dict(zip("abcdef", [0.9, 0.6, 0.5, 0.45, 0.3, 0.1], strict=True))
    keyword = {"b": 4.0, "e": 2.0, "g": 1.0}
    plain = {"b": 4.0, "e": 0.0, "g": 1.0}
    every = features(keyword, plain, 8.0, cosines, True, 2.0)
    some = features(keyword, plain, 8.0, cosines, True, 2.0, only=["g", "e", "a"])
    assert list(some) == ["g", "e", "a"]
    assert some == {k: every[k] for k in ("g", "e", "a")}
    assert features(keyword, plain, 8.0, cosines, True, 2.0, only=[]) == {}


def _model(**weights: float) -> RelevanceModel:
    # floor probability 0.3: reported relevance = probability (gamma 1)
    return RelevanceModel("test", tuple(weights.get(f, 0.0) for f in FEATURES), -1.0)


def test_learned_rank_orders_by_the_probability_it_reports() -> None:
    model = _model(cosine_gap=10.0, name_only=-3.0)
    ranked = rank(
        {"named": 5.0},
        10.0,
        {"named": 0.5, "answer": 0.45, "far": 0.05},
        LEARNED,
        plain={"named": 0.0},
        model=model,
    )
    # "far" has no evidence of its own (no keyword, cosine under the preset's floor)
    assert [r.key for r in ranked] == ["answer", "named"]
    for r in ranked:
        assert r.fused == pytest.approx(odds(r.relevance))
    final = finalise(ranked, LEARNED, {}, 0.0, model)
    assert [r.relevance for r in final] == sorted((r.relevance for r in final), reverse=True)
    assert final[0].relevance == pytest.approx(1 / (1 + math.exp(-(10 * -0.05 - 1))))


def test_the_reported_scale_puts_the_operating_point_at_the_spec_floor() -> None:
    model = RelevanceModel("test", (0.0,) * len(FEATURES), 0.0, floor_probability=0.1)
    assert model.relevance(0.1) == pytest.approx(0.3)
    assert model.relevance(0.0) == 0.0 and model.relevance(1.0) == 1.0
    assert model.relevance(0.05) < model.relevance(0.2) < model.relevance(0.6)


def test_stages_move_the_reported_relevance_with_the_order() -> None:
    ranked = [Ranked("a", odds(0.6), 0.6, 0, 0), Ranked("b", odds(0.5) * 3.0, 0.5, 0, 0)]
    final = finalise(ranked, LEARNED, {}, 0.0, _model())
    assert [r.key for r in final] == ["b", "a"]
    assert final[0].relevance == pytest.approx(probability_of(3.0))  # odds 1 x 3 -> 0.75


def test_recency_blend_is_issue_28s_form_and_newer_wins_a_tie() -> None:
    assert blend(0.8, 30.0, 0.2, 30.0) == pytest.approx(0.8 * 0.8 + 0.2 * math.exp(-1))
    assert blend(0.8, 30.0, 0.0, 30.0) == 0.8
    tie = [Ranked("old", odds(0.7), 0.7, 0, 0), Ranked("new", odds(0.7), 0.7, 0, 0)]
    final = finalise(tie, LEARNED, {"old": 400.0, "new": 3.0}, 0.1, _model())
    assert [r.key for r in final] == ["new", "old"]
    assert final[0].relevance == pytest.approx(0.9 * 0.7 + 0.1 * math.exp(-0.1))
    # today's fusion: order and relevance untouched without a recency weight
    assert finalise(tie, CONVEX, {"old": 1.0}, 0.0) is tie


def test_thresholds_on_the_reported_relevance() -> None:
    two = [Ranked("a", odds(0.9), 0.9, 0.5, 0), Ranked("b", odds(0.2), 0.2, 0, 0.5)]
    final = finalise(two, LEARNED.with_(relative_exponent=0.0), {}, 0.0, _model())
    assert [r.key for r in apply_thresholds(final, 0.3, 0.6)] == ["a"]
    # relative to the best: b reports 0.9 x (0.2 / 0.9) ** 0.25 = 0.62, within 0.6 of a
    final = finalise(two, LEARNED.with_(relative_exponent=0.25), {}, 0.0, _model())
    assert [r.relevance for r in final] == pytest.approx([0.9, 0.9 * (0.2 / 0.9) ** 0.25])
    assert [r.key for r in apply_thresholds(final, 0.3, 0.6)] == ["a", "b"]
    # a turn ranked only for following a match has no evidence of its own: the model's scale
    neighbour = [two[0], Ranked("n", odds(0.2), 0.0, 0.0, 0.0)]
    final = finalise(neighbour, LEARNED.with_(relative_exponent=0.25), {}, 0.0, _model())
    assert final[1].relevance == pytest.approx(0.2)


def test_relative_relevance_keeps_the_best_and_the_order() -> None:
    model = RelevanceModel("test", (0.0,) * len(FEATURES), 0.0, floor_probability=0.08)
    assert model.relevance(0.2, best=0.2, exponent=0.25) == pytest.approx(model.relevance(0.2))
    below = [model.relevance(p, best=0.2, exponent=0.25) for p in (0.15, 0.1, 0.05, 0.01)]
    assert below == sorted(below, reverse=True)
    # closer to the best than the model's own scale puts them
    assert all(b > model.relevance(p) for b, p in zip(below, (0.15, 0.1, 0.05, 0.01), strict=True))
    assert model.relevance(0.0, best=0.2, exponent=0.25) == 0.0
    assert model.relevance(0.1, best=0.2, exponent=0.0) == pytest.approx(model.relevance(0.1))


def test_keyword_only_evidence_needs_a_cosine_over_its_floor() -> None:
    preset = LEARNED.with_(keyword_cosine_floor=0.1, vector_floor=0.25)
    model = _model(keyword=3.0)
    ranked = rank(
        {"team": 1.0, "kept": 1.0, "far": 1.0},
        4.0,
        {"team": 0.05, "kept": 0.2, "x": 0.3},
        preset,
        plain={"team": 1.0, "kept": 1.0, "far": 1.0},
        model=model,
    )
    # "far" was not returned by the vector arm: its cosine is at most the lowest (0.05)
    assert sorted(r.key for r in ranked) == ["kept", "x"]
    # keyword-only search (no vector arm): the cosine says nothing, the match is evidence
    alone = rank({"team": 1.0}, 4.0, {}, preset, plain={"team": 1.0}, model=model)
    assert [r.key for r in alone] == ["team"]


def test_a_match_on_a_name_alone_needs_a_cosine_over_the_floor_and_the_margin() -> None:
    """ "What is Tom's phone number?" against "Tom repairs bicycles": BM25 on the name alone
    (plain 0) and a cosine just over vector_floor, which the shared name gives it."""
    preset = LEARNED.with_(vector_floor=0.25, name_cosine_margin=0.06)
    model = _model(keyword=3.0)
    keyword = {"name only": 1.0, "name far": 1.0, "word": 1.0}
    plain = {"name only": 0.0, "name far": 0.0, "word": 1.0}
    cosines = {"name only": 0.26, "name far": 0.32, "word": 0.26, "cosine only": 0.26}
    ranked = rank(keyword, 4.0, cosines, preset, plain=plain, model=model, has_names=True)
    assert sorted(r.key for r in ranked) == ["cosine only", "name far", "word"]
    off = rank(keyword, 4.0, cosines, preset.with_(name_cosine_margin=0.0), plain=plain,
               model=model, has_names=True)  # fmt: skip
    assert sorted(r.key for r in off) == ["cosine only", "name far", "name only", "word"]


def test_the_committed_model_loads_and_round_trips() -> None:
    model = load_model()
    assert len(model.weights) == len(FEATURES)
    again = parse_model(model.to_json())
    assert again.weights == pytest.approx(model.weights) and again.bias == pytest.approx(model.bias)
    with pytest.raises(ValueError, match="features"):
        parse_model('{"version": "x", "features": ["cosine"], "weights": {"cosine": 1}, "bias": 0}')


def test_newer_wins_a_near_tie_and_the_newest_keeps_its_odds() -> None:
    from app.retrieval.scoring import newer_wins_ties

    ranked = [Ranked("old", odds(0.5), 0.5, 0, 0.5), Ranked("new", odds(0.48), 0.48, 0, 0.5)]
    ages = {"old": 150.0, "new": 18.0}
    out = newer_wins_ties(ranked, ages, 0.25, 30.0)
    assert [r.key for r in out] == ["new", "old"]
    assert out[0].fused == pytest.approx(odds(0.48))  # the newest is not moved
    # far apart stays apart: a tie-break, not a preference
    apart = [Ranked("old", odds(0.8), 0.8, 0, 0.5), Ranked("new", odds(0.3), 0.3, 0, 0.5)]
    assert [r.key for r in newer_wins_ties(apart, ages, 0.25, 30.0)] == ["old", "new"]
    # a store written today: every odds as it was
    today = newer_wins_ties(apart, {"old": 0.0, "new": 0.0}, 0.25, 30.0)
    assert [r.fused for r in today] == pytest.approx([odds(0.8), odds(0.3)])
    assert newer_wins_ties(ranked, ages, 0.0, 30.0) is ranked
    final = finalise(ranked, LEARNED.with_(recency_odds=0.25), ages, 0.0, _model())
    assert [r.key for r in final] == ["new", "old"]
    assert [r.relevance for r in final] == sorted((r.relevance for r in final), reverse=True)


def test_a_memory_weighs_evidence_by_its_own_vector_on_the_shared_scale() -> None:
    from app.retrieval.relevance import ITEM_FEATURES

    memory = tuple(-2.0 if f == "keyword_top" else 0.0 for f in ITEM_FEATURES)
    model = RelevanceModel("test", _model(keyword_top=3.0).weights, -1.0, memory_weights=memory)
    x = [0.0] * len(FEATURES)
    x[FEATURES.index("keyword_top")] = 1.0
    assert model.logit(x) == pytest.approx(2.0)  # a turn: shared weights only
    assert model.logit(x, memory=True) == pytest.approx(0.0)  # a memory: 3 - 2 on the feature
    # no difference in evidence, no difference in probability: the kinds share bias and scale
    none = [0.0] * len(FEATURES)
    assert model.probability(none, memory=True) == model.probability(none)
    # a store holding both: the memory and the turn come out of one ranking, ordered by the
    # probability each reports
    ranked = rank(
        {("memory", 1): 2.0, ("message", 1): 2.0},
        4.0,
        {("memory", 1): 0.5, ("message", 1): 0.5, ("memory", 2): 0.45},
        LEARNED,
        plain={("memory", 1): 2.0, ("message", 1): 2.0},
        model=RelevanceModel("test", _model(keyword_top=3.0, cosine_gap=10.0).weights, -1.0,
                             memory_weights=memory),
        memories={("memory", 1), ("memory", 2)},
    )  # fmt: skip
    assert [r.key for r in ranked] == [("message", 1), ("memory", 1), ("memory", 2)]
    assert [r.relevance for r in ranked] == pytest.approx(
        [1 / (1 + math.exp(-z)) for z in (2.0, 0.0, -1.5)]
    )
    # without `memories` every candidate is weighed as a turn
    plain = rank(
        {("memory", 1): 2.0}, 4.0, {("memory", 1): 0.5}, LEARNED,
        plain={("memory", 1): 2.0}, model=model,
    )  # fmt: skip
    assert plain[0].relevance == pytest.approx(1 / (1 + math.exp(-2.0)))


def test_memory_weights_round_trip_and_are_optional() -> None:
    from app.retrieval.relevance import ITEM_FEATURES

    memory = tuple(float(i) for i in range(len(ITEM_FEATURES)))
    model = RelevanceModel("test", (0.5,) * len(FEATURES), -1.0, memory_weights=memory)
    assert parse_model(model.to_json()).memory_weights == pytest.approx(memory)
    older = RelevanceModel("test", (0.5,) * len(FEATURES), -1.0)
    assert "memory_weights" not in older.to_json()
    assert parse_model(older.to_json()).memory_weights == ()
    body = model.to_json().replace('"keyword_top"', '"other"', 1)  # the memory block's name
    with pytest.raises(ValueError):
        parse_model(body)


def test_the_committed_model_puts_a_memory_and_a_turn_on_one_scale() -> None:
    # a mixed store (the normal product case): a memory and a turn that are equally the
    # question's best cosine and share no word with it get the same probability, and a memory
    # far below the best cosine does not outrank a turn at it, nor the other way round
    model = load_model()
    x = features({}, {}, 0.0, {"memory": 0.5, "turn": 0.5, "far": 0.2}, False)
    assert model.probability(x["memory"], memory=True) == pytest.approx(
        model.probability(x["turn"])
    )
    assert model.probability(x["far"], memory=True) < model.probability(x["turn"])
    assert model.probability(x["far"]) < model.probability(x["memory"], memory=True)
