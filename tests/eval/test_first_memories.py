"""A new user's store from the corpus (eval.datasets.curated.first_memories, `python -m eval
--dataset curated --first-memories N`): pure, on the committed corpus."""

from __future__ import annotations

import itertools

from eval.datasets.curated import CORPUS_PATH, first_memories, load_curated, some_people


def test_each_person_keeps_their_first_memories_and_the_questions_those_still_answer() -> None:
    corpus = load_curated(CORPUS_PATH, "test")
    small = first_memories(corpus, 12)
    assert len(small.users) == len(corpus.users)
    for user, whole in zip(small.users, corpus.users, strict=True):
        assert user.memories == whole.memories[:12]
        kept = {m.key for m in user.memories}
        # Every question nothing answers stays; an answerable one only with all its memories.
        assert [q for q in whole.questions if not q.answerable] == [
            q for q in user.questions if not q.answerable
        ]
        for question in whole.questions:
            labelled = {*question.answers, *question.stale}
            assert (question in user.questions) == (labelled <= kept)
    assert any(q.answerable for u in small.users for q in u.questions)
    assert first_memories(corpus, 10_000) == corpus


def test_a_learning_curve_adds_people_and_chooses_the_same_ones_every_run() -> None:
    """eval.datasets.curated.some_people (`--train-people`, eval.learning_curve): the corpus's
    train people, a count at a time; a smaller count's people are among a larger's."""
    train = [u.id for u in load_curated(CORPUS_PATH, "train").users]
    counts = (3, 6, 12, 24, 48, len(train))
    curve = [some_people(train, n) for n in counts]
    assert [len(people) for people in curve] == list(counts)
    assert all(a < b for a, b in itertools.pairwise(curve))
    assert curve[-1] == set(train) == some_people(reversed(train), len(train) + 6)
    assert some_people(reversed(train), 6) == curve[1]  # not the order they come in
