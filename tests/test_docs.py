"""Every relative link in the documentation leads somewhere: the file, and the heading.

The pages are README.md, SECURITY.md, BENCHMARKS.md and every Markdown file under docs/.
A link's target must be a file or directory of the repository; a ``#anchor`` must be the
GitHub slug of a heading of the Markdown page it names (``tests/doctext.py``), or a line
(``#L12``) of another file. Links to other sites are not fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.doctext import ROOT, anchors, exit_statuses, headings, prose_lines, slug

PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "SECURITY.md",
        ROOT / "BENCHMARKS.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
)

_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def links(page: Path) -> list[str]:
    """Every link target of a page, outside code blocks and code spans."""
    prose = "\n".join(line for _, line in prose_lines(page.read_text()))
    prose = _CODE_SPAN.sub("", prose)
    return _INLINE.findall(prose) + _REFERENCE.findall(prose)


def broken(page: Path, target: str) -> str | None:
    """Why ``target``, linked from ``page``, leads nowhere; None when it resolves."""
    if _EXTERNAL.match(target):
        return None
    path_part, _, anchor = target.partition("#")
    resolved = (page.parent / path_part).resolve() if path_part else page
    if not resolved.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if not resolved.exists():
        return f"{target}: no such file"
    if not anchor:
        return None
    if resolved.suffix == ".md":
        if anchor not in anchors(resolved.read_text()):
            return f"{target}: {resolved.name} has no heading with that anchor"
        return None
    if resolved.is_file() and re.fullmatch(r"L\d+(-L\d+)?", anchor):
        return None
    return f"{target}: an anchor into a file that is not Markdown"


def test_there_are_pages_to_check() -> None:
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "errors.md" in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    problems = [why for target in links(page) if (why := broken(page, target))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Five-minute walkthrough", "five-minute-walkthrough"),
        ("3.1 Entries that fail validation", "31-entries-that-fail-validation"),
        ("The `deplog` command", "the-deplog-command"),
        ("Identities and `list_changed`", "identities-and-list_changed"),
        ("Freshness: witness policies", "freshness-witness-policies"),
        ("The witness's API", "the-witnesss-api"),
        ("[Link](x.md) text", "link-text"),
    ],
)
def test_anchors_are_githubs_slugs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor() -> None:
    text = "# A\n## Notes\n```sh\n# not a heading\n```\n## Notes\n"
    assert [h for _, h in headings(text)] == ["A", "Notes", "Notes"]
    assert anchors(text) == {"a", "notes", "notes-1"}


def test_the_checker_finds_a_broken_file_and_a_broken_anchor() -> None:
    page = ROOT / "docs" / "operators.md"
    assert broken(page, "no-such-page.md") == "no-such-page.md: no such file"
    assert broken(page, "#no-such-heading") is not None
    assert broken(page, "#limits") is None
    assert broken(page, "../deploy/nginx.conf") is None
    assert broken(page, "../deploy/nginx.conf#L3") is None
    assert broken(page, "https://c2sp.org/tlog-tiles#anything") is None
    assert broken(page, "../../outside.md") == "../../outside.md: outside the repository"


def test_links_in_code_are_not_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "See [a](a.md) and `[b](b.md)`.\n\n```md\n[c](c.md)\n```\n[d]: d.md\n"
        "A [link\nover two lines](e.md#x).\n"
    )
    assert links(page) == ["a.md", "e.md#x", "d.md"]


@pytest.mark.parametrize(
    ("page", "heading", "at_least"),
    [
        ("docs/deplog-command.md", "## Exit statuses", {0, 1, 2, 5, 6, 7, 69, 78, 130, 141}),
        ("docs/publishers.md", "## Exit codes of deplog publish", {0, 1, 2, 3, 4}),
        ("docs/operators.md", "### When a database cannot be opened", {65, 73, 74, 77}),
    ],
)
def test_the_exit_tables_the_integration_tests_read_are_where_they_look(
    page: str, heading: str, at_least: set[int]
) -> None:
    """The newcomer tests take their documented exits from these tables: a table that moves
    or loses its shape fails here, in the fast lane, before it fails there."""
    assert exit_statuses(ROOT / page, heading) >= at_least


def test_the_publish_exit_codes_agree_with_the_deplog_table() -> None:
    publish = exit_statuses(ROOT / "docs" / "publishers.md", "## Exit codes of deplog publish")
    assert publish <= exit_statuses(ROOT / "docs" / "deplog-command.md", "## Exit statuses")
