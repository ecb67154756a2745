"""No single entry stops or fools a verifier (docs/fold-spec.md 3.1), against real processes.

Raw leaves the authority would never admit are written into its SQLite file behind its
back (an unauthorized notice, bytes that are no entry, a notice that is not canonical).
Then, each a real process: the authority starts, folds them as every verifier does and
goes on appending; a follower, the auditor and a map-verifying witness go on past them
too, and all of them agree on the map root the authority signs: the follower accepts the
checkpoint's line, the witness cosigns it, ``deplog audit map`` matches it. The tools the
entries name are ``unknown`` everywhere; every other tool is served as before.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deplog.authority.storage.tree import StoredHashTree
from deplog.client.tlog.keyfile import key_file_name
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope, notice_leaf
from tests.integration.harness import ORIGIN, AuthorityProcess, deplog, map_witness

pytestmark = pytest.mark.slow

SERVED = "tool:org.acme/search"
FORGED = "tool:org.acme/fetch"  # an unauthorized revoke names it
MANGLED = "tool:org.acme/mangled"  # a notice whose leaf is not canonical names it


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url + "/v1/notices", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=30) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


@dataclass
class InjectedLog:
    """An authority serving a log with three invalid entries at ``invalid``."""

    authority: AuthorityProcess
    invalid: tuple[int, ...]
    log_key: Path


def inject(db: Path, leaves: list[bytes]) -> list[int]:
    """Append raw leaves to the log's tree in its SQLite file, as a bug or an intruder
    would: no admission, no notices row, no map fold. Their indexes."""
    import sqlite3

    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        tree = StoredHashTree(conn)
        start = tree.size
        for leaf in leaves:
            tree.append_entry(leaf)
        conn.execute("COMMIT")
        return list(range(start, start + len(leaves)))
    finally:
        conn.close()


@pytest.fixture
def injected(
    authority_files: AuthorityProcess, publisher: Signer, tmp_path: Path
) -> Iterator[InjectedLog]:
    authority = authority_files
    authority.start()
    assert post(authority.url, make_envelope(publisher, 1, tool=SERVED).canonical_bytes()) == 201
    authority.stop()
    impostor = Signer.generate(publisher.name)
    unauthorized = notice_leaf(
        make_envelope(impostor, 2, tool=FORGED, action="revoke", reasons=["other"], sunset_at=None)
    )
    spaced = notice_leaf(make_envelope(publisher, 3, tool=MANGLED)).replace(b'{"', b'{ "', 1)
    invalid = inject(authority.data / "log.db", [unauthorized, b"\x00not an entry", spaced])
    authority.start()
    try:
        assert post(authority.url, make_envelope(publisher, 4, tool=SERVED).canonical_bytes())
        yield InjectedLog(
            authority, tuple(invalid), authority.keys / f"{key_file_name(ORIGIN)}.pub"
        )
    finally:
        authority.stop()


def test_the_authority_starts_folds_them_reports_them_and_appends_on(
    injected: InjectedLog,
) -> None:
    url = injected.authority.url
    health = get_json(url + "/healthz")
    assert health["status"] == "ok"
    report = health["invalid_entries"]
    assert isinstance(report, dict) and report["count"] == 3
    assert [(e["index"], e["code"], e["tool_id"]) for e in report["first"]] == [
        (injected.invalid[0], "unauthorized_notice", FORGED),
        (injected.invalid[1], "bad_leaf", None),
        (injected.invalid[2], "bad_leaf", MANGLED),
    ]
    forged = get_json(url + "/v1/tools/" + FORGED)
    assert forged["invalid"] == [injected.invalid[0]]
    served = get_json(url + "/v1/tools/" + SERVED)
    assert served["invalid"] == [] and len(served["notices"]) == 2  # type: ignore[arg-type]
    for index in injected.invalid:  # every entry's page renders, the invalid ones too
        with urllib.request.urlopen(f"{url}/notices/{index}", timeout=30) as page:
            assert page.status == 200
            assert b"fails validation" in page.read()
    with urllib.request.urlopen(f"{url}/tools/{FORGED}", timeout=30) as page:
        assert b"it is unknown in every version" in page.read()


def test_a_follower_goes_on_past_them_and_agrees_on_the_map_root(
    injected: InjectedLog, tmp_path: Path
) -> None:
    """The follower checks the checkpoint's map line against its own fold: following
    through means it folded the invalid entries to the authority's root."""
    url, key = injected.authority.url, injected.log_key
    followed = deplog("follow", url, "--once", "--log-key", key, cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr
    for index in injected.invalid:
        assert f"log entry {index} fails validation" in followed.stderr
    refused = deplog("check", FORGED, "1.0.0", cwd=tmp_path)
    assert refused.returncode == 7, refused.stdout + refused.stderr
    assert "invalid_entry" in refused.stdout
    assert deplog("check", MANGLED, "1.0.0", cwd=tmp_path).returncode == 7
    assert deplog("check", SERVED, "2.0.0", cwd=tmp_path).returncode == 0
    status = deplog("status", FORGED, cwd=tmp_path)
    assert status.returncode == 7 and "fail validation" in status.stdout


def test_the_auditor_replays_to_the_end_names_them_and_matches_every_map_root(
    injected: InjectedLog, tmp_path: Path
) -> None:
    url, key = injected.authority.url, injected.log_key
    assert deplog("export", url, "--out", tmp_path / "export", cwd=tmp_path).returncode == 0
    replayed = deplog("audit", "replay", "--log-key", key, tmp_path / "export", cwd=tmp_path)
    assert replayed.returncode == 1
    assert replayed.stdout.startswith("FAILED: replayed")
    for index in injected.invalid:
        assert f"entry {index}: " in replayed.stdout
    mapped = deplog("audit", "map", "--log-key", key, tmp_path / "export", cwd=tmp_path)
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr


async def test_a_map_verifying_witness_reproduces_the_root_and_cosigns(
    injected: InjectedLog, tmp_path: Path
) -> None:
    url = injected.authority.url
    with urllib.request.urlopen(url + "/checkpoint", timeout=30) as response:
        note = response.read()
    with map_witness(tmp_path / "map-witness", injected.authority) as witness:
        request = urllib.request.Request(
            witness.url + "/add-checkpoint", data=b"old 0\n\n" + note, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 200
            assert answer.read().startswith("— map.witness.test/w ".encode())
