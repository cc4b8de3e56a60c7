"""Loaders that turn public benchmark files into conversations, turns and queries."""
