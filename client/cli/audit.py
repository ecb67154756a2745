"""``deplog audit ...``: the auditor's commands, over files only (never the network).

Thin over ``client.audit``. Rules:

1. ``--log-key`` takes a verifier key or a file holding one; ``--origin`` names the
   checkpoints' origin when it is not the key name (C2SP tlog-checkpoint: they SHOULD
   match, need not). With ``--policy`` (C2SP tlog-policy) the log key is optional and,
   if given, the only log accepted; the witnessed time is the quorum's.
2. Input files are read against size limits, so a hostile file cannot exhaust memory.
3. Success prints one line (``--json``: one object); a failure prints one line naming
   the error code (and, for a replay, the first bad index) and exits 1.
4. ``status`` and ``tools`` exit by ``deplog check``'s verdict table
   (``client.cli.verdicts``); ``evidence`` exits ``EXIT_NOT_PROVEN`` (4) for a file that
   proves nothing; ``replay`` exits 1 when the log holds entries that fail validation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from deplog.client.audit.bundle import read_entries
from deplog.client.audit.mapaudit import audit_map
from deplog.client.audit.offline import (
    AuditInputError,
    ReplayReport,
    audit_checkpoint,
    audit_consistency,
    replay,
)
from deplog.client.audit.tiledir import tiles_dir_leaves
from deplog.client.cache.guard import Verdict
from deplog.client.cache.listing_proofs import ListedTool, verify_listing
from deplog.client.cli import verdicts
from deplog.client.cli.messages import SENTENCES
from deplog.client.cli.trust import (
    EXIT_NOT_PROVEN,
    positive_seconds,
    read_bounded,
    read_log_key,
)
from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.follow.source import PAGE_SIZE
from deplog.client.map.line import require_map_root
from deplog.client.map.proof import MapProof, MapProofDocument, verify_tool_status
from deplog.client.model import canonical
from deplog.client.model.canonical import JSONFormatError
from deplog.client.model.entries import MAX_ENTRY_BYTES, NoticeEntry, decode_entry, encode_entry
from deplog.client.model.notice import MAX_ENVELOPE_BYTES, Envelope
from deplog.client.model.rules import InvalidEntry
from deplog.client.plumbing.progress import Progress
from deplog.client.plumbing.storage_faults import file_fault
from deplog.client.tlog.checkpoint import Checkpoint, check_origin
from deplog.client.tlog.cosignature import TREE_LINES, Cosignature
from deplog.client.tlog.evidence import (
    CONFLICTING_ROOTS,
    FAILING_PROOF,
    INCONSISTENT_PREFIX,
    MAP_MISMATCH,
    read_evidence,
)
from deplog.client.tlog.note import MAX_NOTE_SIZE, encode_base64, parse_note
from deplog.client.tlog.policy import (
    MAX_POLICY_SIZE,
    Policy,
    PolicyError,
    PolicyLog,
    VerifiedCheckpoint,
)
from deplog.client.tlog.proofs import ConsistencyProof, leaf_hash, verify_inclusion
from deplog.client.tlog.receipt import MAX_RECEIPT_SIZE, Receipt
from deplog.client.tlog.timestamps import format_timestamp

MAX_PROOF_FILE: Final = 64 * 1024
MAX_MAP_PROOF_FILE: Final = 16 * 1024 * 1024
"""A tool-status proof carries the tool's whole record (no per-tool cap in v1): 16 MiB is
some 300,000 notices on one tool."""

_Command = Callable[[argparse.Namespace], int]


def _origin(text: str) -> str:
    """A checkpoint origin line (argparse type): non-empty, one line."""
    try:
        return check_origin(text)
    except DeplogError:
        raise argparse.ArgumentTypeError("an origin is one non-empty line of text") from None


def _failure(command: str, err: DeplogError | OSError) -> int:
    """Print the one-line failure message (rule 3) and return the exit status."""
    if isinstance(err, OSError):
        fault = file_fault(err)
        print(f"deplog {command}: {fault.message}", file=sys.stderr)
        return fault.exit_status
    message = str(err.code)
    cause = getattr(err, "cause", None)
    if cause:
        message += f" ({cause})"
    index = getattr(err, "index", None)
    if isinstance(index, int):
        message += f" at index {index}"
    if str(err) != err.code and not cause and not isinstance(index, int):
        message += f": {err}"  # messages are value-free by design, so safe to print
    else:
        message += f"; {SENTENCES[err.code]}"
    print(f"deplog {command}: {message}", file=sys.stderr)
    return 1


def guarded(name: str, fn: _Command) -> _Command:
    """``fn``, with deplog and file errors turned into a one-line failure (rule 3)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except BrokenPipeError:  # the output's reader, not a file: main ends quietly
            raise
        except (DeplogError, OSError) as err:
            return _failure(name, err)

    return run


