"""Tests of client.receipt against C2SP tlog-proof (c2sp.org/tlog-proof@v1)."""

from __future__ import annotations

import base64
import contextlib
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.errors import FormatError, VerificationError
from deplog.client.tlog.checkpoint import Checkpoint, WrongOriginError, sign_checkpoint
from deplog.client.tlog.note import (
    SIG_TYPE_COSIGNATURE_V1,
    InvalidNoteSignatureError,
    NoteSignature,
    Signer,
    UnverifiedNoteError,
    add_signature_lines,
    cosigned_message,
    sign_note,
)
from deplog.client.tlog.proofs import ProofError, inclusion_path, leaf_hash, root_from_leaf_hashes
from deplog.client.tlog.receipt import Receipt, ReceiptFormatError, verify_receipt
from tests.builders import ORIGIN

ENTRIES = [b"entry %d" % i for i in range(11)]
HASHES = [leaf_hash(e) for e in ENTRIES]
INDEX = 6


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.fixture
def checkpoint_note(log_signer: Signer) -> bytes:
    checkpoint = Checkpoint(ORIGIN, len(ENTRIES), root_from_leaf_hashes(HASHES))
    signed = sign_checkpoint(checkpoint, log_signer)
    witness = Signer.from_seed("witness.example/w1", bytes(32), SIG_TYPE_COSIGNATURE_V1)
    timestamp = 1_700_000_000
    sig = witness.sign(cosigned_message(checkpoint.to_text().encode(), timestamp))
    cosig = NoteSignature(witness.name, witness.key_id, timestamp.to_bytes(8, "big") + sig)
    return add_signature_lines(signed, cosig)


@pytest.fixture
def receipt(checkpoint_note: bytes) -> Receipt:
    proof = tuple(inclusion_path(HASHES, INDEX, len(ENTRIES)))
    return Receipt(INDEX, proof, checkpoint_note)


def test_encoding_layout(receipt: Receipt, checkpoint_note: bytes) -> None:
    lines = ["c2sp.org/tlog-proof@v1", f"index {INDEX}", *(b64(h) for h in receipt.proof), ""]
    assert receipt.to_bytes() == "\n".join(lines).encode() + b"\n" + checkpoint_note


def test_round_trip(receipt: Receipt) -> None:
    assert Receipt.parse(receipt.to_bytes()) == receipt


def test_round_trip_with_extra(receipt: Receipt) -> None:
    with_extra = replace(receipt, extra=b"\x00opaque\xff")
    data = with_extra.to_bytes()
    assert data.split(b"\n")[1] == b"extra " + b64(b"\x00opaque\xff").encode()
    assert Receipt.parse(data) == with_extra


def test_round_trip_without_proof_hashes(log_signer: Signer) -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, HASHES[0]), log_signer)
    receipt = Receipt(0, (), note)
    assert receipt.to_bytes().startswith(b"c2sp.org/tlog-proof@v1\nindex 0\n\n")
    assert Receipt.parse(receipt.to_bytes()) == receipt
    verify_receipt(receipt, ENTRIES[0], log_signer.verifier())


def test_verification_returns_checkpoint(receipt: Receipt, log_signer: Signer) -> None:
    checkpoint = verify_receipt(receipt, ENTRIES[INDEX], log_signer.verifier())
    assert checkpoint.size == len(ENTRIES)
    assert checkpoint.root_hash == root_from_leaf_hashes(HASHES)


def test_parsed_receipt_verifies(receipt: Receipt, log_signer: Signer) -> None:
    parsed = Receipt.parse(receipt.to_bytes())
    verify_receipt(parsed, ENTRIES[INDEX], log_signer.verifier())


def test_extra_data_is_not_trusted_or_needed(receipt: Receipt, log_signer: Signer) -> None:
    verify_receipt(replace(receipt, extra=b"anything"), ENTRIES[INDEX], log_signer.verifier())


def test_every_index_of_the_log_verifies(checkpoint_note: bytes, log_signer: Signer) -> None:
    for index, entry in enumerate(ENTRIES):
        proof = tuple(inclusion_path(HASHES, index, len(ENTRIES)))
        verify_receipt(Receipt(index, proof, checkpoint_note), entry, log_signer.verifier())


# Tampering


def test_other_leaf_is_refused(receipt: Receipt, log_signer: Signer) -> None:
    with pytest.raises(ProofError) as info:
        verify_receipt(receipt, ENTRIES[INDEX + 1], log_signer.verifier())
    assert info.value.code == "bad_inclusion_proof"


@pytest.mark.parametrize("index", [0, INDEX - 1, INDEX + 1, len(ENTRIES) - 1, len(ENTRIES)])
def test_tampered_index_is_refused(receipt: Receipt, log_signer: Signer, index: int) -> None:
    with pytest.raises(ProofError):
        verify_receipt(replace(receipt, index=index), ENTRIES[INDEX], log_signer.verifier())


