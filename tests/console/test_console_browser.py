"""The admin console in a real browser (headless Chromium): sign-in, users, memories, "Ask as
this user", purge, health; escaping, CSRF and the session requirement. One browser and one
served app for the module; every test makes its own users."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.console.conftest import (
    ADMIN_KEY,
    PRECISION_AT_5,
    RECALL_AT_5,
    ROOT,
    SERVICE_KEY,
    Console,
    screenshot,
)

PAGES = [
    "/console",
    "/console/users",
    "/console/user?user={u}",
    "/console/memory?user={u}&id={m}",
    "/console/conversations?user={u}",
    "/console/conversation?user={u}&id={c}",
    "/console/ask?user={u}",
    "/console/purge?user={u}",
    "/console/health",
]
POSTS = [
    "/console/logout",
    "/console/memory/create?user={u}",
    "/console/memory/update?user={u}&id={m}",
    "/console/memory/delete?user={u}&id={m}",
    "/console/memory/restore?user={u}&id={m}",
    "/console/ask?user={u}",
    "/console/purge?user={u}",
]


def new_user(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def seed(console: Console, user: str, memories: list[tuple[str, str]]) -> dict[str, Any]:
    """A conversation with two messages and some memories, through the service's HTTP API."""
    with console.api() as api:
        ids = []
        for content, kind in memories:
            r = api.post(
                "/v1/admin/memories", json={"user_id": user, "content": content, "type": kind}
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        headers = {"Authorization": f"Bearer {SERVICE_KEY}", "X-User-Id": user}
        r = api.post("/v1/conversations", json={"title": "kitchen plans"}, headers=headers)
        assert r.status_code == 201, r.text
        conversation = r.json()["id"]
        for role, text in (
            ("user", "Shall we paint the kitchen blue?"),
            ("assistant", "Blue works."),
        ):
            r = api.post(
                f"/v1/conversations/{conversation}/messages",
                json={"role": role, "content": text},
                headers=headers,
            )
            assert r.status_code == 201, r.text
    return {"memories": ids, "conversation": conversation}


def memory(console: Console, user: str, memory_id: str) -> dict[str, Any]:
    with console.api() as api:
        r = api.get(f"/v1/admin/memories/{memory_id}", params={"user_id": user})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]


def sign_in(driver: WebDriver, console: Console, key: str = ADMIN_KEY) -> None:
    driver.get(console.url("/console/login"))
    driver.find_element(By.ID, "admin_key").send_keys(key)
    click(driver, driver.find_element(By.ID, "sign-in"))
    WebDriverWait(driver, 20).until(
        lambda d: d.find_elements(By.ID, "login-error") or d.find_elements(By.ID, "users")
    )


def click(driver: WebDriver, element: WebElement) -> None:
    """Click something that loads a page, and wait until the new page has loaded (a mark set
    on the old page's window is gone with it)."""
    driver.execute_script("window.__before_click = true")
    element.click()
    WebDriverWait(driver, 20, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.__before_click === undefined && document.readyState === 'complete'"
        )
    )


def text_of(driver: WebDriver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def wait_for(driver: WebDriver, element_id: str) -> None:
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, element_id))


@pytest.fixture
def signed_in(browser: WebDriver, console: Console) -> Iterator[WebDriver]:
    browser.delete_all_cookies()
    sign_in(browser, console)
    wait_for(browser, "users")
    yield browser


def test_every_page_refuses_without_a_session(browser: WebDriver, console: Console) -> None:
    user = new_user("nosession")
    made = seed(console, user, [("Nobody may read this without signing in", "fact")])
    values = {"u": user, "m": made["memories"][0], "c": made["conversation"]}
    browser.delete_all_cookies()
    for page in PAGES:
        browser.get(console.url(page.format(**values)))
        assert browser.current_url.startswith(console.url("/console/login")), page
        assert browser.find_elements(By.ID, "admin_key"), page
    screenshot(browser, "login")
    # Posts without a session change nothing and are sent to sign in (no browser needed).
    with httpx.Client(base_url=console.base) as anonymous:
        for page in POSTS:
            r = anonymous.post(page.format(**values), data={"content": "x", "confirm": user})
            assert r.status_code == 303, page
            assert r.headers["location"].startswith("/console/login"), page
    assert memory(console, user, made["memories"][0])["deleted_at"] is None
    # A forged cookie is no session either.
    browser.get(console.url("/console/login"))
    browser.add_cookie(
        {"name": "pgrecall_console", "value": "abc.99999999999.deadbeef", "path": "/console"}
    )
    browser.get(console.url("/console/users"))
    assert browser.current_url.startswith(console.url("/console/login"))


