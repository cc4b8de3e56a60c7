"""What the LLM judge's verdicts and the local verifier's probabilities do to a ranking
(app/retrieval/verdicts.py), pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.retrieval.scoring import Ranked, apply_thresholds
from app.retrieval.verdicts import REJECTED_SHARE, apply_verdicts, apply_verified

FLOOR = 0.3


def ranking(*relevances: float) -> list[Ranked[str]]:
    return [Ranked(f"k{n}", 1.0 - n / 100, r, 0.0, 0.0) for n, r in enumerate(relevances)]


def relevance(ranked: list[Ranked[str]]) -> dict[str, float]:
    return {r.key: r.relevance for r in ranked}


def test_rejected_go_under_the_floor_and_behind_the_rest() -> None:
    ranked = ranking(0.6, 0.5, 0.2, 0.35)
    out = apply_verdicts(ranked, {"k0": False, "k1": True, "k2": True}, FLOOR)
    assert [r.key for r in out] == ["k1", "k2", "k3", "k0"]
    assert relevance(out) == {
        "k0": REJECTED_SHARE * FLOOR,
        "k1": 0.5,  # answers, above the floor: unchanged
        "k2": FLOOR,  # answers: raised to the floor
        "k3": 0.35,  # not judged: unchanged
    }
    kept = apply_thresholds(out, FLOOR, 0.0)
    assert [r.key for r in kept] == ["k1", "k2", "k3"]


def test_nothing_answers_lowers_the_unjudged_too_in_place() -> None:
    ranked = ranking(0.6, 0.5, 0.45)
    out = apply_verdicts(ranked, {"k0": False, "k1": False}, FLOOR)
    assert [r.key for r in out] == ["k0", "k1", "k2"]
    assert all(r.relevance < FLOOR for r in out)
    assert apply_thresholds(out, FLOOR, 0.6) == []


def test_no_verdicts_is_the_ranking_itself() -> None:
    ranked = ranking(0.6, 0.1)
    assert apply_verdicts(ranked, {}, FLOOR) is ranked


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
    st.lists(st.booleans(), min_size=1, max_size=12),
    st.floats(0.01, 1.0),
)
def test_verdicts_move_relevance_one_way_and_keep_every_item(
    relevances: list[float], verdicts: list[bool], floor: float
) -> None:
    ranked = ranking(*relevances)
    judged = {r.key: v for r, v in zip(ranked, verdicts, strict=False)}
    out = apply_verdicts(ranked, judged, floor)
    assert sorted(r.key for r in out) == sorted(r.key for r in ranked)
    before = relevance(ranked)
    for r in out:
        verdict = judged.get(r.key)
        if verdict:
            assert r.relevance >= max(before[r.key], floor)
        elif verdict is False or not any(judged.values()):
            assert r.relevance < floor and r.relevance <= before[r.key]
        else:
            assert r.relevance == before[r.key]
    # The items kept are in their own order.
    order = [r.key for r in ranked]
    kept = [r.key for r in out if judged.get(r.key) is not False]
    assert kept == [k for k in order if k in kept]


def test_verified_items_report_their_probability_in_its_order() -> None:
    ranked = ranking(0.6, 0.5, 0.4, 0.35)
    out = apply_verified(ranked, {"k0": 0.1, "k1": 0.8, "k2": 0.3})
    assert [r.key for r in out] == ["k1", "k2", "k0", "k3"]
    # k3 was not read: never above the lowest read item's probability
    assert relevance(out) == {"k1": 0.8, "k2": 0.3, "k0": 0.1, "k3": 0.1}
    assert [r.fused for r in out[:3]] == [0.8, 0.3, 0.1]
    assert [r.key for r in apply_thresholds(out, FLOOR, 0.0)] == ["k1", "k2"]


def test_a_near_miss_the_ranking_put_first_falls_under_the_floor() -> None:
    # the relevance model's first place (0.6) is read as no answer: nothing is returned
    out = apply_verified(ranking(0.6, 0.5), {"k0": 0.05, "k1": 0.02})
    assert apply_thresholds(out, FLOOR, 0.3) == []


def test_no_probabilities_is_the_ranking_itself() -> None:
    ranked = ranking(0.6, 0.1)
    assert apply_verified(ranked, {}) is ranked


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
)
def test_verified_keeps_every_item_and_the_read_ones_lead(
    relevances: list[float], probabilities: list[float]
) -> None:
    ranked = ranking(*relevances)
    verified = {r.key: p for r, p in zip(ranked, probabilities, strict=False)}
    out = apply_verified(ranked, verified)
    assert sorted(r.key for r in out) == sorted(r.key for r in ranked)
    read = [r for r in out if r.key in verified]
    assert out[: len(read)] == read
    assert [r.relevance for r in read] == sorted(verified.values(), reverse=True)
    assert all(r.relevance <= min(verified.values()) for r in out[len(read) :])
    # the unread keep their own order
    rest = [r.key for r in out[len(read) :]]
    assert rest == [r.key for r in ranked if r.key not in verified]
