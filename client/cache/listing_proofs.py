"""The agent's side of a guarded ``tools/list``: every listed tool's status, proven.

A gateway that guards with ``with_proof`` (``client.cache.mcp.guard_tools_list``) lists
each deplog tool with ``_meta["dev.deplog/proof"]``: the JSON map proof of its status
record at the gateway's checkpoint. ``verify_listing`` checks them all without trusting
the gateway, and decides as the gateway's guard should have. Its rules:

1. A tool without a ``dev.deplog/tool`` object is not deplog's and is left out. One whose
   identity is not a tool id and a SemVer version is ``unknown``/``bad_identifier``;
   one without a proof is ``unknown``/``no_proof`` (the gateway showed nothing: look it up).
2. Each distinct checkpoint the proofs carry is verified once, by the caller's
   ``verify_checkpoint`` (its log key or witness policy, and its freshness bound): a
   gateway cannot pick the log. A checkpoint it refuses as stale makes its tools
   ``stale``/``checkpoint_stale``; any other refusal, or a proof that does not verify
   against the checkpoint's ``deplog-map/v1`` root, is a ``failure`` (its error code):
   the gateway handed over something that is not what the log signed.
3. A proven status decides as ``Guard.check`` does: revoked and sunset refuse; so does a
   schema digest in the notices that differs from the listed definition's. The listed
   definition's digest is computed here from its ``inputSchema`` (what the agent will
   call), and only a tool listed without one is compared by its declared
   ``schema_digest``. Then deprecated warns, and anything else is served.
4. A listed tool the proofs show refused is the gateway's error, not the agent's to
   serve: the gateway was to drop it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deplog.client.cache.guard import Decision, ProcessedThrough, Verdict, refusal, served
from deplog.client.cache.mcp import IDENTITY_KEY, PROOF_KEY, schema_digest
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model.notice import parse_tool_id
from deplog.client.model.semver import Version
from deplog.client.model.status import VersionStatus
from deplog.client.model.vmap import (
    MapProofDocument,
    MapProofError,
    require_map_root,
    verify_status,
)
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import parse_note

__all__ = ["ListedTool", "VerifyCheckpoint", "verify_listing"]

VerifyCheckpoint = Callable[[bytes], Checkpoint]
"""The caller's trust: a signed checkpoint note in, the verified checkpoint out, or a
``DeplogError`` (``stale_checkpoint`` when it is too old to count)."""


@dataclass(frozen=True)
class ListedTool:
    """What the proofs show about one listed deplog tool.

    ``verdict``/``reason`` as ``Guard.check`` gives them, or None with ``failure`` the
    error code when the gateway's proof or checkpoint does not verify (rule 2).
    ``status`` and ``checkpoint`` are set when the status is proven."""

    position: int
    """The tool's index in the listing's ``tools``."""
    name: str
    tool_id: str
    version: str
    verdict: Verdict | None
    reason: str
    status: VersionStatus | None = None
    checkpoint: Checkpoint | None = None
    failure: ErrorCode | None = None
    note: bytes | None = None
    """The signed checkpoint note the status is proven at (with ``checkpoint``)."""

    def decision(self, verified_at: datetime) -> Decision:
        """As a guard ``Decision`` (a failure is ``unknown`` with its code as the reason),
        proven at the checkpoint verified at ``verified_at``: what the MCP annotations and
        refusals are made from."""
        through = None
        if self.checkpoint is not None and self.note is not None:
            through = ProcessedThrough(self.note.decode(), self.checkpoint.size, verified_at)
        verdict = Verdict.UNKNOWN if self.verdict is None else self.verdict
        return Decision(verdict, self.reason, self.tool_id, self.version, through, self.status)


def verify_listing(
    result: Mapping[str, Any], verify_checkpoint: VerifyCheckpoint, now: datetime
) -> list[ListedTool]:
    """Every deplog tool of a ``tools/list`` result, in listed order, as its proof shows it
    at ``now`` under the checkpoints ``verify_checkpoint`` accepts."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return []
    verified: dict[bytes, Checkpoint | DeplogError] = {}

    def checkpoint_of(note: bytes) -> Checkpoint | DeplogError:
        """The checkpoint a proof's note verifies to, once per note; one whose body is not
        the note's (a caller that names its own) is ``map_checkpoint_mismatch``, as
        ``verify_proof_document`` would say for every proof made at it."""
        if note not in verified:
            try:
                checkpoint = verify_checkpoint(note)
                if parse_note(note)[0] != checkpoint.to_text():
                    raise MapProofError(ErrorCode.MAP_CHECKPOINT_MISMATCH)
                verified[note] = checkpoint
            except DeplogError as err:
                verified[note] = err
        return verified[note]

    listed = []
    for position, tool in enumerate(tools):
        meta = tool.get("_meta") if isinstance(tool, dict) else None
        identity = meta.get(IDENTITY_KEY) if isinstance(meta, dict) else None
        if isinstance(identity, dict):
            assert isinstance(tool, dict) and isinstance(meta, dict)
            listed.append(_listed_tool(position, tool, meta, identity, checkpoint_of, now))
    return listed


