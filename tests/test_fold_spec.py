"""``docs/fold-spec.md`` held to the code: its worked examples, limits, grammars and checks.

The document is the oracle. Its worked examples (section 13) and status example (11) are
read out of it and recomputed by the code from the vectors, so neither can drift; its
limits table (10.2) is read row by row and every bound tried at and past its value; the
grammars (10.1) and the order of checks (12) are tried on inputs written from the text.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.errors import DeplogError
from deplog.client.map.hashing import bit_of, leaf_hash, map_key, node_hash, value_hash
from deplog.client.map.line import require_map_root
from deplog.client.map.proof import MapProof, verify_tool_status
from deplog.client.map.record import StatusRecord, evaluate, record_item_bytes
from deplog.client.model import canonical
from deplog.client.model.entries import (
    NoticeEntry,
    PublisherEntry,
    PublisherStatement,
    decode_entry,
)
from deplog.client.model.notice import (
    Envelope,
    Notice,
    parse_advisories,
    parse_key_id,
    parse_namespace,
    parse_publisher_id,
    parse_schema_digest,
    parse_timestamp,
    parse_tool_id,
)
from deplog.client.model.rules import InvalidEntry, LogReplay
from deplog.client.model.semver import Version
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.note import Signer, Verifier, key_id
from deplog.client.tlog.proofs import leaf_hash as log_leaf_hash
from tests.builders import (
    make_envelope,
    notice_json,
    notice_leaf,
    notices,
    publisher_leaf,
    publisher_statement,
    register_statement,
    revoke_json,
    withdraw_json,
)
from tests.doctext import ROOT, code_blocks, section, table
from tests.vmap_vectors import VECTORS

SPEC = ROOT / "docs" / "fold-spec.md"
FETCH, SEARCH, NONE = "tool:org.example/fetch", "tool:org.example/search", "tool:org.example/none"
AT = datetime(2026, 3, 15, tzinfo=UTC)


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text())
    return data


def blocks(heading: str, language: str = "text") -> list[str]:
    """The fenced blocks of ``language`` under ``heading`` of the spec."""
    return code_blocks(section(SPEC, heading), language)


def hex_block(block: str) -> bytes:
    """The bytes of a hex block: every line's hex before its ``;`` comment."""
    return bytes.fromhex("".join("".join(line.split(";")[0].split()) for line in block.split("\n")))


def text_block(block: str) -> bytes:
    """The bytes of a text block: its text without the block's last line break."""
    return block.removesuffix("\n").encode("utf-8")


def leaves(vectors: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(leaf) for leaf in vectors["log"]["leaves"]]


def code(action: Callable[[], object]) -> str | None:
    """The code ``action`` is refused with, None if it is not."""
    try:
        action()
    except DeplogError as err:
        return str(err.code)
    return None


# --- 13: the worked examples --------------------------------------------------------


def test_the_statement_example_is_what_the_log_key_signs_in_the_vector_leaf(
    vectors: dict[str, Any],
) -> None:
    signed, leaf = blocks("### 13.1 A publisher statement")
    entry = decode_entry(text_block(leaf))
    assert isinstance(entry, PublisherEntry) and text_block(leaf) == leaves(vectors)[0]
    assert text_block(signed) == b"deplog/publisher-statement/v1\n" + canonical.dumps(
        entry.statement.to_json()
    )
    log_key = Verifier.parse(vectors["log"]["log_key"])
    assert log_key.verify(text_block(signed), entry.signature)
    assert f"`{log_key.vkey()}`" in section(SPEC, "### 13.1 A publisher statement")


def test_the_notice_example_is_the_vector_leaf_and_its_publisher_signs_the_notice_bytes(
    vectors: dict[str, Any],
) -> None:
    leaf_text, signed, leaf_hash_hex = blocks("### 13.2 A notice's leaf")
    leaf = text_block(leaf_text)
    assert leaf == leaves(vectors)[3] and f"({len(leaf)} bytes)" in section(
        SPEC, "### 13.2 A notice's leaf"
    )
    entry = decode_entry(leaf)
    assert isinstance(entry, NoticeEntry)
    notice_bytes = text_block(signed)
    assert notice_bytes == leaf[len(b'{"notice":') : leaf.rindex(b',"signature":')]
    registration = decode_entry(leaves(vectors)[0])
    assert isinstance(registration, PublisherEntry)
    publisher_key = registration.statement.verifiers()[0]
    assert publisher_key.verify(notice_bytes, entry.envelope.signature)
    assert hex_block(leaf_hash_hex) == log_leaf_hash(leaf) == hashlib.sha256(b"\0" + leaf).digest()


