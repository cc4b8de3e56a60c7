"""The framework-free core every front door builds on.

HTTP (app/api), the console, the chat proxy, MCP, the CLI, the worker and eval all take their
resources, transactions and query service from here; none of them imports another door.

- resources.py: `Resources` and their construction from Settings (`open_resources`).
- uow.py: the unit of work, one transaction with its after-commit hooks.
- query.py: the query configuration and the one factory of the query service and its requests.
"""

from app.runtime.query import query_config, query_request
from app.runtime.resources import (
    Resources,
    agent_memory_service,
    embedder_from_settings,
    open_resources,
    query_service,
    save_memory_for,
)
from app.runtime.uow import admin_transaction, transaction, user_transaction

__all__ = [
    "Resources",
    "admin_transaction",
    "agent_memory_service",
    "embedder_from_settings",
    "open_resources",
    "query_config",
    "query_request",
    "query_service",
    "save_memory_for",
    "transaction",
    "user_transaction",
]
