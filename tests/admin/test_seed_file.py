"""Seed file parsing and validation: formats, line numbers, error messages (no database)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.errors import ValidationFailedError
from app.runtime.identity import validate_user_id
from app.schemas.admin import check_user_id
from app.services.seed_file import SeedFileError, read_seed_file


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_json_array_rows_carry_the_line_they_start_on(tmp_path: Path) -> None:
    text = (
        "[\n"
        '  {"user_id": "u1", "content": "likes tea", "type": "preference"},\n'
        "  {\n"
        '    "user_id": "u1",\n'
        '    "content": "uses vim", "type": "fact", "importance": 0.9,\n'
        '    "created_at": "2024-05-01T10:00:00Z", "source": "import", "metadata": {"k": 1}\n'
        "  }\n"
        "]\n"
    )
    parsed = read_seed_file(_write(tmp_path, "seed.json", text))
    assert parsed.errors == []
    assert [r.line for r in parsed.rows] == [2, 3]
    second = parsed.rows[1].row
    assert (second.importance, second.source, second.metadata) == (0.9, "import", {"k": 1})
    assert second.created_at is not None and second.created_at.utcoffset() is not None
    assert parsed.rows[0].row.importance == 0.5  # the default


def test_errors_name_line_field_and_reason(tmp_path: Path) -> None:
    rows = [
        {"user_id": "u1", "content": "fine", "type": "fact"},
        {"user_id": "has space", "content": "x", "type": "fact"},
        {"user_id": "u1", "content": "", "type": "opinion"},
        {"user_id": "u1", "content": "x", "type": "fact", "importance": 1.5},
        {"user_id": "u1", "content": "x", "type": "fact", "created_at": "2024-01-01T00:00:00"},
        {"user_id": "u1", "content": "x" * 32_001, "type": "fact"},
        {"user_id": "u1", "content": "x", "type": "fact", "colour": "red"},
        {"user_id": "u1", "content": "x", "type": "fact", "created_at": 1700000000},
        ["not", "an", "object"],
    ]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    parsed = read_seed_file(_write(tmp_path, "seed.jsonl", text))
    messages = [str(e) for e in parsed.errors]
    assert [r.line for r in parsed.rows] == [1]
    assert messages[0] == "line 2: user_id: must be 1-255 printable ASCII characters, no spaces"
    assert messages[1].startswith("line 3: content: String should have at least 1 character")
    assert messages[2].startswith("line 3: type: Input should be 'fact', 'preference'")
    assert messages[3].startswith("line 4: importance: Input should be less than or equal to 1")
    assert messages[4].startswith("line 5: created_at: Input should have timezone info")
    assert messages[5].startswith("line 6: content: String should have at most 32000 characters")
    assert messages[6].startswith("line 7: colour: Extra inputs are not permitted")
    assert messages[7].startswith("line 8: created_at: must be an ISO 8601 string")
    assert messages[8] == "line 9: row: must be an object"
    assert parsed.total == 9


def test_jsonl_bad_json_is_a_row_error_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    text = (
        '{"user_id": "u", "content": "a", "type": "note"}\n\n'
        '{"user_id": "u", "content": "b", "type": "note"\n'
        '{"user_id": "u", "content": "c\\u2028d", "type": "note"}\n'
    )
    parsed = read_seed_file(_write(tmp_path, "x.jsonl", text))
    assert [r.line for r in parsed.rows] == [1, 4]
    assert [str(e).split(":")[:2] for e in parsed.errors] == [["line 3", " json"]]


def test_csv_line_numbers_count_multiline_fields(tmp_path: Path) -> None:
    text = (
        "user_id,content,type,importance,created_at,expires_at,source\n"
        'u1,"first line\nsecond line",note,,,,\n'
        "u1,plain,fact,0.7,2024-01-01T00:00:00+02:00,,crm\n"
        "\n"
        "u1,bad,fact,high,,,\n"
        "u1,,fact,,,,\n"
        "u1,short row\n"
    )
    parsed = read_seed_file(_write(tmp_path, "seed.csv", text))
    assert [(r.line, r.row.content) for r in parsed.rows] == [
        (2, "first line\nsecond line"),
        (4, "plain"),
    ]
    assert parsed.rows[1].row.importance == 0.7 and parsed.rows[1].row.source == "crm"
    assert parsed.rows[0].row.importance == 0.5 and parsed.rows[0].row.source is None
    messages = [str(e) for e in parsed.errors]
    assert messages[0] == "line 6: importance: must be a number"
    assert messages[1].startswith("line 7: content: String should have at least 1 character")
    assert messages[2] == "line 8: row: has 2 fields, the header has 7"


def test_csv_header_must_name_known_columns(tmp_path: Path) -> None:
    with pytest.raises(
        SeedFileError, match=r"line 1: header: unknown column 'kind'; missing column 'type'"
    ):
        read_seed_file(_write(tmp_path, "seed.csv", "user_id,content,kind\nu,x,fact\n"))


def test_broken_json_array_fails_the_whole_file(tmp_path: Path) -> None:
    text = '[\n{"user_id": "u", "content": "a", "type": "note"},\n{"user_id": "u",, }\n]\n'
    with pytest.raises(SeedFileError, match=r"^line 3: json: "):
        read_seed_file(_write(tmp_path, "seed.json", text))
    with pytest.raises(SeedFileError, match="expected a JSON array"):
        read_seed_file(_write(tmp_path, "obj.json", '{"user_id": "u"}'))


def test_format_sniffed_without_a_known_extension(tmp_path: Path) -> None:
    row = {"user_id": "u", "content": "a", "type": "note"}
    assert len(read_seed_file(_write(tmp_path, "a.txt", json.dumps([row]))).rows) == 1
    assert len(read_seed_file(_write(tmp_path, "b.txt", json.dumps(row) + "\n")).rows) == 1
    assert (
        len(read_seed_file(_write(tmp_path, "c.txt", "user_id,content,type\nu,a,note\n")).rows) == 1
    )


def test_not_utf8_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "seed.csv"
    path.write_bytes(b"user_id,content,type\nu,caf\xe9,note\n")
    with pytest.raises(SeedFileError, match="not UTF-8"):
        read_seed_file(path)


@pytest.mark.parametrize(
    "value",
    [
        "alice",
        "user-1@example.com",
        "a:b",
        "x" * 255,
        "",
        "x" * 256,
        "a b",
        "tab\there",
        "é",
        "\x7f",
    ],
)
def test_user_id_rule_matches_the_api(value: str) -> None:
    try:
        validate_user_id(value)
        api_ok = True
    except ValidationFailedError:
        api_ok = False
    try:
        check_user_id(value)
        seed_ok = True
    except ValueError:
        seed_ok = False
    assert seed_ok == api_ok
