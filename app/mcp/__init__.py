"""The MCP front door: the same services as app/api, over the official `mcp` SDK.

tools.py registers the tools; http.py serves them at /mcp (streamable HTTP, a per-user key as
Bearer); stdio.py runs them over stdin/stdout for `pgrecall mcp --key TOKEN`. The user always
comes from the credential, never from a tool argument.
"""
