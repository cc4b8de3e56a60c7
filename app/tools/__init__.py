"""The agent tools, each defined once (catalog.py); HTTP (app/api/tools.py) and MCP (app/mcp/)
are generated from it, so the two cannot differ in name, arguments or errors."""

from app.tools.call import ToolCall
from app.tools.catalog import TOOLS, Tool, get_tool, tool_failure

__all__ = ["TOOLS", "Tool", "ToolCall", "get_tool", "tool_failure"]
