"""pgrecall: a Postgres-native memory service for LLM agents."""

__version__ = "0.1.0"
