"""The explorer in a real headless browser (Debian's Chromium, driven by Playwright).

A real ``authority serve`` process with its embedded witness; notices posted
through its API; the browser clicks from the home page to a notice and runs
the in-browser verification, whose WebCrypto checks are the only oracle of
"verified". Altered responses are made by intercepting the browser's own
requests, so the authority itself stays honest and only the bytes the page
sees change.

Screenshots of every page, at desktop and phone widths, go to
``tests/artifacts/explorer/`` (git-ignored; named in docs/architecture.md, "Tests").

With ``CI=true`` a missing Chromium or Playwright fails these tests; elsewhere
they are skipped with the reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from deplog.client.model.entries import PublisherStatement
from deplog.client.tlog.note import Signer
from tests.explorer_seed import HOSTILE_MESSAGE, Seeded, seed
from tests.integration.harness import AuthorityProcess

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "explorer"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def _browser_missing() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if shutil.which(CHROMIUM) is None:
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    return None


_MISSING = _browser_missing()
if _MISSING is not None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the browser tests: {_MISSING}", pytrace=False)
    pytest.skip(f"BROWSER TESTS NOT RUN: {_MISSING}", allow_module_level=True)

from playwright.async_api import Browser, Page, Route, async_playwright, expect  # noqa: E402

# One authority, one seeding and one browser for the module: the tests only read the log,
# and each gets a fresh browser context (no shared cookies, cache or routes). Slow: Chromium.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@dataclass(frozen=True)
class Explored:
    authority: AuthorityProcess
    seeded: Seeded
    browser: Browser


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def explored(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Explored]:
    publisher = Signer.generate("acme")
    authority = AuthorityProcess(tmp_path_factory.mktemp("explorer") / "authority")
    authority.init()
    authority.add_publisher(publisher, "org.acme")
    authority.start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:

            async def post(body: bytes) -> int:
                async with http.post(
                    authority.url + "/v1/notices",
                    data=body,
                    headers={"Content-Type": "application/json"},
                ) as response:
                    assert response.status == 201, await response.text()
                    return int(response.headers["Deplog-Index"])

            async def append(statement: PublisherStatement) -> int:
                return await asyncio.to_thread(_append_statement, authority, statement)

            seeded = await seed(publisher, post, append)
        async with async_playwright() as p:
            browser = await p.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--headless=new", "--disable-gpu"]
            )
            yield Explored(authority, seeded, browser)
            await browser.close()
    finally:
        authority.stop()


_COMMANDS = {
    "register": "add",
    "add_key": "add-key",
    "revoke_key": "revoke-key",
    "revoke_publisher": "revoke",
}


def _append_statement(authority: AuthorityProcess, statement: PublisherStatement) -> int:
    """The registry change as ``authority publisher ...`` makes it, against the running log."""
    args = ["publisher", _COMMANDS[statement.action], statement.publisher, "--json"]
    args += [f"--namespace={n}" for n in statement.namespaces]
    args += [f"--key={k}" for k in statement.keys]
    done = authority.run_cli(*args)
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["index"])


@pytest.fixture
def seeded(explored: Explored) -> Seeded:
    return explored.seeded


@pytest.fixture
def authority(explored: Explored) -> AuthorityProcess:
    return explored.authority


class Tab:
    """One page of the browser, with every console error and CSP violation it reports."""

    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.url = url
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    async def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
            await self.page.set_viewport_size(size)
            await self.page.screenshot(path=ARTIFACTS / f"{name}-{label}.png", full_page=True)
            overflow = await self.page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{name} scrolls sideways at {label} width"
        await self.page.set_viewport_size(DESKTOP)

    async def verify(self) -> Any:
        """Press the verify button from the keyboard and wait for the verdict."""
        button = self.page.get_by_role("button", name="Verify in my browser")
        await button.focus()
        await self.page.keyboard.press("Enter")
        result = self.page.locator("#verify-result")
        await expect(result).to_have_class("result-verified", timeout=15000)
        return result


@pytest_asyncio.fixture(loop_scope="module")
async def tab(explored: Explored) -> AsyncIterator[Tab]:
    context = await explored.browser.new_context(viewport=DESKTOP)
    yield Tab(await context.new_page(), explored.authority.url)
    await context.close()


async def _verdict(tab: Tab) -> str:
    await tab.page.get_by_role("button", name="Verify in my browser").click()
    result = tab.page.locator("#verify-result")
    await expect(result).to_have_class("result-failed", timeout=15000)
    return await result.inner_text()


@pytest.mark.parametrize(
    ("query", "tool", "which"),
    [
        ("acme/sea", "tool:org.acme/search", "deprecated"),
        ("FETCH", "tool:org.acme/fetch", "revoked"),
        ("org.acme/leg", "tool:org.acme/legacy", "withdrawn"),
    ],
)
async def test_click_through_from_search_to_a_verified_notice(
    tab: Tab, seeded: Seeded, query: str, tool: str, which: str
) -> None:
    page = tab.page
    index = getattr(seeded, which)
    await page.goto(tab.url + "/")
    await page.get_by_label("Search tools, namespaces, publishers").fill(query)
    await page.get_by_label("Search tools, namespaces, publishers").press("Enter")
    await page.get_by_role("link", name=tool, exact=True).click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(tool)
    await tab.screenshot(f"tool-{which}")
    await page.get_by_role("link", name=f"#{index}", exact=True).first.click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(f"Log entry #{index}")
    result = await tab.verify()
    text = await result.inner_text()
    assert "VERIFIED in your browser" in text and "FAILED" not in text
    assert "This checks the entry's bytes (the raw entry below), not the page's summary" in text
    assert "Inclusion proof: entry " + str(index) in text
    assert "Cosignature by witness" in text and "Witness quorum: 1 of 1" in text
    assert "Notice signature by the publisher key acme+" in text
    await tab.screenshot(f"notice-{which}-verified")
    assert tab.errors == []


async def test_the_withdraw_itself_verifies(tab: Tab, seeded: Seeded) -> None:
    await tab.page.goto(f"{tab.url}/notices/{seeded.withdraw}")
    text = await (await tab.verify()).inner_text()
    assert "VERIFIED" in text


async def test_every_page_renders_at_desktop_and_phone_width_without_errors(
    tab: Tab, seeded: Seeded
) -> None:
    for name, path in [
        ("home", "/"),
        ("home-older", "/?before=5"),
        ("search", "/search?q=acme"),
        ("search-all", "/search"),
        ("search-advisory", "/search?q=CVE-2026-4242"),
        ("publishers", "/publishers"),
        ("witnesses", "/witnesses"),
        ("registry-change", "/notices/0"),
    ]:
        await tab.page.goto(tab.url + path)
        await tab.screenshot(name)
    await tab.page.goto(tab.url + "/")
    local = tab.page.locator(".local-time").first
    await expect(local).to_contain_text("your time")
    assert tab.errors == []
    missing = await tab.page.goto(tab.url + "/notices/999")
    assert missing is not None and missing.status == 404
    await tab.screenshot("not-found")


async def test_the_policy_on_the_witnesses_page_names_the_log_and_witness_keys(
    tab: Tab, authority: AuthorityProcess, seeded: Seeded
) -> None:
    await tab.page.goto(tab.url + "/witnesses")
    policy = await tab.page.locator("#policy-text").inner_text()
    assert authority.log_verifier.vkey() in policy
    assert "quorum" in policy and "witness" in policy
    assert "Policy met: 1 of 1" in await tab.page.locator("main").inner_text()


async def test_an_altered_inclusion_proof_is_shown_as_failed(tab: Tab, seeded: Seeded) -> None:
    async def alter(route: Route) -> None:
        response = await route.fetch()
        body = await response.json()
        first = bytearray(base64.b64decode(body["proof"][0]))
        first[0] ^= 1
        body["proof"][0] = base64.b64encode(bytes(first)).decode()
        await route.fulfill(response=response, json=body)

    await tab.page.route("**/v1/proofs/inclusion*", alter)
    await tab.page.goto(f"{tab.url}/notices/{seeded.deprecated}")
    text = await _verdict(tab)
    assert "FAILED: this entry could not be verified" in text
    assert "✗ FAILED: Inclusion proof" in text
    await tab.screenshot("notice-altered-proof")


async def test_an_altered_log_signature_is_shown_as_failed(tab: Tab, seeded: Seeded) -> None:
    async def alter(route: Route) -> None:
        response = await route.fetch()
        text, _, signatures = (await response.text()).rpartition("\n\n")
        lines = signatures.split("\n")
        name, sig = lines[0].rsplit(" ", 1)
        raw = bytearray(base64.b64decode(sig))
        raw[-1] ^= 1
        lines[0] = f"{name} {base64.b64encode(bytes(raw)).decode()}"
        await route.fulfill(response=response, body=text + "\n\n" + "\n".join(lines))

    await tab.page.route("**/checkpoint", alter)
    await tab.page.goto(f"{tab.url}/notices/{seeded.revoked}")
    text = await _verdict(tab)
    assert "✗ FAILED: Checkpoint signature by the log key" in text


async def test_a_log_key_the_reader_does_not_trust_fails(tab: Tab, seeded: Seeded) -> None:
    await tab.page.goto(f"{tab.url}/notices/{seeded.revoked}")
    stranger = Signer.generate("localhost/deplog").verifier().vkey()
    await tab.page.get_by_label("Log key").fill(stranger)
    text = await _verdict(tab)
    assert "✗ FAILED: Checkpoint signature by the log key " + stranger in text


async def test_an_entry_other_than_the_one_shown_fails(tab: Tab, seeded: Seeded) -> None:
    async def swap(route: Route) -> None:
        response = await route.fetch()
        body = await response.json()
        leaf = base64.b64decode(body["entries"][0]).replace(b"acme/fetch", b"acme/fetcx")
        body["entries"][0] = base64.b64encode(leaf).decode()
        await route.fulfill(response=response, json=body)

    await tab.page.route("**/v1/entries*", swap)
    await tab.page.goto(f"{tab.url}/notices/{seeded.revoked}")
    text = await _verdict(tab)
    assert "✗ FAILED: The entry served by the log is the one shown on this page" in text


async def test_markup_in_a_notice_renders_inert_and_the_notice_still_verifies(
    tab: Tab, seeded: Seeded
) -> None:
    page = tab.page
    await page.goto(f"{tab.url}/notices/{seeded.hostile}")
    title = await page.title()
    assert title == f"Entry {seeded.hostile} · deplog"
    assert await page.locator("#injected, #injected-img").count() == 0
    await expect(page.locator(".message")).to_have_text(HOSTILE_MESSAGE)
    await page.goto(f"{tab.url}/tools/tool:org.acme/markup")
    assert await page.locator("#injected, #injected-img").count() == 0
    await page.goto(f"{tab.url}/notices/{seeded.hostile}")
    assert "VERIFIED" in await (await tab.verify()).inner_text()
    assert await page.title() == title
    await tab.screenshot("notice-markup-inert")
    assert tab.errors == []


class ExtraCosigners:
    """Two more witnesses for the browser: one signing like litewitness (Ed25519 over the
    first three lines only) and an ML-DSA-44 one; ``add`` cosigns a served note."""

    def __init__(self) -> None:
        from deplog.client.tlog.cosignature import cosigner

        self.lite = cosigner(Signer.generate("lite.witness.test/w1"))
        self.pq = Signer.generate("pq.witness.test/w1", 0x06)

    def add(self, note: bytes) -> bytes:
        from deplog.client.tlog.cosignature import cosign
        from deplog.client.tlog.note import NoteSignature, add_signature_lines, cosigned_message

        text = note[: note.rindex(b"\n\n") + 1]
        three = b"".join(line + b"\n" for line in text.split(b"\n")[:3])
        assert three != text  # the checkpoint carries its map line
        when = 1_767_225_600
        signature = self.lite.sign(cosigned_message(three, when))
        lite = NoteSignature(self.lite.name, self.lite.key_id, when.to_bytes(8, "big") + signature)
        return add_signature_lines(note, lite, cosign(text.decode(), self.pq, when))

    def box_lines(self, tree_lines: bool) -> list[str]:
        lite = self.lite.verifier().vkey() + (" tree-lines" if tree_lines else "")
        return [lite, self.pq.verifier().vkey()]


async def _verify_with_extra_cosigners(tab: Tab, index: int, tree_lines: bool, quorum: int) -> str:
    extra = ExtraCosigners()

    async def add(route: Route) -> None:
        response = await route.fetch()
        await route.fulfill(response=response, body=extra.add(await response.body()))

    await tab.page.route("**/checkpoint", add)
    await tab.page.goto(f"{tab.url}/notices/{index}")
    box = tab.page.locator("#witness-keys")
    embedded = (await box.input_value()).strip()
    await box.fill("\n".join([embedded, *extra.box_lines(tree_lines)]))
    await tab.page.locator("#verification").evaluate(
        f"(el) => {{ el.dataset.quorum = '{quorum}'; }}"
    )
    await tab.page.get_by_role("button", name="Verify in my browser").click()
    result = tab.page.locator("#verify-result")
    await expect(result).not_to_have_class("", timeout=15000)
    await expect(result.locator(".banner")).not_to_have_text("Verifying…", timeout=15000)
    return await result.inner_text()


async def test_a_tree_lines_witness_verifies_and_an_mldsa_one_is_said_unchecked(
    tab: Tab, seeded: Seeded
) -> None:
    text = await _verify_with_extra_cosigners(tab, seeded.deprecated, True, 2)
    assert "VERIFIED in your browser" in text and "FAILED" not in text
    assert "over the tree lines only: origin, size and root, not the extension lines" in text
    assert "ML-DSA-44 cosignature by witness pq.witness.test/w1+" in text
    assert "cannot be checked in the browser (WebCrypto has no ML-DSA)" in text
    assert "Witness quorum: 2 of 2 required (counting only cosignatures checked in this " in text
    assert "1 ML-DSA-44 not checked" in text
    await tab.screenshot("notice-tree-lines-and-ml-dsa")
    assert tab.errors == []


async def test_the_mldsa_cosignature_does_not_count_toward_the_quorum(
    tab: Tab, seeded: Seeded
) -> None:
    text = await _verify_with_extra_cosigners(tab, seeded.deprecated, True, 3)
    assert "✗ FAILED: Witness quorum: 2 of 3 required" in text


async def test_a_three_line_cosignature_without_tree_lines_fails(tab: Tab, seeded: Seeded) -> None:
    text = await _verify_with_extra_cosigners(tab, seeded.deprecated, False, 1)
    assert "✗ FAILED: bad cosignature by lite.witness.test/w1" in text


async def test_every_entry_kind_has_a_page(tab: Tab, seeded: Seeded) -> None:
    actions = ("register", "add-key", "revoke-key", "revoke-publisher")
    for index, name in zip(seeded.registry, actions, strict=True):
        await tab.page.goto(f"{tab.url}/notices/{index}")
        await expect(tab.page.get_by_role("heading", level=2).first).to_contain_text(
            f"Registry change: {name.replace('-', ' ')} publisher beta"
        )
        await tab.screenshot(f"entry-{name}")
    assert tab.errors == []


async def test_the_tool_page_leads_with_the_range_row(tab: Tab, seeded: Seeded) -> None:
    await tab.page.goto(f"{tab.url}/tools/tool:org.acme/weather")
    rows = tab.page.locator("table.status tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0).locator("th")).to_have_text("2.3.1")
    await expect(rows.nth(0).locator(".badge")).to_have_text("deprecated")
    await expect(rows.nth(1).locator("th")).to_have_text("1.0.0 up to 2.0.0 (not included)")
    await expect(rows.nth(1).locator(".badge")).to_have_text("revoked")
    await expect(rows.nth(1)).to_contain_text("CVE-2026-4242")
    await tab.screenshot("tool-ranged")
    assert tab.errors == []


async def test_search_results_carry_status_badges(tab: Tab, seeded: Seeded) -> None:
    await tab.page.goto(f"{tab.url}/search?q=org.acme")
    fetch = tab.page.locator("ul.results li").filter(has_text="tool:org.acme/fetch")
    await expect(fetch.locator(".badge")).to_have_text("revoked")
    await tab.page.goto(f"{tab.url}/search?q=tool:org.acme/fetch")
    await expect(tab.page.get_by_role("heading", level=1)).to_have_text("tool:org.acme/fetch")


_PHONE_LAYOUT = """() => {
  const size = (sel) => {
    const el = document.querySelector(sel);
    return el ? parseFloat(getComputedStyle(el).fontSize) : 0;
  };
  const hidden = [];
  for (const cell of document.querySelectorAll("table td, table th")) {
    const box = cell.getBoundingClientRect();
    if (box.width && box.right > document.documentElement.clientWidth + 1) {
      hidden.push(cell.textContent.trim().slice(0, 40));
    }
  }
  const tallest = Math.max(0, ...Array.from(document.querySelectorAll("td time.when"),
    (t) => t.getBoundingClientRect().height / parseFloat(getComputedStyle(t).lineHeight)));
  return { h1: size("h1"), h2: size("h2"), body: size("main p"), hidden, tallest };
}"""


async def test_at_phone_width_titles_lead_and_no_column_or_date_is_lost(
    tab: Tab, seeded: Seeded
) -> None:
    await tab.page.set_viewport_size(PHONE)
    for path in (
        "/",
        "/witnesses",
        "/tools/tool:org.acme/weather",
        "/search?q=acme",
        "/publishers",
    ):
        await tab.page.goto(tab.url + path)
        layout = await tab.page.evaluate(_PHONE_LAYOUT)
        assert layout["h1"] > layout["h2"] > layout["body"], (path, layout)
        assert layout["hidden"] == [], (path, layout)
        assert layout["tallest"] < 2.5, (path, layout)


async def test_sunset_wears_the_refusal_colour(tab: Tab, seeded: Seeded) -> None:
    await tab.page.goto(tab.url + "/")
    colours = await tab.page.evaluate(
        """() => ["sunset", "revoked", "deprecated"].map((s) => {
          const el = document.createElement("span");
          el.className = "badge badge-" + s;
          document.body.append(el);
          return getComputedStyle(el).color;
        })"""
    )
    assert colours[0] == colours[1] != colours[2]


async def test_a_malformed_witness_key_is_named_by_its_line(tab: Tab, seeded: Seeded) -> None:
    await tab.page.goto(f"{tab.url}/notices/{seeded.revoked}")
    box = tab.page.locator("#witness-keys")
    await box.fill((await box.input_value()).strip() + "\nnot-a-key")
    text = await _verdict(tab)
    assert "✗ FAILED: the witness key on line 2: malformed verifier key" in text
