"""Tests of client.checkpoint against C2SP tlog-checkpoint v1.0.0."""

from __future__ import annotations

import base64
import contextlib
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.errors import FormatError, VerificationError
from deplog.client.tlog.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    WrongOriginError,
    open_checkpoint,
    sign_checkpoint,
)
from deplog.client.tlog.note import (
    SIG_TYPE_COSIGNATURE_V1,
    InvalidNoteSignatureError,
    KeyFormatError,
    NoteSignature,
    Signer,
    UnverifiedNoteError,
    Verifier,
    add_signature_lines,
    sign_note,
)
from tests.builders import ORIGIN

ROOT = hashlib.sha256(b"root").digest()
ROOT_B64 = base64.b64encode(ROOT).decode()

# A real checkpoint of a public log (see tests/test_note.py for its cosignatures).
REAL_LOG_VKEY = (
    "arche2025h1.staging.ct.transparency.dev+ba2f06c0+AU0vHmlGCS/PdN8b2OaGmKprLI8HKM+dJ472xgFYh15f"
)
REAL_CHECKPOINT = """arche2025h1.staging.ct.transparency.dev
1432088532
U7WM79jrzyhGZ5/GUBTpM7NzwdyfFx61t3RovgcC4Ro=

\u2014 arche2025h1.staging.ct.transparency.dev ui8GwCF1+kWqZrxGdhj4aX3gcw7XUlXQQabg/27lefwhUkzbC3NygNI75MdhL1bfTW9g8Ei59RA23oHP7Ry1k3ZFWwQ=
""".encode()  # noqa: E501


@pytest.fixture
def checkpoint() -> Checkpoint:
    return Checkpoint(ORIGIN, 42, ROOT)


@pytest.fixture
def signed(checkpoint: Checkpoint, log_signer: Signer) -> bytes:
    return sign_checkpoint(checkpoint, log_signer)


def body(origin: str = ORIGIN, size: str = "42", root: str = ROOT_B64, *ext: str) -> str:
    return "".join(line + "\n" for line in (origin, size, root, *ext))


def test_to_text_layout(checkpoint: Checkpoint) -> None:
    assert checkpoint.to_text() == f"{ORIGIN}\n42\n{ROOT_B64}\n"


def test_text_round_trip(checkpoint: Checkpoint) -> None:
    assert Checkpoint.from_text(checkpoint.to_text()) == checkpoint


def test_extension_lines_round_trip() -> None:
    checkpoint = Checkpoint(ORIGIN, 7, ROOT, ("ext one", "\u2014 two"))
    assert checkpoint.to_text().endswith("ext one\n\u2014 two\n")
    assert Checkpoint.from_text(checkpoint.to_text()) == checkpoint


def test_empty_tree_has_size_zero() -> None:
    assert Checkpoint.from_text(body(size="0")).size == 0


def test_largest_size_is_accepted() -> None:
    assert Checkpoint.from_text(body(size=str(2**63 - 1))).size == 2**63 - 1


@pytest.mark.parametrize(
    "size", ["00", "01", "007", "", "-1", "+1", " 1", "1 ", "1_0", "0x1", "\u0661", str(2**63)]
)
def test_non_canonical_size_is_refused(size: str) -> None:
    with pytest.raises(CheckpointFormatError) as info:
        Checkpoint.from_text(body(size=size))
    assert info.value.code == "malformed_checkpoint"


@pytest.mark.parametrize(
    "root",
    [
        "",
        ROOT_B64.rstrip("="),
        ROOT_B64 + "=",
        "*" + ROOT_B64[1:],
        base64.urlsafe_b64encode(b"\xfb\xff" * 16).decode(),
        " " + ROOT_B64,
        base64.b64encode(ROOT[:31]).decode(),
        base64.b64encode(ROOT + b"\x00").decode(),
    ],
)
def test_bad_root_base64_is_refused(root: str) -> None:
    with pytest.raises(CheckpointFormatError):
        Checkpoint.from_text(body(root=root))


def test_non_canonical_root_trailing_bits_are_refused() -> None:
    # 32 bytes leave two spare bits in the last character before '='.
    canonical = base64.b64encode(bytes(32)).decode()
    assert canonical.endswith("A=")
    with pytest.raises(CheckpointFormatError):
        Checkpoint.from_text(body(root=canonical[:-2] + "B="))


@pytest.mark.parametrize(
    "text",
    [
        "",
        f"{ORIGIN}\n42\n",
        f"{ORIGIN}\n42\n{ROOT_B64}",
        f"\n42\n{ROOT_B64}\n",
        body(ORIGIN, "42", ROOT_B64, ""),
        body(ORIGIN, "42", ROOT_B64, "ok", ""),
        body(ORIGIN + "\r"),
    ],
)
def test_malformed_body_is_refused(text: str) -> None:
    with pytest.raises(CheckpointFormatError):
        Checkpoint.from_text(text)


