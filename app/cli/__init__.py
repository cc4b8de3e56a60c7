"""The `pgrecall` command; app/cli/commands.py assembles it from one module per command group.

`pgrecall keys` and `pgrecall spaces` run their group alone: assembling every command imports
the server stack (sqlalchemy, the models, uvicorn, onnxruntime through the services), which
costs more than the whole answer of a running service (see app/cli/remote.py).
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    if sys.argv[1:2] == ["keys"]:
        from app.cli.keys import keys_app

        keys_app(args=sys.argv[2:], prog_name="pgrecall keys")
        return
    if sys.argv[1:2] == ["spaces"]:
        from app.cli.spaces import spaces_app

        spaces_app(args=sys.argv[2:], prog_name="pgrecall spaces")
        return
    from app.cli.commands import app

    app()


def __getattr__(name: str) -> Any:
    """`from app.cli import app` (scripts, tests) still gives the assembled command."""
    if name == "app":
        from app.cli.commands import app

        return app
    raise AttributeError(name)
