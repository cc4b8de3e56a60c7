"""LLM extraction of memories from user turns (off by default; docs/extraction.md).

appending a user turn queues a job (app/repositories/extraction.py); worker tasks
(worker.py) claim batches per conversation, ask an OpenAI-compatible model (llm.py, prompt.py),
check its answer strictly (output.py) and store ADD/UPDATE decisions (service.py, writes.py).
"""
