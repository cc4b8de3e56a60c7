"""What kind of answer a question asks for, and whether a memory could hold it (English).

A question with no answer in the store often finds a near miss: a memory on its very subject
that lacks what is asked ("How much will the dry dock cost?" against "Agia Marina goes into
dry dock at Elefsina on 10 March.") or holds another value of the same qualifier ("What was
my 10 km time?" against "Best 5 km: 22:48", "the gas bill in summer" against "in winter").
Its cosine is as high as an answer's, so the embedder cannot tell the two apart; these two
checks can, and the question model (app/retrieval/abstention.py) reads them as features of the
question's best candidate:

- `asked(query)`: the kind of value the question asks for, for the few kinds a memory shows
  in its surface: an amount ("How much ...", a price, a fee, a rent), a count, a time of day,
  a dose. None for every other question (who, where, which, when, how long, how often: too
  many ways to answer them).
- `carries(kind, text)`: whether the text holds a value of that kind at all.
- `contradicts(query, text)`: the question names a month, season or weekday, or a number or
  ordinal before a word ("10 km", "90-minute", "second-class"), and the text names another of
  the same and not the question's.

Pure functions of the two strings; the words are English, as CHANGE_WORDS' are
(app/retrieval/revision.py): a question in another language asks for nothing here, so it
reads as it did before these features.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Hashable
from typing import Literal

from app.retrieval.dates import MONTH_ABBREV, MONTHS, SEASONS, TO_TWELVE, WEEKDAYS

AnswerKind = Literal["amount", "count", "time", "dose"]

# A month by its number, named in full or abbreviated (dates.py's abbreviations), but not by
# those that are as often a name or a word ("Jan", "Jun", "mar").
_MONTH_OF = {m: n for n, m in enumerate(MONTHS, 1)} | {
    a: n for a, n in MONTH_ABBREV.items() if a not in ("jan", "mar", "may", "jun")
}
_ORDINALS = frozenset(
    ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
)
_NUMBER_WORDS = frozenset([*TO_TWELVE, "twenty", "thirty", "forty", "fifty", "hundred"])
_TWELVE_ALT = "|".join(TO_TWELVE)
_WORD = re.compile(r"[a-z0-9]+(?:[.,:][0-9]+)*")
_NUMERAL = re.compile(r"\d+(?:[.,]\d+)?")

# --------------------------------------------------------------------------- what is asked

_DOSE_Q = re.compile(r"(what|which) (dose|dosage)\b|how (much|many) (mg|milligrams|units)\b")
_TIME_Q = re.compile(r"((what|which) time|at what time)\b")
_HOW_MUCH = re.compile(r"how much\b(?! (time|longer|later|earlier|older|younger|more)\b)")
_PRICE_Q = re.compile(r"(what|what's|what is|which)\b")
_PRICE_WORDS = re.compile(
    r"\b(cost|costs|charge|charges|price|fee|fees|rent|salary|premium|wage|wages|fare)\b(?!-)"
)
# "how many years/times ..." is answered by a date or a frequency as often as by a number.
_COUNT_Q = re.compile(r"how many\b(?! (years|months|weeks|days|hours|minutes|times)\b)")


def _clean(text: str) -> str:
    return text.lower().replace("\u2019", "'").strip()


def asked(query: str) -> AnswerKind | None:
    """The kind of value `query` asks for (its first words decide), None when it asks for
    something else or in a way this does not read."""
    q = _clean(query)
    if _DOSE_Q.match(q):
        return "dose"
    if _TIME_Q.match(q):
        return "time"
    if _HOW_MUCH.match(q) or (_PRICE_Q.match(q) and _PRICE_WORDS.search(q)):
        return "amount"
    if _COUNT_Q.match(q):
        return "count"
    return None


# --------------------------------------------------------------------------- what a text holds

_MONTH_ALT = "|".join(MONTHS)
# Numbers that are dates or clock times, taken out before asking whether a text holds an
# amount or a count ("on 10 March", "in 2019", "at 5:30 pm", "the 15th").
_DATE_OR_TIME = re.compile(
    rf"\b\d{{1,2}}(st|nd|rd|th)?\s+({_MONTH_ALT})\b|\b({_MONTH_ALT})\s+\d{{1,2}}(st|nd|rd|th)?\b"
    r"|\b(19|20)\d\d\b|\b\d{1,2}[:.]\d\d\b|\b\d{1,2}\s*(am|pm|a\.m\.|p\.m\.)"
    r"|\b\d{1,2}(st|nd|rd|th)\b"
)
_MONEY = re.compile(
    r"[$€£¥₹₩₦]|\b\d[\d,.]*\s*(k|m|bn|million|thousand|euros?|dollars?|pounds?|yen|won|pesos?"
    r"|rand|kr|kronor|krona|kroner|forints?|rupees?|shillings?|lira|baht|dinars?|zloty|zł|yuan"
    r"|rmb|dirhams?|riyals?|francs?|cents?|pence|p)\b|\b(ksh|kes|rs|r|usd|eur|gbp|nzd|aud|cad|chf"
    r"|inr|zar|tl|mxn)\s?\d|\bfree\b|\bper (hour|day|week|month|year|night|head|kilo|kg|tonne)\b"
)
_COUNT_WORDS = re.compile(
    rf"\b({_TWELVE_ALT}|thirteen|fourteen"
    r"|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy"
    r"|eighty|ninety|hundred|thousand|dozen|dozens|several|a few|a couple|both|no|none|single"
    r"|pair|half)\b"
)
_CLOCK = re.compile(
    r"\b\d{1,2}([:.]\d\d)?\s*(am|pm|a\.m\.|p\.m\.|h|hrs)\b|\b\d{1,2}[:.]\d\d\b|\bnoon\b"
    rf"|\bmidnight\b|o'clock|\b(at|from|until|till|by|before|after) (\d{{1,2}}|{_TWELVE_ALT})\b"
    rf"|\b(dawn|sunrise|sunset|dusk)\b|\bhalf (past )?(\d|{_TWELVE_ALT})"
    r"|\b(morning|mornings|afternoon|afternoons|evening|evenings|midday|lunchtime|teatime"
    r"|bedtime|first thing)\b"  # not "night": as often a noun's ("the night shift")
)
_DOSE = re.compile(
    r"\d[\d.,]*\s*(mg|mcg|µg|g|ml|units?|iu|tablets?|pills?|puffs?|drops?|capsules?)\b"
    r"|\b(one|two|three|half|a) (tablet|pill|puff|drop|capsule)s?\b"
)


def _bare_number(text: str) -> bool:
    return bool(re.search(r"\d", _DATE_OR_TIME.sub(" ", text)))


def carries(kind: AnswerKind, text: str) -> bool:
    """Whether `text` holds a value of `kind`: an amount (a currency, a money word, a bare number
    that is not a date or a time), a count (a bare number or a number word),
    a time of day (a clock time, "at nine", "mornings"), a dose (a number with a unit of
    medicine)."""
    t = _clean(text)
    if kind == "amount":
        # Not numbers in words: as often a thing's ("a two-bedroom flat") as an amount.
        return bool(_MONEY.search(t)) or _bare_number(t)
    if kind == "count":
        return _bare_number(t) or bool(_COUNT_WORDS.search(t))
    if kind == "time":
        return bool(_CLOCK.search(t))
    return bool(_DOSE.search(t))


# --------------------------------------------------------------------------- qualifiers


def _classes(words: list[str]) -> dict[str, set[Hashable]]:
    """The months (by number), seasons (by the months they span, dates.SEASONS: "fall" is
    "autumn") and weekdays `words` name, by class."""
    found: dict[str, set[Hashable]] = {"month": set(), "season": set(), "weekday": set()}
    for w in words:
        if w in _MONTH_OF:
            found["month"].add(_MONTH_OF[w])
        if w in SEASONS:
            found["season"].add(SEASONS[w])
        day = w[:-1] if w.endswith("s") else w
        if day in WEEKDAYS:
            found["weekday"].add(day)
    return found


def _qualified(words: list[str]) -> set[tuple[str, str]]:
    """(qualifier, word) for each number or ordinal before a word: "10 km" -> ("10", "km"),
    "second-class" -> ("second", "class")."""
    pairs = set()
    for a, b in itertools.pairwise(words):
        qualifier = _NUMERAL.fullmatch(a) or a in _ORDINALS or a in _NUMBER_WORDS
        if qualifier and not re.fullmatch(r"[\d.,:]+", b):
            pairs.add((a, b[:-1] if b.endswith("s") else b))
    return pairs


def contradicts(query: str, text: str) -> bool:
    """Whether `text` names another month, season or weekday than `query` does and not the
    query's, or qualifies a word the query qualifies with another number or ordinal only."""
    qw, tw = _WORD.findall(_clean(query)), _WORD.findall(_clean(text))
    qc, tc = _classes(qw), _classes(tw)
    if any(qc[c] and tc[c] and not qc[c] & tc[c] for c in qc):
        return True
    theirs = _qualified(tw)
    for qualifier, word in _qualified(qw):
        others = {q for q, w in theirs if w == word}
        if others and qualifier not in others:
            return True
    return False
