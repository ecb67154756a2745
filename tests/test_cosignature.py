"""tlog-cosignature v1.1: ML-DSA-44 cosignatures, the tree-lines form, and their vectors.

The ML-DSA-44 primitive is checked against the FIPS 204 known-answer tests shipped by
the ``cryptography-vectors`` package (keygen from ``xi`` gives ``pk``; the KAT signature
verifies); the message layout against tests/vectors/tlog-cosignature-v1.1.json, whose
message is assembled field by field from the spec text.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cryptography_vectors
import pytest
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PrivateKey, MLDSA44PublicKey

from deplog.client.errors import ErrorCode
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import (
    FULL_BODY,
    TREE_LINES,
    CosignatureError,
    cosign,
    cosignatures,
    cosigner,
    verify_cosignature,
)
from deplog.client.tlog.note import (
    MLDSA44_KEY_SIZE,
    SIG_TYPE_COSIGNATURE_MLDSA44,
    SIG_TYPE_COSIGNATURE_V1,
    KeyFormatError,
    NoteSignature,
    Signer,
    Verifier,
    add_signature_lines,
    decode_base64,
    encode_base64,
    open_note,
    parse_note,
    subtree_cosigned_message,
)
from tests import cosignature_vectors as gen

KAT = (
    Path(cryptography_vectors.__file__).parent
    / "asymmetric"
    / "MLDSA"
    / "kat_MLDSA_44_det_pure.rsp"
)


def kat_records() -> list[dict[str, str]]:
    """The KAT file's records: ``key = hex`` lines, each record starting at ``count``."""
    records: list[dict[str, str]] = []
    for line in KAT.read_text().splitlines():
        key, sep, value = line.partition(" = ")
        if not sep:
            continue
        if key == "count":
            records.append({})
        records[-1][key.strip()] = value.strip()
    return records


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gen.PATH.read_text())
    return data


# --- the ML-DSA-44 primitive against FIPS 204 known answers ---------------------


def test_every_kat_key_derives_from_its_seed_and_its_signature_verifies() -> None:
    records = kat_records()
    assert len(records) == 100
    for record in records:
        seed, pk = bytes.fromhex(record["xi"]), bytes.fromhex(record["pk"])
        signer = Signer.from_seed("kat.example/w", seed, SIG_TYPE_COSIGNATURE_MLDSA44)
        assert signer.public_key == pk
        assert MLDSA44PrivateKey.from_seed_bytes(seed).public_key().public_bytes_raw() == pk
        signed, msg, ctx = (bytes.fromhex(record[k]) for k in ("sm", "msg", "ctx"))
        assert signed[2420:] == msg
        MLDSA44PublicKey.from_public_bytes(pk).verify(signed[:2420], msg, ctx or None)
        verifier = signer.verifier()
        # Our verifier is pure ML-DSA with the empty context, as tlog-cosignature uses it.
        assert verifier.verify(msg, signed[:2420]) is (not ctx)
        assert not verifier.verify(msg + b"x", signed[:2420])


def test_our_signatures_verify_with_the_kat_public_key() -> None:
    record = kat_records()[0]
    signer = Signer.from_seed("kat.example/w", bytes.fromhex(record["xi"]), 0x06)
    signature = signer.sign(b"message")
    assert len(signature) == 2420
    MLDSA44PublicKey.from_public_bytes(bytes.fromhex(record["pk"])).verify(signature, b"message")


# --- the vectors file -------------------------------------------------------------


def test_vectors_file_is_what_the_generator_makes(vectors: dict[str, Any]) -> None:
    assert gen.render(gen.generate(vectors)) == gen.PATH.read_text()


def test_mldsa_message_is_the_spec_layout_field_by_field(vectors: dict[str, Any]) -> None:
    ml = vectors["ml_dsa_44"]
    fields = dict(ml["message_fields"])
    order = ["label", "cosigner_name", "timestamp", "log_origin", "start", "end", "hash"]
    assert list(fields) == order
    # Assembled from the spec text, not from our code: 12-byte label, then opaque<1..255>
    # (one length byte), u64 big-endian, opaque<1..255>, u64, u64, 32 bytes.
    name, origin = b"witness.example/ml-dsa-44", b"example.org/deplog"
    expected = (
        b"subtree/v1\n\x00"
        + bytes([len(name)])
        + name
        + (1767225600).to_bytes(8, "big")
        + bytes([len(origin)])
        + origin
        + bytes(8)
        + (20852163).to_bytes(8, "big")
        + bytes.fromhex("0ac5186a91863e8e1d90c8080142a89bf5da8e3ee1d9f07630f0378f68f1ab62")
    )
    assert len(b"subtree/v1\n\x00") == 12
    assert bytes.fromhex("".join(fields.values())) == expected
    assert bytes.fromhex(ml["message"]) == expected
    checkpoint = Checkpoint.from_text(vectors["checkpoint"])
    assert expected == subtree_cosigned_message(
        name.decode(), 1767225600, origin, 0, checkpoint.size, checkpoint.root_hash
    )


