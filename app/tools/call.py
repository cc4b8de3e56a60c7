"""What a tool handler is given: the resources, the caller and the correlation id."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime import Resources
from app.services.api_keys import Caller


@dataclass(frozen=True)
class ToolCall:
    """Who a tool call acts for, over what, and the correlation id its logs carry."""

    resources: Resources
    caller: Caller
    correlation_id: str = "-"
