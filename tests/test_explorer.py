"""The explorer over plain HTTP: every page from the real app, without JavaScript.

The app is the authority's own (``build_app``) on a real log, with notices posted
through ``POST /v1/notices``; the tests of what the pages read from the log (checkpoint,
tools, notices, search, publishers, what does not exist) run on SQLite and on
PostgreSQL, those of headers, markup and assets on SQLite; the HTML is read with the
standard library's parser, so "inert" means "no such element", not "no such
substring".
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from deplog.authority.explorer.config import ExplorerConfig, parse_prefix
from deplog.authority.explorer.render import CONTENT_SECURITY_POLICY, load_assets
from deplog.authority.http.limits import Rate
from deplog.client.cli.main import main as deplog_main
from deplog.client.model import canonical
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, serving_log
from tests.conftest import migrated
from tests.explorer_seed import HOSTILE_MESSAGE, Seeded, seed

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


async def _site(tmp_path: Path, db_url: str | None = None, **config: object) -> AsyncIterator[Site]:
    async with serving_log(tmp_path, "explorer.test/log", db_url=db_url, **config) as served:
        site = Site(served.client, Seeded(0, 0, 0, 0, 0), served.publisher, served.log_key)
        site.seeded = await seed(served.publisher, site.post_notice)
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
    assert f"Tree size {site.seeded.hostile + 1}" in text
    assert "explorer.test/log" in text
    assert "/notices/5" in page.links() and "/notices/0" in page.links()
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
    assert "tool:org.acme/search@2.0.0" in text
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
        r'curl -s "\$AUTHORITY(/v1/tools/\S+/proof)" \| '
        r"deplog audit status --log-key '(\S+)' - (\S+) (\S+)",
        page.all_text,
    )
    assert shown is not None
    path, log_key, tool_id, version = shown.groups()
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
    assert len(tools) == 4


@pytest.mark.both_backends
async def test_search_by_a_namespace_prefix_lists_exactly_its_tools(site: Site) -> None:
    page, _ = await site.get("/search?q=tool:org.acme/")
    tools = sorted(link for link in page.links() if link.startswith("/tools/"))
    assert tools == [
        f"/tools/tool%3Aorg.acme/{name}" for name in ("fetch", "legacy", "markup", "search")
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
        "/notices/6",
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
    async for site in _site(tmp_path, address_rate=Rate(0.01, 6)):
        # The seeding took 5 of the submission bucket; the explorer has its own of the same size.
        for _ in range(6):
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
