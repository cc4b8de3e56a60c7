"""What a question asks for and whether a memory holds it (app/retrieval/answer_types.py), pure."""

from __future__ import annotations

import pytest

from app.retrieval.answer_types import asked, carries, contradicts


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("How much will the dry dock cost?", "amount"),
        ("how much do we pay our chauffeur?", "amount"),
        ("What's the fare from Bara to Sandton?", "amount"),
        ("What does Frutas Finas pay for second-class fruit?", None),  # "pay" alone: not read
        ("What do we charge for a 90-minute game?", "amount"),
        ("How many pigeons do I have in the loft?", "count"),
        ("What time does the night shift start?", "time"),
        ("At what time is the school run?", "time"),
        ("What dose of warfarin is my mother on?", "dose"),
        # Answered by a date, a frequency or a duration as often as by a number: not read.
        ("How many years have I been self-employed?", None),
        ("How many times has the boiler failed?", None),
        ("How much longer is the lease?", None),
        ("How often do I water the bonsai?", None),
        ("When is the van's tax due?", None),
        ("Who is my dentist?", None),
        ("What is my diet?", None),
        ("What was my 10 km time?", None),
        ("What time-saving tricks do I use?", "time"),  # the first words decide
        ("¿Cuánto cuesta el alquiler?", None),  # English words only
        ("", None),
    ],
)
def test_asked(query: str, kind: str | None) -> None:
    assert asked(query) == kind


@pytest.mark.parametrize(
    ("kind", "text", "holds"),
    [
        ("amount", "Public liability insurance with Vero, $2 million cover.", True),
        ("amount", "Freight to Rotterdam: 7.40 euros a tonne.", True),
        ("amount", "The tour costs nothing for children: free entry.", True),
        ("amount", "Agia Marina goes into dry dock at Elefsina on 10 March.", False),
        ("amount", "The twins' aftercare is at Little Acorns until 5:30 pm.", False),
        ("amount", "Bought the bungalow in 2019.", False),
        ("amount", "The pension is paid on the 15th of even-numbered months.", False),
        ("count", "Lost 23 kids to the cold snap.", True),
        ("count", "We keep three hives behind the barn.", True),
        ("count", "Kowalski keeps racing pigeons in a loft behind the house.", False),
        ("count", "Milking is twice a day from December to late June.", False),
        ("time", "Taxis start loading at 4:30 am.", True),
        ("time", "The bottega opens at nine.", True),
        ("time", "Swimming lessons on Tuesdays and Thursdays.", False),
        ("dose", "Takes 850 mg of metformin twice a day.", True),
        ("dose", "Half a tablet of amlodipine at night.", True),
        ("dose", "Hoda takes warfarin; her INR is checked every two weeks.", False),
    ],
)
def test_carries(kind: str, text: str, holds: bool) -> None:
    assert carries(kind, text) is holds  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "text", "conflict"),
    [
        (
            "What was the electricity bill in January?",
            "Electricity bill in August: 18,000 yen.",
            True,
        ),
        (
            "What was the electricity bill in Jan?",
            "Electricity bill in January: 21,000 yen.",
            False,
        ),
        ("What's the gas bill in summer?", "City gas bill in winter is around 90,000 won.", True),
        ("What's the gas bill in the fall?", "Gas bill in autumn: about 60,000 won.", False),
        ("Who cleans on Saturdays?", "The cleaner comes on Mondays.", True),
        ("What was my 10 km time?", "Best 5 km: 22:48, in August.", True),
        ("What was my 5 km time?", "Best 5 km: 22:48, in August.", False),
        ("What do we charge for a 90-minute game?", "Price for a 60-minute game: 24,000.", True),
        ("What do we get for second-class fruit?", "38 pesos a kilo for first-class Hass.", True),
        # Another value beside the asked one is no conflict: the text may hold both.
        ("What's the rate in July?", "Rates: 40 euros in June, 45 in July.", False),
        # Nothing of the same class or word in the text: nothing to contradict.
        ("What was the bill in January?", "The bill is paid by direct debit.", False),
        ("How far is the 10 km loop from home?", "The loop starts at the church.", False),
        ("What is my diet?", "Alice is vegetarian.", False),
    ],
)
def test_contradicts(query: str, text: str, conflict: bool) -> None:
    assert contradicts(query, text) is conflict


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("How much sleep do I need?", "The user needs 8 hours of sleep."),
        ("What time do I walk the dog?", "Walks Mabel every morning before work."),
        ("How many kids do we have?", "Our three girls are at the village school."),
        ("How much do I weigh?", "Weighed in at 82 kilos at the club."),
    ],
)
def test_an_answer_in_other_words_holds_the_kind_asked(query: str, text: str) -> None:
    kind = asked(query)
    assert kind is not None and carries(kind, text)


def test_a_name_that_is_a_months_abbreviation_is_no_month() -> None:
    assert not contradicts("When is Jan's dentist appointment?", "Dentist on 4 May at 9.")
    assert contradicts("What was the bill in Aug?", "The bill in October was 40 euros.")
