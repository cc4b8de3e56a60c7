"""Names in a question: words that identify a person, a pet, a brand or a place.

A name matched alone is no evidence that an item answers the question ("What's Sam's job?"
against "Sam is allergic to peanuts": the store knows Sam, not Sam's job). The keyword arm scores
every item twice, with and without these words (app/repositories/retrieval/keyword.py), and the
relevance model sees both. Pure; no list of names: capitalisation is the signal.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W\d_][\w'\u2019\-]*")
_POSSESSIVE = re.compile(r"['\u2019]s$", re.IGNORECASE)
# Capitalised words that are not names wherever they stand.
_NOT_NAMES = frozenset({"i", "i'm", "i've", "i'd", "i'll", "ok", "okay"})
# Contractions that look like possessives at the start of a sentence ("What's ...").
_CONTRACTIONS = frozenset(
    {
        "what",
        "who",
        "where",
        "when",
        "how",
        "why",
        "that",
        "it",
        "there",
        "here",
        "let",
        "he",
        "she",
    }
)


def query_names(question: str) -> list[str]:
    """The capitalised words of the question that are names, possessive "'s" removed.

    A capitalised word counts when it does not open a sentence (the first word of a question
    is capitalised anyway: "Which ...", "Where ..."), or when it opens one as a possessive
    ("Leo's favourite game?"). An all-caps question names nothing (no case signal).
    """
    if question.upper() == question:
        return []
    names: list[str] = []
    sentence_start = True
    for match in _WORD.finditer(question):
        word = match.group(0)
        gap = question[: match.start()].rstrip()
        sentence_start = not gap or gap[-1] in ".?!:;\n\"'“("
        if word[0].isupper() and word.casefold() not in _NOT_NAMES:
            possessive = bool(_POSSESSIVE.search(word)) and (
                _POSSESSIVE.sub("", word).casefold() not in _CONTRACTIONS
            )
            if not sentence_start or possessive:
                names.append(_POSSESSIVE.sub("", word))
    return names
