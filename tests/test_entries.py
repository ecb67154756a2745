"""Tests for client/entries.py: log entry encoding and publisher statements."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.errors import DeplogError
from deplog.client.model import canonical
from deplog.client.model.entries import (
    MAX_ENTRY_BYTES,
    PUBLISHER_STATEMENT_PREFIX,
    EntryFormatError,
    EntrySignatureError,
    NoticeEntry,
    PublisherEntry,
    PublisherStatement,
    decode_entry,
    encode_entry,
    sign_publisher_statement,
)
from deplog.client.model.notice import Envelope, Notice, NoticeError
from deplog.client.tlog.note import KeyFormatError, Signer
from tests.builders import (
    NOW,
    notice_json,
    notices,
    register_statement,
)


def statement_json(**overrides: Any) -> dict[str, Any]:
    key = Signer.generate("k").verifier().vkey()
    base: dict[str, Any] = {
        "action": "register",
        "publisher": "example",
        "namespaces": ["org.example"],
        "keys": [key],
        "issued_at": "2026-01-01T00:00:00Z",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def statement_code(obj: Any) -> str:
    """The code a statement is refused with: the schema's, or the key parser's."""
    with pytest.raises((NoticeError, KeyFormatError)) as e:
        PublisherStatement.from_json(obj)
    return e.value.code


def test_notice_entry_encodes_with_type_notice(signed_envelope: Envelope) -> None:
    leaf = encode_entry(NoticeEntry(signed_envelope))
    obj = json.loads(leaf)
    assert obj["type"] == "notice"
    assert set(obj) == {"type", "notice", "signature"}
    assert leaf == canonical.dumps(obj)


def test_notice_entry_round_trips(signed_envelope: Envelope) -> None:
    entry = NoticeEntry(signed_envelope)
    assert decode_entry(encode_entry(entry)) == entry


def test_publisher_entry_round_trips_and_verifies(authority: Signer, publisher_key: Signer) -> None:
    entry = sign_publisher_statement(register_statement(keys=(publisher_key,)), authority)
    decoded = decode_entry(encode_entry(entry))
    assert decoded == entry
    assert isinstance(decoded, PublisherEntry)
    decoded.verify(authority.verifier())


def test_publisher_signature_is_domain_separated(authority: Signer) -> None:
    st_ = register_statement(keys=(Signer.generate("k"),))
    entry = sign_publisher_statement(st_, authority)
    msg = PUBLISHER_STATEMENT_PREFIX + canonical.dumps(st_.to_json())
    assert authority.verifier().verify(msg, entry.signature)
    assert not authority.verifier().verify(canonical.dumps(st_.to_json()), entry.signature)


def test_publisher_entry_bad_signature(authority: Signer) -> None:
    entry = sign_publisher_statement(register_statement(keys=(Signer.generate("k"),)), authority)
    forged = PublisherEntry(register_statement(publisher="mallory"), entry.signature, entry.key_id)
    with pytest.raises(EntrySignatureError) as e:
        forged.verify(authority.verifier())
    assert e.value.code == "bad_authority_signature"


def test_publisher_entry_signed_by_another_authority_is_refused(authority: Signer) -> None:
    entry = sign_publisher_statement(register_statement(keys=(Signer.generate("k"),)), authority)
    with pytest.raises(EntrySignatureError) as e:
        entry.verify(Signer.generate("other-log").verifier())
    assert e.value.code == "bad_authority_signature"


def test_statement_round_trips() -> None:
    obj = statement_json()
    assert PublisherStatement.from_json(obj).to_json() == obj


@pytest.mark.parametrize("action", ["add_key", "revoke_key"])
def test_key_statements_need_only_keys(action: str) -> None:
    st_ = PublisherStatement.from_json(statement_json(action=action, namespaces=None))
    assert st_.action == action and len(st_.verifiers()) == 1


def test_revoke_publisher_statement_has_no_keys() -> None:
    obj = statement_json(action="revoke_publisher", namespaces=None, keys=None)
    assert PublisherStatement.from_json(obj).keys == ()


def test_statement_bad_action() -> None:
    assert statement_code(statement_json(action="delete")) == "bad_action"


def test_statement_register_without_namespaces_is_missing_field() -> None:
    assert statement_code(statement_json(namespaces=None)) == "missing_field"


def test_statement_namespaces_outside_register_not_allowed() -> None:
    assert statement_code(statement_json(action="add_key")) == "field_not_allowed"


def test_statement_bad_key() -> None:
    assert statement_code(statement_json(keys=["not-a-key"])) == "bad_key"


def test_statement_cosigner_key_is_bad_key() -> None:
    cosigner = Signer.generate("w", sig_type=0x04).verifier().vkey()
    assert statement_code(statement_json(keys=[cosigner])) == "bad_key"


@pytest.mark.parametrize("ns", ["example", "Org.Example", "org..example", "-org.example"])
def test_statement_bad_namespace(ns: str) -> None:
    assert statement_code(statement_json(namespaces=[ns])) == "bad_namespace"


def test_statement_duplicate_namespace() -> None:
    assert statement_code(statement_json(namespaces=["a.b", "a.b"])) == "duplicate_value"


def test_statement_unknown_field() -> None:
    assert statement_code(statement_json(extra=1)) == "unknown_field"


def test_decode_unknown_type_is_malformed_entry() -> None:
    with pytest.raises(EntryFormatError) as e:
        decode_entry(b'{"type":"other"}')
    assert e.value.code == "malformed_entry"


@pytest.mark.parametrize("leaf", [b"[]", b'{"notice":{}}', b'{"type":1}'])
def test_decode_non_entry_is_malformed_entry(leaf: bytes) -> None:
    with pytest.raises(EntryFormatError) as e:
        decode_entry(leaf)
    assert e.value.code == "malformed_entry"


def test_decode_entry_with_extra_member_is_malformed_entry(signed_envelope: Envelope) -> None:
    obj = NoticeEntry(signed_envelope).to_json()
    obj["extra"] = 1
    with pytest.raises(EntryFormatError) as e:
        decode_entry(canonical.dumps(obj))
    assert e.value.code == "malformed_entry"


def test_decode_noncanonical_leaf_is_refused(signed_envelope: Envelope) -> None:
    leaf = json.dumps(NoticeEntry(signed_envelope).to_json()).encode()
    with pytest.raises(EntryFormatError) as e:
        decode_entry(leaf)
    assert e.value.code == "noncanonical_entry"


def test_decode_oversized_leaf_is_leaf_too_large() -> None:
    with pytest.raises(EntryFormatError) as e:
        decode_entry(b" " * (MAX_ENTRY_BYTES + 1))
    assert e.value.code == "leaf_too_large"


def test_decode_keeps_specific_notice_code(signed_envelope: Envelope) -> None:
    obj = NoticeEntry(signed_envelope).to_json()
    obj["notice"]["action"] = "delete"
    with pytest.raises(NoticeError) as e:
        decode_entry(canonical.dumps(obj))
    assert e.value.code == "bad_action"


def test_statement_issued_at_round_trips() -> None:
    st_ = register_statement(keys=(Signer.generate("k"),))
    assert PublisherStatement.from_json(st_.to_json()).issued_at == NOW


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=15,
)


@given(json_values, st.sampled_from(["notice", "publisher", None]))
def test_arbitrary_leaf_raises_only_deplog_errors(value: object, kind: str | None) -> None:
    if kind is not None and isinstance(value, dict):
        value["type"] = kind
    with contextlib.suppress(DeplogError):
        decode_entry(canonical.dumps(value))


@given(json_values)
def test_arbitrary_statement_raises_only_deplog_errors(value: object) -> None:
    with contextlib.suppress(DeplogError):
        PublisherStatement.from_json(value)


@settings(max_examples=100)
@given(notices())
def test_notice_leaf_is_the_canonical_encoding_of_the_whole_entry(obj: dict[str, Any]) -> None:
    envelope = Envelope.sign(Notice.from_json(obj), Signer.generate("acme"))
    entry = NoticeEntry(envelope)
    assert encode_entry(entry) == canonical.dumps(entry.to_json())


@pytest.mark.parametrize(
    "fields",
    [
        {
            "affected": {
                "ranges": [
                    {
                        "type": "SEMVER",
                        "events": [{"introduced": f"{m}.0.0"}, {"fixed": f"{m}.1.0"}],
                    }
                    for m in (1, 2, 3)
                ]
            }
        },
        {"message": "moved to C:\\users\\shared"},
        {"message": 'a quote ", a slash /, \u00e9t\u00e9 and \U0001f600'},
    ],
    ids=["three-ranges", "backslashes", "quotes-and-non-ascii"],
)
def test_a_leaf_the_cli_could_always_produce_decodes(fields: dict[str, Any]) -> None:
    notice = Notice.from_json(notice_json(**fields))
    entry = NoticeEntry(Envelope.sign(notice, Signer.generate("acme")))
    assert decode_entry(encode_entry(entry)) == entry