def test_the_record_example_is_the_encoding_of_the_notice_example(vectors: dict[str, Any]) -> None:
    (block,) = blocks("### 13.3 Its record")
    record = hex_block(block)
    entry = decode_entry(leaves(vectors)[3])
    assert isinstance(entry, NoticeEntry)
    assert record == StatusRecord.of(FETCH, [(3, entry.envelope.notice)]).encode()
    assert record == base64.b64decode(vectors["log"]["records"][FETCH])
    assert f"{len(record)} bytes" in section(SPEC, "### 13.3 Its record")


def test_the_hash_table_and_checkpoint_are_what_the_code_computes(vectors: dict[str, Any]) -> None:
    rows = {
        row[0]: bytes.fromhex(row[2].strip("`"))
        for row in table(section(SPEC, "### 13.4 Its key and hashes"))
    }
    record = hex_block(blocks("### 13.3 Its record")[0])
    search = base64.b64decode(vectors["log"]["records"][SEARCH])
    assert rows["key"] == map_key(FETCH) and bit_of(rows["key"], 0) == 0
    assert rows["value"] == value_hash(record)
    assert rows["leaf"] == leaf_hash(rows["key"], rows["value"])
    assert rows["sibling"] == leaf_hash(map_key(SEARCH), value_hash(search))
    assert rows["root"] == node_hash(0, rows["leaf"], rows["sibling"])
    (note,) = blocks("### 13.4 Its key and hashes")
    assert note == vectors["log"]["checkpoint"]  # a signed note ends with its newline
    checkpoint, _ = open_checkpoint(note.encode(), Verifier.parse(vectors["log"]["log_key"]))
    assert require_map_root(checkpoint) == rows["root"]


def test_the_proof_examples_are_the_vector_proofs_and_verify(vectors: dict[str, Any]) -> None:
    present, absent = (hex_block(b) for b in blocks("### 13.5 A present and an absent proof"))
    proofs = {p["tool_id"]: base64.b64decode(p["binary"]) for p in vectors["log"]["proofs"]}
    assert (present, absent) == (proofs[FETCH], proofs[NONE])
    assert f"({len(present)} bytes)" in section(SPEC, "### 13.5 A present and an absent proof")
    (note,) = blocks("### 13.4 Its key and hashes")
    checkpoint, _ = open_checkpoint(note.encode(), Verifier.parse(vectors["log"]["log_key"]))
    assert verify_tool_status(present, checkpoint, FETCH, "0.9.0", AT).status == "deprecated"
    assert verify_tool_status(absent, checkpoint, NONE, "0.9.0", AT).status == "active"
    assert MapProof.from_binary(absent).alt_key == map_key(FETCH)
    assert map_key(NONE).hex() in section(SPEC, "### 13.5 A present and an absent proof")


def test_the_every_field_item_example_is_the_vector_item(vectors: dict[str, Any]) -> None:
    (notice_text,) = blocks("### 13.6 An item with every field", "json")
    (item,) = blocks("### 13.6 An item with every field")
    case = vectors["record_items"][0]
    assert json.loads(notice_text) == case["notice"]
    assert hex_block(item) == bytes.fromhex(case["item"])
    assert hex_block(item) == record_item_bytes(7, Notice.from_json(json.loads(notice_text)))


# --- 11: what a verifier answers ----------------------------------------------------


def test_the_status_example_is_the_fold_of_the_vector_record(vectors: dict[str, Any]) -> None:
    (example,) = blocks("## 11. What a verifier answers", "json")
    record = StatusRecord.decode(base64.b64decode(vectors["log"]["records"][SEARCH]), SEARCH)
    assert json.loads(example) == evaluate(SEARCH, record, "1.0.0", AT).to_json()


