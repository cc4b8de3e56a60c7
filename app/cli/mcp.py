"""`pgrecall mcp`: the MCP server over stdio for one user's key."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import Runtime, fail, run
from app.errors import ServiceError
from app.services.api_keys import looks_like_key


def mcp_stdio(
    key: Annotated[
        str,
        typer.Option(
            "--key",
            envvar="PGRECALL_MCP_KEY",
            help="a per-user API key (pgrecall keys create); it fixes the user",
            show_default=False,
        ),
    ],
) -> None:
    """Serve MCP over stdin/stdout for the user of KEY (for local MCP clients)."""
    # Lazy: the MCP SDK and the tool server take about 2 s to import; only this command uses
    # them, and every other command (and `pgrecall --help`) should not wait for them.
    from app.mcp.stdio import refuse_over_stdio, serve_stdio, stdio_resources

    if not looks_like_key(key.strip()):
        reason = "--key must be a per-user API key (pgr_...; pgrecall keys create)"
        refuse_over_stdio(reason)
        raise fail(reason, 2)

    async def work(rt: Runtime) -> None:
        assert rt.embeddings is not None
        resources = stdio_resources(rt.settings, rt.sessionmaker, rt.embeddings, rt.cache)
        await serve_stdio(resources, key.strip())

    try:
        run(work, embedder=True)
    except ServiceError as exc:
        refuse_over_stdio(f"{exc.name}: {exc.message}; not serving")
        raise fail(f"{exc.message}; not serving", 2) from None
