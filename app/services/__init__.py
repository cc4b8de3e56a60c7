"""Services coordinate repositories and adapters. They flush, never commit."""
