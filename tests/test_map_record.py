"""Tests for client/map/record.py: what a record keeps of a notice, and its byte codes.

The oracles are written apart from the code: the code tables of ``docs/fold-spec.md``
section 3, copied here, and the field lists of ``Notice`` and ``FoldNotice`` read from
the classes themselves. A new ``Notice`` field fails here until someone decides whether
records encode it or drop it (and says why).
"""

from __future__ import annotations

import dataclasses

from deplog.client.map import record
from deplog.client.map.record import DROPPED_NOTICE_FIELDS, RecordNotice
from deplog.client.model.notice import ACTIONS, EVENT_KINDS, REASONS, Notice
from deplog.client.model.status import FoldNotice, InvalidMark

SPEC_ACTION_CODES = ("deprecate", "revoke", "withdraw", "invalid")
"""``docs/fold-spec.md`` section 3: ``u8 action``, and 3 for an invalid entry's mark."""
SPEC_REASON_CODES = (
    "superseded",
    "end_of_life",
    "security",
    "critical_bug",
    "schema_change",
    "moved",
    "policy",
    "other",
)
SPEC_EVENT_CODES = ("introduced", "fixed", "last_affected")

NOTICE_FIELDS = {field.name for field in dataclasses.fields(Notice)}
RECORD_FIELDS = {field.name for field in dataclasses.fields(RecordNotice)} - {"index"}
FOLD_READS = {
    name
    for name, member in vars(FoldNotice).items()
    if not name.startswith("_") and (isinstance(member, property) or callable(member))
} - {"affects"}


def test_every_notice_field_is_encoded_in_the_record_or_dropped_on_purpose() -> None:
    undecided = NOTICE_FIELDS - RECORD_FIELDS - set(DROPPED_NOTICE_FIELDS)
    assert not undecided, (
        "a Notice field neither encoded in client/map/record.py (RecordNotice and the item "
        "codec) nor listed in DROPPED_NOTICE_FIELDS with why"
    )
    assert not RECORD_FIELDS & set(DROPPED_NOTICE_FIELDS), "a field both encoded and dropped"
    assert RECORD_FIELDS <= NOTICE_FIELDS, "a record keeps only what a notice says"
    assert set(DROPPED_NOTICE_FIELDS) <= NOTICE_FIELDS, "a dropped field that is no field"
    assert all(DROPPED_NOTICE_FIELDS.values()), "every dropped field says why"


def test_every_field_the_fold_reads_is_encoded_but_the_publisher() -> None:
    """The fold reads ``FoldNotice``'s members: a record keeps each of them, except the
    publisher, which admission already checked (a withdraw names its own publisher's
    notice), so a proof's record folds as the log does."""
    assert FOLD_READS <= NOTICE_FIELDS
    assert {"publisher"} == FOLD_READS - RECORD_FIELDS
    assert "publisher" in DROPPED_NOTICE_FIELDS
    assert set(DROPPED_NOTICE_FIELDS) - FOLD_READS == {"issued_at", "sequence", "message"}


def test_a_record_item_of_a_notice_keeps_every_encoded_field() -> None:
    notice = Notice.from_json(
        {
            "tool_id": "tool:org.example/fetch",
            "action": "deprecate",
            "affected": {
                "versions": ["1.0.0"],
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "2.0.0"}]}],
            },
            "schema_digest": "sha256:" + "ab" * 32,
            "reasons": ["superseded", "security"],
            "advisories": ["CVE-2026-1234"],
            "replacement": {"tool_id": "tool:org.example/fetch2", "version": "2.0.0"},
            "effective_at": "2026-02-01T00:00:00Z",
            "sunset_at": "2026-06-01T00:00:00Z",
            "issued_at": "2026-01-15T09:30:00Z",
            "publisher": "acme",
            "sequence": 7,
            "message": "moved to fetch2",
        }
    )
    item = RecordNotice.of(12, notice)
    assert all(getattr(item, name) == getattr(notice, name) for name in RECORD_FIELDS)
    decoded = record.StatusRecord.decode(
        record.StatusRecord.of(notice.tool_id, [(12, notice)]).encode(), notice.tool_id
    )
    assert decoded.notices == (item,)


def test_the_notice_enumerations_are_the_specs_byte_codes_in_order() -> None:
    """The record's byte codes are the positions in ``client.model.notice``'s tuples (one
    definition), so those tuples keep the spec's order; the mark's code 3 is the record's
    own, after the actions."""
    assert (*ACTIONS, InvalidMark.action) == SPEC_ACTION_CODES
    assert REASONS == SPEC_REASON_CODES
    assert EVENT_KINDS == SPEC_EVENT_CODES
    assert {action: i for i, action in enumerate(SPEC_ACTION_CODES)} == record._ACTION_BYTE
    assert {reason: i for i, reason in enumerate(SPEC_REASON_CODES)} == record._REASON_BYTE
    assert {kind: bytes((i,)) for i, kind in enumerate(SPEC_EVENT_CODES)} == record._EVENT_BYTE