def test_wrong_admin_key_is_refused(browser: WebDriver, console: Console) -> None:
    browser.delete_all_cookies()
    sign_in(browser, console, key="not-the-admin-key")
    assert "wrong admin key" in text_of(browser, "login-error")
    assert browser.get_cookie("pgrecall_console") is None
    browser.get(console.url("/console/users"))
    assert browser.current_url.startswith(console.url("/console/login"))
    # The service key is not the admin key either.
    sign_in(browser, console, key=SERVICE_KEY)
    assert "wrong admin key" in text_of(browser, "login-error")


def test_sign_in_find_a_user_and_read_their_conversations(
    signed_in: WebDriver, console: Console
) -> None:
    driver = signed_in
    cookie = driver.get_cookie("pgrecall_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    user = new_user("findme")
    made = seed(console, user, [("Prefers window seats", "preference"), ("Lives in Lyon", "fact")])
    driver.find_element(By.ID, "q").send_keys(user[-12:])
    click(driver, driver.find_element(By.ID, "find-user"))
    wait_for(driver, "users")
    rows = driver.find_elements(By.CSS_SELECTOR, "#users tbody tr")
    assert len(rows) == 1
    cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    assert cells == [user, "1", "2", "2", "0"]
    screenshot(driver, "users")
    click(driver, rows[0].find_element(By.LINK_TEXT, user))
    wait_for(driver, "memories")
    assert text_of(driver, "user-id") == user
    contents = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#memories td.content")]
    assert sorted(contents) == ["Lives in Lyon", "Prefers window seats"]
    screenshot(driver, "user")
    click(driver, driver.find_element(By.LINK_TEXT, "Conversations"))
    wait_for(driver, "conversations")
    click(driver, driver.find_element(By.LINK_TEXT, "kitchen plans"))
    wait_for(driver, "messages")
    messages = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#messages td.content")]
    assert messages == ["Shall we paint the kitchen blue?", "Blue works."]
    assert made["conversation"] in driver.page_source
    screenshot(driver, "conversation")


def _ask(driver: WebDriver, console: Console, user: str, question: str) -> dict[str, list[str]]:
    """Ask as the user; the candidate rows by memory id (cells as text)."""
    driver.get(console.url(f"/console/ask?user={user}"))
    driver.find_element(By.ID, "query").send_keys(question)
    click(driver, driver.find_element(By.ID, "ask"))
    wait_for(driver, "candidates")
    return {
        row.get_attribute("data-id"): [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        for row in driver.find_elements(By.CSS_SELECTOR, "#candidates tbody tr[data-id]")
    }


def test_memory_lifecycle_and_ask_as_this_user(
    signed_in: WebDriver, console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    driver = signed_in
    user = new_user("lifecycle")
    seed(console, user, [("Alice keeps her bicycle in the garage", "fact")])
    driver.get(console.url(f"/console/user?user={user}"))
    content = "Alice drinks green tea every morning and avoids coffee"
    driver.find_element(By.ID, "content").send_keys(content)
    Select(driver.find_element(By.ID, "new-type")).select_by_value("preference")
    click(driver, driver.find_element(By.ID, "create"))
    wait_for(driver, "notice")
    assert text_of(driver, "notice") == "memory created"
    link = driver.find_element(By.LINK_TEXT, content)
    memory_id = link.get_attribute("href").rsplit("id=", 1)[1]
    assert memory(console, user, memory_id)["type"] == "preference"

    # Ranked in "Ask as this user", with its scores and its fate.
    rows = _ask(driver, console, user, "What does Alice drink in the morning?")
    row = rows[memory_id]
    assert row[0] == "1"  # rank
    bm25, keyword, cosine, semantic, fused, relevance = (float(v) for v in row[3:9])
    assert bm25 > 0 and cosine > 0 and 0 < relevance <= 1 and fused > 0
    assert 0 <= keyword <= 1 and 0 <= semantic <= 1
    assert row[9:11] == ["passed", "passed"] and row[12] == "returned"
    assert int(row[11]) > 0
    formatted = text_of(driver, "formatted")
    assert formatted.startswith("<memories>") and content in formatted
    path = screenshot(driver, "ask")
    if os.environ.get("PGRECALL_UPDATE_DOCS_IMG") == "1":  # refresh the README's picture
        shutil.copyfile(path, ROOT / "docs" / "img" / "console-ask.png")

    # Edit.
    driver.get(console.url(f"/console/memory?user={user}&id={memory_id}"))
    box = driver.find_element(By.ID, "content")
    box.clear()
    edited = "Alice drinks jasmine tea every morning and avoids coffee"
    box.send_keys(edited)
    with caplog.at_level("INFO", logger="app.audit"):
        click(driver, driver.find_element(By.ID, "save"))
        wait_for(driver, "memory-content")
    assert text_of(driver, "memory-content") == edited
    # New content is a new version (issue 14's supersession): a new id replaces the old one.
    original, memory_id = memory_id, text_of(driver, "memory-id")
    assert memory_id != original
    assert memory(console, user, memory_id)["content"] == edited
    assert memory(console, user, original)["valid_to"] is not None
    assert len(driver.find_elements(By.CSS_SELECTOR, "#versions tbody tr")) == 2
    audited = [
        {k: r.fields.get(k) for k in ("action", "user_id", "memory_id", "result_id")}
        for r in caplog.records
        if r.name == "app.audit" and "action" in getattr(r, "fields", {})
    ]
    assert [a for a in audited if a["action"] == "memory.update"] == [
        {
            "action": "memory.update",
            "user_id": user,
            "memory_id": original,
            "result_id": memory_id,
        }
    ]
    screenshot(driver, "memory")

    # Delete: gone from the live list and from the answers.
    click(driver, driver.find_element(By.ID, "delete"))
    wait_for(driver, "restore")
    assert text_of(driver, "memory-state").startswith("deleted")
    assert memory(console, user, memory_id)["deleted_at"] is not None
    assert memory_id not in _ask(driver, console, user, "What does Alice drink in the morning?")
    driver.get(console.url(f"/console/user?user={user}"))
    assert not driver.find_elements(By.LINK_TEXT, edited)
    Select(driver.find_element(By.ID, "deleted")).select_by_value("all")
    click(driver, driver.find_element(By.ID, "filter"))
    wait_for(driver, "memories")
    assert driver.find_elements(By.LINK_TEXT, edited)

    # Restore: back in the answers.
    driver.get(console.url(f"/console/memory?user={user}&id={memory_id}"))
    click(driver, driver.find_element(By.ID, "restore"))
    wait_for(driver, "delete")
    assert text_of(driver, "memory-state") == "live"
    assert memory(console, user, memory_id)["deleted_at"] is None
    assert memory_id in _ask(driver, console, user, "What does Alice drink in the morning?")


def test_script_content_renders_as_text(signed_in: WebDriver, console: Console) -> None:
    driver = signed_in
    user = new_user("xss")
    payload = "<script>document.title='owned';document.body.innerHTML='owned'</script>"
    made = seed(console, user, [(payload, "note")])
    memory_id = made["memories"][0]
    for page in (
        f"/console/user?user={user}",
        f"/console/memory?user={user}&id={memory_id}",
    ):
        driver.get(console.url(page))
        assert "owned" not in driver.title
        assert driver.find_elements(By.ID, "user-id") or driver.find_elements(By.ID, "memory-id")
        assert payload in driver.find_element(By.TAG_NAME, "main").text
        assert "&lt;script&gt;" in driver.page_source
    rows = _ask(driver, console, user, "document title script")
    assert payload in rows[memory_id][2]
    assert "owned" not in driver.title
    screenshot(driver, "xss")


def test_a_form_without_the_csrf_token_is_refused(signed_in: WebDriver, console: Console) -> None:
    driver = signed_in
    user = new_user("csrf")
    made = seed(console, user, [("Owns a red kayak", "fact")])
    memory_id = made["memories"][0]
    driver.get(console.url(f"/console/memory?user={user}&id={memory_id}"))
    # The page itself runs no script (CSP); the test removes the token the way a forged
    # cross-site form would lack it.
    driver.execute_script(
        "document.querySelectorAll('input[name=csrf_token]').forEach(e => e.remove())"
    )
    click(driver, driver.find_element(By.ID, "delete"))
    wait_for(driver, "error-message")
    assert "CSRF" in text_of(driver, "error-message")
    assert memory(console, user, memory_id)["deleted_at"] is None
    # A wrong token, and the token of another session, are refused as well.
    cookie = {"pgrecall_console": driver.get_cookie("pgrecall_console")["value"]}
    with httpx.Client(base_url=console.base, cookies=cookie) as client:
        for token in ("", "0" * 64):
            r = client.post(
                f"/console/memory/delete?user={user}&id={memory_id}", data={"csrf_token": token}
            )
            assert r.status_code == 403
    assert memory(console, user, memory_id)["deleted_at"] is None


def test_purge_a_user_with_typed_confirmation(signed_in: WebDriver, console: Console) -> None:
    driver = signed_in
    user = new_user("purge")
    seed(console, user, [("Will be forgotten", "fact")])
    driver.get(console.url(f"/console/purge?user={user}"))
    screenshot(driver, "purge")
    driver.find_element(By.ID, "confirm").send_keys(user + "x")
    click(driver, driver.find_element(By.ID, "purge"))
    wait_for(driver, "purge-error")
    with console.api() as api:
        assert api.get("/v1/admin/memories", params={"user_id": user}).json()["total"] == 1
    driver.find_element(By.ID, "confirm").send_keys(user)
    click(driver, driver.find_element(By.ID, "purge"))
    wait_for(driver, "purged")
    assert "memory_items 1" in text_of(driver, "purged")
    with console.api() as api:
        assert api.get("/v1/admin/memories", params={"user_id": user}).json()["total"] == 0
    driver.get(console.url(f"/console/users?q={user}"))
    assert driver.find_elements(By.CSS_SELECTOR, "#users tbody tr td.muted")


def test_health_page(signed_in: WebDriver, console: Console) -> None:
    driver = signed_in
    driver.get(console.url("/console/health"))
    wait_for(driver, "checks")
    checks = {
        row.find_elements(By.TAG_NAME, "td")[0].text: row.find_elements(By.TAG_NAME, "td")[1].text
        for row in driver.find_elements(By.CSS_SELECTOR, "#checks tbody tr")
    }
    assert checks == {
        "database": "ok",
        "migrations": "ok",
        "redis": "ok",
        "embedder": "ok",
    }
    runs = driver.find_elements(By.CSS_SELECTOR, "#evaluations tbody tr")
    assert len(runs) == 1
    cells = [c.text for c in runs[0].find_elements(By.TAG_NAME, "td")]
    assert cells[0] == "memory-default-console-test" and cells[1] == "memory"
    assert cells[5:7] == [f"{RECALL_AT_5:.3f}", f"{PRECISION_AT_5:.3f}"]
    screenshot(driver, "health")


def test_sign_out_ends_the_session(signed_in: WebDriver, console: Console) -> None:
    driver = signed_in
    old = driver.get_cookie("pgrecall_console")["value"]
    click(driver, driver.find_element(By.CSS_SELECTOR, "form.logout button"))
    wait_for(driver, "admin_key")
    driver.get(console.url("/console/users"))
    assert driver.current_url.startswith(console.url("/console/login"))
    # The old cookie, replayed, is refused: the session was revoked, not only forgotten.
    with httpx.Client(base_url=console.base, cookies={"pgrecall_console": old}) as client:
        r = client.get("/console/users")
        assert r.status_code == 303 and r.headers["location"].startswith("/console/login")
