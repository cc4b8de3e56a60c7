"""The MCP front door: the tool catalog (app/tools) over the official `mcp` SDK.

server.py generates the MCP tools from the catalog; http.py serves them at /mcp (streamable
HTTP, a per-user key as Bearer); stdio.py runs them over stdin/stdout for `pgrecall mcp --key
TOKEN`. The user always comes from the credential, never from a tool argument.
"""
