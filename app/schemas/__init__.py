"""Pydantic request and response models (the HTTP contract)."""