def test_the_status_members_are_the_tables_in_its_order() -> None:
    members = [row[0].strip("`") for row in table(section(SPEC, "## 11. What a verifier answers"))]
    assert members == list(evaluate(SEARCH, None, "1.0.0+b", AT).to_json())
    assert evaluate(SEARCH, None, "1.0.0+b", AT).to_json()["version"] == "1.0.0+b"


# --- 10.2: every limit at and past its value ----------------------------------------


def _notice(**fields: Any) -> Callable[[], object]:
    return lambda: Notice.from_json(notice_json(**fields))


def _namespace(n: int) -> str:
    """A namespace of ``n`` characters (n >= 3)."""
    return "a." * (n // 2) + "a" if n % 2 else "ab." + "a." * ((n - 3) // 2) + "a"


def _keys(n: int) -> list[str]:
    return [Signer.from_seed(f"k{i}", bytes([i]) * 32).verifier().vkey() for i in range(n)]


def _statement(**fields: Any) -> Callable[[], object]:
    base = {"action": "register", "publisher": "p", "issued_at": "2026-01-01T00:00:00Z"}
    return lambda: PublisherStatement.from_json(
        {"namespaces": ["org.example"], "keys": _keys(1), **base, **fields}
    )


def _events(n: int) -> list[dict[str, str]]:
    return [{"fixed" if i % 2 else "introduced": f"1.{i}.0"} for i in range(n)]


def _absent_proof(steps: int) -> bytes:
    return bytes((1, 1)) + bytes(64) + steps.to_bytes(2, "big") + bytes(33) * steps


PROBES: dict[str, Callable[[int], Callable[[], object]]] = {
    "leaf": lambda n: lambda: decode_entry(b" " * n),
    "envelope": lambda n: lambda: Envelope.parse(b" " * n),
    "json nesting": lambda n: lambda: canonical.loads(b"[" * n + b"]" * n),
    "integer": lambda n: lambda: canonical.loads(str(-n).encode()),
    "namespace": lambda n: lambda: parse_namespace(_namespace(n)),
    "name": lambda n: lambda: parse_tool_id("tool:org.example/" + "a" * n),
    "version": lambda n: lambda: Version.parse("1.0.0-" + "a" * (n - 6)),
    "reasons": lambda n: _notice(
        reasons=[
            "superseded",
            "end_of_life",
            "security",
            "critical_bug",
            "schema_change",
            "moved",
            "policy",
            "other",
            "other",
        ][:n]
    ),
    "advisories": lambda n: _notice(advisories=[f"CVE-2026-{i:04d}" for i in range(n)]),
    "versions": lambda n: _notice(affected={"versions": [f"1.0.{i}" for i in range(n)]}),
    "ranges": lambda n: _notice(
        affected={"ranges": [{"type": "SEMVER", "events": _events(1)}] * n}
    ),
    "events": lambda n: _notice(affected={"ranges": [{"type": "SEMVER", "events": _events(n)}]}),
    "message": lambda n: _notice(message="a" * n),
    "namespaces": lambda n: _statement(namespaces=[f"n{i}.example" for i in range(n)]),
    "keys": lambda n: _statement(keys=_keys(n)),
    "path": lambda n: lambda: MapProof.from_binary(_absent_proof(n)),
}


def _limit(cell: str) -> int:
    return 2**53 - 1 if cell.startswith("2^53\N{MINUS SIGN}1") else int(cell.split()[0])


LIMITS = table(section(SPEC, "### 10.2 Limits"))


def test_every_limit_of_the_table_has_a_probe() -> None:
    assert sorted(row[0].strip("`") for row in LIMITS) == sorted(PROBES)


@pytest.mark.parametrize("row", LIMITS, ids=[row[0].strip("`") for row in LIMITS])
def test_a_limit_holds_at_its_value_and_refuses_past_it_with_its_code(row: list[str]) -> None:
    name, limit, refused = row[0].strip("`"), _limit(row[1]), row[2].split("`")[1]
    at_limit = code(PROBES[name](limit))
    assert at_limit is None or (name in ("leaf", "envelope") and at_limit == "malformed_json")
    assert code(PROBES[name](limit + 1)) == refused


def _str8(text: str) -> bytes:
    return bytes((len(text),)) + text.encode()


def _item(field: str, count: int) -> bytes:
    """A deprecate item (section 3) whose list ``field`` holds ``count`` entries."""
    many = {field: count}
    reasons = bytes(i % 8 for i in range(count)) if field == "reasons" else b"\1"
    advisories = [f"CVE-2026-{i:04d}" for i in range(many.get("advisories", 0))]
    versions = [f"1.0.{i}" for i in range(many.get("versions", 1))]
    events = [(next(iter(e)), next(iter(e.values()))) for e in _events(many.get("events", 1))]
    ranges = [events] * many.get("ranges", 1 if "events" in many else 0)
    item = bytes((0, 0)) + (3).to_bytes(8, "big") + (0).to_bytes(8, "big")
    item += bytes((len(reasons),)) + reasons + bytes((len(advisories),))
    item += b"".join(_str8(a) for a in advisories) + len(versions).to_bytes(2, "big")
    item += b"".join(_str8(v) for v in versions) + bytes((len(ranges),))
    kinds = {"introduced": 0, "fixed": 1, "last_affected": 2}
    for range_events in ranges:
        item += bytes((len(range_events),))
        item += b"".join(bytes((kinds[k],)) + _str8(v) for k, v in range_events)
    return item


@pytest.mark.parametrize(
    ("field", "limit"),
    [("reasons", 8), ("advisories", 32), ("versions", 256), ("ranges", 32), ("events", 64)],
)
def test_a_record_list_decodes_at_its_limit_and_is_malformed_past_it(
    field: str, limit: int
) -> None:
    """A count byte can say more than the schema allows: a verifier refuses it (section 3)."""
    assert code(lambda: StatusRecord.decode(b"\1" + _item(field, limit), FETCH)) is None
    refused = code(lambda: StatusRecord.decode(b"\1" + _item(field, limit + 1), FETCH))
    assert refused == "malformed_map_record"


@pytest.mark.parametrize(
    ("seconds", "refused"),
    [(-62135596800, False), (253402300799, False), (-62135596801, True), (253402300800, True)],
)
def test_a_record_time_must_fall_in_years_0001_to_9999(seconds: int, refused: bool) -> None:
    record = bytearray(hex_block(blocks("### 13.3 Its record")[0]))
    record[11:19] = seconds.to_bytes(8, "big", signed=True)
    outcome = code(lambda: StatusRecord.decode(bytes(record), FETCH))
    assert outcome == ("malformed_map_record" if refused else None)


# --- 10.1: the grammars -------------------------------------------------------------

GRAMMARS: list[tuple[Callable[[str], object], str, str | None]] = [
    (parse_publisher_id, "a", None),
    (parse_publisher_id, "a" * 63, None),
    (parse_publisher_id, "a-", None),
    (parse_publisher_id, "a" * 64, "bad_publisher"),
    (parse_publisher_id, "-a", "bad_publisher"),
    (parse_publisher_id, "A", "bad_publisher"),
    (parse_publisher_id, "a_b", "bad_publisher"),
    (parse_namespace, "org.example", None),
    (parse_namespace, "a" * 63 + ".b", None),
    (parse_namespace, "a" * 64 + ".b", "bad_namespace"),
    (parse_namespace, "example", "bad_namespace"),
    (parse_namespace, "a-.b", "bad_namespace"),
    (parse_namespace, "Org.example", "bad_namespace"),
    (parse_namespace, "org..example", "bad_namespace"),
    (parse_tool_id, "tool:org.example/a.b_c-d", None),
    (parse_tool_id, "tool:org.example/_a", "bad_tool_id"),
    (parse_tool_id, "tool:org.example/a/b", "bad_tool_id"),
    (parse_tool_id, "Tool:org.example/a", "bad_tool_id"),
    (parse_tool_id, "tool:org.example/%61", "bad_tool_id"),
    (parse_timestamp, "0001-01-01T00:00:00Z", None),
    (parse_timestamp, "9999-12-31T23:59:59Z", None),
    (parse_timestamp, "2024-02-29T00:00:00Z", None),
    (parse_timestamp, "0000-01-01T00:00:00Z", "bad_timestamp"),
    (parse_timestamp, "2026-02-29T00:00:00Z", "bad_timestamp"),
    (parse_timestamp, "2026-01-15T24:00:00Z", "bad_timestamp"),
    (parse_timestamp, "2026-12-31T23:59:60Z", "bad_timestamp"),
    (parse_timestamp, "2026-01-15t00:00:00z", "bad_timestamp"),
    (parse_timestamp, "2026-01-15T00:00:00+00:00", "bad_timestamp"),
    (parse_timestamp, "2026-01-15T00:00:00.0Z", "bad_timestamp"),
    (parse_schema_digest, "sha256:" + "0a" * 32, None),
    (parse_schema_digest, "sha256:" + "0A" * 32, "bad_digest"),
    (parse_schema_digest, "sha256:" + "a" * 63, "bad_digest"),
    (parse_schema_digest, "SHA256:" + "a" * 64, "bad_digest"),
    (lambda s: parse_advisories([s]), "CVE-2026-1234", None),
    (lambda s: parse_advisories([s]), "CVE-2026-" + "1" * 19, None),
    (lambda s: parse_advisories([s]), "CVE-2026-123", "bad_advisory"),
    (lambda s: parse_advisories([s]), "CVE-2026-" + "1" * 20, "bad_advisory"),
    (lambda s: parse_advisories([s]), "cve-2026-1234", "bad_advisory"),
    (lambda s: parse_advisories([s]), "GHSA-2345-6789-cfgh", None),
    (lambda s: parse_advisories([s]), "GHSA-abcd-6789-cfgh", "bad_advisory"),
    (lambda s: parse_advisories([s]), "GHSA-2345-6789-CFGH", "bad_advisory"),
    (parse_key_id, "5c3a58b1", None),
    (parse_key_id, "5C3A58B1", "bad_signature_encoding"),
    (parse_key_id, "5c3a58b", "bad_signature_encoding"),
    (Version.parse, "1.0.0-rc.1+build.007", None),
    (Version.parse, "01.0.0", "bad_version"),
    (Version.parse, "1.0", "bad_version"),
    (Version.parse, "v1.0.0", "bad_version"),
    (Version.parse, "1.0.0-01", "bad_version"),
    (Version.parse, "1.0.0-", "bad_version"),
    (Version.parse, "1.0.0-é", "bad_version"),
]


@pytest.mark.parametrize(("parse", "text", "refused"), GRAMMARS)
def test_a_grammar_of_the_spec_accepts_and_refuses_as_written(
    parse: Callable[[str], object], text: str, refused: str | None
) -> None:
    assert code(lambda: parse(text)) == refused


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        ("é and 中", None),
        ("", "bad_message"),
        *(
            (f"a{ch}b", "bad_message")
            for ch in "\t\x1f\x7f\x85\x9f\u2028\u2029\u061c\u200e\u202e\u2066\u2069"
        ),
    ],
)
def test_a_message_refuses_controls_separators_and_bidi_formatting(
    message: str, refused: str | None
) -> None:
    assert code(_notice(message=message)) == refused


