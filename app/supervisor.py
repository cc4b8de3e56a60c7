"""Keeps the embedded Postgres running while the service runs.

`pgrecall serve` starts the embedded server once; if its postmaster dies (kill -9, the OOM
killer) every request would get 503 until someone restarted pgrecall by hand. The supervisor
checks the postmaster every second and starts it again: `EmbeddedPostgres.start` treats the
pid file of a dead postmaster as stale, and Postgres replays its WAL, so every committed write
is there. A start that fails (old backends may still hold the shared memory for a moment) is
retried with a growing pause. The engine's pool drops the dead connections by itself; /ready
turns true once the server answers again.

Only a crash is healed: a postmaster that shut down cleanly (its pid file removed: a
`pg_ctl stop`, or a service manager stopping every process of the service) was stopped on
purpose, and starting it again would fight whoever stopped it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.embedded import EmbeddedPostgres

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
MAX_PAUSE_S = 10.0


class PostgresSupervisor:
    def __init__(self, embedded: EmbeddedPostgres, interval_s: float = CHECK_INTERVAL_S) -> None:
        self.embedded = embedded
        self.interval_s = interval_s
        self.restarts = 0
        self._healing = False
        self._stopped_reported = False
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> bool:
        """Start the server when its postmaster crashed; True when it is running afterwards."""
        try:
            if await asyncio.to_thread(self.embedded.postmaster) is not None:
                self._stopped_reported = False
                return True
            # A failed start removes the crashed server's pid file: keep healing until it runs.
            self._healing = self._healing or await asyncio.to_thread(self.embedded.crashed)
            if not self._healing:
                if not self._stopped_reported:
                    log.warning("embedded postgres was shut down cleanly: not restarting it")
                    self._stopped_reported = True
                return False
            log.warning("embedded postgres is not running: restarting it")
            await asyncio.to_thread(self.embedded.start)
        except Exception as exc:  # retried on the next round; one line, not a traceback
            log.warning("restarting embedded postgres failed: %s", str(exc).splitlines()[0])
            return False
        self._healing = False
        self._stopped_reported = False
        self.restarts += 1
        log.warning("embedded postgres restarted (restart %d)", self.restarts)
        return True

    async def _run(self) -> None:
        pause = self.interval_s
        while True:
            await asyncio.sleep(pause)
            running = await self.check()
            pause = self.interval_s if running else min(MAX_PAUSE_S, pause * 2)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="postgres-supervisor")

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
