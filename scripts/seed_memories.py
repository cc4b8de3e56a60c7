#!/usr/bin/env python
"""Seed curated memories from a JSON, JSONL or CSV file: `pgrecall seed` (docs/admin.md).

    scripts/seed_memories.py FILE [--skip-invalid] [--update-near-duplicates] [--dry-run] [--quiet]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import app

if __name__ == "__main__":
    app(args=["seed", *sys.argv[1:]], prog_name="seed_memories.py")