def test_numeric_identifiers_compare_as_integers_of_any_size() -> None:
    big, bigger = "1" + "0" * 100, "9" + "0" * 100
    assert Version.parse(f"{big}.0.0") < Version.parse(f"{bigger}.0.0")
    assert Version.parse("1.0.0-" + "9" * 30) < Version.parse("1.0.0-1" + "0" * 30)


# --- 12: the order of checks --------------------------------------------------------


def _leaf(notice: dict[str, Any], signature: object = None, **extra: Any) -> bytes:
    sig = {"key_id": "5c3a58b1", "sig": base64.b64encode(bytes(64)).decode()}
    entry = {"notice": notice, "signature": sig if signature is None else signature}
    return canonical.dumps({**entry, "type": "notice", **extra})


def _events_notice(*events: dict[str, str]) -> dict[str, Any]:
    return notice_json(affected={"ranges": [{"type": "SEMVER", "events": list(events)}]})


ORDER: list[tuple[str, bytes, str]] = [
    ("size before JSON", b"{" * 65536, "leaf_too_large"),
    ("members before the notice", _leaf(notice_json(action="x"), extra=1), "malformed_entry"),
    (
        "the schema before canonical form",
        json.dumps({"notice": notice_json(action="x"), "signature": {}, "type": "notice"}).encode(),
        "bad_action",
    ),
    ("the notice before its signature", _leaf(notice_json(action="x"), signature=[]), "bad_action"),
    ("unknown before missing", _leaf({"x": 1}), "unknown_field"),
    ("action before tool id", _leaf(notice_json(action="x", tool_id="x")), "bad_action"),
    (
        "tool id before the action's members",
        _leaf(withdraw_json(1, tool_id="x", affected={})),
        "bad_tool_id",
    ),
    (
        "refused before required",
        _leaf(withdraw_json(1, withdraws=None, sunset_at="2026-06-01T00:00:00Z")),
        "field_not_allowed",
    ),
    (
        "affected before reasons",
        _leaf(notice_json(affected={"versions": ["x"]}, reasons=["x"])),
        "bad_version",
    ),
    ("types of reasons before their values", _leaf(notice_json(reasons=["x", 1])), "wrong_type"),
    (
        "known reasons before distinct",
        _leaf(notice_json(reasons=["other", "other", "x"])),
        "bad_reason",
    ),
    (
        "advisory required before times",
        _leaf(revoke_json(advisories=None, effective_at="x")),
        "advisory_required",
    ),
    (
        "sunset before message",
        _leaf(notice_json(sunset_at="2026-01-01T00:00:00Z", message="")),
        "sunset_before_effective",
    ),
    ("long message before its characters", _leaf(notice_json(message="\x00" * 501)), "too_long"),
    ("publisher before sequence", _leaf(notice_json(publisher="X", sequence=0)), "bad_publisher"),
    ("alternation", _leaf(_events_notice({"fixed": "1.0.0"})), "bad_range"),
    (
        "a later introduced 0",
        _leaf(_events_notice({"introduced": "0"}, {"fixed": "1.0.0"}, {"introduced": "0"})),
        "bad_range",
    ),
    (
        "fixed 0 is no version",
        _leaf(_events_notice({"introduced": "1.0.0"}, {"fixed": "0"})),
        "bad_version",
    ),
    (
        "strictly increasing",
        _leaf(_events_notice({"introduced": "1.0.0"}, {"fixed": "1.0.0+b"})),
        "bad_range",
    ),
    (
        "the signature object",
        _leaf(notice_json(), signature={"key_id": "X", "sig": "x"}),
        "bad_signature_encoding",
    ),
]


