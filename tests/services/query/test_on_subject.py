"""The pipeline's subject stage (app/services/query/calibrate.py `on_subject`), pure: a memory
about none of the people the question names reports at most the preset's `subject_cap` and
moves down to where its scaled score stands; a turn, a preset without the stage and a store
whose items mostly carry the name (the user's own) are left alone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from app.repositories.retrieval import Candidate, KeywordHits
from app.repositories.search_index import Source
from app.retrieval.presets import PRESETS
from app.retrieval.relevance import load_model
from app.retrieval.scoring import Ranked
from app.services.query.calibrate import name_share, on_subject
from app.services.query.model import QueryRequest
from app.services.query.state import ArmHits, Key, scope

QUESTION = "When is Daisuke's birthday?"
TEXTS = [
    "Keiko's birthday is 22 April.",  # someone else's birthday: no answer
    "Daisuke is our grandson; he started school in September.",
    "The garden has three persimmon trees.",
]


def key(n: int, source: Source = Source.MEMORY) -> Key:
    return (source, uuid.UUID(int=n))


def candidates(source: Source = Source.MEMORY) -> dict[Key, Candidate]:
    now = datetime(2026, 12, 5, tzinfo=UTC)
    return {
        key(n, source): Candidate(
            source, uuid.UUID(int=n), text, "fact", 0.5, now, None, None, None
        )
        for n, text in enumerate(TEXTS)
    }


def ranked(source: Source = Source.MEMORY) -> list[Ranked[Key]]:
    return [Ranked(key(n, source), r, r, 0.0, 0.0) for n, r in enumerate((0.6, 0.45, 0.1))]


def hits(named: int, items: int = 40) -> ArmHits:
    """A store of `items` memories; the keyword arm matched the question's name in `named`."""
    scores = {key(100 + n): 3.0 for n in range(named)}
    plain = {k: 1.0 for k in scores}
    return ArmHits(KeywordHits(scores, 4.0, plain=plain), {key(n): 0.5 for n in range(items)})


def run(preset: str, source: Source = Source.MEMORY, named: int = 1) -> list[Ranked[Key]]:
    request = QueryRequest(user_id="alice", query=QUESTION, limit=5, min_score=0.0)
    s = scope(request, QUESTION, PRESETS[preset], load_model())
    return on_subject(s, ranked(source), candidates(source), hits(named))


@pytest.mark.parametrize("preset", ["default", "answers"])
def test_someone_elses_birthday_is_capped_under_the_floor_and_moves_down(preset: str) -> None:
    out = run(preset)
    cap = PRESETS[preset].subject_cap
    assert [r.key for r in out] == [key(1), key(0), key(2)]
    assert out[1].relevance == pytest.approx(cap)
    assert out[1].fused == pytest.approx(0.6 * cap / 0.6)
    assert out[0].relevance == 0.45  # the memory about Daisuke keeps its own
    assert out[2].relevance == pytest.approx(0.1)  # already under the cap


def test_turns_a_preset_without_the_stage_and_the_users_own_name_are_left_alone() -> None:
    assert run("learned") == ranked()
    assert run("default", Source.MESSAGE) == ranked(Source.MESSAGE)
    assert run("default", named=8) == ranked()  # 8 of the 48 items searched carry the name


def test_the_share_of_the_store_that_carries_the_questions_names() -> None:
    assert name_share(hits(4, items=40)) == pytest.approx(4 / 44)
    assert name_share(ArmHits(KeywordHits({}, 0.0), {})) == 0.0