def describe(checkpoint: Checkpoint) -> str:
    """A checkpoint in one line of output: origin, size and root."""
    return f"{checkpoint.origin} size {checkpoint.size} root {encode_base64(checkpoint.root_hash)}"


def result(args: argparse.Namespace, lines: list[str], shape: dict[str, Any]) -> None:
    """A command's result: its text lines, or with ``--json`` one JSON object (rule 3)."""
    if args.json:
        print(json.dumps(shape, sort_keys=True))
    else:
        print("\n".join(lines))


def counting(
    leaves: Iterator[bytes], total: int, on_progress: Callable[[int, int], None]
) -> Iterator[bytes]:
    """``leaves`` unchanged, reporting ``(done, total)`` every page and at the end."""
    done = 0
    for leaf in leaves:
        yield leaf
        done += 1
        if done % PAGE_SIZE == 0:
            on_progress(done, total)
    on_progress(done, total)


def _rfc3339(timestamp: int) -> str:
    return format_timestamp(datetime.fromtimestamp(timestamp, UTC))


def policy_lines(verified: VerifiedCheckpoint) -> list[str]:
    """The quorum line, then one line per valid cosignature: what a policy adds to output."""
    when = verified.witnessed_at
    return [
        f"quorum {'none required' if when is None else f'met at {_rfc3339(when)}'}",
        *(
            f"  cosigned by {c.name} at {_rfc3339(c.timestamp)}{_algorithm(c)}"
            for c in verified.cosignatures
        ),
    ]


def with_policy(first: str, policy_lines: list[str]) -> list[str]:
    """A result's lines: ``first`` with the policy's quorum line after it, then the rest."""
    if not policy_lines:
        return [first]
    return [f"{first}; {policy_lines[0]}", *policy_lines[1:]]


_CheckpointVerifier = Callable[[bytes], tuple[Checkpoint, list[str], dict[str, Any]]]


def _checkpoint_verifier(args: argparse.Namespace, max_age: float | None) -> _CheckpointVerifier:
    """Checks a note with ``--log-key`` or ``--policy`` (rule 1), adding a policy's lines and
    JSON members; offline, so no freshness bound but ``max_age`` (``stale_checkpoint``)."""
    if args.policy is None:
        if args.log_key is None:
            raise AuditInputError(ErrorCode.MISSING_INPUT, "give --log-key, --policy or both")
        key = read_log_key(args.log_key)
        return lambda note: (audit_checkpoint(note, key, args.origin), [], {})
    if args.origin is not None:
        raise CLIError("--origin applies to --log-key without --policy", 2)
    policy = Policy.parse(read_bounded(args.policy, MAX_POLICY_SIZE))
    if args.log_key is not None:
        policy = replace(policy, logs=(PolicyLog(read_log_key(args.log_key)),))

    def verify(note: bytes) -> tuple[Checkpoint, list[str], dict[str, Any]]:
        verified = policy.verify(note, now=time.time(), max_age=max_age)
        when = verified.witnessed_at
        if max_age is not None and when is None:
            raise PolicyError(ErrorCode.STALE_CHECKPOINT, "no witness quorum dates it")
        shape = {
            "quorum_met_at": None if when is None else _rfc3339(when),
            "cosignatures": [
                {
                    "name": c.name,
                    "timestamp": _rfc3339(c.timestamp),
                    "algorithm": c.algorithm,
                    "statement": c.statement,
                }
                for c in verified.cosignatures
            ],
        }
        if policy.map_quorum is not None:
            met = verified.map_witnessed_at
            shape["map_quorum_met_at"] = None if met is None else _rfc3339(met)
        return verified.checkpoint, policy_lines(verified), shape

    return verify


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    checkpoint, policy_lines, policy_shape = _checkpoint_verifier(args, None)(
        read_bounded(args.file, MAX_NOTE_SIZE)
    )
    shape = {"ok": True, "checkpoint": checkpoint.to_json(), **policy_shape}
    result(args, with_policy(f"ok: checkpoint {describe(checkpoint)}", policy_lines), shape)
    return 0


