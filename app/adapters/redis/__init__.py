"""The Redis cache's concerns, one module each; app/adapters/cache.py composes them into `Cache`.

breaker.py (the connection guard: timeouts, circuit breaker, warnings, counters),
embeddings.py, sessions.py, rate_limit.py, query_results.py, and admission.py (a query's rate
limit, cached answer and cached vector in one round trip).
"""
