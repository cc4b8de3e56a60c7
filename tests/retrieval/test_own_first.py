"""own_first: a shared space's item never goes before the user's own on a tie (issue 43), and
the order is otherwise untouched."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from app.retrieval.scoring import Ranked, own_first


def r(key: str, relevance: float) -> Ranked[str]:
    return Ranked(key, relevance, relevance, 0.0, 0.0)


def test_the_users_own_item_goes_first_on_a_tie() -> None:
    ranked = [r("space-a", 0.8), r("own-a", 0.8), r("space-b", 0.5), r("own-b", 0.4)]
    out = own_first(ranked, {"space-a", "space-b"})
    assert [x.key for x in out] == ["own-a", "space-a", "space-b", "own-b"]


def test_without_shared_items_nothing_moves() -> None:
    ranked = [r("b", 0.2), r("a", 0.9)]  # not sorted: own_first does not sort
    assert own_first(ranked, set()) == ranked


def test_ties_are_the_reported_relevance_four_places() -> None:
    ranked = [r("space", 0.80001), r("own", 0.8)]
    assert [x.key for x in own_first(ranked, {"space"})] == ["own", "space"]
    ranked = [r("space", 0.801), r("own", 0.8)]
    assert [x.key for x in own_first(ranked, {"space"})] == ["space", "own"]


@given(
    st.lists(
        st.tuples(st.sampled_from([0.1, 0.5, 0.9]), st.booleans()), min_size=0, max_size=12
    )
)
def test_only_ties_move_and_nothing_is_lost(items: list[tuple[float, bool]]) -> None:
    ranked = [r(f"{'s' if shared else 'o'}{n}", rel) for n, (rel, shared) in enumerate(items)]
    shared = {x.key for x in ranked if x.key.startswith("s")}
    out = own_first(ranked, shared)
    assert sorted(x.key for x in out) == sorted(x.key for x in ranked)
    # the sequence of relevances is the same: items move within a tie only
    assert [x.relevance for x in out] == [x.relevance for x in ranked]
    for a, b in itertools.pairwise(out):
        if a.relevance == b.relevance and a.key in shared:
            assert b.key in shared  # no own item after a shared one in its tie
