"""What the bench's commands share: the repository root and the parsers of their options
(sizes such as 10k, concurrency levels, setting overrides)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

ROOT = Path(__file__).resolve().parents[1]
_SIZE = re.compile(r"^(\d+)([km]?)$", re.IGNORECASE)

# Options several commands take, declared once (`parse_settings`, `parse_size` read them).
SetOption = Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE setting")]
MessagesOption = Annotated[str, typer.Option(help="stored turns: 10k, 50k, 100k")]


def parse_size(text: str) -> int:
    """10k -> 10000, 1m -> 1000000, 2500 -> 2500."""
    match = _SIZE.match(text.strip())
    if not match:
        raise typer.BadParameter(f"not a size: {text!r} (examples: 10k, 100k, 1m, 2500)")
    return int(match.group(1)) * {"": 1, "k": 1000, "m": 1_000_000}[match.group(2).lower()]


def parse_levels(text: str) -> list[tuple[int, int]]:
    """'1:300,8:1000' -> [(1, 300), (8, 1000)] (concurrency:requests)."""
    levels = []
    for part in text.split(","):
        concurrency, _, requests = part.partition(":")
        levels.append((int(concurrency), int(requests or 300)))
    return levels


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs (Settings field names, e.g. ivfflat_probes=20)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}")
        out[key.strip().lower()] = value.strip()
    return out
