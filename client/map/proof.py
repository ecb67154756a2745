"""Map proofs: a lookup's result for one tool, its two encodings, and their verification.

The normative text is ``docs/fold-spec.md`` section 6. Rules:

1. **One encoding per proof.** The binary form and the JSON document are parsed
   strictly and totally: no trailing bytes or unknown members, no path longer than a
   key, and any failure ``malformed_map_proof`` with no value in the message.
2. **A proof shows its claim or fails.** A ``present`` proof's record must decode as
   the tool's (record rule *one encoding*) and lead to the root under the tool's key;
   an ``absent`` one must end in another key's leaf that the tool's key reaches; an
   ``empty`` one has no path. Anything else is ``bad_map_proof``.
3. **The caller's checkpoint is the authority.** A JSON document carries the
   checkpoint it was made at, but it is verified against the checkpoint the caller
   verified itself (signature, cosignatures, freshness), whose body it must equal
   (``map_checkpoint_mismatch``); its tool id is the one asked, whatever the result
   (``bad_map_proof``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.errors import MapFormatError, MapProofError
from deplog.client.map.hashing import KEY_BITS, map_key, value_hash
from deplog.client.map.line import require_map_root
from deplog.client.map.record import StatusRecord, _Reader, evaluate
from deplog.client.map.tree import KeyPath, PathStep, root_from_path
from deplog.client.model import canonical
from deplog.client.model.notice import parse_tool_id, parse_version
from deplog.client.model.status import VersionStatus
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import decode_base64, encode_base64, parse_note

PROOF_TYPE: Final = "deplog.map_proof/v1"
BINARY_VERSION: Final = 1
MAX_PATH: Final = KEY_BITS  # split bits strictly decrease from leaf to root

Result = Literal["present", "absent", "empty"]
_RESULT_CODES: Final[tuple[Result, ...]] = ("present", "absent", "empty")


@dataclass(frozen=True)
class MapProof:
    """A lookup result for one key: ``present`` with the record, ``absent`` with the
    alternate leaf the lookup reaches, or ``empty``; ``path`` leaf to root."""

    result: Result
    path: tuple[PathStep, ...] = ()
    record: bytes | None = None
    alt_key: bytes | None = None
    alt_value: bytes | None = None

    def to_binary(self) -> bytes:
        """``u8 1 ‖ u8 result ‖ (u32 len ‖ record | alt_key ‖ alt_value) ‖ u16 n ‖ n x
        (u8 bit ‖ sibling)``, integers big-endian."""
        out = bytearray((BINARY_VERSION, _RESULT_CODES.index(self.result)))
        if self.result == "present":
            assert self.record is not None
            out += struct.pack(">I", len(self.record)) + self.record
        elif self.result == "absent":
            assert self.alt_key is not None and self.alt_value is not None
            out += self.alt_key + self.alt_value
        out += struct.pack(">H", len(self.path))
        for step in self.path:
            out += bytes((step.bit,)) + step.sibling
        return bytes(out)

    @classmethod
    def from_binary(cls, data: bytes) -> MapProof:
        """Parse the binary form; anything but exactly one proof is ``malformed_map_proof``."""
        reader = _Reader(bytes(data), ErrorCode.MALFORMED_MAP_PROOF)
        if reader.u8() != BINARY_VERSION:
            raise MapFormatError()
        code = reader.u8()
        if code >= len(_RESULT_CODES):
            raise MapFormatError()
        result = _RESULT_CODES[code]
        record = alt_key = alt_value = None
        if result == "present":
            record = reader.take(reader.u32())
        elif result == "absent":
            alt_key, alt_value = reader.take(32), reader.take(32)
        count = reader.u16()
        if count > MAX_PATH or (result == "empty" and count):
            raise MapFormatError()
        path = tuple(PathStep(reader.u8(), reader.take(32)) for _ in range(count))
        reader.end()
        return cls(result, path, record, alt_key, alt_value)

    def to_json(self) -> dict[str, Any]:
        """The proof members of the JSON form (``result``, ``record``/``alt_leaf``, ``path``)."""
        out: dict[str, Any] = {"result": self.result}
        if self.record is not None:
            out["record"] = encode_base64(self.record)
        if self.alt_key is not None and self.alt_value is not None:
            out["alt_leaf"] = {
                "key": encode_base64(self.alt_key),
                "value": encode_base64(self.alt_value),
            }
        out["path"] = [{"bit": s.bit, "sibling": encode_base64(s.sibling)} for s in self.path]
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MapProof:
        """Parse the proof members of a JSON proof (other members are the caller's)."""
        result = obj.get("result")
        if result not in _RESULT_CODES:
            raise MapFormatError()
        extra = {"present": {"record"}, "absent": {"alt_leaf"}, "empty": set()}[result]
        if set(obj) - _DOCUMENT_MEMBERS != {"result", "path", *extra}:
            raise MapFormatError()
        record = alt_key = alt_value = None
        if result == "present":
            record = _b64(obj["record"])
        elif result == "absent":
            alt = obj["alt_leaf"]
            if not isinstance(alt, dict) or set(alt) != {"key", "value"}:
                raise MapFormatError()
            alt_key, alt_value = _b64(alt["key"], 32), _b64(alt["value"], 32)
        raw_path = obj["path"]
        if not isinstance(raw_path, list) or len(raw_path) > MAX_PATH:
            raise MapFormatError()
        if result == "empty" and raw_path:
            raise MapFormatError()
        path = []
        for raw in raw_path:
            if not isinstance(raw, dict) or set(raw) != {"bit", "sibling"}:
                raise MapFormatError()
            bit = raw["bit"]
            if isinstance(bit, bool) or not isinstance(bit, int) or not 0 <= bit < KEY_BITS:
                raise MapFormatError()
            path.append(PathStep(bit, _b64(raw["sibling"], 32)))
        return cls(result, tuple(path), record, alt_key, alt_value)


_DOCUMENT_MEMBERS: Final = frozenset({"type", "checkpoint", "tool_id"})


def _b64(value: object, size: int | None = None) -> bytes:
    raw = decode_base64(value) if isinstance(value, str) else None
    if raw is None or (size is not None and len(raw) != size):
        raise MapFormatError()
    return raw


def verify_map_proof(root: bytes, tool_id: str, proof: MapProof) -> StatusRecord | None:
    """Check ``proof`` for ``tool_id`` under ``root`` (rule 2): its record, None if absent."""
    key = map_key(tool_id)
    record: StatusRecord | None = None
    if proof.result == "present":
        if proof.record is None:
            raise MapFormatError()
        record = StatusRecord.decode(proof.record, tool_id)
        path = KeyPath(key, value_hash(proof.record), proof.path)
    elif proof.result == "absent":
        if proof.alt_key is None or proof.alt_value is None:
            raise MapFormatError()
        if proof.alt_key == key:
            raise MapProofError()
        path = KeyPath(proof.alt_key, proof.alt_value, proof.path)
    else:
        path = KeyPath(None, None, proof.path)
    if root_from_path(key, path) != root:
        raise MapProofError()
    return record


def verify_status(
    root: bytes, tool_id: str, version: str, now: datetime, proof: MapProof
) -> VersionStatus:
    """The status of ``tool_id`` at ``version`` at ``now``, as the map ``root`` proves it."""
    return evaluate(tool_id, verify_map_proof(root, tool_id, proof), version, now)


@dataclass(frozen=True)
class MapProofDocument:
    """The JSON proof: the signed checkpoint it was made at, the tool id and the proof."""

    checkpoint: bytes
    tool_id: str
    proof: MapProof

    def to_json(self) -> dict[str, Any]:
        """``{"type", "checkpoint", "tool_id", "result", ..., "path"}``."""
        return {
            "type": PROOF_TYPE,
            "checkpoint": self.checkpoint.decode("utf-8"),
            "tool_id": self.tool_id,
            **self.proof.to_json(),
        }

    def encode(self) -> bytes:
        """The RFC 8785 bytes of the JSON form."""
        return canonical.dumps(self.to_json())

    @classmethod
    def parse(cls, data: bytes) -> MapProofDocument:
        """Parse the JSON form strictly (rule 1); the checkpoint is left to the caller."""
        try:
            obj = canonical.loads(data)
        except DeplogError:
            raise MapFormatError() from None
        document = cls.from_json(obj)
        try:
            parse_note(document.checkpoint)
        except DeplogError:
            raise MapFormatError() from None
        return document

    @classmethod
    def from_json(cls, obj: object) -> MapProofDocument:
        """The document from a decoded JSON value (an MCP ``_meta`` member)."""
        if not isinstance(obj, dict) or obj.get("type") != PROOF_TYPE:
            raise MapFormatError()
        checkpoint, tool_id = obj.get("checkpoint"), obj.get("tool_id")
        if not isinstance(checkpoint, str) or not isinstance(tool_id, str):
            raise MapFormatError()
        try:
            parse_tool_id(tool_id)
            note = checkpoint.encode("utf-8")
        except (DeplogError, UnicodeEncodeError):  # a lone surrogate JSON let through
            raise MapFormatError() from None
        return cls(note, tool_id, MapProof.from_json(obj))


def verify_proof_document(
    document: MapProofDocument, checkpoint: Checkpoint, version: str, now: datetime
) -> VersionStatus:
    """Verify a JSON proof against the checkpoint the caller verified (rule 3)."""
    text, _ = parse_note(document.checkpoint)
    if text != checkpoint.to_text():
        raise MapProofError(ErrorCode.MAP_CHECKPOINT_MISMATCH)
    root = require_map_root(checkpoint)
    return verify_status(root, document.tool_id, version, now, document.proof)


def verify_tool_status(
    proof: bytes, checkpoint: Checkpoint, tool_id: str, version: str, now: datetime
) -> VersionStatus:
    """The status of ``tool_id`` at ``version`` at ``now`` that ``proof``, in either form,
    shows under ``checkpoint``, which the caller verified (rule 3): the agent's check, in
    the order of checks of ``docs/fold-spec.md`` section 12.5."""
    parse_tool_id(tool_id)
    parse_version(version)
    if proof[:1] == b"{":
        document = MapProofDocument.parse(proof)
        if document.tool_id != tool_id:  # whatever the result: absence is asked of one id
            raise MapProofError()
        return verify_proof_document(document, checkpoint, version, now)
    parsed = MapProof.from_binary(proof)
    return verify_status(require_map_root(checkpoint), tool_id, version, now, parsed)
