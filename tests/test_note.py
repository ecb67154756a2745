"""Tests of client.note against C2SP signed-note v1.0.0 and public interop vectors."""

from __future__ import annotations

import base64
import contextlib
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.errors import FormatError, VerificationError
from deplog.client.tlog.note import (
    MAX_NOTE_SIZE,
    MAX_SIGNATURES,
    SIG_TYPE_COSIGNATURE_V1,
    SIG_TYPE_ED25519,
    InvalidNoteSignatureError,
    KeyFormatError,
    NoteFormatError,
    NoteSignature,
    Signer,
    UnverifiedNoteError,
    Verifier,
    add_signature_lines,
    cosigned_message,
    key_id,
    open_note,
    parse_note,
    sign_note,
)

# golang.org/x/mod sumdb/note documentation example: Ed25519 is deterministic, so
# our signer must reproduce Go's note byte for byte.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT
    + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNX"
    "gKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
).encode()

# Verifier keys published by other implementations (signed-note example, transparency-dev).
EXAMPLE_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
PLUS_VKEY = "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6"
COSIGNER_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"

# A real checkpoint of a public log with its Ed25519 signature and witness cosignatures.
REAL_LOG_VKEY = (
    "arche2025h1.staging.ct.transparency.dev+ba2f06c0+AU0vHmlGCS/PdN8b2OaGmKprLI8HKM+dJ472xgFYh15f"
)
REAL_CHECKPOINT = """arche2025h1.staging.ct.transparency.dev
1432088532
U7WM79jrzyhGZ5/GUBTpM7NzwdyfFx61t3RovgcC4Ro=

\u2014 arche2025h1.staging.ct.transparency.dev zTM8sQAAAZ5W0WdjBAMARjBEAiBjW5IQf9pvsYLfQFX6hoGREPMHbdQ3urbllzalApkptQIgIpwtEroeW2BXaHAI4kJXFbon5Ch9MNL5zRNZ55lvGt0=
\u2014 arche2025h1.staging.ct.transparency.dev ui8GwCF1+kWqZrxGdhj4aX3gcw7XUlXQQabg/27lefwhUkzbC3NygNI75MdhL1bfTW9g8Ei59RA23oHP7Ry1k3ZFWwQ=
\u2014 transparency.dev/DEV:witness-little-garden 2AQqhwAAAABqEiEgzgFIqqhbUoDwjMWE6UP8nd8/KYTzwZ2rhIgcqoXHAwVkjZr4AscylP3v7sEodkRAErumC2q44vdgJY096st5BQ==
\u2014 witness1.smartit.nu/witness1 pIyCDwAAAABqEiEghIp82KWebrw7/oHQwlTAm3g2RKS4+eebl8eO0WH+/iEcxZ75W3u5hNI7TOQtmJbqmNWVuE0tgh0XwzdZsDsUAQ==
\u2014 remora.n621.de 2net5wAAAABqEiEgPlfF3V06o0Y+fHM+J5J9s27wgxxcOVSpZ/2g/KSiXCg9DEZI+aVCIobWX9sXTynk5XeU/zZ0WBxtqB0DrAWfBw==
\u2014 witness.stagemole.eu Z/euoAAAAABqEiEgw0i+7g2ENfDAWHmtRzCfKTHSDwYDJA2NmKeGi9Y8FtEyOUvVr+AJmIY/2TUFucgKi7lI7cUiOvKFYe/TmN9DAg==
""".encode()  # noqa: E501


