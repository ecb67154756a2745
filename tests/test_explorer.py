"""The explorer over plain HTTP: every page from the real app, without JavaScript.

The app is the authority's own (``build_app``) on a real log, with notices posted
through ``POST /v1/notices``; the tests of what the pages read from the log (checkpoint,
tools, notices, search, publishers, what does not exist) run on SQLite and on
PostgreSQL, those of headers, markup and assets on SQLite; the HTML is read with the
standard library's parser, so "inert" means "no such element", not "no such
substring".
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.authority.explorer.config import ExplorerConfig, parse_prefix
from deplog.authority.explorer.render import CONTENT_SECURITY_POLICY, load_assets
from deplog.authority.http.limits import Rate
from deplog.client.cli.main import main as deplog_main
from deplog.client.model import canonical
from deplog.client.model.entries import PublisherStatement
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, notices, serving_log
from tests.conftest import migrated
from tests.explorer_seed import HOSTILE_MESSAGE, Seeded, registry_changes, seed

JSON_TYPE = {"Content-Type": "application/json"}


class Page(HTMLParser):
    """The parts of a page the tests look at: elements, attributes, scripts, text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self.text: list[str] = []
        self._in_script = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.script_text if self._in_script else self.text).append(data)

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.tags if a.get("id")}

    def links(self) -> list[str]:
        return [a["href"] or "" for t, a in self.tags if t == "a" and a.get("href")]

    @property
    def all_text(self) -> str:
        return " ".join(" ".join(self.text).split())


@dataclass
class Site:
    client: TestClient[object, object]
    admin: TestClient[object, object]
    seeded: Seeded
    publisher: Signer
    log_key: Signer

    async def get(self, path: str, status: int = 200) -> tuple[Page, dict[str, str]]:
        response = await self.client.get(path)
        body = await response.text()
        assert response.status == status, body
        return Page(body), dict(response.headers)

    async def post_notice(self, body: bytes) -> int:
        response = await self.client.post("/v1/notices", data=body, headers=JSON_TYPE)
        assert response.status == 201, await response.text()
        return int(response.headers["Deplog-Index"])

    async def append_statement(self, statement: PublisherStatement) -> int:
        body = canonical.dumps(statement.to_json())
        response = await self.admin.post("/admin/publishers", data=body)
        assert response.status == 201, await response.text()
        return int((await response.json())["index"])


async def _site(tmp_path: Path, db_url: str | None = None, **config: object) -> AsyncIterator[Site]:
    async with serving_log(tmp_path, "explorer.test/log", db_url=db_url, **config) as served:
        site = Site(
            served.client, served.admin, Seeded(0, 0, 0, 0, 0), served.publisher, served.log_key
        )
        site.seeded = await seed(served.publisher, site.post_notice, site.append_statement)
        yield site


@pytest.fixture
async def site(tmp_path: Path, authority_db: str | None) -> AsyncIterator[Site]:
    """The seeded site; on PostgreSQL for the tests marked ``both_backends``."""
    async for s in _site(tmp_path, None if authority_db is None else migrated(authority_db)):
        yield s


PAGES = ["/", "/search?q=acme", "/tools/tool:org.acme/search", "/notices/1", "/publishers"]


@pytest.mark.parametrize("path", [*PAGES, "/witnesses", "/notices/999", "/tools/tool:org.x/none"])
async def test_every_page_and_error_page_sends_the_strict_headers(site: Site, path: str) -> None:
    response = await site.client.get(path)
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY


@pytest.mark.parametrize("path", PAGES)
async def test_pages_carry_no_inline_script_or_style(site: Site, path: str) -> None:
    page, _ = await site.get(path)
    scripts = [a for t, a in page.tags if t == "script"]
    assert scripts and all(a.get("src") for a in scripts)
    assert not "".join(page.script_text).strip()
    for tag, attrs in page.tags:
        assert tag != "style"
        assert "style" not in attrs
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)


