"""Tests for client/notice.py: the notice schema, the envelope and its signature."""

from __future__ import annotations

import base64
import contextlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.client.errors import DeplogError, TooLargeError
from deplog.client.model import canonical
from deplog.client.model.notice import (
    MAX_ENVELOPE_BYTES,
    Envelope,
    Notice,
    NoticeError,
    NoticeSignatureError,
    parse_tool_id,
)
from deplog.client.model.semver import SemverError, Version
from deplog.client.tlog.note import Signer
from tests.builders import (
    TOOL,
    make_notice,
    notice_json,
    notices,
    revoke_json,
    withdraw_json,
)


def code_of(obj: Any) -> str:
    """The code a notice is refused with: the schema's, or the version parser's."""
    with pytest.raises((NoticeError, SemverError)) as e:
        Notice.from_json(obj)
    return e.value.code


def v(s: str) -> Version:
    return Version.parse(s)


# --- accepted notices -----------------------------------------------------------


def test_valid_deprecate_parses_to_typed_values() -> None:
    n = make_notice()
    assert n.action == "deprecate"
    assert n.effective_at == datetime(2026, 2, 1, tzinfo=UTC)
    assert n.sunset_at == datetime(2026, 6, 1, tzinfo=UTC)
    assert n.affected is not None and [x.text for x in n.affected.versions] == ["1.0.0", "1.1.0"]
    assert n.namespace == "org.example"


def test_valid_revoke_and_withdraw_parse() -> None:
    assert Notice.from_json(revoke_json()).action == "revoke"
    w = Notice.from_json(withdraw_json(3))
    assert w.withdraws == 3 and w.affected is None


def test_to_json_round_trips_exactly() -> None:
    obj = notice_json(
        replacement={"tool_id": "tool:org.example/search2", "version": "2.0.0"},
        schema_digest="sha256:" + "ab" * 32,
        advisories=["GHSA-2222-cfgh-jmpq"],
        message="Use search2; see the changelog.",
        affected={
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "2.0.0"}]}]
        },
    )
    assert Notice.from_json(obj).to_json() == obj


def test_canonical_bytes_are_rfc8785_of_the_json() -> None:
    n = make_notice()
    assert n.canonical_bytes() == canonical.dumps(notice_json())
    assert n.canonical_bytes().startswith(b'{"action":"deprecate","affected"')


def test_message_may_contain_unicode_text() -> None:
    assert make_notice(message="Veraltet \u2014 bitte \u00fcbernehmen 👍").message is not None


def test_message_of_exactly_500_characters_is_accepted() -> None:
    assert make_notice(message="x" * 500).message == "x" * 500


def test_sunset_equal_to_effective_is_accepted() -> None:
    n = make_notice(sunset_at="2026-02-01T00:00:00Z")
    assert n.sunset_at == n.effective_at


def test_leap_day_timestamp_is_accepted() -> None:
    assert make_notice(issued_at="2024-02-29T23:59:59Z").issued_at.day == 29


# --- refusals: one code per kind ------------------------------------------------


def test_not_an_object_is_wrong_type() -> None:
    assert code_of([]) == "wrong_type"


@pytest.mark.parametrize(
    "field", ["tool_id", "action", "reasons", "effective_at", "issued_at", "publisher", "sequence"]
)
def test_missing_required_field(field: str) -> None:
    assert code_of(notice_json(**{field: None})) == "missing_field"


def test_deprecate_without_affected_is_missing_field() -> None:
    assert code_of(notice_json(affected=None)) == "missing_field"


def test_withdraw_without_withdraws_is_missing_field() -> None:
    assert code_of(withdraw_json(1, withdraws=None)) == "missing_field"


def test_unknown_field_is_refused() -> None:
    assert code_of(notice_json(endpoint="https://x")) == "unknown_field"


@pytest.mark.parametrize(
    "overrides",
    [
        {"tool_id": 5},
        {"sequence": "1"},
        {"sequence": True},
        {"reasons": "security"},
        {"affected": []},
        {"message": 5},
        {"effective_at": 1700000000},
    ],
)
def test_wrong_json_type_is_wrong_type(overrides: dict[str, Any]) -> None:
    assert code_of(notice_json(**overrides)) == "wrong_type"


def test_message_over_500_characters_is_too_long() -> None:
    assert code_of(notice_json(message="x" * 501)) == "too_long"


def test_too_many_versions_is_too_long() -> None:
    versions = [f"1.0.{i}" for i in range(257)]
    assert code_of(notice_json(affected={"versions": versions})) == "too_long"


def test_too_many_advisories_is_too_long() -> None:
    adv = [f"CVE-2026-{1000 + i}" for i in range(33)]
    assert code_of(notice_json(advisories=adv)) == "too_long"


