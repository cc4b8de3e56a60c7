"""Requests are UTF-8: bodies, their declared charset and percent-decoded query strings.

Checked once, at the edge (app/middleware.py), before FastAPI parses anything: `json.loads`
on bytes would otherwise detect UTF-16 and UTF-32 by itself, Starlette ignores the charset of
a content type, and it decodes a query string with errors="replace" (`q=%FF` became U+FFFD).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from app.errors import ServiceError, UnsupportedMediaTypeError, ValidationFailedError

UTF8_NAMES = frozenset({"utf-8", "utf8"})


@dataclass(frozen=True)
class Refusal:
    status: int
    body: dict[str, object]


def _charset(content_type: str) -> str | None:
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


def check_body(content_type: str | None, body: bytes) -> None:
    """415 for a declared charset other than UTF-8; 422 (`body`) for bytes that are not UTF-8
    text (a NUL byte included: JSON and forms never hold one raw, UTF-16 text always does)."""
    charset = _charset(content_type or "")
    if charset is not None and charset not in UTF8_NAMES:
        raise UnsupportedMediaTypeError(
            f"request bodies are UTF-8; charset={charset} is not supported"
        )
    if not body:
        return
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailedError("body: not UTF-8", field="body") from None
    if "\x00" in text:
        raise ValidationFailedError("body: not UTF-8 text (a NUL byte)", field="body")


def check_query(query_string: bytes) -> None:
    """422 naming the parameter whose percent-decoded name or value is not UTF-8."""
    for pair in query_string.split(b"&"):
        name, _, value = (unquote_to_bytes(p.replace(b"+", b" ")) for p in pair.partition(b"="))
        try:
            name.decode("utf-8")
            value.decode("utf-8")
        except UnicodeDecodeError:
            where = f"query.{name.decode('utf-8', 'replace')}"
            raise ValidationFailedError(f"{where}: not UTF-8", field=where) from None


def refusal(error: ServiceError) -> Refusal:
    """The body app/http/errors.py renders for `error`, for the middleware (before routing)."""
    body: dict[str, object] = {"error": error.name, "detail": error.message}
    if isinstance(error, ValidationFailedError):
        body["fields"] = [{"field": error.field or "request", "reason": error.message}]
    return Refusal(error.status_code, body)