@pytest.mark.parametrize(
    ("leaf", "refused"), [(leaf, c) for _, leaf, c in ORDER], ids=[n for n, _, _ in ORDER]
)
def test_a_leaf_breaking_two_rules_is_refused_by_the_first_in_the_specs_order(
    leaf: bytes, refused: str
) -> None:
    assert code(lambda: decode_entry(leaf)) == refused


@pytest.fixture(scope="module")
def served(vectors: dict[str, Any]) -> tuple[Checkpoint, dict[str, bytes]]:
    (note,) = blocks("### 13.4 Its key and hashes")
    checkpoint, _ = open_checkpoint(note.encode(), Verifier.parse(vectors["log"]["log_key"]))
    return checkpoint, {p["tool_id"]: p["json"].encode() for p in vectors["log"]["proofs"]}


def test_the_asked_version_is_checked_before_the_proof(
    served: tuple[Checkpoint, dict[str, bytes]],
) -> None:
    checkpoint, _ = served
    assert code(lambda: verify_tool_status(b"\0", checkpoint, FETCH, "1.0", AT)) == "bad_version"


def test_a_binary_proof_is_parsed_before_the_map_line_is_read(
    served: tuple[Checkpoint, dict[str, bytes]],
) -> None:
    checkpoint, _ = served
    lineless = dataclasses.replace(checkpoint, extensions=())
    assert (
        code(lambda: verify_tool_status(b"\1", lineless, FETCH, "1.0.0", AT))
        == "malformed_map_proof"
    )
    proof = _absent_proof(0)
    assert (
        code(lambda: verify_tool_status(proof, lineless, FETCH, "1.0.0", AT)) == "missing_map_line"
    )


