"""Who a question is about, for memories: a question about someone the store knows is answered
by a memory about them. (For turns, app/retrieval/speakers.py: their speaker says who they are
about, and a question naming a speaker raises that speaker's turns.)

"When is Daisuke's birthday?" against a store that knows Daisuke (a memory names him) but not
his birthday: the nearest memory is someone else's birthday ("Keiko's birthday is 22 April"),
close in meaning, and no answer. A ranking that compares each memory with the question by its
words and vector puts it first, and the relevance it reports is that of an answer. Here a
memory that names none of the people or things the question names is no evidence about them,
and is reported so (`off_subject`: the pipeline caps its relevance under the floor):

- unless the store knows none of the question's names (then the name says nothing: a nickname,
  a new person, the user's own name in a store written in the first person);
- unless the question is about the user as well ("What are Zofia's allergy and mine?": first
  person, or the user's own name) and the memory is about the user: written in the first
  person ("I", "my", "we"), of "the user", of the user's family by role ("Mum's birthday"), or
  naming the user;
- turns of a conversation are never judged: who speaks a turn is not in its words
  (speakers.py reads their speaker instead);
- days, months and family roles are no subjects ("Which home is Mum in?").

The user's own name is a name that many of the store's items carry (agents write "Alice is
vegetarian" about Alice): at least `OWN_SHARE` of the items the keyword arm searched
(`name_share`), or of the texts it is given (docs/retrieval.md, "Who a question is about").
Pure: the question and the candidates' texts in, keys out. Names are capitalised words
(app/retrieval/names.py); no list of names.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Hashable, Mapping
from functools import lru_cache
from typing import TypeVar

from app.retrieval.names import query_names

K = TypeVar("K", bound=Hashable)

# A name that this share of the texts carry (and at least OWN_LEAST of them) is the user's own.
OWN_SHARE = 0.1
OWN_LEAST = 3

# Capitalised words that name no one a memory must mention: days and months ("What do I do on
# Thursdays?") and family members addressed by role ("Which home is Mum in?" is answered by
# "My mother is at Rosewood").
_DAYS = "monday tuesday wednesday thursday friday saturday sunday"
_MONTHS = "january february march april may june july august september october november december"
_FAMILY = "mum mom mummy mommy mam ma dad daddy pa mother father nan nana gran granny grandma"
_FAMILY_MORE = "grandpa grandad granddad grandmother grandfather auntie aunt uncle sis bro"
_FAMILY_ROLES = frozenset(f"{_FAMILY} {_FAMILY_MORE}".split())
_CALENDAR = {w for d in _DAYS.split() for w in (d, d + "s")} | set(_MONTHS.split())
NOT_SUBJECTS = _FAMILY_ROLES | _CALENDAR

_FIRST_PERSON = frozenset(
    {"i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself"}
    | {"we", "we're", "we've", "our", "ours", "us"}
)
_WORDS = re.compile(r"[a-z][a-z'\u2019]*")


def _first_person(text: str, user: bool = False) -> bool:
    """`text` speaks in the first person (or, with `user`, of "the user", or of the user's
    family by role: "Mum's birthday is 3 May")."""
    lowered = text.lower()
    words = {w.replace("\u2019", "'").removesuffix("'s") for w in _WORDS.findall(lowered)}
    if words & _FIRST_PERSON:
        return True
    return user and ("the user" in lowered or bool(words & _FAMILY_ROLES))


@lru_cache(maxsize=4096)
def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}(?:e?s)?(?:['\u2019]s?)?(?!\w)", re.IGNORECASE)


def mentions(name: str, text: str) -> bool:
    """`text` names `name`: a whole word, any case, also plural or possessive ("the
    Hendersons' kitchen" names Henderson)."""
    return _name_pattern(name).search(text) is not None


def off_subject(
    question: str,
    texts: Mapping[K, str],
    memories: Collection[K],
    name_share: float = 0.0,
) -> set[K]:
    """The memories among `memories` (keys of `texts`, each candidate's text) that are about
    none of the question's subjects, by the rules of the module; empty when the question
    names no one the texts know. `name_share`: the share of the store's items that carry one
    of the question's names (the keyword arm's matches on them over the items it searched);
    at OWN_SHARE or more the names are the user's own, and the question is about the user."""
    names = [n for n in dict.fromkeys(query_names(question)) if n.casefold() not in NOT_SUBJECTS]
    if not names or name_share >= OWN_SHARE:
        return set()
    # The texts that name each of the question's names.
    naming = {n: {k for k, t in texts.items() if mentions(n, t)} for n in names}
    # A name of the question that many texts carry is the user's own as well.
    least = max(OWN_LEAST, OWN_SHARE * len(texts))
    asked = [n for n in names if len(naming[n]) < least]
    if not asked:
        return set()
    if name_share <= 0.0 and not any(naming[n] for n in asked):
        return set()  # the store knows none of them
    about = {k for n in asked for k in naming[n]}
    off = {k for k in memories if k in texts and k not in about}
    if not off:
        return off
    if _first_person(question) or len(asked) < len(names):
        # ... and about the user: the memories about the user answer it too.
        own = [n for n in names if n not in asked]
        off = {
            k
            for k in off
            if not _first_person(texts[k], user=True)
            and not any(mentions(n, texts[k]) for n in own)
        }
    return off
