"""Pure figures of the curated set (eval.curated_metrics): one question, then aggregates."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from eval.curated_metrics import (
    Answer,
    Judged,
    all_present,
    by_cosine,
    figures,
    first,
    newer_first,
    present,
    shape_rows,
    threshold_sweep,
)
from eval.datasets.curated import SHAPES


def _answer(*keys: str | None, relevances: tuple[float, ...] | None = None) -> Answer:
    return Answer(keys=keys, relevances=relevances or tuple(0.5 for _ in keys))


def _q(
    shape: str,
    answers: tuple[str, ...],
    tool: Answer,
    ranking: Answer | None = None,
    stale: tuple[str, ...] = (),
) -> Judged:
    return Judged(
        question_id=f"q-{shape}",
        user="u",
        shape=shape,
        query="?",
        answers=answers,
        stale=stale,
        tool=tool,
        ranking=ranking or tool,
    )


# --------------------------------------------------------------------------- one question


def test_present_first_and_all_present() -> None:
    keys = ("m02", None, "m01")
    assert present(keys, ["m01"]) and not present(keys, ["m01"], depth=2)
    assert not present(keys, [])  # nothing to find is never "present"
    assert first(keys, ["m02", "m09"]) and not first(keys, ["m01"]) and not first((), ["m01"])
    assert all_present(keys, ["m01", "m02"]) and not all_present(keys, ["m01", "m03"])
    assert not all_present(keys, [])


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (("new", "old"), True),
        (("new",), True),  # the stale one not returned at all
        (("old", "new"), False),
        (("old",), False),  # the newer one missing
        ((), False),
        (("x", "new", "y", "old"), True),
    ],
)
def test_newer_first(keys: tuple[str, ...], expected: bool) -> None:
    assert newer_first(keys, "new", ["old"]) is expected


def test_by_cosine_orders_the_keys_by_their_cosine_to_the_question() -> None:
    question = np.array([1.0, 0.0], dtype=np.float32)
    memories = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    answer = by_cosine(question, memories, ["m1", "m2", "m3"], depth=2)
    assert answer.keys == ("m2", "m1")
    assert answer.relevances == pytest.approx((1.0, 0.6))


# --------------------------------------------------------------------------- aggregates


def _run() -> list[Judged]:
    return [
        _q("paraphrase", ("a",), _answer("a", "b"), _answer("b", "a")),  # tool first, rank not
        _q("paraphrase", ("a",), _answer("b", "a"), _answer("a")),  # present, not first
        _q("paraphrase", ("a",), _answer(), _answer("c", "a")),  # empty
        _q("paraphrase", ("a",), _answer("c"), _answer(*"bcdefghijk", "a")),  # 11th: missed
        _q("shared_word", ("a",), _answer("a")),
        _q("no_answer", (), _answer("x")),  # answered anyway
        _q("no_answer", (), _answer()),
        _q("name_trap", (), _answer()),
        _q("name_trap", ("a",), _answer("b", "a")),
        _q("newer_wins", ("new",), _answer("old", "new"), _answer("new", "old"), stale=("old",)),
        _q("two_memories", ("a", "b"), _answer("a", "b", "c")),
    ]


def test_figures_per_shape_and_path() -> None:
    f = figures(_run())
    assert f["paraphrase_present"] == pytest.approx(2 / 4)
    assert f["paraphrase_first"] == pytest.approx(1 / 4)
    assert f["ranking_paraphrase_present@10"] == pytest.approx(3 / 4)
    assert f["ranking_paraphrase_first"] == pytest.approx(1 / 4)
    assert f["shared_word_present"] == 1.0 and f["shared_word_first"] == 1.0
    # answerable: 4 paraphrase + shared + answerable trap + newer + pair = 8
    assert f["answerable_empty"] == pytest.approx(1 / 8)
    assert f["answerable_present"] == pytest.approx(6 / 8)
    # unanswerable: two no_answer and one trap, one of them answered
    assert f["unanswerable_answered"] == pytest.approx(1 / 3)
    assert f["no_answer_answered"] == pytest.approx(1 / 2)
    assert f["name_trap_answered"] == 0.0 and f["name_trap_first"] == 0.0
    assert f["newer_wins_newer_first"] == 0.0 and f["ranking_newer_wins_newer_first"] == 1.0
    assert f["two_memories_both_present"] == 1.0
    assert f["tool_errors"] == 0.0 and f["ranking_errors"] == 0.0


def test_errors_are_counted_and_an_empty_run_has_no_passing_share() -> None:
    errored = Answer((), (), error="error: database unavailable")
    f = figures([_q("paraphrase", ("a",), errored, _answer("a"))])
    assert f["tool_errors"] == 1.0 and f["ranking_errors"] == 0.0
    assert f["answerable_empty"] == 1.0
    nothing = figures([])
    assert math.isnan(nothing["paraphrase_present"]) and math.isnan(nothing["answerable_empty"])


def test_shape_rows_split_name_traps_by_whether_they_have_an_answer() -> None:
    rows = dict(shape_rows(_run(), SHAPES))
    assert list(rows) == [
        "paraphrase",
        "shared_word",
        "no_answer",
        "name_trap (answer)",
        "name_trap (none)",
        "newer_wins",
        "two_memories",
    ]
    assert rows["paraphrase"]["questions"] == 4 and rows["paraphrase"]["tool empty"] == 0.25
    assert rows["paraphrase"]["tool answered"] == 0.75
    assert math.isnan(rows["no_answer"]["tool present"])
    assert rows["no_answer"]["tool answered"] == 0.5 and rows["no_answer"]["returned"] == 0.5
    assert rows["name_trap (answer)"]["tool present"] == 1.0


def test_threshold_sweep_trades_presence_for_abstention() -> None:
    judged = [
        _q("paraphrase", ("a",), _answer("a", "b", relevances=(0.4, 0.9))),
        _q("paraphrase", ("a",), _answer("a", relevances=(0.7,))),
        _q("no_answer", (), _answer("x", relevances=(0.5,))),
    ]
    sweep = threshold_sweep(judged, [0.0, 0.45, 0.6, 0.8], tool=True)
    assert sweep == [(0.0, 1.0, 1.0), (0.45, 0.5, 1.0), (0.6, 0.5, 0.0), (0.8, 0.0, 0.0)]
    # the default reads the ranking's answer, not the tool's
    other = [_q("no_answer", (), _answer(), _answer("x", relevances=(0.5,)))]
    ((floor, kept, answered),) = threshold_sweep(other, [0.4])
    assert floor == 0.4 and math.isnan(kept) and answered == 1.0


def test_the_embedders_figures_only_when_every_question_has_its_ranking() -> None:
    run = _run()
    assert "cosine_paraphrase_first" not in figures(run)
    assert "cosine first" not in dict(shape_rows(run, SHAPES))["paraphrase"]
    ranked = [
        replace(q, cosine=_answer("a") if q.shape == "paraphrase" else _answer("z")) for q in run
    ]
    f = figures(ranked)
    assert f["cosine_paraphrase_first"] == 1.0
    assert f["cosine_answerable_first"] == pytest.approx(4 / 8)  # the 4 paraphrases of 8
    assert dict(shape_rows(ranked, SHAPES))["paraphrase"]["cosine first"] == 1.0
    assert math.isnan(dict(shape_rows(ranked, SHAPES))["no_answer"]["cosine first"])