@pytest.mark.parametrize(
    ("origin", "size", "root", "ext"),
    [
        ("", 1, ROOT, ()),
        ("a\nb", 1, ROOT, ()),
        (ORIGIN, -1, ROOT, ()),
        (ORIGIN, 2**63, ROOT, ()),
        (ORIGIN, 1, ROOT[:31], ()),
        (ORIGIN, 1, ROOT, ("",)),
        (ORIGIN, 1, ROOT, ("a\nb",)),
    ],
)
def test_invalid_checkpoint_values_are_refused(
    origin: str, size: int, root: bytes, ext: tuple[str, ...]
) -> None:
    with pytest.raises(CheckpointFormatError):
        Checkpoint(origin, size, root, ext)


def test_sign_and_open_round_trip(
    signed: bytes, checkpoint: Checkpoint, log_signer: Signer
) -> None:
    opened, note = open_checkpoint(signed, log_signer.verifier())
    assert opened == checkpoint
    assert note.text == checkpoint.to_text()


def test_signed_checkpoint_is_a_signed_note(
    signed: bytes, checkpoint: Checkpoint, log_signer: Signer
) -> None:
    assert signed == sign_note(checkpoint.to_text(), log_signer)


def test_real_checkpoint_opens() -> None:
    checkpoint, _ = open_checkpoint(REAL_CHECKPOINT, Verifier.parse(REAL_LOG_VKEY))
    assert checkpoint.size == 1432088532
    assert checkpoint.origin == "arche2025h1.staging.ct.transparency.dev"


def test_sign_refuses_key_named_differently(checkpoint: Checkpoint) -> None:
    with pytest.raises(WrongOriginError) as info:
        sign_checkpoint(checkpoint, Signer.from_seed("example.com/other", bytes(32)))
    assert info.value.code == "wrong_origin"


def test_sign_refuses_cosignature_key(checkpoint: Checkpoint, log_signer: Signer) -> None:
    with pytest.raises(KeyFormatError):
        sign_checkpoint(checkpoint, log_signer.with_sig_type(SIG_TYPE_COSIGNATURE_V1))


def test_open_refuses_origin_other_than_key_name() -> None:
    liar = Signer.from_seed("example.com/liar", bytes(32))
    msg = sign_note(body(origin=ORIGIN), liar)
    with pytest.raises(WrongOriginError):
        open_checkpoint(msg, liar.verifier())


def test_open_refuses_other_log_key(signed: bytes) -> None:
    other = Signer.from_seed(ORIGIN, bytes(32)).verifier()
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(signed, other)


def test_open_refuses_cosigner_key(signed: bytes, log_signer: Signer) -> None:
    with pytest.raises(KeyFormatError):
        open_checkpoint(signed, log_signer.with_sig_type(SIG_TYPE_COSIGNATURE_V1).verifier())


def test_open_refuses_tampered_size(signed: bytes, log_signer: Signer) -> None:
    with pytest.raises(InvalidNoteSignatureError):
        open_checkpoint(signed.replace(b"\n42\n", b"\n43\n"), log_signer.verifier())


def test_open_refuses_signed_non_checkpoint(log_signer: Signer) -> None:
    msg = sign_note(body(size="042"), log_signer)
    with pytest.raises(CheckpointFormatError):
        open_checkpoint(msg, log_signer.verifier())


def test_open_keeps_cosignatures_unverified(signed: bytes, log_signer: Signer) -> None:
    cosig = NoteSignature("witness.example/w", b"\x01\x02\x03\x04", bytes(72))
    _, note = open_checkpoint(add_signature_lines(signed, cosig), log_signer.verifier())
    assert note.unverified == (cosig,)


# Properties


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30),
    st.integers(min_value=0, max_value=2**63 - 1),
    st.binary(min_size=32, max_size=32),
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1),
        max_size=3,
    ),
)
def test_any_checkpoint_round_trips(origin: str, size: int, root: bytes, ext: list[str]) -> None:
    checkpoint = Checkpoint(origin, size, root, tuple(ext))
    assert Checkpoint.from_text(checkpoint.to_text()) == checkpoint


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_format_errors(text: str) -> None:
    with contextlib.suppress(CheckpointFormatError):
        Checkpoint.from_text(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_deplog_errors(data: bytes) -> None:
    verifier = Signer.from_seed(ORIGIN, bytes(32)).verifier()
    with contextlib.suppress(FormatError, VerificationError):
        open_checkpoint(data, verifier)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0), st.sampled_from([b"0", b"00", b"\n", b"=", b"+", b" ", b"\r"]))
def test_mutated_signed_checkpoint_never_opens(at: int, junk: bytes) -> None:
    signer = Signer.from_seed(ORIGIN, bytes(32))
    msg = sign_checkpoint(Checkpoint(ORIGIN, 10, ROOT), signer)
    at %= len(msg) + 1
    with pytest.raises((FormatError, VerificationError)):
        open_checkpoint(msg[:at] + junk + msg[at:], signer.verifier())
