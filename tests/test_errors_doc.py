"""docs/errors.md is what ``python -m tests.errors_doc`` generates, and the generator
documents every code exactly once, with its one sentence and, when a server answers it,
its one status.

So a new code without a sentence, a class or a status, or a status for a code no server
answers, fails here (the generator refuses it), and a page not regenerated after a change
of the code's tables fails too.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from deplog.authority.http.status import HTTP_STATUS, http_status
from deplog.client.cli.messages import SENTENCES
from deplog.client.errors import ErrorCode
from tests.doctext import section, table
from tests.errors_doc import DOC, render
from tests.test_http_status import AUTHORITY_CODES, WITNESS_CODES


@pytest.fixture(scope="module")
def generated() -> str:
    return render()


def test_the_committed_page_is_what_the_generator_writes(generated: str) -> None:
    assert DOC.read_text() == generated, "docs/errors.md is stale: run python -m tests.errors_doc"


def rows(text: str) -> list[list[str]]:
    """Every row of the area tables: code, status, meaning, class."""
    areas = text.split("\n## Codes by HTTP status", 1)[0].split("\n### ")[1:]
    return [row for area in areas for row in table(area)]


def test_every_code_is_listed_once_with_its_sentence(generated: str) -> None:
    listed = [(re.fullmatch(r"`([a-z0-9_]+)`", row[0]), row) for row in rows(generated)]
    assert all(match for match, _ in listed), "the code column holds one `code` per row"
    codes = Counter(match.group(1) for match, _ in listed if match)
    assert set(codes) == {code.value for code in ErrorCode}
    assert max(codes.values()) == 1, "a code is listed twice"
    for match, row in listed:
        assert match and row[2] == SENTENCES[ErrorCode(match.group(1))].replace("<", "\\<")


def test_each_code_has_one_meaning() -> None:
    assert all(SENTENCES.get(code) for code in ErrorCode)
    repeated = [s for s, n in Counter(SENTENCES.values()).items() if n > 1]
    assert not repeated, "two codes share a meaning: make them one code"


def test_a_code_has_a_status_exactly_when_a_server_answers_it(generated: str) -> None:
    assert set(HTTP_STATUS) == AUTHORITY_CODES | WITNESS_CODES
    for row in rows(generated):
        code = ErrorCode(row[0].strip("`"))
        status = http_status(code)
        servers = [
            name
            for name, codes in (("authority", AUTHORITY_CODES), ("witness", WITNESS_CODES))
            if code in codes
        ]
        assert row[1] == (f"{status} ({', '.join(servers)})" if servers else "none")


@pytest.mark.parametrize(("column", "answered"), [(2, AUTHORITY_CODES), (3, WITNESS_CODES)])
def test_the_status_table_lists_what_each_server_answers(
    column: int, answered: frozenset[ErrorCode]
) -> None:
    by_status = table(section(DOC, "## Codes by HTTP status"))
    listed = [
        (code, int(row[0]))
        for row in by_status
        for code in re.findall(r"`([a-z0-9_]+)`", row[column])
    ]
    assert len(listed) == len(dict(listed)), "a code is listed twice"
    assert dict(listed) == {code.value: http_status(code) for code in answered}


def test_the_generator_refuses_a_code_without_a_sentence() -> None:
    without: dict[ErrorCode, str] = {
        code: text for code, text in SENTENCES.items() if code != ErrorCode.BAD_RANGE
    }
    with pytest.raises(ValueError, match="bad_range has no sentence"):
        render(sentences=without)


def test_the_generator_refuses_a_code_a_server_answers_without_a_status() -> None:
    without: dict[ErrorCode, int] = {
        code: status for code, status in HTTP_STATUS.items() if code != ErrorCode.BUSY
    }
    with pytest.raises(ValueError, match="busy: the witness answers it, with no status"):
        render(statuses=without)


def test_the_generator_refuses_a_status_no_server_answers() -> None:
    extra = {**HTTP_STATUS, ErrorCode.BAD_SNAPSHOT: 400}
    with pytest.raises(ValueError, match="bad_snapshot: a status"):
        render(statuses=extra)
