"""The README's error tables list every code exactly where it belongs, and nothing else.

Three tables: the API's by status, the witness's by status, and the library's
and commands' by area. A code a server answers is in that server's table, with
the status of ``authority/http/status.py`` (a code both servers answer is in
both); every other code is in the library table, once, with a meaning.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deplog.authority.http.status import http_status
from deplog.client.errors import ErrorCode
from tests.test_http_status import AUTHORITY_CODES, WITNESS_CODES

README = Path(__file__).resolve().parents[1] / "README.md"
_CODE = re.compile(r"`([a-z0-9_]+)`")


def table_after(heading: str) -> list[list[str]]:
    """The cells of each body row of the first table after ``heading``."""
    text = README.read_text()
    assert heading in text.splitlines(), f"the README lost its {heading!r} section"
    after = text.split(f"\n{heading}\n", 1)[1]
    lines = after.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:  # past the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def codes_by_status(heading: str) -> list[tuple[str, int]]:
    """(code, status) for every code named in a status table, repeats kept."""
    return [
        (code, int(status)) for status, cell in table_after(heading) for code in _CODE.findall(cell)
    ]


@pytest.mark.parametrize(
    ("heading", "answered"),
    [("### API errors", AUTHORITY_CODES), ("### Witness errors", WITNESS_CODES)],
    ids=["authority", "witness"],
)
def test_a_server_table_lists_each_code_it_answers_once_with_its_status(
    heading: str, answered: frozenset[ErrorCode]
) -> None:
    listed = codes_by_status(heading)
    assert len(listed) == len(dict(listed)), "a code is listed twice"
    assert dict(listed) == {code.value: http_status(code) for code in answered}


def test_the_library_table_lists_every_other_code_once_with_a_meaning() -> None:
    rows = table_after("## Library and command-line errors")
    listed = [_CODE.fullmatch(code) for _, code, _ in rows]
    assert all(listed), "the code column holds one `code` per row"
    codes = [match.group(1) for match in listed if match]
    assert len(codes) == len(set(codes)), "a code is listed twice"
    expected = set(ErrorCode) - AUTHORITY_CODES - WITNESS_CODES
    assert set(codes) == {code.value for code in expected}
    assert all(area and meaning for area, _, meaning in rows)


def test_library_codes_are_grouped_by_area() -> None:
    """Rows of one area are adjacent, so the table reads area by area."""
    areas = [area for area, _, _ in table_after("## Library and command-line errors")]
    assert areas == sorted(areas, key=areas.index)
