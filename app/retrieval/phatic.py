"""Phatic turns: acknowledgements that carry no information of their own.

"Noted.", "Will do.", "Thanks for the heads-up.", "How lovely, congratulations!": an
assistant's (or a friend's) reply to a fact is the turn after a matching turn, so the
dialogue-neighbour step (scoring.propagate) would lift it beside the fact and the agent would
get it as a second answer. The other speaker's reply to a statement (not to a question: that
is its answer) inherits nothing from it (`acknowledges`) when it has at most
`MAX_CONTENT_WORDS` content words (two or more letters or digits, not in Postgres' English
stop-word list, the list the keyword arm drops) and nothing that identifies or places
anything (no digit, no name in the sense of app/retrieval/names.py, no time as
app/retrieval/dates.tells_time reads one): it would only repeat the statement's evidence, and
the statement is already there. A short answer keeps inheriting ("Tuesday at 9.", "Yes, in
Lisbon.", "Since March."), and so does the same speaker's next turn ("Pixel is a greyhound").
On the LoCoMo development half 4 of the 1,103 evidence turns of its questions have at most
two content words (a count over the data set's texts). Pure and unit-tested
(tests/retrieval/test_phatic.py).
"""

from __future__ import annotations

import re

from app.retrieval.dates import tells_time
from app.retrieval.names import query_names

MAX_CONTENT_WORDS = 2

# Postgres' English stop words (share/tsearch_data/english.stop: the Snowball list), which
# to_tsvector('english') drops: the keyword arm indexes none of them.
_ENGLISH_STOP = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing a an the and but if or because as until while of at by for with about against
    between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more
    most other some such no nor not only own same so than too very s t can will just don
    should now
"""
STOP_WORDS = frozenset(_ENGLISH_STOP.split())

_WORD = re.compile(r"[^\W_]+")


def content_words(text: str) -> list[str]:
    """The words of `text` that carry content: two or more letters or digits, not stop words."""
    return [w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOP_WORDS]


def asks(text: str) -> bool:
    """Whether a turn asks something (ends with '?'): the other speaker's next turn is its
    answer (app/retrieval/rerank.answer_pairs), however short."""
    return text.rstrip().endswith("?")


def acknowledges(said: str, said_role: str | None, reply: str, reply_role: str | None) -> bool:
    """Whether `reply` only acknowledges `said`: the other speaker's phatic turn after a
    statement. The same speaker's next turn goes on with what they were saying ("Pixel is a
    greyhound"), and the turn after a question is its answer (`asks`)."""
    return reply_role != said_role and not asks(said) and is_phatic(reply)


def is_phatic(text: str) -> bool:
    """An acknowledgement, a greeting, a sign-off: at most MAX_CONTENT_WORDS content words,
    and no digit, name or time."""
    if len(content_words(text)) > MAX_CONTENT_WORDS or any(c.isdigit() for c in text):
        return False
    return not query_names(text) and not tells_time(text)
