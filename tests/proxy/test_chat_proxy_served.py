"""The chat proxy end to end: the official `openai` client -> a real `pgrecall serve` -> a real
HTTP upstream speaking the chat completions protocol (tests/proxy/upstream_server.py)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from app.embedding_models import TRAINED_MODEL_ID
from pgrecall import types as t
from pgrecall.client import Client, PgrecallError
from tests.proxy.upstream_server import Answer, Upstream
from tests.served import Served, serving

MODEL = "gpt-test"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


@pytest.fixture(scope="module")
def served(upstream: Upstream) -> Iterator[Served]:
    with serving("pgr-proxy-", {"PGRECALL_CHAT_UPSTREAM_URL": upstream.base}) as server:
        yield server


@pytest.fixture
def user() -> str:
    return f"chat-{uuid.uuid4()}"


_opened: list[openai.OpenAI] = []


def chat(served: Served, user: str) -> openai.OpenAI:
    client = openai.OpenAI(
        base_url=f"{served.base}/v1",
        api_key="sk-upstream-of-the-caller",
        default_headers={"X-User-Id": user},
        max_retries=0,
    )
    _opened.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_openai_clients() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def pgr(served: Served, user: str) -> Client:
    return Client(served.base, user_id=user)


def stored(served: Served, user: str, conversation: str, count: int) -> list[t.Message]:
    """The conversation's messages once there are `count` (streams store after the last byte)."""
    deadline = time.monotonic() + 15
    with pgr(served, user) as client:
        while True:
            items = client.list_messages(conversation).items
            if len(items) >= count or time.monotonic() > deadline:
                return items
            time.sleep(0.1)


def memory_blocks(body: dict[str, Any]) -> list[str]:
    return [
        m["content"]
        for m in body["messages"]
        if m["role"] == "system" and "<memories>" in str(m["content"])
    ]


def test_plain_completion_injects_memories_and_stores_both_turns(
    served: Served, upstream: Upstream, user: str
) -> None:
    with pgr(served, user) as client:
        memory = client.create_memory(
            {"user_id": user, "content": "Prefers uv over pip for Python", "type": "preference"}
        )
    upstream.answers.append(Answer(text="Use uv, as you prefer."))
    question = "Which Python package manager should I use?"
    raw = chat(served, user).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": question},
        ],
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Use uv, as you prefer."
    assert raw.headers["x-pgrecall-memory-ids"].split(",")[0] == str(memory.id)
    conversation = raw.headers["x-pgrecall-conversation-id"]
    assert raw.headers["x-pgrecall-stored"] == "true"

    seen = upstream.seen[-1]
    assert seen.headers["authorization"] == "Bearer sk-upstream-of-the-caller"
    assert "memory" not in seen.body
    messages = seen.body["messages"]
    assert messages[0] == {"role": "system", "content": "You are terse."}
    assert messages[1]["role"] == "system" and messages[1]["content"].startswith("<memories>")
    assert "Prefers uv over pip for Python" in messages[1]["content"]
    assert messages[2] == {"role": "user", "content": question}  # the user's text untouched

    turns = stored(served, user, conversation, 2)
    assert [(m.role, m.content) for m in turns] == [
        ("user", question),
        ("assistant", "Use uv, as you prefer."),
    ]
    assert turns[1].metadata == {"source": "chat_proxy", "model": MODEL}