def _cmd_receipt(args: argparse.Namespace) -> int:
    verify = _checkpoint_verifier(args, None)
    if args.envelope is not None:
        body = read_bounded(args.envelope, MAX_ENVELOPE_BYTES)
        leaf = encode_entry(NoticeEntry(Envelope.parse(body)))
    else:
        leaf = read_bounded(args.leaf, MAX_ENTRY_BYTES)
    receipt = Receipt.parse(read_bounded(args.receipt, MAX_RECEIPT_SIZE))
    checkpoint, policy_lines, policy_shape = verify(receipt.checkpoint)
    decode_entry(leaf)
    verify_inclusion(
        leaf_hash(leaf), receipt.index, checkpoint.size, receipt.proof, checkpoint.root_hash
    )
    first = f"ok: entry {receipt.index} is included in {describe(checkpoint)}"
    shape = {"ok": True, "index": receipt.index, "checkpoint": checkpoint.to_json()}
    result(args, with_policy(first, policy_lines), {**shape, **policy_shape})
    return 0


def _algorithm(cosig: Cosignature) -> str:
    """Nothing for the spec's Ed25519 full-body form, else its type and ``tree lines only``."""
    if cosig.algorithm == "ed25519" and cosig.statement != TREE_LINES:
        return ""
    return f" ({cosig.algorithm}, tree lines only)"


def _cmd_consistency(args: argparse.Namespace) -> int:
    proof = ConsistencyProof.from_json(canonical.loads(read_bounded(args.proof, MAX_PROOF_FILE)))
    old, new = audit_consistency(
        read_bounded(args.old, MAX_NOTE_SIZE),
        read_bounded(args.new, MAX_NOTE_SIZE),
        proof,
        read_log_key(args.log_key),
        args.origin,
    )
    shape = {"ok": True, "old": old.to_json(), "new": new.to_json()}
    result(args, [f"ok: {new.origin} size {new.size} is consistent with size {old.size}"], shape)
    return 0


def _cmd_evidence(args: argparse.Namespace) -> int:
    evidence = read_evidence(args.file)
    finding = evidence.verify(read_log_key(args.log_key), args.origin)
    meaning = {
        CONFLICTING_ROOTS: "the log signed two different trees of one size: a fork",
        INCONSISTENT_PREFIX: "the log signed a larger tree whose first leaves, by the proof "
        "in the file, are not the smaller tree it signed: a fork",
        MAP_MISMATCH: "the log signed a map root that is not the fold of its entries",
        FAILING_PROOF: "both checkpoints are validly signed, but the consistency proof "
        "served between them fails; the log never signs proofs, so a network path could "
        "have corrupted it: ask the log (or a mirror) for the proof again",
    }[finding]
    verdict = "proven" if evidence.proven else "not proven"
    by = f"reported by {evidence.reporter} at {evidence.detected_at}"
    line = f"{verdict}: {finding}: {meaning} ({by})"
    shape = {
        "proven": evidence.proven,
        "finding": finding,
        "reporter": evidence.reporter,
        "detected_at": evidence.detected_at,
    }
    result(args, [line], shape)
    return 0 if evidence.proven else EXIT_NOT_PROVEN


def _summary(report: ReplayReport) -> str:
    actions = ", ".join(f"{n} {action}" for action, n in report.notices.items()) or "none"
    return (
        f"ok: replayed {report.size} entries of {report.checkpoint.origin}: "
        f"{report.publisher_entries} publisher entries, notices: {actions}, "
        f"{len(report.publishers)} publishers; root {encode_base64(report.root)}"
    )


