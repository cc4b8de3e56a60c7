"""What an LLM judge's verdicts do to a calibrated ranking (app/services/query/judge.py asks the
model; this is the arithmetic, pure)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import TypeVar

from app.retrieval.scoring import Ranked

K = TypeVar("K", bound=Hashable)

# A rejected item's relevance: this share of the lower of its own and the floor, so it lands
# under the floor (when the floor is above 0) and is never raised.
REJECTED_SHARE = 0.5


def apply_verdicts(
    ranked: list[Ranked[K]], verdicts: Mapping[K, bool], floor: float
) -> list[Ranked[K]]:
    """The ranking after the judge (`verdicts`: True = answers the question, for the items it
    judged; `floor`: the relevance the answer stage requires).

    - An item the judge says answers: relevance max(own, floor), so the floor never cuts it
      (the relative cutoff still may).
    - An item it says does not answer: relevance REJECTED_SHARE x min(own, floor), under the
      floor, and it moves behind every item that was not rejected (in its own order).
    - Items it did not judge keep their relevance, unless it rejected every item it judged:
      then they are lowered as a rejected one is (they ranked below what it rejected, so the
      store holds no answer the ranking can find) and keep their places.

    Otherwise the order is kept: the judge removes items, it never reorders the ones it keeps.
    """
    if not verdicts:
        return ranked

    def lowered(r: Ranked[K]) -> Ranked[K]:
        return replace(r, relevance=REJECTED_SHARE * min(r.relevance, floor))

    if not any(verdicts.values()):  # everything goes under the floor, in the local order
        return [lowered(r) for r in ranked]
    kept: list[Ranked[K]] = []
    rejected: list[Ranked[K]] = []
    for r in ranked:
        verdict = verdicts.get(r.key)
        if verdict is None:
            kept.append(r)
        elif verdict:
            kept.append(replace(r, relevance=max(r.relevance, floor)))
        else:
            rejected.append(lowered(r))
    return kept + rejected


def apply_verified(ranked: list[Ranked[K]], verified: Mapping[K, float]) -> list[Ranked[K]]:
    """The ranking after the local answer verifier (app/adapters/verifier.py): `verified` is
    the probability that each item it read answers the question.

    - An item it read reports that probability, and its ranking score is the same number: the
      read items are ordered by it.
    - An item it did not read (it ranked past the verifier's depth, or had no stored vector)
      keeps its relevance but never stands above the lowest read item's, and stays behind the
      read items in its own order: the verifier read the better candidates.
    """
    if not verified:
        return ranked
    lowest = min(verified.values())
    read = [
        replace(r, relevance=verified[r.key], fused=verified[r.key])
        for r in ranked
        if r.key in verified
    ]
    read.sort(key=lambda r: -r.relevance)  # stable: equal probabilities keep the local order
    rest = [
        replace(r, relevance=min(r.relevance, lowest), fused=min(r.relevance, lowest))
        for r in ranked
        if r.key not in verified
    ]
    return read + rest
