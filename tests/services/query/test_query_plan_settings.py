"""The planner settings each statement of the query path runs with (app/db.py, the read path;
RetrievalRepository.set_vector_search, the ANN path): custom plans and no parallel workers
everywhere, and the in-memory page cost on the vector statement (the ANN connection's, or the
exact path's from the vector statement on: its index-only scan of the covering indexes). A
user of at most
PGRECALL_GENERIC_PLAN_MAX_ITEMS items runs the statements after search_size on the request's
connection on generic plans (the ANN connection keeps custom ones)."""

from __future__ import annotations

from typing import Any

import pytest

from app.repositories.retrieval import ANN_RANDOM_PAGE_COST, RetrievalRepository
from tests.helpers import ask_after_one_turn

_SETTINGS = (
    "SELECT current_setting('plan_cache_mode') AS plans, "
    "current_setting('max_parallel_workers_per_gather') AS workers, "
    "current_setting('random_page_cost') AS page_cost"
)


@pytest.mark.parametrize("generic_max", [0, 1_000])
@pytest.mark.parametrize(("exact_max", "path"), [(10_000, "exact"), (0, "ann")])
async def test_query_statements_run_with_the_read_paths_planner_settings(
    make_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,
    exact_max: int,
    path: str,
    generic_max: int,
    generic_plan: str,
) -> None:
    seen: dict[str, tuple[str, str, str]] = {}

    def recording(name: str) -> Any:
        original = getattr(RetrievalRepository, name)

        async def method(self: RetrievalRepository, *args: Any, **kwargs: Any) -> Any:
            (row,) = await self._rows(_SETTINGS, {})
            seen[name] = (row["plans"], row["workers"], row["page_cost"])
            return await original(self, *args, **kwargs)

        return method

    for name in ("keyword", "vector", "fetch_around"):
        monkeypatch.setattr(RetrievalRepository, name, recording(name))
    settings = {"exact_search_max_items": exact_max, "generic_plan_max_items": generic_max}
    async with make_client(**settings) as (client, _):
        await ask_after_one_turn(client, user_id)
    plans = generic_plan if generic_max else "force_custom_plan"  # a 1-turn user
    default = (plans, "0", "4")  # Postgres's random_page_cost
    in_memory = (plans, "0", str(ANN_RANDOM_PAGE_COST))
    # A size read in this transaction: the exact path's settings come with its vector
    # statement, so the keyword arm before it keeps the default (a remembered size starts the
    # transaction with them: tests/services/query/test_query_exact_threshold.py).
    assert seen["keyword"] == default
    if path == "ann":  # its own connection; the request's keeps the default
        assert seen["vector"] == ("force_custom_plan", "0", str(ANN_RANDOM_PAGE_COST))
        assert seen["fetch_around"] == default
    else:
        assert seen["vector"] == seen["fetch_around"] == in_memory
