"""Reading the documentation as the tests read it: headings, their anchors, sections, tables.

Tests that take a table or an example from the docs as their oracle (the Limits table,
the exit statuses, the README's cache example, the MCP sessions) find it by its page and
heading here, so a page that loses the heading fails the test that reads it, and a table
that moves takes its test along. Anchors follow GitHub's heading slugs, which
``tests/test_docs.py`` checks every link against.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root: README.md, SECURITY.md and docs/ live here."""

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_TAG = re.compile(r"<[^>]+>")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) for every line outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = _FENCE.match(line)
        if opened:
            if fence is None:
                fence = opened.group(1)
            elif opened.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield number, line


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every ATX heading outside code blocks, in order."""
    found = []
    for _, line in prose_lines(text):
        match = _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lower-cased, without punctuation.

    The rendered text is kept (a link's text, a code span's content), markup dropped;
    then every character but letters, digits, ``-``, ``_`` and spaces goes, and each
    space becomes ``-`` (github-slugger's rule).
    """
    text = _LINK.sub(lambda match: match.group(1), heading)
    text = _TAG.sub("", text).replace("`", "").replace("*", "")
    kept = "".join(ch for ch in text.lower() if ch.isalnum() or ch in "-_ ")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page; a repeated slug gets ``-1``, ``-2``... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, heading in headings(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def section(path: Path, heading: str) -> str:
    """The text under ``heading`` (a whole line, ``## Limits``) in the page at ``path``, up
    to the next heading of the same or a higher level; its sub-sections are included."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = path.read_text().splitlines()
    prose = dict(prose_lines(path.read_text()))
    starts = [number for number, line in prose.items() if line == heading]
    assert len(starts) == 1, f"{path.name} has {len(starts)} headings {heading!r}, not one"
    body = []
    for number in range(starts[0] + 1, len(lines) + 1):
        line = lines[number - 1]
        match = _HEADING.match(line) if number in prose else None
        if match and len(match.group(1)) <= level:
            break
        body.append(line)
    return "\n".join(body)


def table(text: str) -> list[list[str]]:
    """The cells of each body row of the first table in ``text`` (``\\|`` is a literal bar)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:  # past the header and its |---| line
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append([cell.strip().replace("\\|", "|") for cell in cells])
    return rows


def exit_statuses(path: Path, heading: str) -> frozenset[int]:
    """The exit statuses a table lists in its first column (``65, 73, 74, 77`` is four)."""
    return frozenset(
        int(number) for row in table(section(path, heading)) for number in row[0].split(",")
    )


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in ``text``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)
