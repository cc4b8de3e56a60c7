"""Newer wins on one topic: two memories about the same thing, the newer one first.

People change their minds without saying which memory they take back ("staying on pens for
now", months later "switching to an insulin pump"): nothing links the two memories, and a
ranking that compares each with the question alone puts whichever shares more words first.
Here two memories among the first places of the ranking for a question are one topic when
their own vectors are close (cosine at or over a threshold, measured between the stored vectors
in Postgres): the question says what the topic is, the pair's cosine that they are about the
same thing. Two decisions a question finds need less of a cosine (a threshold per kind): a
decision is a stance that a later decision revises, and the words of the two often differ.
Names do not keep two memories apart: a change of mind usually swaps one named thing for
another ("a radial extractor from Lega", later "the electric one from Lyson"). Of a linked
pair:

- the newer one ranks at least where the older one did (it takes the older one's score and
  relevance when those are higher: what answered the question then answers it now);
- the older one is reported as possibly outdated, naming the newer one.

A near tie is weaker evidence, of any kinds: two of those memories whose vectors are close
(`tie`'s cosine) and whose relevance to the question is about the same (the newer's at least
`tie`'s ratio of the older's) are ordered newer first, as a person would answer with the later
of two equal accounts ("dry dock at Perama in February", later "at Elefsina on 10 March"), but
nothing is marked: two near answers on one subject are as often two facts that both hold
("Keiko's pension", "my pension"). Beside the near tie's two thresholds, a learned pair model
(app/retrieval/revision.py, `revises`) orders newer first a pair whose older one ranks first
when it says the newer revises it, and marks the older only when it is surer still. Order by
creation, not by age, so memories written a second apart are ordered too.

Pure: keys, scores, creation times and the pair cosines in; a new ranking and the links
out. What a threshold links wrongly is measured on the corpus (docs/retrieval.md, "Newer wins").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Generic, Literal, TypeVar

from app.retrieval.scoring import Ranked

K = TypeVar("K", bound=Hashable)
# What a revision model says of a pair whose older item ranks first: the newer comes first
# ("precedes"), or comes first and the older is reported possibly outdated ("outdates").
Revision = Literal["precedes", "outdates"]


@dataclass(frozen=True)
class Linked(Generic[K]):
    """The ranking after linking, and for each possibly outdated item the newer item of its
    topic."""

    ranked: list[Ranked[K]]
    newer: dict[K, K]


def link_topics(
    ranked: Sequence[Ranked[K]],
    created: Mapping[K, datetime],
    similarity: Mapping[tuple[K, K], float],
    threshold: float,
    kinds: Mapping[K, str | None] | None = None,
    same_kind: Mapping[str, float] | None = None,
    tie: tuple[float, float] | None = None,
    revises: Callable[[K, K, float], Revision | None] | None = None,
) -> Linked[K]:
    """Link the pairs of `similarity` (cosine between two items' vectors, either order of the
    keys) at or over `threshold` (<= 0: none), or, for two items of one kind (`kinds`) named in
    `same_kind`, at or over that kind's threshold (two decisions: a revised decision), and
    rank each pair's newer item at least where its older one stands (see the module). With
    `tie` (a cosine, a ratio), a pair at or over that cosine whose newer item's relevance is at
    least the ratio of the older one's is a near tie on one topic: its newer item ranks at least
    where the older stands too, but the older is not reported outdated (two near answers on
    one subject are as often two facts that both hold). `revises(older, newer, cosine)`, for
    a pair whose older item ranks first, says whether the newer revises it: "precedes" orders
    the pair as a near tie, "outdates" links it (the older reported outdated), None neither.
    Items without a creation time are never linked."""
    if not similarity or (threshold <= 0.0 and not same_kind and tie is None and revises is None):
        return Linked(list(ranked), {})
    kinds, same_kind = kinds or {}, same_kind or {}
    relevance = {r.key: r.relevance for r in ranked}

    def linked(a: K, b: K, cosine: float) -> bool:
        kind = kinds.get(a)
        if kind is not None and kind == kinds.get(b) and kind in same_kind:
            return cosine >= same_kind[kind]
        return threshold > 0.0 and cosine >= threshold

    position = {r.key: n for n, r in enumerate(ranked)}

    def near_tie(old: K, new: K, cosine: float) -> bool:
        if tie is None or cosine < tie[0]:
            return False
        return relevance.get(new, 0.0) >= tie[1] * relevance.get(old, 0.0) > 0.0

    def revision(old: K, new: K, cosine: float) -> Revision | None:
        older_first = position.get(old, -1) < position.get(new, -1)
        return revises(old, new, cosine) if revises is not None and older_first else None

    newer: dict[K, K] = {}  # linked: the older is possibly outdated
    tied: dict[K, K] = {}  # a near tie: the newer first, nothing marked
    for (a, b), cosine in similarity.items():
        if a == b or a not in created or b not in created or created[a] == created[b]:
            continue  # written together: two parts of one account, not a change of mind
        old, new = (a, b) if created[a] < created[b] else (b, a)
        said = revision(old, new, cosine)
        if linked(a, b, cosine) or said == "outdates":
            found: dict[K, K] | None = newer
        elif near_tie(old, new, cosine) or said == "precedes":
            found = tied
        else:
            found = None
        # The newest memory of the topic is what the older ones point to.
        if found is not None and (old not in found or created[new] > created[found[old]]):
            found[old] = new
    if not newer and not tied:
        return Linked(list(ranked), {})
    by_key = {r.key: r for r in ranked}
    lifted = dict(by_key)
    pairs = [*tied.items(), *newer.items()]
    for old, new in sorted(pairs, key=lambda pair: created[pair[1]]):
        if old not in by_key or new not in by_key:
            continue
        was, now = lifted[old], lifted[new]
        if (was.fused, was.relevance) > (now.fused, now.relevance):
            lifted[new] = replace(now, fused=was.fused, relevance=max(was.relevance, now.relevance))
    behind = newer.keys() | tied.keys()
    out = sorted(
        lifted.values(),
        # Equal scores: the current one first, then the ranking's own order.
        key=lambda r: (-r.fused, -r.relevance, r.key in behind, position[r.key]),
    )
    return Linked(out, {o: n for o, n in newer.items() if o in by_key and n in by_key})
