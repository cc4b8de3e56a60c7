"""Start-up objects leave the garbage collector's sight once per process (app/main.py)."""

from __future__ import annotations

import gc
from typing import Any


async def test_start_up_objects_are_frozen_once_per_process(make_client: Any) -> None:
    async with make_client() as (client, _):
        assert (await client.get("/health")).status_code == 200
        frozen = gc.get_freeze_count()
        assert frozen > 0
    async with make_client() as (client, _):
        assert (await client.get("/health")).status_code == 200
        # A second app in the same process freezes nothing more (frozen objects that died
        # meanwhile have left the count; a second freeze would add this app's).
        assert gc.get_freeze_count() <= frozen
