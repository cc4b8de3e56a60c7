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
