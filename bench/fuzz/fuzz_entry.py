"""Fuzz log entries: ``client.entries.decode_entry`` on leaf bytes.

Invariants: only DeplogError escapes; a leaf that decodes is exactly the
encoding of its entry (``encode_entry(decode_entry(x)) == x``: one entry, one
leaf, one hash).

    python bench/fuzz/fuzz_entry.py -atheris_runs=100000
"""

from __future__ import annotations

from datetime import UTC, datetime

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.errors import DeplogError
    from deplog.client.model.entries import (
        NoticeEntry,
        PublisherStatement,
        decode_entry,
        encode_entry,
        sign_publisher_statement,
    )
    from deplog.client.model.notice import Envelope, Notice
    from deplog.client.tlog.note import Signer

LOG = Signer.from_seed("example.org/log", bytes(range(32)))
PUBLISHER = Signer.from_seed("acme", bytes([3]) * 32)
NEW_KEY = Signer.from_seed("acme-2", bytes([4]) * 32)
_WHEN = datetime(2026, 1, 1, tzinfo=UTC)
_STATEMENTS = [
    PublisherStatement(
        "register", "acme", _WHEN, ("org.acme", "com.acme.tools"), (PUBLISHER.verifier().vkey(),)
    ),
    PublisherStatement("add_key", "acme", _WHEN, keys=(NEW_KEY.verifier().vkey(),)),
    PublisherStatement("revoke_key", "acme", _WHEN, keys=(PUBLISHER.verifier().vkey(),)),
    PublisherStatement("revoke_publisher", "acme", _WHEN),
]
_NOTICE = Notice.from_json(
    {
        "tool_id": "tool:org.acme/search",
        "action": "deprecate",
        "affected": {"versions": ["1.0.0"]},
        "reasons": ["superseded"],
        "effective_at": "2026-02-01T00:00:00Z",
        "issued_at": "2026-01-15T09:30:00Z",
        "publisher": "acme",
        "sequence": 1,
        "message": "caf\u00e9",
    }
)
SAMPLES = [encode_entry(NoticeEntry(Envelope.sign(_NOTICE, PUBLISHER)))] + [
    encode_entry(sign_publisher_statement(s, LOG)) for s in _STATEMENTS
]


def test_one_input(data: bytes) -> None:
    leaf = derive(data, SAMPLES)
    try:
        entry = decode_entry(leaf)
    except DeplogError:
        return
    assert encode_entry(entry) == leaf


if __name__ == "__main__":
    main(test_one_input)
