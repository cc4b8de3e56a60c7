"""Seed files: JSON array, JSON Lines or CSV rows of memories, validated with line numbers.

Every row is validated before anything is written, so a report can name every bad line.
Structural damage (a JSON array that does not parse, an unknown CSV column) fails the whole
file: the rows after it cannot be trusted, whatever `--skip-invalid` says.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from app.schemas.admin import AdminMemoryCreate

Format = Literal["json", "jsonl", "csv"]
# tags: one cell, labels separated by spaces ("work travel").
CSV_COLUMNS = (
    "user_id",
    "content",
    "type",
    "importance",
    "created_at",
    "expires_at",
    "source",
    "tags",
)
CSV_REQUIRED = ("user_id", "content", "type")
# Big enough that an over-long content is reported by validation, not by the csv module.
_CSV_FIELD_LIMIT = 16 * 1024 * 1024
_EXTENSIONS: dict[str, Format] = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
}


class SeedFileError(Exception):
    """The file cannot be read as a whole (encoding, JSON structure, CSV header)."""


@dataclass(frozen=True)
class RowError:
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.reason}"


@dataclass(frozen=True)
class SeedRow:
    line: int
    row: AdminMemoryCreate


@dataclass
class ParsedFile:
    rows: list[SeedRow] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.rows) + len({e.line for e in self.errors})


def detect_format(path: Path, text: str) -> Format:
    """By extension; otherwise '[' means a JSON array, '{' JSON Lines, anything else CSV."""
    known = _EXTENSIONS.get(path.suffix.lower())
    if known is not None:
        return known
    head = text.lstrip()[:1]
    return "json" if head == "[" else "jsonl" if head == "{" else "csv"


def read_seed_file(path: Path, fmt: Format | None = None) -> ParsedFile:
    """Parse and validate every row; raises SeedFileError when the file itself is unusable."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SeedFileError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SeedFileError(f"{path}: {exc.strerror or exc}") from None
    chosen = fmt or detect_format(path, text)
    records = {"json": _json_array, "jsonl": _json_lines, "csv": _csv_rows}[chosen](text)
    parsed = ParsedFile()
    for line, record in records:
        if isinstance(record, RowError):
            parsed.errors.append(record)
        else:
            _validate(line, record, parsed)
    return parsed


def _validate(line: int, record: Any, parsed: ParsedFile) -> None:
    if not isinstance(record, dict):
        parsed.errors.append(RowError(line, "row", "must be an object"))
        return
    try:
        parsed.rows.append(SeedRow(line, AdminMemoryCreate.model_validate(record)))
    except ValidationError as exc:
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"]) or "row"
            reason = err["msg"].removeprefix("Value error, ")
            parsed.errors.append(RowError(line, name, reason))


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _json_array(text: str) -> Iterator[tuple[int, Any]]:
    """Elements of a top-level array with the line each starts on (json.load has no positions)."""
    decoder = json.JSONDecoder()
    i = _skip_space(text, 0)
    if not text.startswith("[", i):
        raise SeedFileError(f"line {_line_of(text, i)}: json: expected a JSON array of objects")
    i = _skip_space(text, i + 1)
    if text.startswith("]", i):
        return
    while True:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise SeedFileError(f"line {exc.lineno}: json: {exc.msg}") from None
        yield _line_of(text, i), value
        i = _skip_space(text, end)
        if text.startswith(",", i):
            i = _skip_space(text, i + 1)
        elif text.startswith("]", i):
            break
        else:
            raise SeedFileError(f"line {_line_of(text, i)}: json: expected ',' or ']'")
    if _skip_space(text, i + 1) != len(text):
        raise SeedFileError(f"line {_line_of(text, i + 1)}: json: data after the array")


def _json_lines(text: str) -> Iterator[tuple[int, Any]]:
    # split("\n"), not splitlines(): JSON strings may hold U+2028 and other line separators.
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            yield number, json.loads(raw)
        except json.JSONDecodeError as exc:
            yield number, RowError(number, "json", exc.msg)


def _csv_rows(text: str) -> Iterator[tuple[int, Any]]:
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip() for name in next(reader)]
    except StopIteration:
        return
    unknown = [name for name in header if name not in CSV_COLUMNS]
    missing = [name for name in CSV_REQUIRED if name not in header]
    if unknown or missing or len(set(header)) != len(header):
        problems = [f"unknown column {n!r}" for n in unknown]
        problems += [f"missing column {n!r}" for n in missing]
        if len(set(header)) != len(header):
            problems.append("repeated column")
        allowed = ", ".join(CSV_COLUMNS)
        raise SeedFileError(f"line 1: header: {'; '.join(problems)} (columns: {allowed})")
    previous_end = reader.line_num
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise SeedFileError(f"line {previous_end + 1}: csv: {exc}") from None
        start, previous_end = previous_end + 1, reader.line_num
        if not cells:
            continue
        if len(cells) != len(header):
            reason = f"has {len(cells)} fields, the header has {len(header)}"
            yield start, RowError(start, "row", reason)
            continue
        record: dict[str, str | float | list[str]] = {}
        for name, value in zip(header, cells, strict=True):
            # An empty optional cell means "not given"; required ones stay so validation names them.
            if value != "" or name in CSV_REQUIRED:
                record[name] = value
        if "importance" in record:
            # CSV cells are text; the number column becomes a number here, as JSON would carry it.
            try:
                record["importance"] = float(record["importance"])
            except ValueError:
                yield start, RowError(start, "importance", "must be a number")
                continue
        if "tags" in record:
            record["tags"] = str(record["tags"]).split()
        yield start, record