def spec_key_id(name: str, sig_type: int, public_key: bytes) -> bytes:
    """signed-note: key ID = SHA-256(key name || 0x0A || signature type || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\x0a" + bytes([sig_type]) + public_key).digest()[:4]


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.fixture
def signer() -> Signer:
    return Signer.from_seed("example.com/log", bytes(range(32)))


@pytest.fixture
def other() -> Signer:
    return Signer.from_seed("example.com/other", bytes(range(1, 33)))


@pytest.fixture
def text() -> str:
    return "example.com/log\n42\nAAAA\n"


@pytest.fixture
def signed(signer: Signer, text: str) -> bytes:
    return sign_note(text, signer)


def flip(data: bytes, i: int) -> bytes:
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


# Interop vectors


def test_sign_note_reproduces_go_note_byte_for_byte() -> None:
    assert sign_note(GO_TEXT, Signer.parse(GO_SKEY)) == GO_NOTE


def test_open_note_accepts_go_note() -> None:
    note = open_note(GO_NOTE, [Verifier.parse(GO_VKEY)])
    assert note.text == GO_TEXT
    assert [s.name for s in note.signatures] == ["PeterNeumann"]


def test_skey_round_trips_go_private_key() -> None:
    assert Signer.parse(GO_SKEY).skey() == GO_SKEY


def test_signer_verifier_is_go_verifier_key() -> None:
    assert Signer.parse(GO_SKEY).verifier().vkey() == GO_VKEY


@pytest.mark.parametrize("vkey", [EXAMPLE_VKEY, GO_VKEY, PLUS_VKEY])
def test_published_verifier_keys_round_trip(vkey: str) -> None:
    assert Verifier.parse(vkey).vkey() == vkey


def test_verifier_key_with_plus_in_base64_parses() -> None:
    verifier = Verifier.parse(PLUS_VKEY)
    assert verifier.name == "TEST"
    assert verifier.key_id == bytes.fromhex("7997405c")


def test_real_checkpoint_log_signature_verifies() -> None:
    note = open_note(REAL_CHECKPOINT, [Verifier.parse(REAL_LOG_VKEY)])
    assert note.text.splitlines()[1] == "1432088532"
    assert len(note.unverified) == 5


def test_real_checkpoint_cosignature_verifies() -> None:
    note = open_note(REAL_CHECKPOINT, [Verifier.parse_cosigner(COSIGNER_VKEY)])
    assert [s.name for s in note.signatures] == ["remora.n621.de"]


# Key IDs


def test_key_id_is_spec_definition() -> None:
    public = bytes(range(32))
    assert key_id("example.com/log", 0x01, public) == spec_key_id("example.com/log", 0x01, public)


def test_key_id_of_signed_note_example_key() -> None:
    verifier = Verifier.parse(EXAMPLE_VKEY)
    assert spec_key_id(verifier.name, 0x01, verifier.public_key) == bytes.fromhex("530d903a")


def test_one_key_has_different_ids_for_log_and_cosignature_types(signer: Signer) -> None:
    cosigner = signer.with_sig_type(SIG_TYPE_COSIGNATURE_V1)
    assert cosigner.public_key == signer.public_key
    assert cosigner.key_id == spec_key_id(signer.name, 0x04, signer.public_key)
    assert cosigner.key_id != signer.key_id


def test_verifier_with_wrong_key_id_is_refused(signer: Signer) -> None:
    with pytest.raises(KeyFormatError):
        Verifier(signer.name, b"\x00\x00\x00\x00", signer.public_key)


# Verifier keys


def test_vkey_round_trips(signer: Signer) -> None:
    vkey = signer.verifier().vkey()
    assert Verifier.parse(vkey) == signer.verifier()


def test_cosigner_vkey_round_trips(signer: Signer) -> None:
    verifier = signer.with_sig_type(SIG_TYPE_COSIGNATURE_V1).verifier()
    assert Verifier.parse_cosigner(verifier.vkey()) == verifier


def test_parse_refuses_cosigner_key() -> None:
    with pytest.raises(KeyFormatError):
        Verifier.parse(COSIGNER_VKEY)


def test_parse_cosigner_refuses_log_key() -> None:
    with pytest.raises(KeyFormatError):
        Verifier.parse_cosigner(EXAMPLE_VKEY)


def _vkey(name: str, blob: bytes) -> str:
    return f"{name}+{spec_key_id(name, blob[0], blob[1:]).hex()}+{b64(blob)}"


@pytest.mark.parametrize(
    "vkey",
    [
        "",
        "example.com/foo",
        "example.com/foo+530d903a",
        EXAMPLE_VKEY.replace("530d903a", "530d903"),
        EXAMPLE_VKEY.replace("530d903a", "530D903A"),
        EXAMPLE_VKEY.replace("530d903a", "530d903a00"),
        EXAMPLE_VKEY.replace("530d903a", "530d903b"),
        EXAMPLE_VKEY + "!",
        EXAMPLE_VKEY + "\n",
        EXAMPLE_VKEY.replace("Aeky", "Ae\nky"),
        EXAMPLE_VKEY[:-1],
        _vkey("a b", b"\x01" + bytes(32)),
        _vkey("a\u00a0b", b"\x01" + bytes(32)),
        _vkey("a\u3000b", b"\x01" + bytes(32)),
        "+" + EXAMPLE_VKEY.split("+", 1)[1],
        _vkey("a", b"\x01" + bytes(31)),
        _vkey("a", b"\x01" + bytes(33)),
        _vkey("a", b"\x02" + bytes(32)),
        _vkey("a", b"\x01"),
    ],
)
def test_malformed_vkey_is_refused(vkey: str) -> None:
    with pytest.raises(KeyFormatError) as info:
        Verifier.parse(vkey)
    assert info.value.code == "bad_key"


def test_vkey_with_non_canonical_base64_is_refused() -> None:
    vkey = _vkey("a", b"\x01" + bytes(32))
    # 33 bytes encode to 44 characters without padding; a changed last
    # character with the same decoded prefix is not canonical.
    mangled = vkey[:-1] + ("B" if vkey[-1] == "A" else "A")
    with pytest.raises(KeyFormatError):
        Verifier.parse(mangled)


# Private keys


def test_skey_round_trips(signer: Signer) -> None:
    parsed = Signer.parse(signer.skey())
    assert parsed.verifier() == signer.verifier()
    assert parsed.skey() == signer.skey()


def test_generated_keys_differ() -> None:
    assert Signer.generate("a").public_key != Signer.generate("a").public_key


@pytest.mark.parametrize(
    "skey",
    [
        GO_SKEY.replace("PRIVATE+KEY+", ""),
        GO_SKEY.replace("c74f20a3", "c74f20a4"),
        GO_SKEY.replace("PeterNeumann", "Peter Neumann"),
        GO_SKEY + "A",
        GO_SKEY[:-4],
    ],
)
def test_malformed_skey_is_refused_without_key_material(skey: str) -> None:
    with pytest.raises(KeyFormatError) as info:
        Signer.parse(skey)
    secret = skey.rsplit("+", 1)[-1]
    assert secret not in str(info.value)


def test_signer_repr_has_no_key_material(signer: Signer) -> None:
    secret = signer.skey().rsplit("+", 1)[-1]
    assert secret not in repr(signer)
    assert b64(signer.public_key) not in repr(signer)


def test_seed_must_be_32_bytes() -> None:
    with pytest.raises(KeyFormatError):
        Signer.from_seed("a", bytes(31))


@pytest.mark.parametrize("name", ["", "a b", "a+b", "a\tb", "a\u2003b", "a\u2028b"])
def test_invalid_key_names_are_refused(name: str) -> None:
    with pytest.raises(KeyFormatError):
        Signer.from_seed(name, bytes(32))


# Signing and opening


def test_sign_and_open_round_trip(signed: bytes, signer: Signer, text: str) -> None:
    note = open_note(signed, [signer.verifier()])
    assert note.text == text
    assert note.signatures == (
        NoteSignature(signer.name, signer.key_id, signer.sign(text.encode())),
    )
    assert note.unverified == ()


def test_signed_note_layout(signed: bytes, signer: Signer, text: str) -> None:
    sig = signer.sign(text.encode())
    assert signed == (text + "\n\u2014 example.com/log " + b64(signer.key_id + sig) + "\n").encode()


def test_signature_line_format() -> None:
    line = NoteSignature("a", b"\x01\x02\x03\x04", b"\x05").line()
    assert line == "\u2014 a AQIDBAU=\n"


def test_parse_note_returns_text_and_signatures(signed: bytes, signer: Signer, text: str) -> None:
    parsed_text, sigs = parse_note(signed)
    assert parsed_text == text
    assert [(s.name, s.key_id) for s in sigs] == [(signer.name, signer.key_id)]


def test_several_signers_all_verify(signer: Signer, other: Signer, text: str) -> None:
    msg = sign_note(text, signer, other)
    note = open_note(msg, [signer.verifier(), other.verifier()])
    assert [s.name for s in note.signatures] == [signer.name, other.name]


def test_unknown_signatures_are_kept_unverified(signer: Signer, other: Signer, text: str) -> None:
    note = open_note(sign_note(text, signer, other), [signer.verifier()])
    assert [s.name for s in note.signatures] == [signer.name]
    assert [s.name for s in note.unverified] == [other.name]


def test_same_name_other_key_id_is_unknown(signer: Signer, text: str) -> None:
    impostor = Signer.from_seed(signer.name, bytes(32))
    note = open_note(sign_note(text, signer, impostor), [signer.verifier()])
    assert [s.key_id for s in note.unverified] == [impostor.key_id]


def test_same_key_id_other_name_is_unknown(signer: Signer, text: str) -> None:
    forged = NoteSignature("example.com/elsewhere", signer.key_id, bytes(64))
    msg = add_signature_lines(sign_note(text, signer), forged)
    note = open_note(msg, [signer.verifier()])
    assert note.unverified == (forged,)


def test_failing_known_signature_rejects_note(signer: Signer, text: str) -> None:
    bad = NoteSignature(signer.name, signer.key_id, bytes(64))
    msg = add_signature_lines(sign_note(text, Signer.from_seed("x", bytes(32))), bad)
    with pytest.raises(InvalidNoteSignatureError) as info:
        open_note(msg, [signer.verifier()])
    assert info.value.code == "bad_note_signature"


def test_failing_repeat_of_valid_signature_rejects_note(signed: bytes, signer: Signer) -> None:
    msg = signed + NoteSignature(signer.name, signer.key_id, bytes(64)).line().encode()
    with pytest.raises(InvalidNoteSignatureError):
        open_note(msg, [signer.verifier()])


def test_identical_repeated_signature_is_reported_once(signed: bytes, signer: Signer) -> None:
    _, sigs = parse_note(signed)
    note = open_note(signed + sigs[0].line().encode(), [signer.verifier()])
    assert len(note.signatures) == 1


def test_note_without_known_signature_is_unverified(signed: bytes, other: Signer) -> None:
    with pytest.raises(UnverifiedNoteError) as info:
        open_note(signed, [other.verifier()])
    assert info.value.code == "unverified_note"


def test_note_with_no_verifiers_is_unverified(signed: bytes) -> None:
    with pytest.raises(UnverifiedNoteError):
        open_note(signed, [])


def test_conflicting_verifiers_are_refused(signed: bytes, signer: Signer) -> None:
    good = signer.verifier()
    clash = Verifier.__new__(Verifier)
    object.__setattr__(clash, "name", good.name)
    object.__setattr__(clash, "key_id", good.key_id)
    object.__setattr__(clash, "public_key", bytes(32))
    object.__setattr__(clash, "sig_type", SIG_TYPE_ED25519)
    with pytest.raises(KeyFormatError):
        open_note(signed, [good, clash])


# Structure


def test_carriage_return_is_refused(signed: bytes) -> None:
    with pytest.raises(NoteFormatError) as info:
        parse_note(signed.replace(b"\n", b"\r\n"))
    assert info.value.code == "malformed_note"


@pytest.mark.parametrize("char", [b"\x00", b"\t", b"\x1b", b"\x1f", b"\r"])
def test_control_characters_are_refused(signed: bytes, char: bytes) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(char + signed)


@pytest.mark.parametrize("dash", ["-", "\u2013", "\u2015", "--"])
def test_em_dash_is_required(signed: bytes, dash: str) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(signed.replace("\u2014".encode(), dash.encode()))


def test_space_after_em_dash_is_required(signed: bytes) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(signed.replace("\u2014 ".encode(), "\u2014".encode()))


def test_text_ends_at_last_blank_line(signer: Signer) -> None:
    text = "first\n\nsecond after a blank line\n\n\u2014 not a signature line\n"
    msg = sign_note(text, signer)
    assert parse_note(msg)[0] == text
    assert open_note(msg, [signer.verifier()]).text == text


def test_text_ending_in_blank_line_round_trips(signer: Signer) -> None:
    text = "body\n\n"
    assert open_note(sign_note(text, signer), [signer.verifier()]).text == text


def test_note_without_blank_line_is_refused(signed: bytes) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(signed.replace(b"\n\n", b"\n"))


def test_note_without_final_newline_is_refused(signed: bytes) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(signed[:-1])


def test_note_without_signatures_is_refused(text: str) -> None:
    with pytest.raises(NoteFormatError):
        parse_note((text + "\n").encode())


def test_blank_line_between_signatures_splits_text(signer: Signer, other: Signer) -> None:
    msg = sign_note("t\n", signer) + b"\n" + sign_note("t\n", other).split(b"\n\n")[1]
    # The last blank line now precedes only the second signature: the first
    # becomes part of the text, which the second signature does not cover.
    assert parse_note(msg)[0].count("\u2014") == 1
    with pytest.raises(InvalidNoteSignatureError):
        open_note(msg, [other.verifier()])


@pytest.mark.parametrize(
    "line",
    [
        "\u2014 name\n",
        "\u2014 name \n",
        "\u2014  AQIDBAU=\n",
        "\u2014 name AQIDBA==\n",
        "\u2014 name AQIDBAU\n",
        "\u2014 name AQIDBAU= \n",
        "\u2014 name  AQIDBAU=\n",
        "\u2014 na+me AQIDBAU=\n",
        "\u2014 na\u00a0me AQIDBAU=\n",
        "\u2014 name AQIDBAV=\n",
    ],
)
def test_malformed_signature_line_is_refused(signed: bytes, line: str) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(signed + line.encode())


def test_invalid_utf8_is_refused(signed: bytes) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(b"\xff" + signed)


def test_encoded_surrogate_is_refused(signed: bytes) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(b"\xed\xa0\x80\n" + signed)


def test_every_single_byte_flip_fails(signed: bytes, signer: Signer) -> None:
    for i in range(len(signed)):
        with pytest.raises((FormatError, VerificationError)):
            open_note(flip(signed, i), [signer.verifier()])


def test_maximum_number_of_signatures_is_accepted(signed: bytes, signer: Signer) -> None:
    extra = NoteSignature("w", b"\x00\x00\x00\x00", bytes(64)).line().encode()
    msg = signed + extra * (MAX_SIGNATURES - 1)
    assert len(parse_note(msg)[1]) == MAX_SIGNATURES


def test_too_many_signatures_are_refused(signed: bytes) -> None:
    extra = NoteSignature("w", b"\x00\x00\x00\x00", bytes(64)).line().encode()
    with pytest.raises(NoteFormatError):
        parse_note(signed + extra * MAX_SIGNATURES)


def test_oversized_note_is_refused(signer: Signer) -> None:
    msg = sign_note("x" * (MAX_NOTE_SIZE - 200) + "\n", signer)
    assert parse_note(msg)
    with pytest.raises(NoteFormatError):
        parse_note(b"y" * 200 + msg)


@pytest.mark.parametrize("bad", ["", "no newline", "a\r\n", "a\x00\n", "\ud800\n"])
def test_sign_note_refuses_invalid_text(signer: Signer, bad: str) -> None:
    with pytest.raises(NoteFormatError):
        sign_note(bad, signer)


def test_sign_note_needs_a_signer(text: str) -> None:
    with pytest.raises(NoteFormatError):
        sign_note(text)


def test_sign_note_refuses_cosignature_keys(signer: Signer, text: str) -> None:
    with pytest.raises(KeyFormatError):
        sign_note(text, signer.with_sig_type(SIG_TYPE_COSIGNATURE_V1))


# Appending signatures and cosignatures


def cosign(cosigner: Signer, text: str, timestamp: int) -> NoteSignature:
    sig = cosigner.sign(cosigned_message(text.encode(), timestamp))
    return NoteSignature(cosigner.name, cosigner.key_id, timestamp.to_bytes(8, "big") + sig)


@pytest.fixture
def cosigner() -> Signer:
    return Signer.from_seed("witness.example/w1", bytes(range(2, 34)), SIG_TYPE_COSIGNATURE_V1)


def test_cosigned_message_layout() -> None:
    assert (
        cosigned_message(b"o\n1\nr\n", 1679315147) == b"cosignature/v1\ntime 1679315147\no\n1\nr\n"
    )


def test_appended_cosignature_verifies(
    signed: bytes, signer: Signer, cosigner: Signer, text: str
) -> None:
    msg = add_signature_lines(signed, cosign(cosigner, text, 1700000000))
    assert open_note(msg, [signer.verifier()]).unverified[0].name == cosigner.name
    assert open_note(msg, [cosigner.verifier()]).signatures[0].name == cosigner.name


def test_cosignature_over_other_timestamp_fails(signed: bytes, cosigner: Signer, text: str) -> None:
    good = cosign(cosigner, text, 1700000000)
    moved = NoteSignature(
        good.name, good.key_id, (1700000001).to_bytes(8, "big") + good.signature[8:]
    )
    with pytest.raises(InvalidNoteSignatureError):
        open_note(add_signature_lines(signed, moved), [cosigner.verifier()])


@pytest.mark.parametrize("timestamp", [-1, 1 << 63])
def test_cosigned_message_refuses_out_of_range_timestamp(timestamp: int) -> None:
    with pytest.raises(NoteFormatError):
        cosigned_message(b"t\n", timestamp)


def test_key_id_refuses_unencodable_name() -> None:
    with pytest.raises(KeyFormatError):
        key_id("\ud800", SIG_TYPE_ED25519, bytes(32))


def test_cosignature_timestamp_above_2_63_fails(signed: bytes, cosigner: Signer, text: str) -> None:
    # Signed correctly over the out-of-range timestamp, yet refused (tlog-cosignature).
    message = b"cosignature/v1\ntime %d\n" % (1 << 63) + text.encode()
    payload = (1 << 63).to_bytes(8, "big") + cosigner.sign(message)
    cosig = NoteSignature(cosigner.name, cosigner.key_id, payload)
    with pytest.raises(InvalidNoteSignatureError):
        open_note(add_signature_lines(signed, cosig), [cosigner.verifier()])


def test_add_signature_lines_replaces_same_key(signed: bytes, cosigner: Signer, text: str) -> None:
    once = add_signature_lines(signed, cosign(cosigner, text, 1))
    twice = add_signature_lines(once, cosign(cosigner, text, 2))
    assert twice == add_signature_lines(signed, cosign(cosigner, text, 2))


def test_add_signature_lines_keeps_text_and_order(signer: Signer, other: Signer, text: str) -> None:
    msg = sign_note(text, signer)
    extra = parse_note(sign_note(text, other))[1]
    assert add_signature_lines(msg, *extra) == sign_note(text, signer, other)


def test_add_signature_lines_refuses_malformed_note() -> None:
    with pytest.raises(NoteFormatError):
        add_signature_lines(b"not a note", NoteSignature("a", bytes(4), b"x"))


# Properties

ANY_DEPLOG_ERROR = (FormatError, VerificationError)
note_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\r")
    | st.just("\n"),
    max_size=80,
).map(lambda s: s + "\n")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_deplog_errors(data: bytes) -> None:
    verifier = Signer.from_seed("example.com/log", bytes(32)).verifier()
    with contextlib.suppress(*ANY_DEPLOG_ERROR):
        open_note(data, [verifier])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60), st.integers(min_value=0), st.binary(max_size=60))
def test_spliced_notes_raise_only_deplog_errors(prefix: bytes, at: int, junk: bytes) -> None:
    signer = Signer.from_seed("example.com/log", bytes(32))
    msg = sign_note("a\n\nb\n", signer)
    at %= len(msg) + 1
    with contextlib.suppress(*ANY_DEPLOG_ERROR):
        open_note(prefix + msg[:at] + junk + msg[at:], [signer.verifier()])


@settings(max_examples=150, deadline=None)
@given(note_text)
def test_any_valid_text_round_trips(text: str) -> None:
    signer = Signer.from_seed("example.com/log", bytes(32))
    assert open_note(sign_note(text, signer), [signer.verifier()]).text == text


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.text(min_size=1, max_size=20))
def test_any_valid_key_round_trips_or_is_refused(seed: bytes, name: str) -> None:
    try:
        signer = Signer.from_seed(name, seed)
    except KeyFormatError:
        return
    assert Verifier.parse(signer.verifier().vkey()) == signer.verifier()
    assert Signer.parse(signer.skey()).skey() == signer.skey()
