"""Time expressions in a question, resolved against a reference 'now' into a window of time.

Pure and offline: regular expressions over English text, no locale data, no clock (the caller
passes `now`). What it understands, most specific first:

- explicit dates: "2023-05-08", "8 May 2023", "May 8th, 2023", "on 7 July, 2023";
- a month of a year or a season: "May 2023", "in July 2022", "summer 2021";
- a date shifted by an amount: "two weeks before August 11, 2023", "the week before 3 June 2023",
  "the weekend before April 10, 2023", "3 days after 2023-01-05";
- a year: "in 2023", "during 2021", "since 2019";
- relative to now: "yesterday", "today", "last night", "two weeks ago", "a month ago",
  "last week", "last weekend", "last month", "last year", "this month", "this year",
  "last Friday", "last May", "in May" (the most recent May up to now), "May 8" (the most
  recent one up to now).

The result is a half-open window [start, end) in UTC. Anything else gives None: the parser
never guesses from bare numbers ("5 apples"), and "may" as a verb is not a month.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
MONTH_ABBREV = {m[:3]: i + 1 for i, m in enumerate(MONTHS)} | {"sept": 9}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
SEASONS = {"spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3), "winter": (12, 3)}
# The numbers one to twelve in words (app/retrieval/answer_types.py reads them too).
TO_TWELVE = (
    "one", "two", "three", "four", "five", "six",
    "seven", "eight", "nine", "ten", "eleven", "twelve",
)  # fmt: skip
_NUMBERS = (
    {"a": 1, "an": 1}
    | {word: n for n, word in enumerate(TO_TWELVE, 1)}
    | {"a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3}
)

_MONTH = (
    r"(?P<month>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|"
    r"aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_AMOUNT = (
    r"(?P<amount>\d{1,3}|a couple of|a couple|couple of|a few|few|several|an?|"
    + "|".join(TO_TWELVE)
    + ")"
)
_UNIT = r"(?P<unit>day|week|month|year)s?"

_ISO = re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b")
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", re.I)
_SEASON_YEAR = re.compile(
    rf"\b(?P<season>spring|summer|autumn|fall|winter)\s+(?:of\s+)?{_YEAR}\b", re.I
)
_SHIFT = re.compile(
    rf"\b(?:(?:{_AMOUNT}\s+{_UNIT})|(?:the\s+(?P<span>day|week|weekend|month|year)))\s+"
    r"(?P<direction>before|after|prior to|earlier than|later than)\s*$",
    re.I,
)
_YEAR_ONLY = re.compile(rf"\b(?:in|during|since|of|from|throughout|by)\s+{_YEAR}\b", re.I)
_AGO = re.compile(rf"\b{_AMOUNT}\s+{_UNIT}\s+ago\b", re.I)
_RELATIVE_SPAN = re.compile(
    r"\b(?P<which>last|past|previous|this|next)\s+(?P<span>week|weekend|month|year)\b", re.I
)
_LAST_WEEKDAY = re.compile(
    r"\b(?:last|this past|on)\s+(?P<weekday>monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)\b",
    re.I,
)
# A month without a year is only a month after a word that makes it one ("may" is a verb).
_MONTH_DAY = re.compile(
    rf"\b(?:on|since|by|until|before|after)\s+{_MONTH}\s+{_DAY}\b(?!\s*,?\s*\d)", re.I
)
_LAST_MONTH_NAME = re.compile(
    rf"\b(?P<which>last|this|in|during|early|late|mid|since)\s+{_MONTH}\b(?!\s*,?\s*\d)", re.I
)
_DAY_WORD = re.compile(r"\b(?P<word>yesterday|today|tonight|last night|this morning)\b", re.I)


@dataclass(frozen=True)
class TimeWindow:
    """A half-open span of time [start, end) in UTC, and the words it was read from."""

    start: datetime
    end: datetime
    phrase: str

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= _utc(moment) < self.end

    def widened(
        self, before: timedelta = timedelta(0), after: timedelta = timedelta(0)
    ) -> TimeWindow:
        """The window extended on either side, clamped to the calendar's ends."""
        try:
            start = self.start - before
        except OverflowError:
            start = datetime.min.replace(tzinfo=UTC)
        try:
            end = self.end + after
        except OverflowError:
            end = datetime.max.replace(tzinfo=UTC)
        return TimeWindow(start, end, self.phrase)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _month_number(name: str) -> int:
    key = name.lower().rstrip(".")
    return MONTH_ABBREV[key[:4] if key.startswith("sept") else key[:3]]


