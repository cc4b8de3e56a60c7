"""The memory-augmented, OpenAI-compatible chat proxy: POST /v1/chat/completions."""
