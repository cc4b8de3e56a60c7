#!/usr/bin/env python
"""The performance benchmark (`make bench`); the code lives in bench/ (docs/performance.md).

scripts/bench.py [--sizes 10k,100k] [--levels 1:300,8:1000,32:1000] [--set KEY=VALUE] ...
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.__main__ import cli

if __name__ == "__main__":
    cli(prog_name="bench.py")
