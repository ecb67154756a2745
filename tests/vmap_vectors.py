"""Generates tests/vectors/vmap-v1.json, the deplog-map/v1 test vectors (docs/fold-spec.md).

Run ``python -m tests.vmap_vectors`` to rewrite the file; tests/test_vmap.py checks that
the checked-in file is exactly what this produces and recomputes its roots with the
reference model. Every input is derived from fixed seeds (Ed25519 signing is
deterministic), so the file is byte-stable.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deplog.client.map.hashing import EMPTY_ROOT, leaf_hash, map_key, node_hash, value_hash
from deplog.client.map.line import map_line
from deplog.client.map.proof import MapProofDocument
from deplog.client.map.record import StatusRecord, evaluate, record_item_bytes
from deplog.client.map.tree import PrefixTree
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.entries import (
    NoticeEntry,
    PublisherStatement,
    encode_entry,
    sign_publisher_statement,
)
from deplog.client.model.notice import Envelope, Notice
from deplog.client.model.status import InvalidMark
from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer, encode_base64
from deplog.client.tlog.proofs import leaf_hash as log_leaf_hash
from deplog.client.tlog.proofs import root_from_leaf_hashes
from tests.builders import admitted

__all__ = [
    "ACCUMULATED_STEPS",
    "VECTORS",
    "accumulated_items",
    "generate",
    "vector_leaves",
]

VECTORS = Path(__file__).resolve().parent / "vectors" / "vmap-v1.json"
ACCUMULATED_STEPS = 1000
ORIGIN = "vectors.deplog.example/log"
_PUBLISHER = "example"


_RECORD = bytes.fromhex(
    "01"  # the record format
    "00"  # deprecate
    "01"  # flags: sunset_at
    "0000000000003039"  # log index 12345
    "0000000069ab6a80"  # effective_at 2026-03-07T00:00:00Z
    "0100"  # one reason: superseded
    "00"  # no advisories
    "0001"
    "05"
    "312e302e30"  # one version: 1.0.0
    "00"  # no ranges
    "000000006a1b7a00"  # sunset_at 2026-05-31T00:00:00Z
)
"""A one-notice record spelled out field by field (docs/fold-spec.md section 3)."""


def _b64(raw: bytes) -> str:
    return encode_base64(raw)


def _h(label: str, *parts: bytes) -> bytes:
    return hashlib.sha256(label.encode("ascii") + b"".join(parts)).digest()


def accumulated_items(step: int) -> dict[bytes, bytes]:
    """The batch of accumulated step ``step``: insert key ``step`` and, from step 1, set
    key ``step // 2`` (already present) to a new value."""
    key = _h("deplog-map/v1 key", step.to_bytes(4, "big"))
    items = {key: _h("deplog-map/v1 value", key, step.to_bytes(4, "big"))}
    if step:
        old = _h("deplog-map/v1 key", (step // 2).to_bytes(4, "big"))
        items[old] = _h("deplog-map/v1 value", old, step.to_bytes(4, "big"))
    return items


def _accumulated() -> dict[str, Any]:
    tree = PrefixTree()
    digest = hashlib.sha256()
    roots = []
    for step in range(ACCUMULATED_STEPS):
        root = tree.update(accumulated_items(step))
        digest.update(root)
        roots.append(root)
    return {
        "steps": ACCUMULATED_STEPS,
        "rule": (
            "key(i) = SHA-256('deplog-map/v1 key' || u32be(i)); batch i sets key(i) and, for "
            "i >= 1, key(i // 2), each to SHA-256('deplog-map/v1 value' || key || u32be(i)); "
            "digest = SHA-256(root after batch 0 || ... || root after batch 999)"
        ),
        "first_root": _b64(roots[0]),
        "last_root": _b64(roots[-1]),
        "digest": _b64(digest.digest()),
    }


def _key(label: str) -> bytes:
    return _h("deplog-map/v1 raw", label.encode("ascii"))


def _shaped_keys() -> list[bytes]:
    """Keys sharing long prefixes: a base key, and the base with bit i flipped for several
    i up to 255 (adjacent leaves, a 255-bit shared prefix)."""
    base = bytearray(_key("base"))
    keys = [bytes(base)]
    for bit in (0, 1, 7, 8, 100, 200, 254, 255):
        flipped = bytearray(base)
        flipped[bit >> 3] ^= 0x80 >> (bit & 7)
        keys.append(bytes(flipped))
    return keys


def _tree_case(name: str, keys: list[bytes], probes: list[bytes]) -> dict[str, Any]:
    items = {k: _h("deplog-map/v1 raw value", k) for k in keys}
    tree = PrefixTree()
    tree.update(items)
    lookups = []
    for probe in probes:
        path = tree.lookup(probe)
        lookups.append(
            {
                "key": _b64(probe),
                "leaf_key": None if path.leaf_key is None else _b64(path.leaf_key),
                "path": [{"bit": s.bit, "sibling": _b64(s.sibling)} for s in path.steps],
            }
        )
    return {
        "name": name,
        "items": [{"key": _b64(k), "value": _b64(v)} for k, v in sorted(items.items())],
        "root": _b64(tree.root()),
        "lookups": lookups,
    }


def _notices() -> list[dict[str, Any]]:
    """The notices of the log vector: a deprecate, a ranged revoke, a withdraw of the
    deprecate, a second tool, and a deprecate of the first tool's 2.x line."""
    base = {"issued_at": "2026-01-10T00:00:00Z", "publisher": _PUBLISHER}
    search, fetch = "tool:org.example/search", "tool:org.example/fetch"
    return [
        {
            **base,
            "tool_id": search,
            "action": "deprecate",
            "affected": {"versions": ["1.0.0", "1.1.0"]},
            "reasons": ["superseded"],
            "effective_at": "2026-02-01T00:00:00Z",
            "sunset_at": "2026-06-01T00:00:00Z",
            "replacement": {"tool_id": search, "version": "2.0.0"},
            "sequence": 1,
        },
        {
            **base,
            "tool_id": search,
            "action": "revoke",
            "affected": {
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.0.5"}]}]
            },
            "reasons": ["security"],
            "advisories": ["CVE-2026-1234"],
            "effective_at": "2026-03-01T00:00:00Z",
            "sequence": 2,
        },
        {
            **base,
            "tool_id": fetch,
            "action": "deprecate",
            "affected": {"versions": ["0.9.0"]},
            "reasons": ["end_of_life"],
            "effective_at": "2026-01-15T00:00:00Z",
            "message": "Use the built-in fetch.",
            "sequence": 3,
        },
        {
            **base,
            "tool_id": search,
            "action": "withdraw",
            "withdraws": 1,
            "reasons": ["other"],
            "effective_at": "2026-04-01T00:00:00Z",
            "sequence": 4,
        },
        {
            **base,
            "tool_id": search,
            "action": "deprecate",
            "affected": {
                "ranges": [
                    {
                        "type": "SEMVER",
                        "events": [{"introduced": "2.0.0"}, {"last_affected": "2.3.1"}],
                    }
                ]
            },
            "reasons": ["schema_change"],
            "effective_at": "2026-05-01T00:00:00Z",
            "sequence": 5,
        },
    ]


def vector_leaves() -> list[bytes]:
    """The log vector's leaves: the registration of publisher ``example`` (signed by the
    seeded log key; it changes no record), then the notices, signed by its seeded key."""
    log_key = Signer.from_seed(ORIGIN, _h("deplog-map/v1 log seed"))
    publisher = Signer.from_seed(_PUBLISHER, _h("deplog-map/v1 publisher seed"))
    statement = PublisherStatement(
        action="register",
        publisher=_PUBLISHER,
        issued_at=_at("2026-01-01T00:00:00Z"),
        namespaces=("org.example",),
        keys=(publisher.verifier().vkey(),),
    )
    leaves = [encode_entry(sign_publisher_statement(statement, log_key))]
    for obj in _notices():
        leaves.append(encode_entry(NoticeEntry(Envelope.sign(Notice.from_json(obj), publisher))))
    return leaves


def _at(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _log_case() -> dict[str, Any]:
    leaves = vector_leaves()
    log_key = Signer.from_seed(ORIGIN, _h("deplog-map/v1 log seed"))
    vmap = VerifiableMap()
    sizes = []
    for size in range(len(leaves) + 1):
        if size:
            vmap.fold(admitted([leaves[size - 1]], size - 1))
        sizes.append({"size": size, "map_root": _b64(vmap.root())})
    checkpoint = Checkpoint(
        ORIGIN,
        len(leaves),
        root_from_leaf_hashes([log_leaf_hash(leaf) for leaf in leaves]),
        (map_line(vmap.root()),),
    )
    note = sign_checkpoint(checkpoint, log_key)
    evaluations = []
    for tool_id in ("tool:org.example/search", "tool:org.example/fetch", "tool:org.example/none"):
        record = vmap.records.get(tool_id)
        for version in ("0.9.0", "1.0.0", "1.0.7", "1.1.0", "2.2.0", "3.0.0"):
            for at in (
                "2026-01-20T00:00:00Z",
                "2026-02-15T00:00:00Z",
                "2026-03-15T00:00:00Z",
                "2026-04-15T00:00:00Z",
                "2026-05-15T00:00:00Z",
                "2026-07-01T00:00:00Z",
            ):
                status = evaluate(tool_id, record, version, _at(at))
                evaluations.append(
                    {"tool_id": tool_id, "version": version, "at": at, **_status(status.to_json())}
                )
    proofs = []
    for tool_id in ("tool:org.example/search", "tool:org.example/fetch", "tool:org.example/none"):
        proof = vmap.prove(tool_id)
        proofs.append(
            {
                "tool_id": tool_id,
                "binary": _b64(proof.to_binary()),
                "json": MapProofDocument(note, tool_id, proof).encode().decode("utf-8"),
            }
        )
    return {
        "log_key": log_key.verifier().vkey(),
        "leaves": [_b64(leaf) for leaf in leaves],
        "map_roots": sizes,
        "records": {t: _b64(r.encode()) for t, r in sorted(vmap.records.items())},
        "checkpoint": note.decode("utf-8"),
        "evaluations": evaluations,
        "proofs": proofs,
    }


def _record_items() -> list[dict[str, Any]]:
    """Signed notices (every optional field the fold reads, and the fields it drops) with
    their log index and the bytes of their record item, and of a record of them all."""
    base = {
        "tool_id": "tool:org.example/search",
        "issued_at": "2026-01-15T09:30:00Z",
        "publisher": _PUBLISHER,
        "message": "dropped from the record",
    }
    cases = [
        {
            **base,
            "action": "deprecate",
            "affected": {
                "versions": ["1.0.0", "1.1.0-rc.1+build.7"],
                "ranges": [
                    {
                        "type": "SEMVER",
                        "events": [
                            {"introduced": "0"},
                            {"fixed": "0.9.0"},
                            {"introduced": "2.0.0"},
                        ],
                    }
                ],
            },
            "reasons": ["superseded", "end_of_life"],
            "advisories": ["CVE-2026-0001", "GHSA-2345-6789-cfgh"],
            "replacement": {"tool_id": "tool:org.example/search2", "version": "2.0.0"},
            "schema_digest": "sha256:" + "ab" * 32,
            "effective_at": "2026-02-01T00:00:00Z",
            "sunset_at": "2026-06-01T00:00:00Z",
            "sequence": 1,
        },
        {
            **base,
            "action": "revoke",
            "affected": {
                "ranges": [
                    {
                        "type": "SEMVER",
                        "events": [{"introduced": "1.0.0"}, {"last_affected": "1.0.7"}],
                    }
                ]
            },
            "reasons": ["security"],
            "advisories": ["CVE-2026-1234"],
            "effective_at": "1969-12-31T23:59:59Z",
            "sequence": 2,
        },
        {
            **base,
            "action": "withdraw",
            "withdraws": 7,
            "reasons": ["other"],
            "effective_at": "2026-03-01T00:00:00Z",
            "sequence": 3,
        },
    ]
    items = [(7 + i, Notice.from_json(obj)) for i, obj in enumerate(cases)]
    record = StatusRecord.of("tool:org.example/search", items)
    return [
        {"index": i, "notice": n.to_json(), "item": record_item_bytes(i, n).hex()} for i, n in items
    ] + [{"record": record.encode().hex()}]


def _invalid_record() -> dict[str, Any]:
    """A record holding a notice and the mark of an entry that fails validation
    (fold-spec 3.1): its items, its bytes, and what it evaluates to (``unknown``), with
    marks that are not items of the one encoding."""
    tool = "tool:org.example/search"
    notice = Notice.from_json(
        {
            "tool_id": tool,
            "action": "deprecate",
            "affected": {"versions": ["1.0.0"]},
            "reasons": ["superseded"],
            "effective_at": "2026-02-01T00:00:00Z",
            "issued_at": "2026-01-15T09:30:00Z",
            "publisher": _PUBLISHER,
            "sequence": 1,
        }
    )
    mark = InvalidMark(tool, 9)
    record = StatusRecord.of(tool, [(7, notice), (9, mark)])
    status = evaluate(tool, record, "1.0.0", datetime(2026, 3, 1, tzinfo=UTC))
    return {
        "tool_id": tool,
        "items": [
            {"index": 7, "notice": notice.to_json(), "item": record_item_bytes(7, notice).hex()},
            {"index": 9, "invalid": True, "item": record_item_bytes(9, mark).hex()},
        ],
        "record": record.encode().hex(),
        "status_at_2026_03_01": status.to_json(),
        "malformed_items": [
            "0301" + (9).to_bytes(8, "big").hex(),  # flags other than 0
            "0300" + (2**53).to_bytes(8, "big").hex(),  # an index above 2^53-1
            "0300" + (9).to_bytes(7, "big").hex(),  # cut short
        ],
    }


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: obj[k] for k in ("status", "notices", "pending", "withdrawn", "sunset_at")}


def generate() -> dict[str, Any]:
    """Every vector, as the JSON object written to ``VECTORS``."""
    k, v = _key("hash key"), _key("hash value")
    left, right = _key("left"), _key("right")
    shaped = _shaped_keys()
    plain = [_key(f"plain {i}") for i in range(16)]
    return {
        "spec": "deplog-map/v1 (docs/fold-spec.md)",
        "generator": "python -m tests.vmap_vectors",
        "hashes": {
            "empty_root": _b64(EMPTY_ROOT),
            "value": {"record": _b64(_RECORD), "hash": _b64(value_hash(_RECORD))},
            "leaf": {"key": _b64(k), "value": _b64(v), "hash": _b64(leaf_hash(k, v))},
            "node": {
                "bit": 17,
                "left": _b64(left),
                "right": _b64(right),
                "hash": _b64(node_hash(17, left, right)),
            },
        },
        "keys": [
            {"tool_id": t, "key": _b64(map_key(t))}
            for t in ("tool:org.example/search", "tool:a.b/c", "tool:org.example/v1.2_beta-x")
        ],
        "trees": [
            _tree_case("empty", [], [_key("probe")]),
            _tree_case("one key", plain[:1], [plain[0], _key("probe")]),
            _tree_case("two keys", plain[:2], [*plain[:2], _key("probe")]),
            _tree_case("sixteen keys", plain, [*plain[:4], _key("probe"), _key("probe 2")]),
            _tree_case("shared prefixes", shaped, [*shaped, _key("probe")]),
        ],
        "record_items": _record_items(),
        "invalid_record": _invalid_record(),
        "log": _log_case(),
        "lines": {
            "valid": [map_line(_key("root"))],
            "malformed": [
                "deplog-map/v1",
                "deplog-map/v1 ",
                "deplog-map/v1  " + _b64(_key("root")),
                "deplog-map/v1 " + _b64(_key("root")) + " ",
                "deplog-map/v1 " + _b64(_key("root")[:31]),
                "deplog-map/v1 " + _b64(_key("root")).rstrip("="),
            ],
            "ignored": ["deplog-map/v2 " + _b64(_key("root")), "deplog-map/v1x abc", "other"],
        },
        "accumulated": _accumulated(),
    }


def _write() -> None:
    VECTORS.parent.mkdir(exist_ok=True)
    VECTORS.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    _write()
    sys.exit(0)
