"""The date-expression parser: absolute dates, relative expressions, nonsense."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.retrieval.dates import (
    TimeWindow,
    asks_when,
    parse_time_expression,
    tells_time,
    tells_time_by_patterns,
)

# A Wednesday.
NOW = datetime(2024, 3, 13, 15, 30, tzinfo=UTC)


def d(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


CASES: list[tuple[str, datetime, datetime]] = [
    # explicit days
    ("What happened on 2023-05-08?", d(2023, 5, 8), d(2023, 5, 9)),
    ("What did she paint on October 13, 2023?", d(2023, 10, 13), d(2023, 10, 14)),
    ("What did Gina find on 1 February, 2023?", d(2023, 2, 1), d(2023, 2, 2)),
    ("news shared on 16th of June 2023", d(2023, 6, 16), d(2023, 6, 17)),
    ("the meeting on Sept 3rd, 2022", d(2022, 9, 3), d(2022, 9, 4)),
    # a month or season of a year
    ("What setback did she face in October 2023?", d(2023, 10, 1), d(2023, 11, 1)),
    ("Which trip in Dec 2022", d(2022, 12, 1), d(2023, 1, 1)),
    ("What state did Joanna visit in summer 2021?", d(2021, 6, 1), d(2021, 9, 1)),
    ("ski trip in winter 2022", d(2022, 12, 1), d(2023, 3, 1)),
    # shifted from an explicit date
    ("the puppy she got two weeks before August 11, 2023", d(2023, 7, 25), d(2023, 8, 1)),
    ("What did John do the week before August 3, 2023?", d(2023, 7, 27), d(2023, 8, 3)),
    ("the 31 February 2023 party", d(2023, 2, 1), d(2023, 3, 1)),  # no such day: the month
    ("3 days after 2023-01-05", d(2023, 1, 8), d(2023, 1, 9)),
    ("the day after 5 May 2023", d(2023, 5, 6), d(2023, 5, 7)),
    # a year
    ("How many times has she gone to the beach in 2023?", d(2023, 1, 1), d(2024, 1, 1)),
    ("since 2019", d(2019, 1, 1), d(2020, 1, 1)),
    # relative to now
    ("what did I eat yesterday", d(2024, 3, 12), d(2024, 3, 13)),
    ("plans for today", d(2024, 3, 13), d(2024, 3, 14)),
    ("the movie we saw last night", d(2024, 3, 12), d(2024, 3, 13)),
    ("the book I mentioned two weeks ago", d(2024, 2, 25), d(2024, 3, 3)),
    ("3 days ago", d(2024, 3, 10), d(2024, 3, 11)),
    ("a month ago", d(2024, 2, 1), d(2024, 3, 1)),
    ("a couple of years ago", d(2022, 1, 1), d(2023, 1, 1)),
    ("last week", d(2024, 3, 4), d(2024, 3, 11)),
    ("this week", d(2024, 3, 11), d(2024, 3, 18)),
    ("What did she do last weekend?", d(2024, 3, 9), d(2024, 3, 11)),  # the one just past
    ("last month", d(2024, 2, 1), d(2024, 3, 1)),
    ("this month", d(2024, 3, 1), d(2024, 4, 1)),
    ("last year", d(2023, 1, 1), d(2024, 1, 1)),
    ("this year", d(2024, 1, 1), d(2025, 1, 1)),
    ("last Friday", d(2024, 3, 8), d(2024, 3, 9)),
    ("last Wednesday", d(2024, 3, 6), d(2024, 3, 7)),
    ("the trip last May", d(2023, 5, 1), d(2023, 6, 1)),
    ("the party last March", d(2023, 3, 1), d(2023, 4, 1)),
    ("When did she go camping in June?", d(2023, 6, 1), d(2023, 7, 1)),
    ("What happened in February?", d(2024, 2, 1), d(2024, 3, 1)),
    ("early January", d(2024, 1, 1), d(2024, 1, 11)),
    ("the call on March 2", d(2024, 3, 2), d(2024, 3, 3)),
    ("the call on March 20", d(2023, 3, 20), d(2023, 3, 21)),
]


@pytest.mark.parametrize(("text", "start", "end"), CASES, ids=[c[0] for c in CASES])
def test_expressions_resolve_to_their_window(text: str, start: datetime, end: datetime) -> None:
    window = parse_time_expression(text, NOW)
    assert window is not None, text
    assert (window.start, window.end) == (start, end)
    assert window.phrase.lower() in text.lower()


NONSENSE = [
    "What is Caroline's favourite colour?",
    "May I ask what her hobbies are?",
    "She bought 5 apples and 2023 oranges",
    "version 2.2023 of the app",
    "room 2023-13-45",
    "",
    "agoraphobia weekly",
    "he may march on",
]


@pytest.mark.parametrize("text", NONSENSE)
def test_text_without_a_time_gives_none(text: str) -> None:
    assert parse_time_expression(text, NOW) is None


def test_naive_now_is_read_as_utc() -> None:
    window = parse_time_expression("yesterday", NOW.replace(tzinfo=None))
    assert window is not None and window.start == d(2024, 3, 12)


def test_window_membership_and_widening() -> None:
    window = TimeWindow(d(2023, 6, 1), d(2023, 7, 1), "in June 2023")
    assert d(2023, 6, 1) in window
    assert d(2023, 7, 1) not in window  # half-open
    assert datetime(2023, 6, 30, 23, 59) in window  # naive = UTC
    wider = window.widened(after=timedelta(days=14))
    assert d(2023, 7, 10) in wider and d(2023, 7, 20) not in wider


def test_the_earliest_relative_expression_wins() -> None:
    window = parse_time_expression("yesterday, not last year", NOW)
    assert window is not None and window.phrase == "yesterday"


@pytest.mark.parametrize(
    ("text", "now"),
    [
        ("last year", datetime(1, 1, 1, tzinfo=UTC)),
        ("two years ago", datetime(1, 6, 1, tzinfo=UTC)),
        ("yesterday", datetime(1, 1, 1, tzinfo=UTC)),
        ("next year", datetime(9999, 12, 31, tzinfo=UTC)),
        ("999 months ago", datetime(2, 1, 1, tzinfo=UTC)),
    ],
)
def test_windows_off_the_calendar_are_none_not_errors(text: str, now: datetime) -> None:
    assert parse_time_expression(text, now) is None


def test_widening_stops_at_the_calendar_ends() -> None:
    late = TimeWindow(datetime(9999, 12, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC), "x")
    assert late.widened(after=timedelta(days=30)).end == datetime.max.replace(tzinfo=UTC)
    early = TimeWindow(datetime(1, 1, 2, tzinfo=UTC), datetime(1, 2, 1, tzinfo=UTC), "x")
    assert early.widened(before=timedelta(days=30)).start == datetime.min.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("When did Melanie paint a sunrise?", True),
        ("  when was the move?", True),
        ("What year did she start surfing?", True),
        ("On what date did they meet?", True),
        ("How long ago was the trip?", True),
        ("Since when has he been vegan?", True),
        ("What did she paint?", False),
        ("Whenever I ask, what do you say?", False),
        ("What time zone do I work in", True),  # a time question all the same: a soft preference
        ("Who came to the party last week?", False),
        ("", False),
    ],
)
def test_asks_when(question: str, expected: bool) -> None:
    assert asks_when(question) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went camping with the kids yesterday.", True),
        ("We moved here two years ago", True),
        ("Last week I joined a gym", True),
        ("The race is on Saturday!", True),
        ("Back in 2019 I lived in Lyon", True),
        ("I started on March 3 with the new team", True),
        ("I loved reading that book as a kid.", False),
        ("You may march on with it", False),  # "may" and "march" as verbs
        ("Room 2023-13 is free", False),
        ("", False),
    ],
)
def test_tells_time(text: str, expected: bool) -> None:
    assert tells_time(text) is expected


_TIME_ISH = st.sampled_from(
    [
        "last", "this", "next", "past", "in", "early", "since", "by", "on", "until", "before",
        "week", "weekend", "weeks", "month", "year", "years", "night", "summer", "fall", "autumn",
        "ago", "today", "Yesterday", "TONIGHT", "recently", "lately", "Monday", "sunday's",
        "March", "may", "maybe", "Mayday", "june", "December", "Sept", "3", "21st", "2019",
        "1999-2000", "x2023", "_may", "may_", "march5", "\u017f", "\u212a", "\u0130", "\u0131",
        "caf\u00e9", "day", "days", "birthday",
    ]
)  # fmt: skip
_FILLER = st.text(alphabet=" .,;:!?'\"-_()\n\tabcdefghijklmnopqrstuvwxyzAMY0123456789", max_size=12)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(_TIME_ISH, _FILLER), max_size=12), st.sampled_from([" ", "", "  ", "-"]))
def test_tells_time_reads_words_as_the_patterns_do(parts: list[str], glue: str) -> None:
    text = glue.join(parts)
    assert tells_time(text) is tells_time_by_patterns(text)


@pytest.mark.parametrize(
    "text",
    [
        "See you tomorrow", "a long weekend", "weekends are short", "in may", "may 3",
        "this fall", "fall down", "the \u017fummer", "la\u017ft week",
        "\u0130n May", "yesterday_x", "x_yesterday", "yesterday2", "two weeks ago.",
    ],
)  # fmt: skip
def test_tells_time_agrees_with_its_patterns(text: str) -> None:
    assert tells_time(text) is tells_time_by_patterns(text)
