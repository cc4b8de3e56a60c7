"""`pgrecall mcp`: the MCP server over stdio for one user's key, optionally in a memory scope
(an agent, a run, own or inherit, shared spaces: docs/agents.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import Runtime, fail, run
from app.errors import ServiceError, ValidationFailedError
from app.runtime.identity import ScopeFields, scope_claim
from app.services.api_keys import looks_like_key

# The scope's fields as this command spells its options (a refusal names the option).
OPTIONS = ScopeFields("--agent-id", "--run-id", "--scope-mode", "--spaces")


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
    agent_id: Annotated[
        str | None,
        typer.Option(
            "--agent-id",
            envvar="PGRECALL_MCP_AGENT_ID",
            help="the agent every tool call acts as: its own memory and the user's unscoped "
            "memory, never another agent's (a key bound to an agent fixes it)",
            show_default=False,
        ),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            envvar="PGRECALL_MCP_RUN_ID",
            help="the run (one session of the agent) the tool calls belong to",
            show_default=False,
        ),
    ] = None,
    scope_mode: Annotated[
        str | None,
        typer.Option(
            "--scope-mode",
            envvar="PGRECALL_MCP_SCOPE_MODE",
            help="inherit (default): the agent's or run's memory and the user's unscoped "
            "memory; own: the agent's or run's memory only",
            show_default=False,
        ),
    ] = None,
    spaces: Annotated[
        str | None,
        typer.Option(
            "--spaces",
            envvar="PGRECALL_MCP_SPACES",
            help="shared spaces queries read besides, comma-separated (each needs the user's "
            "grant)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve MCP over stdin/stdout for the user of KEY (for local MCP clients)."""
    # Lazy: the MCP SDK and the tool server take about 2 s to import; only this command uses
    # them, and every other command (and `pgrecall --help`) should not wait for them.
    from app.mcp.stdio import refuse_over_stdio, serve_stdio, stdio_resources

    if not looks_like_key(key.strip()):
        reason = "--key must be a per-user API key (pgr_...; pgrecall keys create)"
        refuse_over_stdio(reason)
        raise fail(reason, 2)
    try:
        claim = scope_claim(agent_id, run_id, scope_mode, spaces, fields=OPTIONS)
    except ValidationFailedError as exc:
        refuse_over_stdio(exc.message)
        raise fail(exc.message, 2) from None

    async def work(rt: Runtime) -> None:
        assert rt.embeddings is not None
        resources = stdio_resources(rt.settings, rt.sessionmaker, rt.embeddings, rt.cache)
        await serve_stdio(resources, key.strip(), claim)

    try:
        run(work, embedder=True, as_service=True)
    except ServiceError as exc:
        refuse_over_stdio(f"{exc.name}: {exc.message}; not serving")
        raise fail(f"{exc.message}; not serving", 2) from None
