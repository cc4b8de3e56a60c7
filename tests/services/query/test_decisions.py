"""Newer wins between two decisions (app/services/query/calibrate.py `newer_wins`, preset
`decision_link`), pure: two decisions a question finds are one topic at a low cosine, a newer
decision is lifted only when it would be returned on its own, other kinds keep the general
threshold, and a preset without the link leaves the ranking alone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from app.embedding_models import DEFAULT_MODEL_ID
from app.repositories.retrieval import Candidate
from app.repositories.search_index import Source
from app.retrieval.presets import PRESETS
from app.retrieval.relevance import SPEC_FLOOR, load_model
from app.retrieval.revision import memory_text, revision_features, revision_model_for
from app.retrieval.scoring import Ranked
from app.services.query.calibrate import newer_wins
from app.services.query.model import QueryRequest
from app.services.query.state import scope

QUESTION = "Which extractor am I buying?"
NOW = datetime(2026, 12, 5, tzinfo=UTC)
Key = tuple[Source, uuid.UUID]


def key(n: int) -> Key:
    return (Source.MEMORY, uuid.UUID(int=n))


def candidate(n: int, kind: str, age_days: int) -> Candidate:
    return Candidate(
        Source.MEMORY, uuid.UUID(int=n), f"memory {n}", kind, 0.5,
        NOW - timedelta(days=age_days), None, None, None,
    )  # fmt: skip


def run(preset: str, relevances: tuple[float, float, float], kinds: tuple[str, str, str]):
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    s = scope(request, QUESTION, PRESETS[preset], load_model())
    ranked = [Ranked(key(n), r, r, 0.0, 0.0) for n, r in enumerate(relevances)]
    candidates = {key(n): candidate(n, kinds[n], age) for n, age in enumerate((170, 20, 400))}
    pairs = {(key(0), key(1)): 0.35, (key(0), key(2)): 0.35, (key(1), key(2)): 0.35}
    return newer_wins(s, ranked, candidates, pairs)


def test_the_newer_of_two_decisions_comes_first_and_the_older_is_marked() -> None:
    linked = run("default", (0.8, 0.5, 0.4), ("decision", "decision", "fact"))
    assert [r.key for r in linked.ranked] == [key(1), key(0), key(2)]
    assert linked.newer == {key(0): key(1)}


def test_a_newer_decision_under_the_floor_is_not_lifted() -> None:
    below = SPEC_FLOOR - 0.01
    linked = run("default", (0.8, below, 0.1), ("decision", "decision", "fact"))
    assert linked.newer == {}
    assert [r.key for r in linked.ranked] == [key(0), key(1), key(2)]


def test_facts_keep_the_general_threshold_and_the_learned_preset_links_nothing() -> None:
    facts = run("default", (0.8, 0.5, 0.4), ("fact", "fact", "fact"))
    assert facts.newer == {}
    assert PRESETS["learned"].decision_link == 0.0
    assert run("learned", (0.8, 0.5, 0.4), ("decision", "decision", "fact")).newer == {}


def test_the_default_puts_the_newer_of_a_near_tie_first_and_the_learned_preset_does_not() -> None:
    """`tie_link` 0.5 / `tie_ratio` 0.95 in the default: two facts on one topic (their vectors'
    cosine 0.6) whose newer stands within 5% of the older come newer first, unmarked; 10%
    behind, or in `learned`, they keep their order."""
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    candidates = {key(n): candidate(n, "fact", age) for n, age in enumerate((170, 20))}
    pairs = {(key(0), key(1)): 0.6}
    for preset, relevances, first in (
        ("default", (0.50, 0.48), key(1)),
        ("default", (0.50, 0.45), key(0)),
        ("learned", (0.50, 0.49), key(0)),
    ):
        s = scope(request, QUESTION, PRESETS[preset], load_model())
        ranked = [Ranked(key(n), r, r, 0.0, 0.0) for n, r in enumerate(relevances)]
        linked = newer_wins(s, ranked, candidates, pairs)
        assert linked.ranked[0].key == first, (preset, relevances)
        assert linked.newer == {}


def test_the_revision_model_lifts_a_close_newer_decision_the_floor_kept_out() -> None:
    """The default's revision model (app/retrieval/revision.py) beside the decision link: a
    newer decision the question finds under the spec's floor (which the decision link leaves
    alone) comes first when the two decisions' vectors are close, and the older is marked
    outdated where the model is surer than `revision_outdates`; at a far cosine it stays
    behind."""
    model = revision_model_for(DEFAULT_MODEL_ID)
    assert model is not None
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    candidates = {key(n): candidate(n, "decision", age) for n, age in enumerate((170, 20))}
    ranked = [Ranked(key(0), 0.40, 0.40, 0.0, 0.0), Ranked(key(1), 0.29, 0.29, 0.0, 0.0)]
    default = PRESETS["default"]
    for cosine, revision, first in (
        (0.6, None, key(0)),  # the decision link alone: the newer is under the floor
        (0.6, model, key(1)),
        (0.2, model, key(0)),
    ):
        s = scope(request, QUESTION, default, load_model(), revision=revision)
        linked = newer_wins(s, ranked, candidates, {(key(0), key(1)): cosine})
        assert linked.ranked[0].key == first, (cosine, revision)
        texts = [memory_text(f"memory {n}", "decision") for n in (0, 1)]
        x = revision_features(cosine, 0.40, 0.29, *texts)
        sure = revision is not None and model.probability(x) >= default.revision_outdates
        assert linked.newer == ({key(0): key(1)} if sure else {}), (cosine, revision)
