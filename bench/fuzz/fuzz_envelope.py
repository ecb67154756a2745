"""Fuzz notice envelopes: ``client.notice.Envelope.parse`` (the body of ``POST /v1/notices``).

Invariants: only DeplogError escapes; an envelope that parses survives a trip
through its canonical bytes (``Envelope.parse(e.canonical_bytes()) == e``), and
those bytes are a fixed point.

    python bench/fuzz/fuzz_envelope.py -atheris_runs=100000
"""

from __future__ import annotations

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.errors import DeplogError
    from deplog.client.model.notice import Envelope, Notice
    from deplog.client.tlog.note import Signer

PUBLISHER = Signer.from_seed("acme", bytes(range(32)))
_BASE = {
    "tool_id": "tool:org.acme/search",
    "issued_at": "2026-01-15T09:30:00Z",
    "effective_at": "2026-02-01T00:00:00Z",
    "publisher": "acme",
    "sequence": 7,
}
_NOTICES = [
    _BASE
    | {
        "action": "deprecate",
        "affected": {"versions": ["1.0.0", "1.1.0-rc.1+build.5"]},
        "reasons": ["superseded", "schema_change"],
        "sunset_at": "2026-06-01T00:00:00Z",
        "replacement": {"tool_id": "tool:org.acme/search2", "version": "2.0.0"},
        "schema_digest": "sha256:" + "ab" * 32,
        "message": "Use search2. \u00e9\u2603",
    },
    _BASE
    | {
        "action": "revoke",
        "affected": {
            "ranges": [
                {"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.2.3"}]},
            ]
        },
        "reasons": ["security"],
        "advisories": ["CVE-2026-1234", "GHSA-2345-6789-cfgh"],
    },
    _BASE | {"action": "withdraw", "withdraws": 12, "reasons": ["other"]},
]
SAMPLES = [Envelope.sign(Notice.from_json(obj), PUBLISHER).canonical_bytes() for obj in _NOTICES]


def test_one_input(data: bytes) -> None:
    body = derive(data, SAMPLES)
    try:
        envelope = Envelope.parse(body)
    except DeplogError:
        return
    canonical = envelope.canonical_bytes()
    again = Envelope.parse(canonical)
    assert again == envelope
    assert again.canonical_bytes() == canonical


if __name__ == "__main__":
    main(test_one_input)
