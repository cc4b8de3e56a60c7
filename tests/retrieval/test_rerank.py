"""Re-ranking stages as pure functions: the soft time preference and diversification."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.retrieval.dates import TimeWindow
from app.retrieval.presets import PRESETS
from app.retrieval.rerank import rerank
from app.retrieval.scoring import (
    Ranked,
    answers_inherit,
    boost,
    diversify,
    group_vote,
    prefer_window,
)


def r(key: str, fused: float, relevance: float = 0.5) -> Ranked[str]:
    return Ranked(key=key, fused=fused, relevance=relevance, keyword=relevance, semantic=0.0)


JUNE = TimeWindow(datetime(2023, 6, 1, tzinfo=UTC), datetime(2023, 7, 1, tzinfo=UTC), "June 2023")
TIMES = {
    "a": datetime(2022, 6, 5, tzinfo=UTC),
    "b": datetime(2023, 6, 5, tzinfo=UTC),
    "c": datetime(2023, 8, 1, tzinfo=UTC),
}


def test_items_in_the_window_move_up_by_the_boost() -> None:
    ranked = [r("a", 1.0), r("b", 0.8), r("c", 0.7)]
    out = prefer_window(ranked, TIMES, JUNE, boost=0.3)
    assert [x.key for x in out] == ["b", "a", "c"]
    assert out[0].fused == pytest.approx(0.8 * 1.3)
    assert out[0].relevance == 0.5  # thresholds still see the item's own relevance


def test_a_small_boost_keeps_a_large_lead_and_nothing_gains_from_nothing() -> None:
    assert [x.key for x in prefer_window([r("a", 1.0), r("b", 0.5)], TIMES, JUNE, 0.3)] == [
        "a",
        "b",
    ]
    ranked = [r("a", 0.2), r("b", 0.0, relevance=0.0)]
    assert prefer_window(ranked, TIMES, JUNE, boost=5.0)[1].fused == 0.0


def test_no_window_zero_boost_or_unknown_times_change_nothing() -> None:
    ranked = [r("a", 1.0), r("b", 0.8), r("c", 0.7)]
    assert prefer_window(ranked, TIMES, None, boost=0.3) == ranked
    assert prefer_window(ranked, TIMES, JUNE, boost=0.0) == ranked
    assert prefer_window(ranked, {}, JUNE, boost=0.3) == ranked


def test_cap_defers_a_crowded_conversation() -> None:
    ranked = [r("a1", 1.0), r("a2", 0.9), r("a3", 0.8), r("b1", 0.7), r("c1", 0.6), r("a4", 0.5)]
    groups = {k: k[0] for k in ("a1", "a2", "a3", "a4", "b1", "c1")}
    out = diversify(ranked, groups, cap=2, depth=4)
    assert [x.key for x in out] == ["a1", "a2", "b1", "c1", "a3", "a4"]


def test_cap_when_the_ranking_runs_out_keeps_everything() -> None:
    ranked = [r("a1", 1.0), r("a2", 0.9), r("b1", 0.5)]
    out = diversify(ranked, {"a1": "a", "a2": "a", "b1": "b"}, cap=1, depth=5)
    assert [x.key for x in out] == ["a1", "b1", "a2"]


def test_items_without_a_group_are_never_deferred_and_cap_zero_is_off() -> None:
    ranked = [r("m1", 1.0), r("m2", 0.9), r("a1", 0.8), r("a2", 0.7)]
    groups = {"a1": "a", "a2": "a"}
    assert [x.key for x in diversify(ranked, groups, cap=1, depth=3)] == ["m1", "m2", "a1", "a2"]
    assert diversify(ranked, groups, cap=0, depth=3) == ranked


@settings(derandomize=True, max_examples=300)
@given(
    st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 3)), min_size=1, max_size=20),
    st.integers(0, 3),
    st.integers(0, 10),
)
def test_diversify_is_a_permutation_that_keeps_the_best_first(
    items: list[tuple[float, int]], cap: int, depth: int
) -> None:
    ranked = sorted(
        (r(f"k{i}", fused) for i, (fused, _) in enumerate(items)), key=lambda x: -x.fused
    )
    groups = {f"k{i}": group for i, (_, group) in enumerate(items)}
    out = diversify(ranked, groups, cap=cap, depth=depth)
    assert sorted(x.key for x in out) == sorted(x.key for x in ranked)
    assert out[0] == ranked[0]
    if cap > 0:

        def within_cap(seq: list[Ranked[str]]) -> set[str]:
            seen: dict[int, int] = {}
            kept = set()
            for x in seq:
                seen[groups[x.key]] = seen.get(groups[x.key], 0) + 1
                if seen[groups[x.key]] <= cap:
                    kept.add(x.key)
            return kept

        head = [groups[x.key] for x in out[:depth]]
        if any(head.count(g) > cap for g in head):
            # A group fills more than `cap` head places only once every item that fits under
            # the cap is already in the head.
            assert within_cap(ranked) <= {x.key for x in out[:depth]}


def test_group_vote_lifts_items_of_a_conversation_that_matched_often() -> None:
    ranked = [r("x1", 1.0), r("a1", 0.9), r("a2", 0.8), r("b1", 0.85)]
    groups = {"x1": "x", "a1": "a", "a2": "a", "b1": "b"}
    out = group_vote(ranked, groups, weight=0.5, depth=4)
    # a's vote 1.7 is the best: a1 0.9 x 1.5 = 1.35 passes x1 1.0 x (1 + 0.5 / 1.7) = 1.29;
    # a2 0.8 x 1.5 = 1.2 passes b1 0.85 x (1 + 0.5 x 0.85 / 1.7) = 1.06.
    assert [x.key for x in out] == ["a1", "x1", "a2", "b1"]
    assert all(x.relevance == 0.5 for x in out)
    assert group_vote(ranked, groups, weight=0.0, depth=4) == ranked
    assert group_vote(ranked, {}, weight=0.5, depth=4) == ranked


def test_expansion_moves_the_ranking_not_the_relevance() -> None:
    from app.retrieval.presets import CONVEX
    from app.retrieval.scoring import rank

    preset = CONVEX.with_(prf_weight=1.0)
    keyword = {"a": 2.0, "b": 1.0}
    plain = rank(keyword, 4.0, {}, preset)
    expanded = rank(keyword, 4.0, {}, preset, expansion={"b": 3.0, "z": 5.0})
    assert [x.key for x in plain] == ["a", "b"]
    assert [x.key for x in expanded] == ["b", "a"]  # 1 + 3 > 2
    assert {x.key: x.relevance for x in expanded} == {x.key: x.relevance for x in plain}
    # An item found only by the expansion has no signal of its own: it is not returned.
    assert "z" not in {x.key for x in expanded}


def test_boost_lifts_the_chosen_items_and_keeps_their_relevance() -> None:
    ranked = [r("a", 1.0), r("b", 0.8), r("c", 0.5), r("z", 0.0, relevance=0.0)]
    out = boost(ranked, {"c", "z"}, 1.2)
    assert [x.key for x in out] == ["c", "a", "b", "z"]
    assert out[0].fused == pytest.approx(1.1) and out[0].relevance == 0.5
    assert out[-1].fused == 0.0  # nothing gains from nothing
    assert boost(ranked, {"c"}, 0.0) == ranked
    assert boost(ranked, set(), 1.0) == ranked


def test_an_answer_inherits_a_share_of_its_questions_relevance_and_keeps_its_place() -> None:
    ranked = [r("q", 1.0, relevance=0.8), r("x", 0.9, relevance=0.5), r("a", 0.5, relevance=0.1)]
    out = answers_inherit(ranked, {"q": "a"}, 0.75)
    assert [x.key for x in out] == ["q", "x", "a"]  # the order does not move
    assert out[2].relevance == pytest.approx(0.6)
    assert out[2].keyword == 0.1  # its own parts stay its own
    # Never lowered: an answer more relevant than its share keeps its own relevance.
    high = [r("q", 1.0, relevance=0.4), r("a", 0.5, relevance=0.9)]
    assert answers_inherit(high, {"q": "a"}, 0.75)[1].relevance == 0.9
    assert answers_inherit(ranked, {"q": "a"}, 0.0) == ranked
    assert answers_inherit(ranked, {"q": "missing"}, 0.75) == ranked


def test_rerank_drops_rowless_items_and_runs_the_stages_the_preset_turns_on() -> None:
    @dataclass(frozen=True)
    class Row:
        content: str
        role: str | None
        created_at: datetime
        speaker: str | None = None
        conversation_id: object = None

    t = datetime(2024, 5, 1, tzinfo=UTC)
    rows = {
        "q": Row("Which lens should I buy?", "user", t, "Ana"),
        "x": Row("Lenses are expensive.", "assistant", t, "Ben"),
        "a": Row("The XF 35mm.", "assistant", t, "Ben"),
    }
    ranked = [
        Ranked("q", 1.0, 0.9, 0.9, 0.0),
        Ranked("gone", 0.95, 0.9, 0.9, 0.0),  # no row (deleted meanwhile): dropped
        Ranked("x", 0.8, 0.7, 0.7, 0.0),
        Ranked("a", 0.1, 0.1, 0.0, 0.1),
    ]
    neighbours = {"q": (None, "a")}
    question = "Which lens?"
    plain = rerank(ranked, rows, neighbours, question, None, PRESETS["baseline"])
    assert [r.key for r in plain] == ["q", "x", "a"]
    staged = rerank(ranked, rows, neighbours, question, None, PRESETS["convex"])
    assert [r.key for r in staged] == ["q", "a", "x"]  # the answer inherits 0.9 of 1.0
    assert {r.key: r.relevance for r in staged}["a"] == pytest.approx(0.9)
    named = rerank(ranked, rows, neighbours, "What did Ben say?", None, PRESETS["convex"])
    assert [r.key for r in named][:2] == ["a", "x"]  # Ben's turns first


@dataclass(frozen=True)
class Turn:
    content: str
    role: str | None
    created_at: datetime = datetime(2026, 11, 1, tzinfo=UTC)
    speaker: str | None = None
    conversation_id: object = None


def test_a_past_question_steps_aside_for_the_memory_that_tells_the_fact() -> None:
    """The chat proxy's case: "What is my dog's name?" asked before is closer to "Remind me
    what my dog is called?" than the memory that answers it; the question's odds are lowered,
    the memory and turns that tell something are not."""
    preset = PRESETS["default"].with_(question_odds=0.2, answer_relevance=0.0, answer_weight=0.0)
    rows = {
        "asked": Turn("What is my dog's name?", "user"),
        "memory": Turn("The user's dog is named Biscuit.", None),
        "told": Turn("We walk the dog every morning.", "user"),
    }
    ranked = [r("asked", 3.0), r("memory", 2.0), r("told", 1.0)]
    out = rerank(ranked, rows, {}, "Remind me what my dog is called?", None, preset)
    assert [x.key for x in out] == ["memory", "told", "asked"]
    assert out[2].fused == pytest.approx(0.6)
    off = rerank(ranked, rows, {}, "x", None, preset.with_(question_odds=1.0))
    assert [x.key for x in off] == ["asked", "memory", "told"]


def test_boost_lowers_only_when_asked_to() -> None:
    ranked = [r("a", 1.0), r("b", 0.8)]
    assert boost(ranked, {"a"}, -0.5) == ranked  # a negative factor is off by default
    assert [x.key for x in boost(ranked, {"a"}, -0.5, lower=True)] == ["b", "a"]
    assert boost(ranked, {"a"}, -1.0, lower=True) == ranked  # never to zero or below
