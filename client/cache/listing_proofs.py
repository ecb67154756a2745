"""The agent's side of a guarded ``tools/list``: every listed tool's status, proven.

A gateway that guards with ``with_proof`` (``client.cache.mcp.guard_tools_list``) lists
each deplog tool with ``_meta["dev.deplog/proof"]``: the JSON map proof of its status
record at the gateway's checkpoint. ``verify_listing`` checks them all without trusting
the gateway, and decides as the gateway's guard should have. Its rules:

1. Which tools are deplog's, and as which identity, is decided as ``client.cache.mcp``
   rules 1 and 2 say, with the caller's ``pins`` and ``require_pins``: a tool that is
   not deplog's (no pin, no ``dev.deplog/tool`` object) is left out; one refused on the
   listing alone (``identity_missing``, ``identity_mismatch``, ``not_pinned``,
   ``schema_undigestable``, ``schema_digest_mismatch``) is ``refuse`` with that reason,
   whatever its proof says. One whose identity is not a tool id and a SemVer version
   is ``unknown``/``bad_identifier``; one without a proof is ``unknown``/``no_proof``
   (the gateway showed nothing: look it up).
2. Each distinct checkpoint the proofs carry is verified once, by the caller's
   ``verify_checkpoint`` (its log key or witness policy, and its freshness bound): a
   gateway cannot pick the log. A checkpoint it refuses as stale makes its tools
   ``stale``/``checkpoint_stale``; any other refusal, or a proof that does not verify
   against the checkpoint's ``deplog-map/v1`` root, is a ``failure`` (its error code):
   the gateway handed over something that is not what the log signed.
3. A proven status decides as ``Guard.check`` does: revoked and sunset refuse; so does a
   schema digest in the notices that differs from the listed definition's. That digest
   is always computed here from the listed ``inputSchema`` (what the agent will call),
   never taken from the identity's declared ``schema_digest`` (rule 1 refuses a tool
   whose schema has none, and one that declares another). Then deprecated warns, and
   anything else is served.
4. A listed tool the proofs show refused is the gateway's error, not the agent's to
   serve: the gateway was to drop it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deplog.client.cache.guard import Decision, ProcessedThrough, Verdict, refusal, served
from deplog.client.cache.mcp import (
    PROOF_KEY,
    ListedIdentity,
    Pins,
    check_listed,
    checked_pins,
)
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.errors import MapProofError
from deplog.client.map.line import require_map_root
from deplog.client.map.proof import MapProofDocument, verify_status
from deplog.client.model.status import VersionStatus
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
    result: Mapping[str, Any],
    verify_checkpoint: VerifyCheckpoint,
    now: datetime,
    *,
    pins: Pins | None = None,
    require_pins: bool = False,
) -> list[ListedTool]:
    """Every deplog tool of a ``tools/list`` result, in listed order, as its proof shows it
    at ``now`` under the checkpoints ``verify_checkpoint`` accepts, held to the caller's
    ``pins`` (checked as ``client.cache.mcp.checked_pins`` does)."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return []
    pinned = checked_pins(pins)
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
        entry = tool if isinstance(tool, dict) else {}  # not a tool: nobody's identity
        checked = check_listed(entry, pinned, require_pins=require_pins)
        if checked is not None:
            listed.append(_listed_tool(position, entry, checked, checkpoint_of, now))
    return listed


def _listed_tool(
    position: int,
    tool: dict[str, Any],
    checked: ListedIdentity | Decision,
    checkpoint_of: Callable[[bytes], Checkpoint | DeplogError],
    now: datetime,
) -> ListedTool:
    listed_name = tool.get("name")
    name = listed_name if isinstance(listed_name, str) else ""
    if isinstance(checked, Decision):  # decided on the listing alone (rule 1)
        return ListedTool(
            position, name, checked.tool_id, checked.version, checked.verdict, checked.reason
        )
    tool_id, version = checked.tool_id, checked.version

    def failed(code: ErrorCode) -> ListedTool:
        return ListedTool(position, name, tool_id, version, None, code.value, failure=code)

    meta = tool["_meta"]  # a tool with an identity that passed rule 1 declared it there
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
    refused = refusal(status, checked.schema_digest)
    verdict, reason = (Verdict.REFUSE, refused) if refused is not None else served(status)
    return ListedTool(
        position, name, tool_id, version, verdict, reason,
        status=status, checkpoint=checkpoint, note=document.checkpoint,
    )  # fmt: skip