def _cmd_replay(args: argparse.Namespace) -> int:
    checkpoint_path = args.checkpoint or (args.dir / "checkpoint" if args.dir else None)
    entries_path = args.entries or (args.dir / "entries" if args.dir else None)
    if checkpoint_path is None or entries_path is None:
        raise AuditInputError(
            ErrorCode.MISSING_INPUT, "give DIR, or --checkpoint FILE and --entries FILE"
        )
    log_key = read_log_key(args.log_key)
    note = read_bounded(checkpoint_path, MAX_NOTE_SIZE)
    if args.entries is None and not entries_path.exists() and (args.dir / "tile").is_dir():
        leaves: Iterator[bytes] = tiles_dir_leaves(args.dir, note)  # a mirrored tiles directory
    else:
        leaves = read_entries(entries_path)
    total = Checkpoint.from_text(parse_note(note)[0]).size  # for display; replay verifies
    with Progress("replaying entries", quiet=args.json) as progress:
        report = replay(counting(leaves, total, progress.update), note, log_key, args.origin)
    shape = {
        "ok": not report.invalid,
        "checkpoint": report.checkpoint.to_json(),
        "notices": report.notices,
        "publisher_entries": report.publisher_entries,
        "publishers": list(report.publishers),
        "invalid": [entry.to_json() for entry in report.invalid],
    }
    lines = [_summary(report)]
    if report.invalid:  # the log signed entries it should have refused: the audit fails
        lines = [
            f"FAILED: replayed {report.size} entries of {report.checkpoint.origin}; "
            f"{len(report.invalid)} fail validation (docs/fold-spec.md, entries that fail "
            "validation):",
            *(_invalid_line(entry) for entry in report.invalid[:_INVALID_SHOWN]),
        ]
        if len(report.invalid) > _INVALID_SHOWN:
            lines.append(f"  ... and {len(report.invalid) - _INVALID_SHOWN} more (--json)")
    result(args, lines, shape)
    return 1 if report.invalid else 0


_INVALID_SHOWN = 20
"""Invalid entries a replay lists as text (``--json`` lists them all)."""


def _invalid_line(entry: InvalidEntry) -> str:
    cause = f" ({entry.cause})" if entry.cause else ""
    tool = f", names {entry.tool_id}: unknown for every verifier" if entry.tool_id else ""
    return f"  entry {entry.index}: {entry.code}{cause}{tool}"


def _cmd_map(args: argparse.Namespace) -> int:
    paths = [args.dir / "checkpoint", *args.checkpoint]
    archive = args.dir / "checkpoints"
    if archive.is_dir():
        paths += sorted(p for p in archive.iterdir() if p.is_file())
    key = read_log_key(args.log_key)
    notes = [read_bounded(path, MAX_NOTE_SIZE) for path in paths]
    report = audit_map(read_entries(args.dir / "entries"), notes, key, args.origin)
    print(
        f"ok: {len(report.matched)} checkpoints commit to the map of their entries "
        f"({report.entries} entries folded; {len(report.without_line)} without a map line)"
    )
    return 0


def _read_input(path: str, limit: int) -> bytes:
    """A file, or standard input for ``-`` (an agent pipes a proof or a listing into it)."""
    return read_bounded(sys.stdin.buffer if path == "-" else Path(path), limit)


