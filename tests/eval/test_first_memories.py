"""A new user's store from the corpus (eval.datasets.curated.first_memories, `python -m eval
--dataset curated --first-memories N`): pure, on the committed corpus."""

from __future__ import annotations

from eval.datasets.curated import CORPUS_PATH, first_memories, load_curated


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
