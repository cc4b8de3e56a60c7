"""Offline evaluation of pgrecall's retrieval quality (metrics, datasets, reports)."""
