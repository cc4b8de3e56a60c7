"""The extraction model: chat completions on any OpenAI-compatible endpoint (`openai` client).

The client never retries by itself (max_retries=0): retries belong to the job table, where
they are counted, backed off and dead-lettered. Each call has one deadline of
PGRECALL_EXTRACTION_TIMEOUT_S over all of it (app/deadline.py: the SDK's timeout bounds each
read alone, and a drip-fed answer held one attempt 120 s under a 30 s setting). Errors come out
as two kinds: worth retrying (429, timeouts, connection failures, 5xx, a 200 that is not a
completion) and not (other 4xx: a request the endpoint refuses). The 200 body is read here,
not by the client's models: those accept any shape and fail later with AttributeError or
UnicodeDecodeError (a traceback, and a batch left `running` until its lease ran out).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.deadline import within

if TYPE_CHECKING:
    import openai
    from openai import AsyncOpenAI


class LLMError(Exception):
    """The endpoint did not answer with a completion."""

    retryable: bool = True
    spent: bool = False  # the endpoint answered: tokens were probably used


class LLMRetryableError(LLMError):
    """Rate limited, timed out, unreachable or failing (5xx): try again later."""


class LLMMalformedError(LLMRetryableError):
    """A 200 whose body is not a chat completion (not UTF-8, not JSON, wrong shape). The
    endpoint may have spent tokens on it: they are counted at the worst case."""

    spent = True


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
        self.timeout_s = timeout_s
        # imported here, as in app/adapters/judge.py: about a second that a process without
        # an extraction model would spend for nothing
        from openai import AsyncOpenAI

        self._client: AsyncOpenAI = AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=0
        )

    async def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        """The model's answer and the tokens the endpoint says it used."""
        return await self._create(
            messages,
            _refused_unless_transient,
            max_completion_tokens=self.max_output_tokens,
            response_format={"type": "json_object"},
        )

    async def complete_text(
        self, messages: Sequence[dict[str, str]], max_tokens: int
    ) -> Completion:
        """A plain-text answer of at most `max_tokens` (the conversation summary)."""
        return await self._create(
            messages,
            lambda exc: LLMError(f"HTTP {exc.status_code}: {type(exc).__name__}"),
            max_completion_tokens=max_tokens,
        )

    async def _create(
        self,
        messages: Sequence[dict[str, str]],
        status_error: Callable[[openai.APIStatusError], LLMError],
        **options: Any,
    ) -> Completion:
        """One chat completion at temperature 0 within the timeout; the endpoint's failures as
        LLMErrors (an error status as `status_error` says)."""
        import openai

        try:
            raw = await within(
                self.timeout_s,
                self._client.chat.completions.with_raw_response.create(
                    model=self.model,
                    messages=list(messages),  # type: ignore[arg-type]
                    temperature=0,
                    **options,
                ),
            )
        except TimeoutError:
            raise self._timed_out() from None
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise LLMRetryableError(f"{type(exc).__name__}: {exc}") from exc
        except openai.APIStatusError as exc:
            raise status_error(exc) from exc
        except openai.OpenAIError as exc:
            raise LLMRetryableError(f"{type(exc).__name__}: {exc}") from exc
        return read_completion(raw.content)

    def _timed_out(self) -> LLMRetryableError:
        return LLMRetryableError(
            f"APITimeoutError: no whole answer within {self.timeout_s:g} s "
            "(PGRECALL_EXTRACTION_TIMEOUT_S)"
        )

    async def aclose(self) -> None:
        await self._client.close()


def _refused_unless_transient(exc: openai.APIStatusError) -> LLMError:
    """An extraction call's error status: worth a retry when it may pass, else refused."""
    message = f"HTTP {exc.status_code}: {type(exc).__name__}"
    if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
        return LLMRetryableError(message)
    return LLMRefusedError(message)


def read_completion(body: bytes) -> Completion:
    """A chat completion's text and usage from its raw body; LLMMalformedError naming what is
    wrong with anything else. A usage report with the wrong shape counts as none."""
    try:
        data: Any = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise LLMMalformedError("malformed answer: the body is not UTF-8") from None
    except ValueError:
        raise LLMMalformedError("malformed answer: the body is not JSON") from None
    if not isinstance(data, dict):
        raise LLMMalformedError("malformed answer: the body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise LLMMalformedError("malformed answer: `choices` is not a list")
    text = None
    if choices:
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise LLMMalformedError("malformed answer: `choices[0].message` is not an object")
        text = message.get("content")
        if text is not None and not isinstance(text, str):
            raise LLMMalformedError("malformed answer: `choices[0].message.content` is not text")
    usage = data.get("usage")
    counts = [usage.get(k) for k in _USAGE_KEYS] if isinstance(usage, dict) else []
    if len(counts) != 3 or not all(type(c) is int and c >= 0 for c in counts):
        return Completion(text, 0, 0, 0, usage_reported=False)
    return Completion(text, counts[0], counts[1], counts[2], usage_reported=True)


_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