@pytest.mark.parametrize(
    "overrides",
    [{"reasons": []}, {"advisories": []}, {"affected": {"versions": []}}],
)
def test_empty_list_is_refused(overrides: dict[str, Any]) -> None:
    assert code_of(notice_json(**overrides)) == "empty_list"


@pytest.mark.parametrize(
    "overrides",
    [
        {"reasons": ["security", "security"]},
        {"advisories": ["CVE-2026-1234", "CVE-2026-1234"]},
        {"affected": {"versions": ["1.0.0", "1.0.0"]}},
    ],
)
def test_duplicate_list_value_is_refused(overrides: dict[str, Any]) -> None:
    assert code_of(notice_json(**overrides)) == "duplicate_value"


@pytest.mark.parametrize(
    "tool_id",
    [
        "org.example/search",
        "tool:example/search",
        "tool:Org.Example/search",
        "tool:org.example/Search",
        "tool:org.example/",
        "tool:org.example/a/b",
        "tool:org.-example/search",
        "tool:org.example-/search",
        "tool:org..example/search",
        "tool:org.example/.search",
        "tool:" + "a" * 64 + ".example/search",
        "tool:" + ".".join(["a" * 63] * 4) + "/search",
        "tool:org.example/" + "a" * 129,
        "tool:org.exampl\u0435/search",
    ],
)
def test_bad_tool_id_is_refused(tool_id: str) -> None:
    assert code_of(notice_json(tool_id=tool_id)) == "bad_tool_id"


def test_longest_tool_name_and_label_are_accepted() -> None:
    assert parse_tool_id("tool:" + "a" * 63 + ".b/" + "n" * 128)[1] == "n" * 128


def test_bad_replacement_tool_id_is_refused() -> None:
    bad = {"tool_id": "tool:x/y", "version": "1.0.0"}
    assert code_of(notice_json(replacement=bad)) == "bad_tool_id"


@pytest.mark.parametrize(
    "overrides",
    [
        {"affected": {"versions": ["1.0"]}},
        {"replacement": {"tool_id": TOOL, "version": "v2"}},
        {"affected": {"ranges": [{"type": "SEMVER", "events": [{"introduced": "1.x"}]}]}},
    ],
)
def test_bad_version_is_refused(overrides: dict[str, Any]) -> None:
    assert code_of(notice_json(**overrides)) == "bad_version"


def _range(*events: dict[str, str], rtype: str = "SEMVER") -> dict[str, Any]:
    return {"affected": {"ranges": [{"type": rtype, "events": list(events)}]}}


@pytest.mark.parametrize(
    "overrides",
    [
        _range({"introduced": "1.0.0"}, rtype="ECOSYSTEM"),
        _range({"fixed": "1.0.0"}),
        _range({"introduced": "1.0.0"}, {"introduced": "2.0.0"}),
        _range({"introduced": "2.0.0"}, {"fixed": "1.0.0"}),
        _range({"introduced": "1.0.0"}, {"fixed": "1.0.0"}),
        _range({"introduced": "1.0.0"}, {"fixed": "2.0.0"}, {"introduced": "1.5.0"}),
        _range({"introduced": "1.0.0"}, {"fixed": "2.0.0"}, {"fixed": "3.0.0"}),
        _range({"introduced": "1.0.0"}, {"fixed": "2.0.0"}, {"introduced": "0"}),
        _range({"introduced": "1.0.0", "fixed": "2.0.0"}),
        _range({"limit": "1.0.0"}),
        _range({"introduced": "1.0.0+a"}, {"fixed": "1.0.0+b"}),
    ],
)
def test_bad_range_is_refused(overrides: dict[str, Any]) -> None:
    assert code_of(notice_json(**overrides)) == "bad_range"


def test_range_with_unknown_member_is_unknown_field() -> None:
    r = {"type": "SEMVER", "events": [{"introduced": "0"}], "database_specific": {}}
    assert code_of(notice_json(affected={"ranges": [r]})) == "unknown_field"


def test_empty_affected_is_missing_field() -> None:
    assert code_of(notice_json(affected={})) == "missing_field"


@pytest.mark.parametrize(
    "ts",
    [
        "2026-02-30T00:00:00Z",
        "2026-02-01T24:00:00Z",
        "2026-12-31T23:59:60Z",
        "2026-02-01T00:00:00.5Z",
        "2026-02-01T00:00:00+00:00",
        "2026-02-01t00:00:00z",
        "2026-02-01 00:00:00Z",
        "0000-01-01T00:00:00Z",
        "2026-2-01T00:00:00Z",
        "2026-02-01T00:00:00Z\n",
    ],
)
def test_bad_timestamp_is_refused(ts: str) -> None:
    assert code_of(notice_json(issued_at=ts)) == "bad_timestamp"


