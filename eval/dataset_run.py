"""What a dataset runner hands back to `python -m eval` (eval.runner) for gating and reporting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.metrics import CaseResult, Threshold

__all__ = ["DatasetRun"]


@dataclass
class DatasetRun:
    """One dataset's run: cases for the house metrics, its gate, and what it adds to the report."""

    name: str
    results: list[CaseResult]
    thresholds: tuple[Threshold, ...]
    params: dict[str, object]
    breakdown: str = ""  # printed after the table
    extra_metrics: dict[str, float] = field(default_factory=dict)  # logged to MLflow too
    failure_details: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The dataset's own figures: shown, gated and logged beside the house metrics.
    figures: dict[str, float] = field(default_factory=dict)
    write_extra: Callable[[Path], list[Path]] | None = None  # the dataset's own artifacts