def test_a_json_proof_names_the_asked_id_before_its_checkpoint_is_compared(
    served: tuple[Checkpoint, dict[str, bytes]],
) -> None:
    checkpoint, documents = served
    other = dataclasses.replace(checkpoint, size=checkpoint.size + 1)
    document = documents[NONE]
    assert (
        code(lambda: verify_tool_status(document, other, NONE, "1.0.0", AT))
        == "map_checkpoint_mismatch"
    )
    assert code(lambda: verify_tool_status(document, other, FETCH, "1.0.0", AT)) == "bad_map_proof"


def test_a_present_record_is_decoded_before_any_hash_is_compared(
    served: tuple[Checkpoint, dict[str, bytes]],
) -> None:
    checkpoint, _ = served
    proof = MapProof("present", (), record=b"\2").to_binary()
    refused = code(lambda: verify_tool_status(proof, checkpoint, FETCH, "1.0.0", AT))
    assert refused == "malformed_map_record"


def test_a_notice_signature_is_checked_before_its_key_or_publisher_is_revoked() -> None:
    """12.4 rule 3: a bad signature by a revoked key is ``bad_signature``, not ``key_revoked``."""
    log_key, key = Signer.generate("spec.test/log"), Signer.generate("acme")
    statements = [
        register_statement("acme", ("org.acme",), (key,)),
        publisher_statement("revoke_key", "acme", (key,)),
    ]
    replay = LogReplay(log_key.verifier())
    for index, statement in enumerate(statements):
        assert isinstance(replay.judge(index, publisher_leaf(statement, log_key)), PublisherEntry)
    envelope = make_envelope(key, 1)
    forged = notice_leaf(dataclasses.replace(envelope, signature=bytes(64)))
    judged = [replay.judge(2, forged), replay.judge(3, notice_leaf(envelope))]
    assert [(j.code, j.cause) for j in judged if isinstance(j, InvalidEntry)] == [
        ("unauthorized_notice", "bad_signature"),
        ("unauthorized_notice", "key_revoked"),
    ]
    evidence = {"index": 2, "code": "unauthorized_notice", "cause": "bad_signature"}
    assert isinstance(judged[0], InvalidEntry)
    assert judged[0].to_json() == {**evidence, "tool_id": "tool:org.acme/search"}  # section 11