def _cmd_status(args: argparse.Namespace) -> int:
    if args.max_age is not None and args.policy is None:
        raise CLIError("--max-age needs --policy: only witness cosignatures date a checkpoint", 2)
    at = verdicts.time_flag("--at", args.at)
    proof = _read_input(args.proof, MAX_MAP_PROOF_FILE)
    document = MapProofDocument.parse(proof) if proof[:1] == b"{" else None
    parsed = MapProof.from_binary(proof) if document is None else document.proof
    if args.checkpoint is not None:  # authoritative: a JSON proof must carry the same body
        note = read_bounded(args.checkpoint, MAX_NOTE_SIZE)
    elif document is not None:
        note = document.checkpoint  # verified below like any other
    else:
        raise AuditInputError(
            ErrorCode.MISSING_INPUT, "a binary proof needs --checkpoint, the note it was served at"
        )
    verify = _checkpoint_verifier(args, args.max_age)
    try:
        checkpoint, policy_lines, policy_shape = verify(note)
    except PolicyError as err:
        if err.code != ErrorCode.STALE_CHECKPOINT:
            raise
        print(f"deplog audit status: stale: {err.code}; {SENTENCES[err.code]}", file=sys.stderr)
        return verdicts.EXIT_STALE
    status = verify_tool_status(proof, checkpoint, args.tool_id, args.version, at)
    map_root = encode_base64(require_map_root(checkpoint))
    proven = f"  at {format_timestamp(at)}, proven ({parsed.result}) by the map {map_root} of "
    lines = [
        f"ok: {verdicts.row_line(args.tool_id, status.to_json())}",
        *with_policy(proven + describe(checkpoint), policy_lines),
    ]
    shape = {
        "ok": True,
        "status": status.to_json(),
        "at": format_timestamp(at),
        "result": parsed.result,
        "map_root": map_root,
        "checkpoint": checkpoint.to_json(),
        **policy_shape,
    }
    result(args, lines, shape)
    return verdicts.status_exit(status.status)


def _read_listing(paths: list[str]) -> list[Any]:
    """The tools of saved ``tools/list`` results or JSON-RPC responses, a file per page."""
    if paths.count("-") > 1:
        raise CLIError("standard input (-) can be given once", 2)
    tools: list[Any] = []
    for path in paths:
        try:
            obj = json.loads(_read_input(path, MAX_MAP_PROOF_FILE))
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser
            raise JSONFormatError(message="not a tools/list result") from None
        if isinstance(obj, dict) and isinstance(obj.get("result"), dict):
            obj = obj["result"]
        if not isinstance(obj, dict) or not isinstance(obj.get("tools"), list):
            raise JSONFormatError(message="not a tools/list result")
        tools += obj["tools"]
    return tools


_LISTING_SUMMARY: Final = {
    1: "failed: {n} of {tools} with a proof that does not verify",
    verdicts.EXIT_REFUSE: "refused: {n} of {tools} proven refused, yet listed (a guarding "
    "gateway drops them)",
    verdicts.EXIT_STALE: "stale: {n} of {tools} proven at a checkpoint older than --max-age",
    verdicts.EXIT_UNKNOWN: "not proven: {n} of {tools} with no proof, or no valid identity",
}


def _tools(count: int, what: str = "deplog tool") -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _shown(text: str, limit: int = 100) -> str:
    """A name or id from a listing, as one line of text: a hostile one cannot forge lines
    (control characters escaped) or flood the terminal (cut at ``limit``)."""
    line = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text[: limit + 1])
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _cmd_tools(args: argparse.Namespace) -> int:
    if args.max_age is not None and args.policy is None:
        raise CLIError("--max-age needs --policy: only witness cosignatures date a checkpoint", 2)
    at = verdicts.time_flag("--at", args.at)
    listed = _read_listing(args.listing)
    listing, count = {"tools": listed}, len(listed)
    verify = _checkpoint_verifier(args, args.max_age)
    given = None if args.checkpoint is None else read_bounded(args.checkpoint, MAX_NOTE_SIZE)
    seen: dict[bytes, tuple[Checkpoint, list[str], dict[str, Any]]] = {}

    def verify_once(note: bytes) -> Checkpoint:
        note = note if given is None else given  # authoritative: each proof must carry its body
        if note not in seen:
            seen[note] = verify(note)
        return seen[note][0]

    tools = verify_listing(listing, verify_once, at)
    exits = [1 if t.verdict is None else verdicts.VERDICT_EXITS[t.verdict] for t in tools]
    code = 1 if 1 in exits else verdicts.exit_for(exits)
    if code:
        first = _LISTING_SUMMARY[code].format(n=exits.count(code), tools=_tools(len(tools)))
    elif tools:
        warned = sum(t.verdict == Verdict.WARN for t in tools)
        first = f"ok: {_tools(len(tools))} proven servable ({warned} deprecated)"
    else:
        first = "ok: no deplog tool listed"
    if count > len(tools):
        first += f"; {_tools(count - len(tools), 'listed tool')} without a deplog identity"
    lines = [first]
    for tool in tools:
        said = (
            verdicts.row_line(tool.status.tool_id, tool.status.to_json())
            if tool.status is not None
            else f"{_shown(tool.tool_id)} {_shown(tool.version)}: {tool.reason}"
        )
        verdict = "failed" if tool.verdict is None else tool.verdict.value
        lines.append(f"  {verdict} {_shown(tool.name) or '(no name)'}: {said}")
    checkpoints = []
    for checkpoint, policy_lines, policy_shape in seen.values():
        try:
            map_root: str | None = encode_base64(require_map_root(checkpoint))
        except DeplogError:  # its proofs failed on it already: the table says so
            map_root = None
        proving = f"the map {map_root}" if map_root else "no map (no valid deplog-map/v1 line)"
        line = f"  at {format_timestamp(at)}, by {proving} of {describe(checkpoint)}"
        lines += with_policy(line, policy_lines)
        checkpoints.append({**checkpoint.to_json(), "map_root": map_root, **policy_shape})
    shape = {
        "ok": code == 0,
        "at": format_timestamp(at),
        "tools": [_listed_json(tool) for tool in tools],
        "without_identity": count - len(tools),
        "checkpoints": checkpoints,
    }
    result(args, lines, shape)
    return code