def test_mldsa_key_encodings_and_key_id(vectors: dict[str, Any]) -> None:
    ml = vectors["ml_dsa_44"]
    pk = bytes.fromhex(ml["public_key"])
    assert len(pk) == MLDSA44_KEY_SIZE
    name = "witness.example/ml-dsa-44"
    key_id = hashlib.sha256(name.encode() + b"\n\x06" + pk).digest()[:4]
    assert ml["key_id"] == key_id.hex()
    assert ml["vkey"] == name + "+" + key_id.hex() + "+" + encode_base64(b"\x06" + pk)
    verifier = Verifier.parse_cosigner(ml["vkey"])
    assert (verifier.sig_type, verifier.public_key, verifier.vkey()) == (0x06, pk, ml["vkey"])
    seed = bytes.fromhex(ml["seed"])
    assert ml["skey"] == (
        "PRIVATE+KEY+" + name + "+" + key_id.hex() + "+" + encode_base64(b"\x06" + seed)
    )
    signer = Signer.parse(ml["skey"], SIG_TYPE_COSIGNATURE_MLDSA44)
    assert signer.verifier() == verifier
    assert signer.skey() == ml["skey"]


def test_mldsa_line_verifies_and_covers_the_tree_lines_only(vectors: dict[str, Any]) -> None:
    ml = vectors["ml_dsa_44"]
    verifier = Verifier.parse_cosigner(ml["vkey"])
    text = vectors["checkpoint"]
    _, (line,) = parse_note(text.encode() + b"\n" + ml["signature_line"].encode())
    assert len(line.signature) == 8 + 2420
    cosig = verify_cosignature(text, line, verifier)
    assert (cosig.timestamp, cosig.statement, cosig.algorithm) == (
        1767225600,
        TREE_LINES,
        "ml-dsa-44",
    )
    # Extension lines are not signed: another map line leaves it valid...
    other_map = text.replace("deplog-map/v1 AAEC", "deplog-map/v1 AQEC")
    assert other_map != text
    assert verify_cosignature(other_map, line, verifier).statement == TREE_LINES
    # ...but another root, size, origin or timestamp does not.
    for changed in (
        text.replace("20852163", "20852164"),
        text.replace("CsUY", "CsUZ"),
        text.replace("example.org/deplog", "example.org/deploh"),
    ):
        with pytest.raises(CosignatureError) as err:
            verify_cosignature(changed, line, verifier)
        assert err.value.code == ErrorCode.BAD_COSIGNATURE
    later = NoteSignature(
        line.name, line.key_id, (1767225601).to_bytes(8, "big") + line.signature[8:]
    )
    with pytest.raises(CosignatureError):
        verify_cosignature(text, later, verifier)


def test_mldsa_line_on_text_that_is_not_a_checkpoint_fails() -> None:
    signer = gen.mldsa44_signer()
    verifier = signer.verifier()
    line = cosign(gen.CHECKPOINT.to_text(), signer, 5)
    for text in (
        "just a note\n",
        "o\n1\nnot-base64\n",
        "o\n01\n" + encode_base64(bytes(32)) + "\n",
    ):
        assert not verifier.verify_note_signature(text.encode(), line.signature)
    with pytest.raises(ValueError, match="checkpoint body"):
        cosign("just a note\n", signer, 5)


def test_mldsa_cosigned_note_opens_with_both_cosigners(vectors: dict[str, Any]) -> None:
    log = Verifier.parse(vectors["log"]["vkey"])
    note = vectors["ml_dsa_44"]["cosigned_note"].encode()
    checkpoint, _ = open_checkpoint(note, log)
    assert checkpoint.extensions[0].startswith("deplog-map/v1 ")
    ml = Verifier.parse_cosigner(vectors["ml_dsa_44"]["vkey"])
    ed = Verifier.parse_cosigner(vectors["ed25519"]["vkey"])
    opened = open_note(note, [log, ml, ed])
    assert len(opened.signatures) == 3
    found = {c.algorithm: c.statement for c in cosignatures(note, [ml, ed])}
    assert found == {"ml-dsa-44": TREE_LINES, "ed25519": FULL_BODY}