def test_any_tampered_proof_byte_is_refused(receipt: Receipt, log_signer: Signer) -> None:
    for j, h in enumerate(receipt.proof):
        for b in range(len(h)):
            bad = h[:b] + bytes([h[b] ^ 1]) + h[b + 1 :]
            proof = (*receipt.proof[:j], bad, *receipt.proof[j + 1 :])
            with pytest.raises(ProofError):
                verify_receipt(replace(receipt, proof=proof), ENTRIES[INDEX], log_signer.verifier())


def test_dropped_proof_hash_is_refused(receipt: Receipt, log_signer: Signer) -> None:
    with pytest.raises(ProofError):
        verify_receipt(
            replace(receipt, proof=receipt.proof[:-1]), ENTRIES[INDEX], log_signer.verifier()
        )


def test_tampered_checkpoint_signature_is_refused(receipt: Receipt, log_signer: Signer) -> None:
    text, _, rest = receipt.checkpoint.partition(b"\n\n")
    line, _, cosig = rest.partition(b"\n")
    prefix, _, sig = line.rpartition(b" ")
    raw = bytearray(base64.b64decode(sig))
    raw[10] ^= 1
    tampered = text + b"\n\n" + prefix + b" " + base64.b64encode(bytes(raw)) + b"\n" + cosig
    with pytest.raises(InvalidNoteSignatureError):
        verify_receipt(replace(receipt, checkpoint=tampered), ENTRIES[INDEX], log_signer.verifier())


def test_tampered_checkpoint_size_is_refused(receipt: Receipt, log_signer: Signer) -> None:
    tampered = receipt.checkpoint.replace(b"\n11\n", b"\n12\n", 1)
    with pytest.raises(InvalidNoteSignatureError):
        verify_receipt(replace(receipt, checkpoint=tampered), ENTRIES[INDEX], log_signer.verifier())


def test_checkpoint_from_other_log_key_is_refused(receipt: Receipt) -> None:
    other = Signer.from_seed(ORIGIN, bytes(32))
    with pytest.raises(UnverifiedNoteError):
        verify_receipt(receipt, ENTRIES[INDEX], other.verifier())


def test_checkpoint_with_other_origin_is_refused(log_signer: Signer) -> None:
    # Validly signed by the key "example.com/liar", claiming to be "example.com/log".
    liar = Signer.from_seed("example.com/liar", bytes(32))
    note = sign_note(Checkpoint(ORIGIN, 1, HASHES[0]).to_text(), liar)
    with pytest.raises(WrongOriginError):
        verify_receipt(Receipt(0, (), note), ENTRIES[0], liar.verifier())


# Malformed receipts


def encode(*lines: str, checkpoint: bytes) -> bytes:
    return "".join(line + "\n" for line in lines).encode() + checkpoint


@pytest.fixture
def proof_lines(receipt: Receipt) -> list[str]:
    return [b64(h) for h in receipt.proof]


HEADER = "c2sp.org/tlog-proof@v1"


def test_minimal_hand_written_receipt_parses(receipt: Receipt, proof_lines: list[str]) -> None:
    data = encode(HEADER, f"index {INDEX}", *proof_lines, "", checkpoint=receipt.checkpoint)
    assert Receipt.parse(data) == receipt


@pytest.mark.parametrize(
    "head",
    [
        [],
        ["c2sp.org/tlog-proof@v2", "index 6"],
        ["c2sp.org/tlog-proof@v1 ", "index 6"],
        ["C2SP.ORG/TLOG-PROOF@V1", "index 6"],
        ["", HEADER, "index 6"],
        [HEADER],
        [HEADER, "index 06"],
        [HEADER, "index -6"],
        [HEADER, "index +6"],
        [HEADER, "index  6"],
        [HEADER, "index 6 "],
        [HEADER, "index\t6"],
        [HEADER, "Index 6"],
        [HEADER, "index"],
        [HEADER, "index " + str(2**63)],
        [HEADER, "extra", "index 6"],
        [HEADER, "extra ", "index 6"],
        [HEADER, "extra AAA", "index 6"],
        [HEADER, "extra AB==", "index 6"],
        [HEADER, "index 6", "extra AAAA"],
        [HEADER, "extra AAAA", "extra AAAA", "index 6"],
    ],
)
def test_malformed_header_is_refused(
    receipt: Receipt, proof_lines: list[str], head: list[str]
) -> None:
    data = encode(*head, *proof_lines, "", checkpoint=receipt.checkpoint)
    with pytest.raises(ReceiptFormatError) as info:
        Receipt.parse(data)
    assert info.value.code == "malformed_receipt"


