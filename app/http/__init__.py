"""Where an HTTP request enters, for every door mounted on the app (the API, the console, the
chat proxy): the request's resources and correlation id, who it acts for (read from its headers,
decided by app.runtime.identity.resolve_caller), its transaction, and the one mapping of
failures to the JSON error body.

- deps.py: the FastAPI dependencies every door declares its routes with.
- errors.py: `install_handlers`, exceptions to `{"error", "detail"[, "fields"]}`.
"""
