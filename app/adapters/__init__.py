"""Adapters to the world outside Postgres: embedders and the Redis cache."""