def test_overrides_reuse_the_conversation_and_switch_memory_off(
    served: Served, upstream: Upstream, user: str
) -> None:
    with pgr(served, user) as client:
        client.create_memory({"user_id": user, "content": "Owns a cat named Miso", "type": "fact"})
        client.create_memory({"user_id": user, "content": "The cat Miso is ten", "type": "fact"})
        conversation = client.create_conversation("kept")
    openai_client = chat(served, user)
    upstream.answers.extend([Answer(text="Miso."), Answer(text="No idea.")])
    raw = openai_client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is my cat called?"}],
        extra_body={"memory": {"conversation_id": str(conversation.id), "top_k": 1}},
    )
    assert raw.headers["x-pgrecall-conversation-id"] == str(conversation.id)
    assert len(raw.headers["x-pgrecall-memory-ids"].split(",")) == 1
    assert len(memory_blocks(upstream.seen[-1].body)) == 1

    raw = openai_client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is my cat called, again?"}],
        extra_body={"memory": {"conversation_id": str(conversation.id), "off": True}},
    )
    assert raw.headers["x-pgrecall-memory-ids"] == ""
    assert memory_blocks(upstream.seen[-1].body) == []
    turns = stored(served, user, str(conversation.id), 4)
    assert [m.content for m in turns] == [
        "What is my cat called?",
        "Miso.",
        "What is my cat called, again?",
        "No idea.",
    ]


def test_stream_reaches_the_client_before_the_upstream_finishes(
    served: Served, upstream: Upstream, user: str
) -> None:
    gate = threading.Event()
    upstream.finished.clear()
    pieces = ["Streams ", "stay ", "streams."]
    upstream.answers.append(Answer(stream_pieces=pieces, gate=gate))
    raw = chat(served, user).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Say something"}], stream=True
    )
    conversation = raw.headers["x-pgrecall-conversation-id"]
    received: list[str] = []
    try:
        for event in raw.parse():
            content = event.choices[0].delta.content if event.choices else None
            if content:
                if not received:
                    # The first delta is here while the upstream is still holding the rest.
                    assert not upstream.finished.is_set()
                    gate.set()
                received.append(content)
    finally:
        gate.set()
    assert received == pieces
    # The client stops at [DONE]; the upstream writes its terminating chunk after that, so it
    # may still be finishing here: wait for it (a bare is_set() raced it on a loaded machine).
    assert upstream.finished.wait(10)
    turns = stored(served, user, conversation, 2)
    assert [(m.role, m.content) for m in turns] == [
        ("user", "Say something"),
        ("assistant", "Streams stay streams."),
    ]
    assert "incomplete" not in turns[1].metadata


def test_upstream_error_comes_back_with_its_status_and_body(
    served: Served, upstream: Upstream, user: str
) -> None:
    error = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}}
    upstream.answers.append(Answer(status=429, error=error, headers={"retry-after": "7"}))
    with pytest.raises(openai.RateLimitError) as limited:
        chat(served, user).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hello?"}]
        )
    assert limited.value.status_code == 429
    assert limited.value.response.json() == error
    assert limited.value.response.headers["retry-after"] == "7"
    conversation = limited.value.response.headers["x-pgrecall-conversation-id"]
    turns = stored(served, user, conversation, 1)  # the user's words are kept, marked
    assert [(m.role, m.content) for m in turns] == [("user", "Hello?")]
    assert turns[0].metadata["upstream_error"] == "http_429"


def test_dropped_upstream_stream_is_reported_and_the_partial_answer_kept(
    served: Served, upstream: Upstream, user: str
) -> None:
    upstream.answers.append(Answer(stream_pieces=["Half ", "an ", "answer"], drop_after=3))
    raw = chat(served, user).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me"}], stream=True
    )
    conversation = raw.headers["x-pgrecall-conversation-id"]
    received: list[str] = []
    with pytest.raises(openai.APIError, match="dropped the stream"):
        for event in raw.parse():
            if event.choices and event.choices[0].delta.content:
                received.append(event.choices[0].delta.content)
    assert received == ["Half ", "an "]
    turns = stored(served, user, conversation, 2)
    assert [m.content for m in turns] == ["Tell me", "Half an "]
    assert turns[1].metadata["incomplete"] == "upstream_dropped"
    assert turns[0].metadata["upstream_error"] == "upstream_dropped"