@pytest.mark.both_backends
async def test_home_shows_the_checkpoint_and_the_latest_entries(site: Site) -> None:
    page, _ = await site.get("/")
    text = page.all_text
    assert f"Tree size {site.seeded.ranged + 2}" in text
    assert "explorer.test/log" in text
    assert "/notices/5" in page.links() and "/notices/0" not in page.links()
    assert "/tools/tool%3Aorg.acme/markup" in page.links()
    assert "No witnesses are configured" in text
    assert any(t == "polyline" for t, _ in page.tags)


@pytest.mark.both_backends
async def test_tool_page_shows_status_dates_replacement_and_its_notices(site: Site) -> None:
    page, _ = await site.get("/tools/tool:org.acme/search")
    text = page.all_text
    assert "deprecated" in text
    assert "2026-01-01 00:00:00 UTC" in text  # effective, rendered server-side in UTC
    assert "2027-06-01 00:00:00 UTC" in text  # sunset
    assert "tool:org.acme/search 2.0.0" in text  # the replacement, a link to its tool
    assert "sha256:" + "ab" * 32 in text
    assert "deplog check tool:org.acme/search 1.0.0" in text
    assert "/v1/tools/tool%3Aorg.acme/search" in page.links()
    assert "/v1/tools/tool%3Aorg.acme/search/proof" in page.links()
    assert f"/notices/{site.seeded.deprecated}" in page.links()


