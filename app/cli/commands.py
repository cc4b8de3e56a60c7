"""The `pgrecall` command, assembled from one module per command group (app/cli/__init__.py
runs it; `pgrecall keys` and `pgrecall spaces` alone skip the assembly).

serve.py (serve), db.py (db upgrade/url), admin.py (seed, reindex, reembed, rebuild-keywords,
rebuild-passages, purge-user), memories.py, keys.py, spaces.py, portable.py (export, import),
mcp.py, worker.py, and `doctor` from app/doctor; common.py holds what they share (settings, the
runner that finds and migrates the database, user-id checks, error lines), remote.py what keys
and spaces share (the running service's admin API, asked before the database). The modules
import those two, never each other.
"""

from __future__ import annotations

import typer

from app.cli.admin import (
    purge_user,
    rebuild_keywords,
    rebuild_passages,
    reembed,
    reindex,
    seed,
)
from app.cli.db import db_app
from app.cli.keys import keys_app
from app.cli.mcp import mcp_stdio
from app.cli.memories import memories_app
from app.cli.portable import export, import_
from app.cli.serve import serve
from app.cli.spaces import spaces_app
from app.cli.worker import worker
from app.doctor import doctor

app = typer.Typer(no_args_is_help=True, add_completion=False, help="pgrecall: memory for agents")
app.command()(serve)
app.add_typer(db_app, name="db")
app.command()(seed)
app.command()(reindex)
app.command()(reembed)
app.command("rebuild-keywords")(rebuild_keywords)
app.command("rebuild-passages")(rebuild_passages)
app.command("purge-user")(purge_user)
app.add_typer(memories_app, name="memories")
app.command()(doctor)
app.add_typer(keys_app, name="keys")
app.add_typer(spaces_app, name="spaces")
app.command("mcp")(mcp_stdio)
app.command()(export)
app.command("import")(import_)
app.command("worker")(worker)
