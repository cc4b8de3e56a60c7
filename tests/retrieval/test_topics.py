"""Newer wins on one topic (app/retrieval/topics.py): pure, with lists."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from app.retrieval.scoring import Ranked
from app.retrieval.topics import Revision, link_topics

NOW = datetime(2026, 11, 26, tzinfo=UTC)


def ranked(*rows: tuple[str, float]) -> list[Ranked[str]]:
    return [Ranked(k, score, score, 0.0, 0.0) for k, score in rows]


def ages(**days: int) -> dict[str, datetime]:
    return {k: NOW - timedelta(days=d) for k, d in days.items()}


def test_the_newer_of_two_close_memories_takes_the_older_ones_place_and_marks_it() -> None:
    order = ranked(("pens", 0.8), ("pump", 0.6), ("diet", 0.5))
    linked = link_topics(
        order, ages(pens=200, pump=20, diet=5), {("pens", "pump"): 0.72}, threshold=0.6
    )
    assert [r.key for r in linked.ranked] == ["pump", "pens", "diet"]
    assert linked.newer == {"pens": "pump"}
    pump = linked.ranked[0]
    assert (pump.fused, pump.relevance) == (0.8, 0.8)  # what answered then answers now


def test_a_newer_memory_already_ahead_keeps_its_own_score() -> None:
    linked = link_topics(
        ranked(("pump", 0.9), ("pens", 0.8)),
        ages(pens=200, pump=20),
        {("pump", "pens"): 0.7},
        threshold=0.6,
    )
    assert [(r.key, r.relevance) for r in linked.ranked] == [("pump", 0.9), ("pens", 0.8)]
    assert linked.newer == {"pens": "pump"}


def test_distant_memories_and_memories_of_one_moment_are_not_linked() -> None:
    order = ranked(("old", 0.8), ("new", 0.7), ("a", 0.6), ("b", 0.5))
    created = ages(old=300, new=10, a=40, b=40)
    pairs = {("old", "new"): 0.5, ("a", "b"): 0.9, ("old", "a"): 0.3}
    linked = link_topics(order, created, pairs, threshold=0.6)
    assert linked.newer == {}
    assert linked.ranked == order


def test_three_versions_point_to_the_newest_and_no_threshold_links_nothing() -> None:
    order = ranked(("v1", 0.9), ("v2", 0.8), ("v3", 0.2))
    created = ages(v1=300, v2=100, v3=1)
    pairs = {("v1", "v2"): 0.8, ("v2", "v3"): 0.8, ("v1", "v3"): 0.8}
    linked = link_topics(order, created, pairs, threshold=0.6)
    assert linked.newer == {"v1": "v3", "v2": "v3"}
    assert linked.ranked[0].key == "v3"
    assert link_topics(order, created, pairs, threshold=0.0).newer == {}


def test_an_item_without_a_time_or_outside_the_ranking_is_left_alone() -> None:
    order = ranked(("a", 0.9), ("b", 0.5))
    linked = link_topics(order, ages(a=10), {("a", "b"): 0.95}, threshold=0.6)
    assert linked.newer == {} and linked.ranked == order
    gone = link_topics(order, ages(a=100, b=10, c=1), {("b", "c"): 0.95}, threshold=0.6)
    assert gone.newer == {}  # c is not ranked: b has no newer item to point to here


def test_two_decisions_link_at_their_own_lower_threshold_and_other_kinds_do_not() -> None:
    order = ranked(("lega", 0.8), ("lyson", 0.6), ("hives", 0.5), ("honey", 0.4))
    created = ages(lega=170, lyson=20, hives=400, honey=30)
    kinds = {"lega": "decision", "lyson": "decision", "hives": "fact", "honey": "fact"}
    pairs = {("lega", "lyson"): 0.35, ("hives", "honey"): 0.35, ("lega", "hives"): 0.35}
    linked = link_topics(order, created, pairs, 0.0, kinds, {"decision": 0.2})
    assert linked.newer == {"lega": "lyson"}
    assert [r.key for r in linked.ranked] == ["lyson", "lega", "hives", "honey"]
    # Under the kind's threshold, or without kinds, nothing links (the general one is off).
    assert link_topics(order, created, pairs, 0.0, kinds, {"decision": 0.4}).newer == {}
    assert link_topics(order, created, pairs, 0.0).newer == {}


def test_the_general_threshold_still_links_other_kinds_beside_the_decisions_own() -> None:
    order = ranked(("pens", 0.8), ("pump", 0.6), ("tea", 0.5), ("coffee", 0.4))
    created = ages(pens=200, pump=20, tea=300, coffee=10)
    kinds = {"pens": "fact", "pump": "fact", "tea": "decision", "coffee": "decision"}
    pairs = {("pens", "pump"): 0.7, ("tea", "coffee"): 0.3}
    linked = link_topics(order, created, pairs, 0.6, kinds, {"decision": 0.2})
    assert linked.newer == {"pens": "pump", "tea": "coffee"}
    # A pair of two kinds (a fact and a decision) takes the general threshold.
    mixed = {"pens": "decision", "pump": "fact"}
    one_pair = {("pens", "pump"): 0.5}
    assert link_topics(order, created, one_pair, 0.6, mixed, {"decision": 0.2}).newer == {}


def test_a_near_tie_on_one_topic_puts_the_newer_first_and_marks_nothing() -> None:
    order = ranked(("perama", 0.416), ("elefsina", 0.412), ("crew", 0.30))
    created = ages(perama=150, elefsina=20, crew=5)
    pairs = {("perama", "elefsina"): 0.78, ("perama", "crew"): 0.2}
    linked = link_topics(order, created, pairs, 0.0, tie=(0.5, 0.95))
    assert [r.key for r in linked.ranked] == ["elefsina", "perama", "crew"]
    assert linked.ranked[0].relevance == 0.416  # the older's place, and its relevance
    assert linked.newer == {}  # two near answers on one subject may both hold


def test_a_newer_memory_further_behind_or_on_another_topic_is_not_a_tie() -> None:
    created = ages(old=150, new=20)
    behind = ranked(("old", 0.50), ("new", 0.47))  # 0.94 of the older's relevance
    assert link_topics(behind, created, {("old", "new"): 0.9}, 0.0, tie=(0.5, 0.95)).ranked == (
        behind
    )
    close = ranked(("old", 0.50), ("new", 0.49))
    far = link_topics(close, created, {("old", "new"): 0.49}, 0.0, tie=(0.5, 0.95))
    assert far.ranked == close  # a cosine under the tie's: not one topic
    same_time = link_topics(
        close, ages(old=20, new=20), {("old", "new"): 0.9}, 0.0, tie=(0.5, 0.95)
    )
    assert same_time.ranked == close
    # With the tie in the default's values, the newer of the close pair comes first.
    tied = link_topics(close, created, {("old", "new"): 0.9}, 0.0, tie=(0.5, 0.95))
    assert [r.key for r in tied.ranked] == ["new", "old"]


def test_a_linked_pair_still_marks_the_older_when_ties_are_on_too() -> None:
    order = ranked(("pens", 0.8), ("pump", 0.79))
    created = ages(pens=200, pump=20)
    kinds = {"pens": "decision", "pump": "decision"}
    linked = link_topics(
        order, created, {("pens", "pump"): 0.3}, 0.0, kinds, {"decision": 0.2}, (0.5, 0.95)
    )
    assert [r.key for r in linked.ranked] == ["pump", "pens"]
    assert linked.newer == {"pens": "pump"}


def asking(
    says: dict[str, Revision],
) -> tuple[Callable[[str, str, float], Revision | None], list[tuple[str, str, float]]]:
    """A revision predicate that says `says[newer]` (None for the rest), and the pairs asked."""
    asked: list[tuple[str, str, float]] = []

    def revises(old: str, new: str, cosine: float) -> Revision | None:
        asked.append((old, new, cosine))
        return says.get(new)

    return revises, asked


def test_a_pair_the_revision_predicate_accepts_is_ordered_newer_first_and_not_marked() -> None:
    order = ranked(("school", 0.40), ("apprenticeship", 0.30), ("rugby", 0.25))
    created = ages(school=300, apprenticeship=30, rugby=10)
    pairs = {("school", "apprenticeship"): 0.56, ("school", "rugby"): 0.40}
    revises, asked = asking({"apprenticeship": "precedes"})
    linked = link_topics(order, created, pairs, threshold=0.0, revises=revises)
    assert [r.key for r in linked.ranked] == ["apprenticeship", "school", "rugby"]
    assert linked.ranked[0].relevance == 0.40  # it takes the older one's place
    assert linked.newer == {}  # a learned near tie marks nothing outdated
    assert sorted(asked) == [("school", "apprenticeship", 0.56), ("school", "rugby", 0.40)]


def test_the_revision_predicate_is_not_asked_of_a_newer_memory_already_ahead() -> None:
    order = ranked(("new", 0.5), ("old", 0.4))
    revises, asked = asking({"new": "outdates"})
    linked = link_topics(
        order, ages(old=200, new=10), {("new", "old"): 0.9}, threshold=0.0, revises=revises
    )
    assert asked == []
    assert linked.ranked == order


def test_the_near_tie_still_orders_a_pair_the_revision_predicate_rejects() -> None:
    order = ranked(("perama", 0.416), ("elefsina", 0.412))
    linked = link_topics(
        order,
        ages(perama=130, elefsina=20),
        {("perama", "elefsina"): 0.83},
        threshold=0.0,
        tie=(0.5, 0.95),
        revises=lambda old, new, cosine: None,
    )
    assert [r.key for r in linked.ranked] == ["elefsina", "perama"]


def test_a_pair_the_revision_predicate_says_outdates_is_linked_and_the_older_marked() -> None:
    order = ranked(("greenfield", 0.40), ("sunnyridge", 0.30))
    linked = link_topics(
        order,
        ages(greenfield=210, sunnyridge=35),
        {("greenfield", "sunnyridge"): 0.33},
        threshold=0.0,
        revises=lambda old, new, cosine: "outdates",
    )
    assert [r.key for r in linked.ranked] == ["sunnyridge", "greenfield"]
    assert linked.newer == {"greenfield": "sunnyridge"}