async def test_tool_page_shows_an_offline_check_that_verifies_the_proof_it_links(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, _ = await site.get("/tools/tool:org.acme/search")
    shown = re.search(
        r'curl -s "(\S+)(/v1/tools/\S+/proof)" \| '
        r"deplog audit status --log-key '(\S+)' - (\S+) (\S+)",
        page.all_text,
    )
    assert shown is not None
    origin, path, log_key, tool_id, version = shown.groups()
    assert origin == str(site.client.make_url("")).rstrip("/")
    assert log_key == site.log_key.verifier().vkey()
    response = await site.client.get(path)
    assert response.status == 200
    proof = tmp_path / "proof.json"
    proof.write_bytes(await response.read())
    assert deplog_main(["audit", "status", "--log-key", log_key, str(proof), tool_id, version]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {tool_id} {version}: deprecated")


@pytest.mark.both_backends
async def test_tool_page_marks_a_revoked_version_with_its_advisory(site: Site) -> None:
    page, _ = await site.get("/tools/tool:org.acme/fetch")
    assert "revoked" in page.all_text and "CVE-2026-1234" in page.all_text


@pytest.mark.both_backends
async def test_tool_page_names_the_withdraw_behind_a_withdrawn_notice(site: Site) -> None:
    page, _ = await site.get("/tools/tool:org.acme/legacy")
    text = page.all_text
    assert "withdrawn" in text and "active" in text
    assert f"/notices/{site.seeded.withdraw}" in page.links()


@pytest.mark.both_backends
async def test_notice_page_decodes_the_notice_and_names_its_signing_key(site: Site) -> None:
    page, _ = await site.get(f"/notices/{site.seeded.revoked}")
    text = page.all_text
    assert "tool:org.acme/fetch" in text and "security" in text
    assert site.publisher.verifier().vkey() in text
    section = next(a for t, a in page.tags if a.get("id") == "verification")
    assert section["data-index"] == str(site.seeded.revoked)
    assert section["data-publisher-key"] == site.publisher.verifier().vkey()
    log_key = next(a for t, a in page.tags if a.get("id") == "log-key")
    assert log_key["value"] == site.log_key.verifier().vkey()


@pytest.mark.both_backends
async def test_notice_page_of_a_registry_change_shows_the_statement(site: Site) -> None:
    page, _ = await site.get("/notices/0")
    assert "Registry change: register publisher" in page.all_text
    assert site.publisher.verifier().vkey() in page.all_text


async def test_every_entry_kind_has_a_page(site: Site) -> None:
    register, add_key, revoke_key, revoke_publisher = site.seeded.registry
    for index, action in [
        (register, "register"),
        (add_key, "add key"),
        (revoke_key, "revoke key"),
        (revoke_publisher, "revoke publisher"),
    ]:
        page, _ = await site.get(f"/notices/{index}")
        assert f"Registry change: {action} publisher beta" in page.all_text
        assert "/publishers#publisher-beta" in page.links()
    for index in (site.seeded.deprecated, site.seeded.revoked, site.seeded.withdraw):
        page, _ = await site.get(f"/notices/{index}")
        assert "notice for tool:org.acme/" in page.all_text


async def _every_page_of_a_log(directory: Path, drawn: list[dict[str, Any]]) -> None:
    async with serving_log(directory, "explorer.test/log") as served:
        site = Site(
            served.client, served.admin, Seeded(0, 0, 0, 0, 0), served.publisher, served.log_key
        )
        for statement in registry_changes():
            await site.append_statement(statement)
        tools = set()
        for sequence, obj in enumerate(drawn, 1):
            tool = "tool:org.acme/" + obj["tool_id"].split("/")[1]
            fields = dict.fromkeys(("affected", "sunset_at", "withdraws"))
            fields |= {
                k: v
                for k, v in obj.items()
                if k not in ("tool_id", "publisher", "sequence", "issued_at")
            }
            body = canonical.dumps(
                make_envelope(site.publisher, sequence, tool=tool, **fields).to_json()
            )
            response = await site.client.post("/v1/notices", data=body, headers=JSON_TYPE)
            assert response.status in (201, 400, 409, 422), await response.text()
            tools.add(tool)
        checkpoint = await (await site.client.get("/checkpoint")).text()
        size = int(checkpoint.split("\n")[1])
        for path in [f"/notices/{i}" for i in range(size)] + [f"/tools/{t}" for t in tools]:
            response = await site.client.get(path)
            assert response.status in (200, 404), path
            assert response.content_type == "text/html"


@pytest.mark.slow  # an authority app per example
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(drawn=st.lists(notices(), min_size=1, max_size=6))
def test_every_entry_of_a_random_log_has_a_page(
    tmp_path_factory: pytest.TempPathFactory, drawn: list[dict[str, Any]]
) -> None:
    asyncio.run(_every_page_of_a_log(tmp_path_factory.mktemp("random"), drawn))


async def test_a_revoked_publishers_keys_show_as_revoked(site: Site) -> None:
    page, _ = await site.get("/publishers")
    beta = page.all_text.split("beta revoked", 1)[1]
    assert "active" not in beta and beta.count("revoked") >= 3


def _edit_database(tmp_path: Path, *statements: str) -> None:
    """Change the log's SQLite file behind the authority's back, as a fault would."""
    conn = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


async def test_a_page_that_fails_is_an_html_500_page(site: Site, tmp_path: Path) -> None:
    _edit_database(tmp_path, "UPDATE registry SET state = '{'")
    page, headers = await site.get("/publishers", status=500)
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert "Error 500" in page.all_text and "internal" in page.all_text


async def test_a_corrupt_entry_is_an_html_503_page(site: Site, tmp_path: Path) -> None:
    _edit_database(
        tmp_path,
        "DROP TRIGGER leaves_append_only_update",
        f"UPDATE leaves SET data = X'00' WHERE idx = {site.seeded.revoked}",
    )
    page, headers = await site.get(f"/notices/{site.seeded.revoked}", status=503)
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert "storage_corrupt" in page.all_text


async def test_markup_in_a_notice_message_renders_as_text(site: Site) -> None:
    for path in (f"/notices/{site.seeded.hostile}", "/tools/tool:org.acme/markup"):
        page, _ = await site.get(path)
        assert "injected" not in page.ids() and "injected-img" not in page.ids()
        assert [t for t, _ in page.tags].count("script") == 1  # the explorer's own
        assert not any(t in ("b", "img") for t, _ in page.tags)
    page, _ = await site.get(f"/notices/{site.seeded.hostile}")
    assert HOSTILE_MESSAGE in " ".join(page.text)


@pytest.mark.both_backends
async def test_search_matches_any_part_of_a_tool_id_or_namespace(site: Site) -> None:
    page, _ = await site.get("/search?q=ACME/SE")
    assert "/tools/tool%3Aorg.acme/search" in page.links()
    assert "/tools/tool%3Aorg.acme/fetch" not in page.links()
    page, _ = await site.get("/search?q=org.acme")
    tools = [link for link in page.links() if link.startswith("/tools/")]
    assert len(tools) == 5


@pytest.mark.both_backends
async def test_search_by_a_namespace_prefix_lists_exactly_its_tools(site: Site) -> None:
    page, _ = await site.get("/search?q=tool:org.acme/")
    tools = sorted(link for link in page.links() if link.startswith("/tools/"))
    assert tools == [
        f"/tools/tool%3Aorg.acme/{name}"
        for name in ("fetch", "legacy", "markup", "search", "weather")
    ]
    page, _ = await site.get("/search?q=tool:org.acme/sea")
    assert [link for link in page.links() if link.startswith("/tools/")] == [
        "/tools/tool%3Aorg.acme/search"
    ]
    page, _ = await site.get("/search?q=tool:org.acmf")
    assert not [link for link in page.links() if link.startswith("/tools/")]


@pytest.mark.both_backends
async def test_search_finds_a_publisher_and_links_its_namespaces(site: Site) -> None:
    page, _ = await site.get("/search?q=acm")
    assert "/publishers#publisher-acme" in page.links()
    assert "/search?q=tool%3Aorg.acme/" in page.links()


async def test_search_results_carry_each_tools_worst_status(site: Site) -> None:
    page, _ = await site.get("/search?q=org.acme")
    items = page.all_text.split("Tools ", 1)[1]
    assert "revoked tool:org.acme/fetch" in items
    assert "deprecated tool:org.acme/search" in items
    assert "revoked tool:org.acme/weather" in items  # its revoked range outranks 2.3.1


async def test_an_exact_tool_id_goes_straight_to_the_tool(site: Site) -> None:
    response = await site.client.get("/search?q=TOOL:org.acme/search", allow_redirects=False)
    assert response.status == 302
    assert response.headers["Location"] == "/tools/tool:org.acme/search"


async def test_an_advisory_id_finds_the_notices_that_name_it(site: Site) -> None:
    for query in ("ghsa-2345-6789-cfgh", "CVE-2026-4242"):
        page, _ = await site.get(f"/search?q={query}")
        assert f"/notices/{site.seeded.ranged}" in page.links()
        assert "/tools/tool%3Aorg.acme/weather" in page.links()
        assert f"/notices/{site.seeded.revoked}" not in page.links()


async def test_an_empty_search_lists_every_tool(site: Site) -> None:
    page, _ = await site.get("/search?q=")
    tools = [link for link in page.links() if link.startswith("/tools/")]
    assert len(tools) == 5 and "Every tool" in page.all_text


async def test_one_search_box_carries_the_query(site: Site) -> None:
    page, _ = await site.get("/search?q=acme")
    boxes = [a for t, a in page.tags if t == "input" and a.get("type") == "search"]
    assert len(boxes) == 1 and boxes[0]["value"] == "acme"


async def test_the_home_page_pages_back_through_the_log(site: Site) -> None:
    page, _ = await site.get("/")
    older = [link for link in page.links() if link.startswith("/?before=")]
    assert older == [f"/?before={site.seeded.ranged + 2 - 10}"]
    page, _ = await site.get(older[0])
    assert "/notices/0" in page.links() and "/notices/2" not in page.links()
    assert "/" in page.links()  # back to the newest


async def test_home_rows_badge_each_action_and_link_its_publisher_or_tool(site: Site) -> None:
    page, _ = await site.get("/?before=5")
    classes = {a.get("class") for t, a in page.tags if t == "span"}
    assert {"badge badge-revoke_publisher", "badge badge-add_key"} <= classes
    assert "/publishers#publisher-beta" in page.links()


async def test_the_growth_chart_has_axes_and_labels(site: Site) -> None:
    page, _ = await site.get("/")
    assert [t for t, a in page.tags if t == "line" and a.get("class") == "axis"] == ["line"] * 2
    assert "checkpoint signed at (UTC)" in page.all_text and "entries" in page.all_text


async def test_a_tool_page_leads_with_every_version_and_range_row(site: Site) -> None:
    page, _ = await site.get("/tools/tool:org.acme/weather")
    text = page.all_text
    assert text.index("Status of every version and range") < text.index("Check it yourself")
    assert "1.0.0 up to 2.0.0 (not included) revoked" in text and "2.3.1 deprecated" in text
    assert "/search?q=CVE-2026-4242" in page.links() and "Upgrade to 2.3.1 at least." in text
    assert "/tools/tool%3Aorg.acme/weather" in page.links()  # the replacement


async def test_a_tools_notices_are_paged(site: Site) -> None:
    indexes = []
    for n in range(26):
        body = make_envelope(site.publisher, 200 + n, tool="tool:org.acme/busy").to_json()
        indexes.append(await site.post_notice(canonical.dumps(body)))
    first, _ = await site.get("/tools/tool:org.acme/busy")
    assert f"?after={indexes[24]}" in first.links() and "?" not in first.links()
    later, _ = await site.get(f"/tools/tool:org.acme/busy?after={indexes[24]}")
    rows = [sum(1 for t, _ in page.tags if t == "tr") for page in (first, later)]
    assert rows == [1 + 1 + 1 + 25, 1 + 1 + 1 + 1]  # headers, the one version row, notices
    assert "?" in later.links() and not any("after=" in link for link in later.links())


@pytest.mark.both_backends
async def test_search_results_are_paged(site: Site) -> None:
    for n in range(30):
        await site.post_notice(
            canonical.dumps(
                make_envelope(site.publisher, 100 + n, tool=f"tool:org.acme/bulk{n:02d}").to_json()
            )
        )
    first, _ = await site.get("/search?q=bulk")
    second, _ = await site.get("/search?q=bulk&page=2")
    first_tools = [link for link in first.links() if link.startswith("/tools/")]
    second_tools = [link for link in second.links() if link.startswith("/tools/")]
    assert len(first_tools) == 25 and len(second_tools) == 5
    assert not set(first_tools) & set(second_tools)
    assert "/search?q=bulk&page=2" in first.links()
    assert "/search?q=bulk&page=1" in second.links()
    assert not any("page=3" in link for link in second.links())


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "path",
    [
        "/tools/tool:org.acme/never-named",
        "/notices/12",
        "/?before=12",
        "/?before=0",
        "/tools/tool:org.acme/search?page=0",
        "/tools/tool:org.acme/search?page=2",
        "/tools/tool:org.acme/search?after=x",
        "/notices/99999999999999999999",
        "/notices/01",
        "/notices/-1",
        "/notices/abc",
        "/search?q=a&page=0",
        "/search?q=a&page=101",
        "/search?q=a&page=x",
        "/assets/nope.js",
    ],
)
async def test_what_does_not_exist_is_a_404_page_with_a_stable_code(site: Site, path: str) -> None:
    page, _ = await site.get(path, status=404)
    assert "not_found" in page.all_text


@pytest.mark.parametrize(
    "path", ["/search?q=acme&q=x", "/search?q=acme&page=1&page=2", "/assets/{asset}?v=1&v=1"]
)
async def test_a_repeated_query_parameter_is_refused_as_the_api_refuses_it(
    site: Site, path: str
) -> None:
    asset = next(iter(load_assets()))
    page, _ = await site.get(path.format(asset=asset), status=400)
    assert "repeated_parameter" in page.all_text and "acme" not in page.all_text


async def test_a_malformed_tool_id_is_refused_with_its_code_and_not_echoed(site: Site) -> None:
    page, _ = await site.get("/tools/not-a-tool<i>x</i>", status=400)
    assert "not-a-tool" not in page.all_text and "i" not in [t for t, _ in page.tags]


@pytest.mark.both_backends
async def test_publishers_page_lists_keys_with_their_registry_indexes(site: Site) -> None:
    page, _ = await site.get("/publishers")
    assert "publisher-acme" in page.ids()
    assert site.publisher.verifier().vkey() in page.all_text
    assert "/notices/0" in page.links()


async def test_witnesses_page_without_witnesses_says_there_is_no_policy(site: Site) -> None:
    page, _ = await site.get("/witnesses")
    assert "no witnesses" in page.all_text
    assert site.log_key.verifier().vkey() in page.all_text


async def test_assets_named_by_digest_are_cached_for_a_year(site: Site) -> None:
    page, _ = await site.get("/")
    for tag, attr in (("script", "src"), ("link", "href")):
        url = next(a[attr] for t, a in page.tags if t == tag and a.get(attr))
        assert url is not None and "?v=" in url
        response = await site.client.get(url)
        assert response.status == 200
        assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        stale = await site.client.get(url.split("?")[0] + "?v=0000")
        assert stale.headers["Cache-Control"] == "public, max-age=300"


@pytest.mark.both_backends
async def test_a_new_checkpoint_is_shown_at_once_despite_the_render_cache(site: Site) -> None:
    before, _ = await site.get("/")
    index = await site.post_notice(
        canonical.dumps(make_envelope(site.publisher, 50, tool="tool:org.acme/fresh").to_json())
    )
    after, _ = await site.get("/")
    assert f"/notices/{index}" in after.links()
    assert f"/notices/{index}" not in before.links()


async def test_explorer_pages_share_the_per_address_rate_limit_setting(tmp_path: Path) -> None:
    async for site in _site(tmp_path, address_rate=Rate(0.01, 7)):
        # The seeding took 7 of the submission bucket; the explorer has its own of the same size.
        for _ in range(7):
            await site.get("/")
        response = await site.client.get("/publishers")
        assert response.status == 429
        assert int(response.headers["Retry-After"]) >= 1
        assert "rate_limited" in Page(await response.text()).all_text


async def test_the_explorer_mounts_under_a_prefix(tmp_path: Path) -> None:
    async for site in _site(tmp_path, explorer=ExplorerConfig(prefix="/explore")):
        page, _ = await site.get("/explore/")
        assert "/explore/notices/5" in page.links()
        assert "/explore/search" in page.links()
        await site.get("/explore/tools/tool:org.acme/search")
        root = await site.client.get("/")
        assert root.status == 404 and root.content_type == "application/json"


async def test_the_explorer_can_be_turned_off(tmp_path: Path) -> None:
    async for site in _site(tmp_path, explorer=ExplorerConfig(enabled=False)):
        assert (await site.client.get("/")).status == 404
        assert (await site.client.get("/checkpoint")).status == 200


@pytest.mark.parametrize("prefix", ["/v1", "/checkpoint/x", "/tile", "/admin", "explore", "/A"])
def test_a_prefix_that_could_capture_an_api_path_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        parse_prefix(prefix)


def test_the_cosigners_table_names_each_type_and_a_tree_lines_cosignature() -> None:
    from deplog.authority.explorer import pages
    from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
    from deplog.client.tlog.cosignature import cosign, cosigner
    from deplog.client.tlog.note import NoteSignature, add_signature_lines, cosigned_message

    log = Signer.generate("x.example/log")
    lite = cosigner(Signer.generate("lite.example"))
    pq = Signer.generate("pq.example", 0x06)
    checkpoint = Checkpoint("x.example/log", 3, bytes(32), ("deplog-map/v1 " + "A" * 43 + "=",))
    text = checkpoint.to_text()
    three = "".join(line + "\n" for line in text.split("\n")[:3]).encode()
    lite_line = NoteSignature(
        lite.name, lite.key_id, (100).to_bytes(8, "big") + lite.sign(cosigned_message(three, 100))
    )
    note = add_signature_lines(sign_checkpoint(checkpoint, log), lite_line, cosign(text, pq, 100))
    served = pages.Served(
        note, 3, 100.0, log.verifier(), (lite.verifier(), pq.verifier()), 2, (lite.verifier(),)
    )
    view = pages.checkpoint_view(served, 200.0)
    shown = [(c["name"], c["algorithm"], c["statement"]) for c in view["cosigners"]]
    assert shown == [
        ("lite.example", "ed25519", "tree_lines"),
        ("pq.example", "ml-dsa-44", "tree_lines"),
    ]
    assert view["policy_met"]
    policy = served.policy()
    assert policy is not None and "#deplog: tree-lines lite.example\n" in policy.to_text()
