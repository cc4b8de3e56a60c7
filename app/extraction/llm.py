"""The extraction model: chat completions on any OpenAI-compatible endpoint (`openai` client).

The client never retries by itself (max_retries=0): retries belong to the job table, where
they are counted, backed off and dead-lettered. Errors come out as two kinds: worth retrying
(429, timeouts, connection failures, 5xx) and not (other 4xx: a request the endpoint refuses).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import openai
from openai import AsyncOpenAI


class LLMError(Exception):
    """The endpoint did not answer with a completion."""

    retryable: bool = True


class LLMRetryableError(LLMError):
    """Rate limited, timed out, unreachable or failing (5xx): try again later."""


class LLMRefusedError(LLMError):
    """A 4xx other than 429: the same request would fail again."""

    retryable = False


@dataclass(frozen=True)
class Completion:
    text: str | None
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    usage_reported: bool


class ExtractionLLM:
    """One chat-completions call per batch, JSON mode, temperature 0."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float,
        max_output_tokens: int,
    ) -> None:
        self.model = model
        self.max_output_tokens = max_output_tokens
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=0
        )

    async def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        """The model's answer and the tokens the endpoint says it used."""
        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                messages=list(messages),  # type: ignore[arg-type]
                temperature=0,
                max_completion_tokens=self.max_output_tokens,
                response_format={"type": "json_object"},
            )
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise LLMRetryableError(f"{type(exc).__name__}: {exc}") from exc
        except openai.APIStatusError as exc:
            message = f"HTTP {exc.status_code}: {type(exc).__name__}"
            if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                raise LLMRetryableError(message) from exc
            raise LLMRefusedError(message) from exc
        except openai.OpenAIError as exc:  # e.g. a body that is not a completion
            raise LLMRetryableError(f"{type(exc).__name__}: {exc}") from exc
        return _completion(response)

    async def complete_text(
        self, messages: Sequence[dict[str, str]], max_tokens: int
    ) -> Completion:
        """A plain-text answer of at most `max_tokens` (the conversation summary)."""
        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                messages=list(messages),  # type: ignore[arg-type]
                temperature=0,
                max_completion_tokens=max_tokens,
            )
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise LLMRetryableError(f"{type(exc).__name__}: {exc}") from exc
        except openai.APIStatusError as exc:
            raise LLMError(f"HTTP {exc.status_code}: {type(exc).__name__}") from exc
        except openai.OpenAIError as exc:
            raise LLMRetryableError(f"{type(exc).__name__}: {exc}") from exc
        return _completion(response)

    async def aclose(self) -> None:
        await self._client.close()


def _completion(response: Any) -> Completion:
    usage = response.usage
    text = response.choices[0].message.content if response.choices else None
    if usage is None:
        return Completion(text, 0, 0, 0, usage_reported=False)
    return Completion(
        text,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.total_tokens,
        usage_reported=True,
    )