def _listed_tool(
    position: int,
    tool: dict[str, Any],
    meta: dict[str, Any],
    identity: dict[str, Any],
    checkpoint_of: Callable[[bytes], Checkpoint | DeplogError],
    now: datetime,
) -> ListedTool:
    listed_name = tool.get("name")
    name = listed_name if isinstance(listed_name, str) else ""
    tool_id, version = identity.get("tool_id"), identity.get("version")
    if not isinstance(tool_id, str) or not isinstance(version, str) or not _valid(tool_id, version):
        return ListedTool(
            position, name, str(tool_id), str(version), Verdict.UNKNOWN, "bad_identifier"
        )

    def failed(code: ErrorCode) -> ListedTool:
        return ListedTool(position, name, tool_id, version, None, code.value, failure=code)

    if PROOF_KEY not in meta:
        return ListedTool(position, name, tool_id, version, Verdict.UNKNOWN, "no_proof")
    try:
        document = MapProofDocument.from_json(meta[PROOF_KEY])
    except DeplogError:  # not a proof document
        return failed(ErrorCode.MALFORMED_MAP_PROOF)
    if document.tool_id != tool_id:
        return failed(ErrorCode.BAD_MAP_PROOF)
    checkpoint = checkpoint_of(document.checkpoint)
    if isinstance(checkpoint, DeplogError):
        if checkpoint.code == ErrorCode.STALE_CHECKPOINT:
            return ListedTool(position, name, tool_id, version, Verdict.STALE, "checkpoint_stale")
        return failed(checkpoint.code)
    try:  # ``verify_proof_document``, but for the body: checked once per note above
        status = verify_status(require_map_root(checkpoint), tool_id, version, now, document.proof)
    except DeplogError as err:
        return failed(err.code)
    refused = refusal(status, _listed_digest(tool, identity))
    verdict, reason = (Verdict.REFUSE, refused) if refused is not None else served(status)
    return ListedTool(
        position, name, tool_id, version, verdict, reason,
        status=status, checkpoint=checkpoint, note=document.checkpoint,
    )  # fmt: skip


def _valid(tool_id: str, version: str) -> bool:
    try:
        parse_tool_id(tool_id)
        Version.parse(version)
    except DeplogError:
        return False
    return True


def _listed_digest(tool: dict[str, Any], identity: dict[str, Any]) -> str | None:
    """The digest of the definition as listed (rule 3), else the one the identity declares."""
    schema = tool.get("inputSchema")
    if isinstance(schema, dict):
        try:
            return schema_digest(schema)
        except DeplogError:  # not representable in RFC 8785: fall back to the declaration
            pass
    declared = identity.get("schema_digest")
    return declared if isinstance(declared, str) else None
