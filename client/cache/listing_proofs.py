"""The agent's side of a guarded ``tools/list``: every listed tool's status, proven.

A gateway guarding ``with_proof`` lists each deplog tool with its map proof
(``_meta["dev.deplog/proof"]``); ``verify_listing`` checks them all without trusting the
gateway, and decides as its guard should have. Rules:

1. Which tools are deplog's, and as which identity, is ``client.cache.mcp`` rules 1 and
   2 with the caller's pins: a tool refused on the listing alone is ``refuse`` whatever
   its proof says; one without a proof is ``unknown``/``no_proof``.
2. Each distinct checkpoint is verified once by the caller's ``verify_checkpoint``: a
   stale one makes its tools ``stale``/``checkpoint_stale``; any other refusal, or a
   proof that does not verify against its map root, is a ``failure`` (its error code).
3. A proven status decides as ``Guard.check`` does, with the digest computed from the
   listed ``inputSchema``; a tool shown refused yet listed is the gateway's error.
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

VerifyCheckpoint = Callable[[bytes], Checkpoint]
"""The caller's trust: a signed note in, the verified checkpoint out (or a ``DeplogError``,
``stale_checkpoint`` when it is too old to count)."""


@dataclass(frozen=True)
class ListedTool:
    """What the proofs show about the listed tool at ``position``: a guard's ``verdict``, or
    None and the ``failure`` code (rule 2), and a proven status's checkpoint and note."""

    position: int
    name: str
    tool_id: str
    version: str
    verdict: Verdict | None
    reason: str
    status: VersionStatus | None = None
    checkpoint: Checkpoint | None = None
    failure: ErrorCode | None = None
    note: bytes | None = None

    def decision(self, verified_at: datetime) -> Decision:
        """As a guard ``Decision`` (a failure is ``unknown``, its code the reason)."""
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
    """Every deplog tool of a ``tools/list`` result, in order, as its proof shows it at ``now``."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return []
    pinned = checked_pins(pins)
    verified: dict[bytes, Checkpoint | DeplogError] = {}

    def checkpoint_of(note: bytes) -> Checkpoint | DeplogError:
        """The checkpoint a note verifies to, once per note (rule 2)."""
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