@pytest.mark.parametrize(
    "bad_line",
    [
        b64(bytes(31)),
        b64(bytes(33)),
        b64(bytes(32)).rstrip("="),
        b64(bytes(32))[:-2] + "B=",
        base64.urlsafe_b64encode(b"\xff" * 32).decode(),
        " " + b64(bytes(32)),
        "\u00e9",
    ],
)
def test_malformed_proof_line_is_refused(
    receipt: Receipt, proof_lines: list[str], bad_line: str
) -> None:
    data = encode(HEADER, "index 6", *proof_lines, bad_line, "", checkpoint=receipt.checkpoint)
    with pytest.raises(ReceiptFormatError):
        Receipt.parse(data)


def test_more_than_64_proof_lines_are_refused(receipt: Receipt) -> None:
    lines = [b64(bytes(32))] * 65
    with pytest.raises(ReceiptFormatError):
        Receipt.parse(encode(HEADER, "index 6", *lines, "", checkpoint=receipt.checkpoint))


def test_missing_blank_line_is_refused(receipt: Receipt, proof_lines: list[str]) -> None:
    with pytest.raises(ReceiptFormatError):
        Receipt.parse(encode(HEADER, "index 6", *proof_lines, checkpoint=receipt.checkpoint))


def test_missing_checkpoint_is_refused(proof_lines: list[str]) -> None:
    with pytest.raises(ReceiptFormatError):
        Receipt.parse(encode(HEADER, "index 6", *proof_lines, "", checkpoint=b""))


def test_unsigned_checkpoint_is_refused(proof_lines: list[str]) -> None:
    body = Checkpoint(ORIGIN, 11, root_from_leaf_hashes(HASHES)).to_text().encode()
    with pytest.raises(ReceiptFormatError):
        Receipt.parse(encode(HEADER, "index 6", *proof_lines, "", checkpoint=body))


def test_signed_note_that_is_not_a_checkpoint_is_refused(
    log_signer: Signer, proof_lines: list[str]
) -> None:
    note = sign_note("not\na checkpoint\n", log_signer)
    with pytest.raises(ReceiptFormatError):
        Receipt.parse(encode(HEADER, "index 6", *proof_lines, "", checkpoint=note))


def test_carriage_returns_are_refused(receipt: Receipt) -> None:
    with pytest.raises(ReceiptFormatError):
        Receipt.parse(receipt.to_bytes().replace(b"\n", b"\r\n"))


def test_truncated_receipts_are_refused(receipt: Receipt, log_signer: Signer) -> None:
    data = receipt.to_bytes()
    # Signature lines are independent: dropping the whole last line (the
    # cosignature) leaves a valid receipt with fewer signatures for the witness
    # policy to count. Every other cut is refused.
    without_cosignature = data.rstrip(b"\n").rfind(b"\n") + 1
    for end in range(len(data)):
        if end == without_cosignature:
            verify_receipt(Receipt.parse(data[:end]), ENTRIES[INDEX], log_signer.verifier())
            continue
        with pytest.raises(ReceiptFormatError):
            Receipt.parse(data[:end])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"index": -1},
        {"index": 2**63},
        {"index": True},
        {"proof": (bytes(31),)},
        {"proof": (bytes(32),) * 65},
        {"extra": b""},
        {"checkpoint": b"not a note"},
    ],
)
def test_invalid_receipt_values_are_refused(receipt: Receipt, kwargs: dict[str, object]) -> None:
    with pytest.raises(ReceiptFormatError):
        replace(receipt, **kwargs)  # type: ignore[arg-type]


def test_receipt_errors_are_format_errors() -> None:
    assert issubclass(ReceiptFormatError, FormatError)


# Properties


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_receipt_errors(data: bytes) -> None:
    with contextlib.suppress(ReceiptFormatError):
        Receipt.parse(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0), st.binary(min_size=1, max_size=8))
def test_spliced_receipts_never_verify_or_crash(at: int, junk: bytes) -> None:
    signer = Signer.from_seed(ORIGIN, bytes(range(32)))
    checkpoint = Checkpoint(ORIGIN, len(ENTRIES), root_from_leaf_hashes(HASHES))
    proof = tuple(inclusion_path(HASHES, INDEX, len(ENTRIES)))
    data = Receipt(INDEX, proof, sign_checkpoint(checkpoint, signer)).to_bytes()
    at %= len(data) + 1
    mutated = data[:at] + junk + data[at:]
    try:
        receipt = Receipt.parse(mutated)
        verify_receipt(receipt, ENTRIES[INDEX], signer.verifier())
    except (FormatError, VerificationError):
        return
    # Only an insertion that the format ignores could survive; none exists.
    raise AssertionError("a spliced receipt verified")
