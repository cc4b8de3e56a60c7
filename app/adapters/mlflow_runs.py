"""The last evaluation runs, read from MLflow's local sqlite store (what `python -m eval` writes).

Read-only and without importing mlflow (seconds to import): the store's `runs`, `experiments`,
`latest_metrics` and `params` tables, opened with sqlite's read-only URI mode. Only sqlite
stores are read; any other tracking URI (a server) is reported as not readable here.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

_PREFIX = "sqlite:///"
_METRICS = ("recall_at_5", "precision_at_5")
_RUNS_SQL = """
SELECT r.run_uuid, r.name, e.name, r.start_time, r.status
FROM runs AS r JOIN experiments AS e ON e.experiment_id = r.experiment_id
WHERE r.lifecycle_stage = 'active' AND e.name LIKE 'pgrecall-eval-%'
ORDER BY r.start_time DESC LIMIT ?
"""


@dataclass(frozen=True)
class EvalRun:
    run_id: str
    name: str
    experiment: str
    started: datetime | None
    status: str
    metrics: dict[str, float] = field(default_factory=dict)  # recall_at_5, precision_at_5
    params: dict[str, str] = field(default_factory=dict)  # dataset, preset.name, git_commit


@dataclass(frozen=True)
class EvalRuns:
    runs: list[EvalRun]
    note: str | None = None  # why there are none (no store, not sqlite, unreadable)


def sqlite_path(tracking_uri: str) -> Path | None:
    """The file of a `sqlite:///...` tracking URI, None for anything else."""
    if not tracking_uri.startswith(_PREFIX):
        return None
    raw = tracking_uri[len(_PREFIX) :].split("?", 1)[0]
    return Path(raw) if raw and raw != ":memory:" else None


def _read(path: Path, limit: int) -> list[EvalRun]:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
        runs = db.execute(_RUNS_SQL, (limit,)).fetchall()
        out = []
        for run_id, name, experiment, start, status in runs:
            metrics = dict(
                db.execute(
                    "SELECT key, value FROM latest_metrics WHERE run_uuid = ? AND key IN (?, ?)",
                    (run_id, *_METRICS),
                ).fetchall()
            )
            params = dict(
                db.execute(
                    "SELECT key, value FROM params WHERE run_uuid = ? "
                    "AND key IN ('dataset', 'preset.name', 'git_commit')",
                    (run_id,),
                ).fetchall()
            )
            started = datetime.fromtimestamp(start / 1000, UTC) if start else None
            run = EvalRun(run_id, name or "", experiment, started, status or "", metrics, params)
            out.append(run)
    return out


async def last_runs(tracking_uri: str, limit: int = 5) -> EvalRuns:
    """The newest `limit` pgrecall evaluation runs of the store, newest first."""
    path = sqlite_path(tracking_uri)
    if path is None:
        return EvalRuns([], f"not a local sqlite store: {tracking_uri}")
    if not path.is_file():
        return EvalRuns([], f"no MLflow store at {path} (run `make eval`)")
    try:
        return EvalRuns(await asyncio.to_thread(_read, path, limit))
    except sqlite3.Error as exc:
        return EvalRuns([], f"MLflow store unreadable: {exc}")