def test_sunset_before_effective_is_refused() -> None:
    assert code_of(notice_json(sunset_at="2026-01-31T23:59:59Z")) == "sunset_before_effective"


@pytest.mark.parametrize(
    "digest", ["sha256:" + "AB" * 32, "sha256:" + "ab" * 31, "sha512:" + "ab" * 32, "ab" * 32]
)
def test_bad_digest_is_refused(digest: str) -> None:
    assert code_of(notice_json(schema_digest=digest)) == "bad_digest"


def test_bad_action_is_refused() -> None:
    assert code_of(notice_json(action="delete")) == "bad_action"


def test_bad_reason_is_refused() -> None:
    assert code_of(notice_json(reasons=["because"])) == "bad_reason"


@pytest.mark.parametrize(
    "adv", ["CVE-26-1234", "CVE-2026-123", "cve-2026-1234", "GHSA-aaaa-bbbb-cccc", "GHSA-2222-3333"]
)
def test_bad_advisory_is_refused(adv: str) -> None:
    assert code_of(notice_json(advisories=[adv])) == "bad_advisory"


def test_revoke_for_security_requires_advisory() -> None:
    assert code_of(revoke_json(advisories=None)) == "advisory_required"


def test_revoke_for_other_reason_needs_no_advisory() -> None:
    assert Notice.from_json(revoke_json(advisories=None, reasons=["policy"])).advisories == ()


@pytest.mark.parametrize("pub", ["", "Example", "-example", "ex_ample", "a" * 64])
def test_bad_publisher_is_refused(pub: str) -> None:
    assert code_of(notice_json(publisher=pub)) == "bad_publisher"


@pytest.mark.parametrize("seq", [0, -1, 2**53])
def test_bad_sequence_is_refused(seq: int) -> None:
    assert code_of(notice_json(sequence=seq)) == "bad_sequence"


def test_largest_sequence_is_accepted() -> None:
    assert make_notice(sequence=2**53 - 1).sequence == 2**53 - 1


def test_negative_withdraw_index_is_refused() -> None:
    assert code_of(withdraw_json(-1)) == "bad_withdraw_index"


@pytest.mark.parametrize(
    "obj",
    [
        notice_json(withdraws=1),
        revoke_json(sunset_at="2026-06-01T00:00:00Z"),
        withdraw_json(1, affected={"versions": ["1.0.0"]}),
        withdraw_json(1, replacement={"tool_id": TOOL, "version": "2.0.0"}),
        withdraw_json(1, schema_digest="sha256:" + "ab" * 32),
        withdraw_json(1, sunset_at="2026-06-01T00:00:00Z"),
    ],
)
def test_field_not_allowed_for_action(obj: dict[str, Any]) -> None:
    assert code_of(obj) == "field_not_allowed"


@pytest.mark.parametrize("msg", ["", "line\nbreak", "tab\there", "bidi\u202eoverride", "ls\u2028"])
def test_bad_message_is_refused(msg: str) -> None:
    assert code_of(notice_json(message=msg)) == "bad_message"


def test_error_message_never_echoes_input() -> None:
    secret = "tool:SECRET-VALUE/x"
    with pytest.raises(NoticeError) as e:
        Notice.from_json(notice_json(tool_id=secret))
    assert "SECRET" not in str(e.value)


# --- affects --------------------------------------------------------------------


def test_affects_exact_version_ignoring_build_metadata() -> None:
    n = make_notice()
    assert n.affects(v("1.0.0")) and n.affects(v("1.0.0+build7"))
    assert not n.affects(v("1.0.1")) and not n.affects(v("1.0.0-rc.1"))


def test_affects_fixed_range_is_half_open() -> None:
    n = make_notice(**_range({"introduced": "1.0.0"}, {"fixed": "2.0.0"}))
    assert n.affects(v("1.0.0")) and n.affects(v("1.9.9")) and n.affects(v("2.0.0-rc.1"))
    assert not n.affects(v("2.0.0")) and not n.affects(v("0.9.0"))


def test_affects_last_affected_is_inclusive() -> None:
    n = make_notice(**_range({"introduced": "1.0.0"}, {"last_affected": "1.4.0"}))
    assert n.affects(v("1.4.0")) and not n.affects(v("1.4.1"))


def test_affects_introduced_zero_means_from_the_beginning() -> None:
    n = make_notice(**_range({"introduced": "0"}, {"fixed": "1.0.0"}))
    assert n.affects(v("0.0.0")) and n.affects(v("0.0.0-alpha")) and not n.affects(v("1.0.0"))


def test_affects_open_ended_range() -> None:
    n = make_notice(**_range({"introduced": "3.0.0"}))
    assert n.affects(v("99.0.0")) and not n.affects(v("2.9.9"))


