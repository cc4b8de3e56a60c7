"""Client-side pgrecall: the typed HTTP client (`pgrecall.client`) and framework adapters."""
