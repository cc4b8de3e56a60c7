#!/usr/bin/env python
"""Move every stored vector to the configured embedding model: `pgrecall reembed` (docs/admin.md).

    scripts/reembed.py [--batch-size N] [--dry-run] [--quiet]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import app

if __name__ == "__main__":
    app(args=["reembed", *sys.argv[1:]], prog_name="reembed.py")