def test_affects_multiple_intervals_in_one_range() -> None:
    n = make_notice(
        **_range(
            {"introduced": "1.0.0"}, {"fixed": "1.2.0"}, {"introduced": "2.0.0"}, {"fixed": "2.1.0"}
        )
    )
    assert n.affects(v("1.1.0")) and n.affects(v("2.0.5"))
    assert not n.affects(v("1.5.0"))


def test_withdraw_affects_nothing() -> None:
    assert not Notice.from_json(withdraw_json(0)).affects(v("1.0.0"))


# --- envelope -------------------------------------------------------------------


def test_envelope_sign_then_verify(publisher_key: Signer, signed_envelope: Envelope) -> None:
    signed_envelope.verify(publisher_key.verifier())


def test_envelope_parse_round_trips(signed_envelope: Envelope) -> None:
    body = json.dumps(signed_envelope.to_json(), indent=2).encode()
    parsed = Envelope.parse(body)
    assert parsed == signed_envelope
    assert parsed.canonical_bytes() == signed_envelope.canonical_bytes()


def test_envelope_json_shape(signed_envelope: Envelope, publisher_key: Signer) -> None:
    j = signed_envelope.to_json()
    assert set(j) == {"notice", "signature"}
    assert j["signature"]["key_id"] == publisher_key.key_id.hex()
    assert base64.b64decode(j["signature"]["sig"]) == signed_envelope.signature


def test_envelope_with_tampered_notice_fails_verification(
    publisher_key: Signer, signed_envelope: Envelope
) -> None:
    j = signed_envelope.to_json()
    j["notice"]["sequence"] = 2
    tampered = Envelope.from_json(j)
    with pytest.raises(NoticeSignatureError) as e:
        tampered.verify(publisher_key.verifier())
    assert e.value.code == "bad_signature"


def test_envelope_verify_with_other_key_is_key_mismatch(signed_envelope: Envelope) -> None:
    with pytest.raises(NoticeSignatureError) as e:
        signed_envelope.verify(Signer.generate("other").verifier())
    assert e.value.code == "key_mismatch"


def test_envelope_over_64_kib_is_too_large() -> None:
    with pytest.raises(TooLargeError) as e:
        Envelope.parse(b" " * (MAX_ENVELOPE_BYTES + 1))
    assert e.value.code == "too_large"


def test_envelope_with_bad_json_keeps_json_code() -> None:
    with pytest.raises(DeplogError) as e:
        Envelope.parse(b'{"notice": {}, "notice": {}}')
    assert e.value.code == "duplicate_field"


def _with_sig(env: Envelope, **sig: Any) -> dict[str, Any]:
    j = env.to_json()
    j["signature"].update(sig)
    return j


@pytest.mark.parametrize(
    "sig",
    [
        {"key_id": "ABCDEF12"},
        {"key_id": "abcdef"},
        {"sig": base64.b64encode(b"x" * 63).decode()},
        {"sig": base64.b64encode(b"x" * 64).decode().rstrip("=")},
        {"sig": base64.urlsafe_b64encode(b"\xff" * 64).decode()},
        {"sig": "A" * 85 + "B=="},  # non-zero padding bits
        {"sig": "\u00e9" * 88},
    ],
)
def test_bad_signature_encoding_is_refused(signed_envelope: Envelope, sig: dict[str, Any]) -> None:
    with pytest.raises(NoticeError) as e:
        Envelope.from_json(_with_sig(signed_envelope, **sig))
    assert e.value.code == "bad_signature_encoding"


def test_envelope_unknown_member_is_refused(signed_envelope: Envelope) -> None:
    j = signed_envelope.to_json()
    j["extra"] = 1
    with pytest.raises(NoticeError) as e:
        Envelope.from_json(j)
    assert e.value.code == "unknown_field"


# --- properties -----------------------------------------------------------------


@given(notices())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_generated_notice_round_trips(obj: dict[str, Any]) -> None:
    n = Notice.from_json(obj)
    assert n.to_json() == obj
    assert Notice.from_json(canonical.loads(n.canonical_bytes())) == n


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.floats(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=15,
)


@given(json_values)
def test_arbitrary_json_raises_only_deplog_errors(value: object) -> None:
    for parse in (Notice.from_json, Envelope.from_json):
        with contextlib.suppress(DeplogError):
            parse(value)


@given(notices(), st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_mutated_notice_raises_only_deplog_errors(obj: dict[str, Any], data: st.DataObject) -> None:
    field = data.draw(st.sampled_from([*sorted(obj), "sunset_at", "withdraws", "affected"]))
    obj[field] = data.draw(json_values)
    with contextlib.suppress(DeplogError):
        Notice.from_json(obj)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_envelope_raises_only_deplog_errors(body: bytes) -> None:
    with contextlib.suppress(DeplogError):
        Envelope.parse(body)