@pytest.mark.parametrize(
    ("fields", "refused"),
    [({"schema_digest": None}, "wrong_type"), ({"advisories": []}, "empty_list")],
    ids=["null", "empty list"],
)
def test_an_optional_member_is_absent_never_null_or_empty(
    fields: dict[str, Any], refused: str
) -> None:
    obj = notice_json()
    obj.update(fields)
    assert code(lambda: Notice.from_json(obj)) == refused


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("é", None),
        ("a b", "bad_key"),
        ("a+b", "bad_key"),
        ("a\x85", "bad_key"),
        ("a\xa0", "bad_key"),
        ("a\u2028", "bad_key"),
        ("a\x1f", "bad_key"),
    ],
)
def test_a_statement_key_name_follows_the_signed_note_rules(name: str, refused: str | None) -> None:
    """9.3: a verifier key's name is non-empty, without ``+``, spaces, separators or controls."""
    key = Signer.from_seed("k", bytes(32)).verifier()
    vkey = (
        name
        + "+"
        + key_id(name, 1, key.public_key).hex()
        + "+"
        + base64.b64encode(bytes((1,)) + key.public_key).decode()
    )
    assert code(_statement(keys=[vkey])) == refused


# --- 3: a notice's item, written from the text alone ------------------------------------

_SPEC_ACTIONS = {"deprecate": 0, "revoke": 1, "withdraw": 2}
_SPEC_REASONS = "superseded end_of_life security critical_bug schema_change moved policy other"
_SPEC_KINDS = {"introduced": 0, "fixed": 1, "last_affected": 2}