def _listed_json(tool: ListedTool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": tool.name,
        "tool_id": tool.tool_id,
        "version": tool.version,
        "verdict": None if tool.verdict is None else tool.verdict.value,
        "reason": tool.reason,
    }
    if tool.status is not None and tool.checkpoint is not None:
        out["status"] = tool.status.to_json()
        out["checkpoint_size"] = tool.checkpoint.size
    return out


# --- wiring ---------------------------------------------------------------------


def _add_proof_trust(sp: argparse.ArgumentParser) -> None:
    """The flags that say whose checkpoints count, how fresh, and when a status is evaluated."""
    sp.add_argument("--policy", type=Path, help="a C2SP tlog-policy file to verify against")
    sp.add_argument(
        "--at", metavar="TIME", help="RFC 3339 UTC time to evaluate the status at (default: now)"
    )
    sp.add_argument(
        "--max-age",
        type=positive_seconds,
        metavar="SECONDS",
        help="with --policy: a checkpoint its witness quorum cosigned longer ago is stale (exit 6)",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``audit`` and its commands to ``deplog``."""
    audit = subparsers.add_parser("audit", help="verify log files offline")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)

    def add(
        name: str, help_text: str, fn: _Command, key_required: bool = True
    ) -> argparse.ArgumentParser:
        sp = audit_sub.add_parser(name, help=help_text)
        sp.add_argument(
            "--log-key", required=key_required, help="log verifier key, or a file holding it"
        )
        sp.add_argument(
            "--origin",
            type=_origin,
            help="the checkpoints' origin line, if not the log key's name",
        )
        sp.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        sp.set_defaults(func=guarded(f"audit {name}", fn))
        return sp

    sp = add(
        "checkpoint",
        "verify a checkpoint's log signature, or a whole witness policy",
        _cmd_checkpoint,
        key_required=False,
    )
    sp.add_argument("file", type=Path, help="the signed checkpoint note")
    sp.add_argument("--policy", type=Path, help="a C2SP tlog-policy file to verify against")

    sp = add(
        "receipt",
        "verify that a receipt proves an entry is in the log",
        _cmd_receipt,
        key_required=False,
    )
    sp.add_argument("receipt", type=Path, help="the .tlog-proof file")
    sp.add_argument(
        "--policy",
        type=Path,
        help="a C2SP tlog-policy file: also verify the receipt's cosignatures and quorum",
    )
    given = sp.add_mutually_exclusive_group(required=True)
    given.add_argument("--envelope", type=Path, help="the signed envelope JSON that was logged")
    given.add_argument("--leaf", type=Path, help="the exact leaf bytes")

    sp = add("consistency", "verify that a newer checkpoint extends an older one", _cmd_consistency)
    sp.add_argument("old", type=Path, metavar="OLD_CHECKPOINT", help="the older signed checkpoint")
    sp.add_argument("new", type=Path, metavar="NEW_CHECKPOINT", help="the newer signed checkpoint")
    sp.add_argument("proof", type=Path, metavar="PROOF_JSON", help='{"old","new","proof"}')

    sp = add("replay", "replay an exported log: every leaf, signature and the root", _cmd_replay)
    sp.add_argument(
        "dir",
        type=Path,
        nargs="?",
        metavar="DIR",
        help="holds checkpoint and entries, or checkpoint and tile/ (a tiles directory)",
    )
    sp.add_argument("--checkpoint", type=Path, help="checkpoint file (default: DIR/checkpoint)")
    sp.add_argument("--entries", type=Path, help="entry bundle (default: DIR/entries)")

    sp = add("map", "recompute the tool-status map root of every archived checkpoint", _cmd_map)
    sp.add_argument("dir", type=Path, metavar="DIR", help="an export: checkpoint, entries")
    sp.add_argument(
        "--checkpoint",
        type=Path,
        action="append",
        default=[],
        help="another signed checkpoint to check (repeatable; DIR/checkpoints/* are read too)",
    )

    sp = add(
        "status",
        "verify a tool-status proof: a version's status as of a signed checkpoint",
        _cmd_status,
        key_required=False,
    )
    sp.formatter_class = argparse.RawDescriptionHelpFormatter
    sp.epilog = (
        "exit codes:\n"
        "  0  proven: active or deprecated (serve)\n"
        "  1  not proven: the proof, the checkpoint or a signature does not verify\n"
        "  2  a usage error\n"
        f"  {verdicts.EXIT_REFUSE}  proven: revoked or sunset (refuse)\n"
        f"  {verdicts.EXIT_STALE}  stale: the witness quorum cosigned longer ago than --max-age"
    )
    sp.add_argument(
        "proof",
        metavar="PROOF",
        help="GET /v1/tools/{tool_id}/proof's answer, JSON or binary (- reads standard input)",
    )
    sp.add_argument(
        "tool_id", metavar="TOOL_ID", type=verdicts.tool_id, help="tool:<namespace>/<name>"
    )
    sp.add_argument(
        "version", metavar="VERSION", type=verdicts.version, help="a SemVer version, e.g. 1.2.0"
    )
    sp.add_argument(
        "--checkpoint",
        type=Path,
        help="the signed checkpoint to verify against (a binary proof needs it; a JSON "
        "proof must have been made at it)",
    )
    _add_proof_trust(sp)

    sp = add(
        "tools",
        "verify a guarded MCP tools/list: every listed deplog tool's status, proven",
        _cmd_tools,
        key_required=False,
    )
    sp.formatter_class = argparse.RawDescriptionHelpFormatter
    sp.epilog = (
        "exit codes (the most severe tool wins):\n"
        "  0  every deplog tool listed is proven active or deprecated\n"
        "  1  a proof, a checkpoint or a signature does not verify\n"
        "  2  a usage error\n"
        f"  {verdicts.EXIT_REFUSE}  a tool listed is proven revoked, sunset or of another schema\n"
        f"  {verdicts.EXIT_STALE}  stale: a proof's witness quorum cosigned longer ago than "
        "--max-age\n"
        f"  {verdicts.EXIT_UNKNOWN}  not proven: a tool has no proof, or no valid deplog identity"
    )
    sp.add_argument(
        "listing",
        metavar="LISTING",
        nargs="+",
        help="a tools/list result or its JSON-RPC response, as a gateway guarding with "
        "proofs answers it, one file per page (- reads standard input)",
    )
    sp.add_argument(
        "--checkpoint",
        type=Path,
        help="the signed checkpoint every proof must have been made at (default: the ones "
        "they carry, each verified)",
    )
    _add_proof_trust(sp)

    sp = add("evidence", "verify a fork evidence file from a follower or witness", _cmd_evidence)
    sp.add_argument("file", type=Path, help="the fork-evidence JSON file")