def test_client_gone_mid_stream_still_stores_what_it_got(
    served: Served, upstream: Upstream, user: str
) -> None:
    gate = threading.Event()
    upstream.answers.append(Answer(stream_pieces=["First ", "second ", "third"], gate=gate))
    raw = chat(served, user).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Count"}], stream=True
    )
    conversation = raw.headers["x-pgrecall-conversation-id"]
    stream = raw.parse()
    try:
        for event in stream:
            if event.choices and event.choices[0].delta.content:
                break
        stream.close()  # the client goes away while the upstream is still generating
        turns = stored(served, user, conversation, 2)
    finally:
        gate.set()
    assert [m.content for m in turns] == ["Count", "First "]
    assert turns[1].metadata["incomplete"] == "client_disconnected"


def test_users_never_see_each_other(served: Served, upstream: Upstream) -> None:
    alice, bob = f"alice-{uuid.uuid4()}", f"bob-{uuid.uuid4()}"
    with pgr(served, alice) as client:
        client.create_memory(
            {"user_id": alice, "content": "Alice's locker code is 4417", "type": "fact"}
        )
    upstream.answers.extend([Answer(text="4417"), Answer(text="I don't know.")])
    raw = chat(served, alice).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "What is my locker code?"}]
    )
    assert "4417" in memory_blocks(upstream.seen[-1].body)[0]
    alices = raw.headers["x-pgrecall-conversation-id"]

    raw = chat(served, bob).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "What is my locker code?"}]
    )
    assert raw.headers["x-pgrecall-memory-ids"] == ""
    assert memory_blocks(upstream.seen[-1].body) == []  # neither the memory nor Alice's turns

    calls = len(upstream.seen)
    with pytest.raises(openai.NotFoundError):
        chat(served, bob).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Append me to Alice"}],
            extra_body={"memory": {"conversation_id": alices}},
        )
    assert len(upstream.seen) == calls  # refused before anything went upstream
    with pgr(served, bob) as client, pytest.raises(PgrecallError):
        client.get_conversation(alices)
    assert [m.content for m in stored(served, alice, alices, 2)] == [
        "What is my locker code?",
        "4417",
    ]


def test_a_repeated_user_header_is_refused_over_a_real_socket(
    served: Served, upstream: Upstream, user: str
) -> None:
    """uvicorn hands both headers on; the first would have named the user (app/middleware.py)."""
    before = len(upstream.seen)
    headers = [("X-User-Id", f"client-chosen-{uuid.uuid4()}"), ("X-User-Id", user)]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Who am I?"}]}
    response = httpx.post(f"{served.base}/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "RepeatedHeaderError"
    assert len(upstream.seen) == before


@pytest.fixture(scope="module")
def served_answers(upstream: Upstream) -> Iterator[Served]:
    """The proxy on issue 45's models (the trained MiniLM and preset `answers`)."""
    settings = {
        "PGRECALL_CHAT_UPSTREAM_URL": upstream.base,
        "PGRECALL_EMBEDDING_MODEL": TRAINED_MODEL_ID,
        "PGRECALL_RETRIEVAL_PRESET": "answers",
    }
    with serving("pgr-proxy-answers-", settings) as server:
        yield server


def test_a_past_question_does_not_crowd_out_the_fact_that_answers_it(
    served_answers: Served, upstream: Upstream, user: str
) -> None:
    """The relevance issue's example: after the user asked "What is my dog's name?" once, the
    stored turn is closer to "Remind me what my dog is called?" than the memory that answers
    it and its reply; the memory is still injected."""
    with pgr(served_answers, user) as client:
        client.create_memory(
            {"user_id": user, "content": "The user's dog is named Biscuit", "type": "fact"}
        )
    upstream.answers.append(Answer(text="Your dog is called Biscuit."))
    chat(served_answers, user).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is my dog's name?"}]
    )
    upstream.answers.append(Answer(text="Biscuit."))
    chat(served_answers, user).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Remind me what my dog is called?"}]
    )
    (block,) = memory_blocks(upstream.seen[-1].body)
    assert "The user's dog is named Biscuit" in block, block