def _seconds(timestamp: str) -> bytes:
    moment = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return int((moment - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()).to_bytes(
        8, "big", signed=True
    )


def spec_item(index: int, notice: dict[str, Any]) -> bytes:
    """Section 3, "From a notice to its item", read as an implementer reads it."""
    flags = sum(
        bit
        for bit, member in ((1, "sunset_at"), (2, "replacement"), (4, "schema_digest"))
        if member in notice
    )
    out = bytes((_SPEC_ACTIONS[notice["action"]], flags)) + index.to_bytes(8, "big")
    out += _seconds(notice["effective_at"])
    out += bytes(
        (len(notice["reasons"]), *(_SPEC_REASONS.split().index(r) for r in notice["reasons"]))
    )
    advisories = notice.get("advisories", [])
    out += bytes((len(advisories),)) + b"".join(_str8(a) for a in advisories)
    if notice["action"] == "withdraw":
        out += notice["withdraws"].to_bytes(8, "big")
    else:
        versions = notice["affected"].get("versions", [])
        ranges = notice["affected"].get("ranges", [])
        out += len(versions).to_bytes(2, "big") + b"".join(_str8(v) for v in versions)
        out += bytes((len(ranges),))
        for rng in ranges:
            out += bytes((len(rng["events"]),))
            for event in rng["events"]:
                ((kind, version),) = event.items()
                out += bytes((_SPEC_KINDS[kind],)) + _str8(version)
    if "sunset_at" in notice:
        out += _seconds(notice["sunset_at"])
    if "replacement" in notice:
        tool = notice["replacement"]["tool_id"].encode()
        out += len(tool).to_bytes(2, "big") + tool + _str8(notice["replacement"]["version"])
    if "schema_digest" in notice:
        out += bytes.fromhex(notice["schema_digest"].removeprefix("sha256:"))
    return out


def test_the_texts_projection_gives_the_vector_items(vectors: dict[str, Any]) -> None:
    for case in vectors["record_items"][:-1]:
        assert spec_item(case["index"], case["notice"]).hex() == case["item"]


@settings(settings.get_profile("fast"))
@given(notice=notices(), index=st.integers(0, 2**53 - 1))
def test_property_the_texts_projection_is_the_codes_item(
    notice: dict[str, Any], index: int
) -> None:
    assert spec_item(index, notice) == record_item_bytes(index, Notice.from_json(notice))


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"sequence": True}, "wrong_type"),
        ({"sequence": "1"}, "wrong_type"),
        ({"sequence": 0}, "bad_sequence"),
        ({"sequence": 2**53 - 1}, None),
    ],
)
def test_an_integer_member_is_a_json_integer_in_its_range(
    fields: dict[str, Any], refused: str | None
) -> None:
    assert code(_notice(**fields)) == refused


def test_a_withdraw_target_is_from_zero() -> None:
    assert code(lambda: Notice.from_json(withdraw_json(0))) is None
    assert code(lambda: Notice.from_json(withdraw_json(-1))) == "bad_withdraw_index"


def test_a_leaf_escapes_only_quote_backslash_and_controls_and_keeps_utf8() -> None:
    """9.1: RFC 8785 strings; a message holds no control, so only ``"`` and ``\\`` escape."""
    notice = Notice.from_json(notice_json(message='say "hi" \\ é\u2603'))
    assert b'"message":"say \\"hi\\" \\\\ \xc3\xa9\xe2\x98\x83"' in notice.canonical_bytes()


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"action": "revoke_publisher", "publisher": "X"}, "field_not_allowed"),
        ({"action": "add_key", "namespaces": None, "publisher": "X"}, "bad_publisher"),
        ({"publisher": "X", "namespaces": ["x"]}, "bad_publisher"),
        ({"namespaces": ["x"], "keys": ["x"]}, "bad_namespace"),
        ({"keys": ["x", 1]}, "wrong_type"),
        ({"keys": ["x"], "issued_at": "x"}, "bad_key"),
    ],
)
def test_a_statement_breaking_two_rules_is_refused_by_the_first_in_the_specs_order(
    fields: dict[str, Any], refused: str
) -> None:
    base = {"action": "register", "publisher": "p", "issued_at": "2026-01-01T00:00:00Z"}
    obj = {"namespaces": ["org.example"], "keys": _keys(1), **base, **fields}
    assert (
        code(lambda: PublisherStatement.from_json({k: v for k, v in obj.items() if v is not None}))
        == refused
    )