def test_ed25519_tree_lines_line_needs_the_tree_lines_mark(vectors: dict[str, Any]) -> None:
    ed = vectors["ed25519"]
    verifier = Verifier.parse_cosigner(ed["vkey"])
    text = vectors["checkpoint"]
    full_message = ed["full_body_message"].encode()
    assert full_message == b"cosignature/v1\ntime 1767225600\n" + text.encode()
    three = "".join(line + "\n" for line in text.split("\n")[:3])
    assert ed["tree_lines_message"] == "cosignature/v1\ntime 1767225600\n" + three
    _, (full, lines) = parse_note(
        text.encode() + b"\n" + (ed["full_body_line"] + ed["tree_lines_line"]).encode()
    )
    assert verify_cosignature(text, full, verifier).statement == FULL_BODY
    assert verify_cosignature(text, full, verifier, tree_lines=True).statement == FULL_BODY
    with pytest.raises(CosignatureError) as err:
        verify_cosignature(text, lines, verifier)
    assert err.value.code == ErrorCode.BAD_COSIGNATURE
    cosig = verify_cosignature(text, lines, verifier, tree_lines=True)
    assert (cosig.statement, cosig.timestamp, cosig.algorithm) == (
        TREE_LINES,
        1767225600,
        "ed25519",
    )
    # The tree-lines form says nothing about the map line, so another map line leaves it
    # valid; another tree does not.
    other_map = text.replace("deplog-map/v1 AAEC", "deplog-map/v1 AQEC")
    assert verify_cosignature(other_map, lines, verifier, tree_lines=True).statement == TREE_LINES
    with pytest.raises(CosignatureError):
        verify_cosignature(text.replace("20852163", "20852164"), lines, verifier, tree_lines=True)
    note = add_signature_lines(vectors["signed_note"].encode(), lines)
    with pytest.raises(CosignatureError):
        cosignatures(note, [verifier])
    (found,) = cosignatures(note, [verifier], tree_lines=[verifier])
    assert found.statement == TREE_LINES


# --- keys -----------------------------------------------------------------------


def test_cosigner_vkeys_of_both_types_parse_and_others_do_not() -> None:
    ed = cosigner(Signer.from_seed("w.example", bytes(32)))
    ml = Signer.from_seed("w.example", bytes(32), SIG_TYPE_COSIGNATURE_MLDSA44)
    assert Verifier.parse_cosigner(ed.verifier().vkey()).sig_type == SIG_TYPE_COSIGNATURE_V1
    assert Verifier.parse_cosigner(ml.verifier().vkey()).sig_type == SIG_TYPE_COSIGNATURE_MLDSA44
    log = Signer.from_seed("w.example", bytes(32)).verifier().vkey()
    for bad in (log, ml.verifier().vkey()[:-8] + "AAAAAAA=", ed.verifier().vkey()[:-4] + "AAA=="):
        with pytest.raises(KeyFormatError):
            Verifier.parse_cosigner(bad)
    with pytest.raises(KeyFormatError):
        Verifier.parse(ml.verifier().vkey())
    # A 0x06 blob with an Ed25519-sized key, and a 0x04 blob with an ML-DSA-sized one.
    for type_byte, size in ((0x06, 32), (0x04, MLDSA44_KEY_SIZE)):
        blob = bytes([type_byte]) + bytes(size)
        kid = hashlib.sha256(b"w.example\n" + blob).digest()[:4].hex()
        with pytest.raises(KeyFormatError):
            Verifier.parse_cosigner(f"w.example+{kid}+{encode_base64(blob)}")


def test_key_errors_never_carry_key_material() -> None:
    ml = Signer.from_seed("w.example", bytes(range(32)), SIG_TYPE_COSIGNATURE_MLDSA44)
    skey = ml.skey()
    for bad in (skey[:-4] + "AAA=", skey.replace("+", "+x", 1)):
        with pytest.raises(KeyFormatError) as err:
            Signer.parse(bad, SIG_TYPE_COSIGNATURE_MLDSA44)
        assert skey.split("+")[-1][:12] not in str(err.value)
    assert skey.split("+")[-1][:12] not in repr(ml)
    with pytest.raises(KeyFormatError):
        Signer.parse(skey)  # a type 0x06 key is not a log key
    assert Signer.parse(skey, (SIG_TYPE_COSIGNATURE_V1, SIG_TYPE_COSIGNATURE_MLDSA44)) is not None


def test_an_mldsa_key_has_one_type_and_a_bounded_name() -> None:
    ml = Signer.generate("w.example", SIG_TYPE_COSIGNATURE_MLDSA44)
    assert cosigner(ml) is ml
    with pytest.raises(KeyFormatError):
        ml.with_sig_type(SIG_TYPE_COSIGNATURE_V1)
    with pytest.raises(KeyFormatError):
        Signer.from_seed("w" * 256, bytes(32), SIG_TYPE_COSIGNATURE_MLDSA44)
    assert Signer.generate("w.example", 0x06).public_key != ml.public_key


def test_mldsa_cosignatures_are_hedged_yet_both_verify() -> None:
    signer = gen.mldsa44_signer()
    text = gen.CHECKPOINT.to_text()
    one, two = cosign(text, signer, 7), cosign(text, signer, 7)
    assert one.signature[:8] == two.signature[:8]
    for line in (one, two):
        assert verify_cosignature(text, line, signer.verifier()).timestamp == 7
    note = sign_checkpoint(gen.CHECKPOINT, gen.log_signer())
    assert decode_base64(one.line().split(" ")[-1].strip()) is not None
    assert cosignatures(add_signature_lines(note, one), [signer.verifier()])[0].sig_type == 0x06
