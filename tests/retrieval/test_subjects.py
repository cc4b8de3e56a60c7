"""Who a question is about (app/retrieval/subjects.py): pure, with texts."""

from __future__ import annotations

import pytest

from app.retrieval.subjects import OWN_SHARE, mentions, off_subject

# A store of a grandmother's memories, written as an agent writes them: some about her, in the
# first person, some about her family, one naming her (Keiko) in the third person.
STORE = {
    "keiko-birthday": "Keiko's birthday is 22 April.",
    "daisuke": "Daisuke is our grandson; he started school in September.",
    "daisuke-school": "Daisuke's school is Higashi Elementary in Sakai.",
    "pension": "My pension is paid on the 15th of even-numbered months.",
    "tea": "I drink green tea every morning.",
    "hiroshi-stent": "Hiroshi had a stent put in in 2023.",
    "van": "The car is a 2019 Toyota Prius.",
    "keiko-knits": "Keiko knits scarves for the church bazaar.",
    "garden": "The garden has three persimmon trees.",
    "doctor": "The cardiologist is Dr Nakamura at Sakai City Hospital.",
    "keiko-allergy": "Keiko is allergic to penicillin.",
    "user-allergy": "The user is allergic to shellfish.",
}
MEMORIES = list(STORE)


def test_someone_elses_birthday_does_not_answer_a_question_about_a_person_the_store_knows() -> None:
    # The keyword arm matched Daisuke in few of the store's items: under OWN_SHARE.
    off = off_subject("When is Daisuke's birthday?", STORE, MEMORIES, name_share=0.05)
    assert "keiko-birthday" in off
    assert "daisuke" not in off and "daisuke-school" not in off


def test_a_name_the_store_does_not_know_says_nothing() -> None:
    assert off_subject("When is Ruby's birthday?", STORE, MEMORIES) == set()


def test_the_users_own_name_is_the_user() -> None:
    """A name that OWN_SHARE or more of the store carries (the keyword arm's share) is the
    user's own: every memory may answer a question about the user."""
    assert off_subject("When is Keiko's birthday?", STORE, MEMORIES, name_share=OWN_SHARE) == set()
    # ... and the same when the texts carry it that often (3 of 12).
    assert off_subject("What does Keiko drink every morning?", STORE, MEMORIES) == set()


def test_a_question_about_someone_and_the_user_keeps_the_memories_about_the_user() -> None:
    off = off_subject("What are Hiroshi's allergy and mine?", STORE, MEMORIES, name_share=0.05)
    assert "user-allergy" not in off  # "the user"
    assert "tea" not in off and "pension" not in off  # first person
    assert "keiko-allergy" in off  # names Keiko, whose name few memories carry
    assert "hiroshi-stent" not in off  # names Hiroshi
    assert "van" in off and "doctor" in off  # about neither
    family = {"mum": "Mum's birthday is 3 May.", "selin": "Selin's birthday is 9 June."}
    family |= {"tea": "The tea shop opens at nine.", "x": "Ask Selin."}
    off = off_subject("When are Selin's and my mum's birthdays?", family, list(family), 0.05)
    assert off == {"tea"}  # the user's mum, by role, is about the user


def test_a_question_without_names_and_turns_are_never_judged() -> None:
    assert off_subject("What is my blood type?", STORE, MEMORIES) == set()
    # Keiko's birthday as a turn (a key of the texts, not of the memories): never judged, while
    # the memories about neither are.
    memories = [k for k in MEMORIES if k != "keiko-birthday"]
    off = off_subject("When is Daisuke's birthday?", STORE, memories, name_share=0.05)
    assert "keiko-birthday" not in off and "van" in off


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("Henderson", "The Hendersons' kitchen job starts on 3 March.", True),
        ("Henderson", "Mrs Henderson's boiler", True),
        ("daisuke", "Daisuke is seven.", True),
        ("Sam", "Samuel repairs bicycles.", False),
        ("Ali", "Alice is vegetarian.", False),
    ],
)
def test_a_name_is_mentioned_as_a_whole_word_plural_or_possessive(
    name: str, text: str, named: bool
) -> None:
    assert mentions(name, text) is named


@pytest.mark.parametrize(
    "question", ["Which nursing home is Mum in?", "What do I do for fun on Thursdays?"]
)
def test_days_months_and_family_roles_are_no_subjects(question: str) -> None:
    store = {"home": "My mother is at Rosewood Care Home.", "mum": "Mum likes roses."}
    store |= {f"m{n}": f"Thursday note {n}" for n in range(3)} | {"x": "Ask Ana."}
    assert off_subject(question, store, list(store), name_share=0.01) == set()
