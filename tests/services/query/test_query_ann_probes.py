"""The ANN path's probes rule (app/services/query/model.py ann_probes) and its wiring: the vector
statement of a user on the ANN path runs with the probes the rule gives for that user's size."""

from __future__ import annotations

from typing import Any

import pytest

from app.repositories.retrieval import RetrievalRepository
from app.services.query import ann_probes
from tests.helpers import ask_after_one_turn


def test_probes_are_a_share_of_the_users_own_lists_and_never_below_the_setting() -> None:
    # user_lists_for(rows) = rows / 500 within 10..4000: the lists `pgrecall reindex` gives
    # the user's own index.
    assert ann_probes(50_000, 10, 0.5) == 50
    assert ann_probes(50_099, 10, 0.5) == 50
    assert ann_probes(50_000, 10, 0.4) == 40
    assert ann_probes(200_000, 10, 0.5) == 200
    assert ann_probes(12_000, 10, 0.4) == 10  # 24 lists: the setting is the floor
    assert ann_probes(50_000, 10, 0.0) == 10  # share 0: the setting alone
    assert ann_probes(50_000, 60, 0.5) == 60
    assert ann_probes(0, 1, 0.5) == 5  # user_lists_for never goes below 10


@pytest.mark.parametrize(("probes", "share", "expected"), [(1, 0.5, "5"), (3, 0.0, "3")])
async def test_the_ann_statement_runs_with_the_rules_probes(
    make_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,
    probes: int,
    share: float,
    expected: str,
) -> None:
    seen: list[tuple[str, str]] = []
    original = RetrievalRepository.vector

    async def vector(self: RetrievalRepository, *args: Any, **kwargs: Any) -> Any:
        (row,) = await self._rows(
            "SELECT current_setting('ivfflat.probes') AS probes, "
            "current_setting('plan_cache_mode') AS plans, "
            "current_setting('random_page_cost') AS page_cost",
            {},
        )
        seen.append((row["probes"], row["plans"], row["page_cost"]))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(RetrievalRepository, "vector", vector)
    async with make_client(
        exact_search_max_items=0, ivfflat_probes=probes, ivfflat_probe_share=share
    ) as (client, _):
        await ask_after_one_turn(client, user_id)
    # ANN_RANDOM_PAGE_COST: the planner prices the index's lists as pages in memory.
    assert seen == [(expected, "force_custom_plan", "1.1")]