def _amount(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _day(year: int, month: int, day: int) -> tuple[datetime, datetime] | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:  # "31 February"
        return None
    return start, start + timedelta(days=1)


def _month_span(year: int, month: int, months: int = 1) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    end_month = month - 1 + months
    return start, datetime(year + end_month // 12, end_month % 12 + 1, 1, tzinfo=UTC)


def _add_months(moment: datetime, months: int) -> datetime:
    index = moment.year * 12 + moment.month - 1 + months
    year, month = divmod(index, 12)
    day = min(moment.day, calendar.monthrange(year, month + 1)[1])
    return moment.replace(year=year, month=month + 1, day=day)


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _explicit_day(text: str) -> tuple[re.Match[str], datetime, datetime] | None:
    """The first fully written date in the text (day, month and year)."""
    found = []
    for pattern in (_ISO, _DAY_MONTH_YEAR, _MONTH_DAY_YEAR):
        for match in pattern.finditer(text):
            month = match["month"]
            number = int(month) if month.isdigit() else _month_number(month)
            span = _day(int(match["year"]), number, int(match["day"]))
            if span is not None:
                found.append((match, *span))
    return min(found, key=lambda f: f[0].start()) if found else None


def _shifted(text: str, anchor: re.Match[str], start: datetime) -> TimeWindow | None:
    """'two weeks before <date>' / 'the weekend before <date>': a window around the shift."""
    shift = _SHIFT.search(text[: anchor.start()])
    if shift is None:
        return None
    sign = -1 if shift["direction"].lower() in {"before", "prior to", "earlier than"} else 1
    phrase = text[shift.start() : anchor.end()]
    if shift["span"]:
        span = shift["span"].lower()
        length = {"day": 1, "week": 7, "weekend": 7, "month": 31, "year": 366}[span]
        if sign < 0:
            return TimeWindow(start - timedelta(days=length), start, phrase)
        after = start + timedelta(days=1)
        return TimeWindow(after, after + timedelta(days=length), phrase)
    amount, unit = _amount(shift["amount"]), shift["unit"].lower()
    if unit == "day":
        day = start + timedelta(days=sign * amount)
        return TimeWindow(day, day + timedelta(days=1), phrase)
    if unit == "week":
        centre = start + timedelta(weeks=sign * amount)
        return TimeWindow(centre - timedelta(days=3), centre + timedelta(days=4), phrase)
    months = amount * (12 if unit == "year" else 1)
    centre = _add_months(start, sign * months)
    half = timedelta(days=15 if unit == "month" else 183)
    return TimeWindow(centre - half, centre + half, phrase)


def _relative(text: str, now: datetime) -> TimeWindow | None:
    today = _midnight(now)
    candidates: list[tuple[int, TimeWindow]] = []

    for m in _DAY_WORD.finditer(text):
        word = m["word"].lower()
        day = today - timedelta(days=1) if word in {"yesterday", "last night"} else today
        candidates.append((m.start(), TimeWindow(day, day + timedelta(days=1), m[0])))

    for m in _AGO.finditer(text):
        amount, unit = _amount(m["amount"]), m["unit"].lower()
        if unit == "day":
            day = today - timedelta(days=amount)
            window = TimeWindow(day, day + timedelta(days=1), m[0])
        elif unit == "week":
            centre = today - timedelta(weeks=amount)
            window = TimeWindow(centre - timedelta(days=3), centre + timedelta(days=4), m[0])
        elif unit == "month":
            then = _add_months(today, -amount)
            window = TimeWindow(*_month_span(then.year, then.month), m[0])
        else:
            window = TimeWindow(*_month_span(now.year - amount, 1, 12), m[0])
        candidates.append((m.start(), window))

    for m in _RELATIVE_SPAN.finditer(text):
        which, span = m["which"].lower(), m["span"].lower()
        step = {"this": 0, "next": 1}.get(which, -1)
        if span in {"week", "weekend"}:
            monday = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
            if span == "weekend":
                saturday = monday + timedelta(days=5)
                window = TimeWindow(saturday, saturday + timedelta(days=2), m[0])
            else:
                window = TimeWindow(monday, monday + timedelta(days=7), m[0])
        elif span == "month":
            then = _add_months(today.replace(day=1), step)
            window = TimeWindow(*_month_span(then.year, then.month), m[0])
        else:
            window = TimeWindow(*_month_span(now.year + step, 1, 12), m[0])
        candidates.append((m.start(), window))

    for m in _LAST_WEEKDAY.finditer(text):
        target = WEEKDAYS.index(m["weekday"].lower())
        back = (today.weekday() - target) % 7 or 7
        day = today - timedelta(days=back)
        candidates.append((m.start(), TimeWindow(day, day + timedelta(days=1), m[0])))

    for m in _MONTH_DAY.finditer(text):
        month, day_number = _month_number(m["month"]), int(m["day"])
        for year in (now.year, now.year - 1):
            span = _day(year, month, day_number)
            if span is not None and span[0] <= today:
                candidates.append((m.start(), TimeWindow(*span, m[0])))
                break

    for m in _LAST_MONTH_NAME.finditer(text):
        month = _month_number(m["month"])
        which = m["which"].lower()
        year = now.year if month <= now.month else now.year - 1
        if which == "last" and month == now.month:
            year -= 1  # "last May" said in May is a year ago
        start, end = _month_span(year, month)
        if which == "early":
            end = start + timedelta(days=10)
        elif which == "late":
            start = end - timedelta(days=11)
        elif which == "mid":
            start, end = start + timedelta(days=9), start + timedelta(days=21)
        candidates.append((m.start(), TimeWindow(start, end, m[0])))

    return min(candidates, key=lambda c: c[0])[1] if candidates else None


def parse_time_expression(text: str, now: datetime) -> TimeWindow | None:
    """The time a question is about, as a window, or None when it names no time.

    `now` anchors relative expressions ("two weeks ago"); explicit dates ignore it. A window
    that would leave the calendar (year 0 or 10000, from an extreme `now`) is None too.
    """
    try:
        return _parse(text, _utc(now))
    except (ValueError, OverflowError):
        return None


def _parse(text: str, now: datetime) -> TimeWindow | None:
    explicit = _explicit_day(text)
    if explicit is not None:
        match, start, end = explicit
        return _shifted(text, match, start) or TimeWindow(start, end, match[0])
    for pattern in (_MONTH_YEAR, _SEASON_YEAR):
        m = pattern.search(text)
        if m is None:
            continue
        year = int(m["year"])
        if "season" in m.groupdict() and m["season"]:
            first, months = SEASONS[m["season"].lower()]
            return TimeWindow(*_month_span(year, first, months), m[0])
        return TimeWindow(*_month_span(year, _month_number(m["month"])), m[0])
    relative = _relative(text, now)
    if relative is not None:
        return relative
    m = _YEAR_ONLY.search(text)
    if m is not None:
        return TimeWindow(*_month_span(int(m["year"]), 1, 12), m[0])
    return None


# A question that asks for a time: "When did ...", "What date/year/month ...", "How long ago".
_ASKS_WHEN = re.compile(
    r"^\W*(?:when\b|(?:on\s+)?what\s+(?:date|day|year|month|time|week)\b|how\s+long\s+ago\b)"
    r"|\b(?:since|until)\s+when\b",
    re.I,
)
# Words that place a told event in time (beyond the full expressions the parser reads).
_TELLS_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|ago|recently|lately|weekend|"
    r"(?:last|this|next|past)\s+(?:night|week|month|year|summer|winter|spring|fall|autumn)|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|april|june|july|august|september|october|november|december|"
    # "march" and "may" are verbs too: months only next to a day or after a time word
    r"(?:in|last|this|early|late|since|until|by)\s+(?:march|may)|(?:march|may)\s+[0-3]?\d)\b"
    r"|(?<![\d-])(?:19|20)\d\d(?![\d-])",
    re.I,
)


def asks_when(question: str) -> bool:
    """Whether the question asks for a time ("When did ...?", "What year ...?")."""
    return _ASKS_WHEN.search(question) is not None


# What _TELLS_TIME and _MONTH_DAY match, read word by word where that is exact: in an ASCII
# text without a digit, where a word is a run of [a-z_] once lowered and the patterns'
# case-insensitive match is str.lower()'s (elsewhere the long s, the Kelvin sign and the
# dotted and dotless i fold onto ASCII letters too). These words tell a time on their own ...
_TIME_ON_ITS_OWN = frozenset(
    word.encode()
    for word in (
        "yesterday", "today", "tonight", "ago", "recently", "lately", "weekend",
        *(calendar.day_name[d].lower() for d in range(7)),
        *(calendar.month_name[m].lower() for m in range(1, 13) if m not in (3, 5)),
    )
)  # fmt: skip
# ... these only beside another word ("last week", "in May"), and every other match holds a
# digit: a text with none of them tells no time.
_TIME_WORDS = _TIME_ON_ITS_OWN | {
    word.encode()
    for word in (
        "night", "week", "month", "year", "summer", "winter", "spring", "fall", "autumn",
        "march", "may",
    )
}  # fmt: skip
# Lowered ASCII bytes -> words: a-z and _ kept, a digit "#", anything else a space.
_WORD_BYTES = bytes(
    c if 97 <= c <= 122 or c == 95 else 35 if 48 <= c <= 57 else 32 for c in range(256)
)


def tells_time(text: str) -> bool:
    """Whether a text places something in time: a date, a weekday, a month, "yesterday",
    "last week", "two weeks ago". A turn that does is what a "when" question needs."""
    if text.isascii():  # the common case, read without the patterns' many alternatives
        folded = text.lower().encode("ascii").translate(_WORD_BYTES)
        if b"#" not in folded:
            words = set(folded.split())
            if not _TIME_ON_ITS_OWN.isdisjoint(words):
                return True
            if _TIME_WORDS.isdisjoint(words):
                return False
    return tells_time_by_patterns(text)


def tells_time_by_patterns(text: str) -> bool:
    """`tells_time` by its patterns alone, for any text: what the word-by-word reading above
    answers for in the texts it reads (tests/retrieval/test_dates.py holds them to it)."""
    return _TELLS_TIME.search(text) is not None or _MONTH_DAY.search(text) is not None
