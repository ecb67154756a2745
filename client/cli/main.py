"""``deplog``: the publisher's and auditor's command line.

Thin over the library: ``keygen`` writes a publisher key pair, ``publish``
builds, signs and submits a notice and keeps the envelope and its receipt,
``verify-receipt`` checks a receipt offline with nothing but the log's
verifier key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deplog.client.cache import inventory
from deplog.client.cli import audit as auditcli
from deplog.client.cli import monitor as monitorcli
from deplog.client.cli.trust import add_follow_arguments, load_trust, log_origin
from deplog.client.errors import CLIError, DeplogError
from deplog.client.follow.follower import Follower, SyncResult
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import ForkError, SuspectedForkError
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry, decode_entry, encode_entry
from deplog.client.model.notice import (
    Envelope,
    Notice,
    parse_timestamp,
)
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.keyfile import create_signer, key_file_name, load_signer
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.receipt import Receipt, verify_receipt
from deplog.client.tlog.timestamps import format_timestamp, now_timestamp

__all__ = [
    "DEFAULT_STATE",
    "HTTP_TIMEOUT",
    "MAX_RESPONSE",
    "main",
    "parser",
]

DEFAULT_STATE = "deplog-state.db"
HTTP_TIMEOUT = 30.0
MAX_RESPONSE = 1 << 20


def _parse_range(text: str) -> dict[str, Any]:
    """``A..B`` (B fixed, excluded), ``A..=B`` (B last affected) or ``A..`` (open)."""
    if ".." not in text:
        raise CLIError("a range is A..B, A..=B or A..")
    introduced, rest = text.split("..", 1)
    events: list[dict[str, str]] = [{"introduced": introduced or "0"}]
    if rest.startswith("="):
        events.append({"last_affected": rest[1:]})
    elif rest:
        events.append({"fixed": rest})
    return {"type": "SEMVER", "events": events}


def _build_notice(args: argparse.Namespace, publisher: str) -> Notice:
    obj: dict[str, Any] = {
        "tool_id": args.tool,
        "action": args.action,
        "reasons": args.reason,
        "effective_at": args.effective_at or now_timestamp(),
        "issued_at": now_timestamp(),
        "publisher": publisher,
        "sequence": args.sequence if args.sequence is not None else time.time_ns() // 1_000_000,
    }
    affected: dict[str, Any] = {}
    if args.version:
        affected["versions"] = args.version
    if args.range:
        affected["ranges"] = [_parse_range(r) for r in args.range]
    if affected:
        obj["affected"] = affected
    if args.withdraws is not None:
        obj["withdraws"] = args.withdraws
    if args.advisory:
        obj["advisories"] = args.advisory
    if args.replacement:
        tool, _, version = args.replacement.rpartition("@")
        obj["replacement"] = {"tool_id": tool, "version": version}
    for name in ("sunset_at", "schema_digest", "message"):
        value = getattr(args, name)
        if value is not None:
            obj[name] = value
    return Notice.from_json(obj)


def _post_envelope(url: str, envelope: Envelope) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/notices",
        data=envelope.canonical_bytes(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            return int(response.status), bytes(response.read(MAX_RESPONSE))
    except urllib.error.HTTPError as err:
        try:
            code = json.loads(err.read(4096)).get("error", str(err.code))
        except ValueError:
            code = str(err.code)
        raise CLIError(f"refused ({err.code}): {code}") from None
    except (urllib.error.URLError, OSError) as err:
        raise CLIError(f"cannot reach the authority: {type(err).__name__}") from None


def _cmd_keygen(args: argparse.Namespace) -> int:
    stem = key_file_name(args.name)
    signer = create_signer(args.out, stem, args.name)
    print(f"wrote {args.out / (stem + '.key')} (mode 0600) and {args.out / (stem + '.pub')}")
    print(signer.verifier().vkey())
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    key_path: Path = args.key
    signer = load_signer(key_path.parent, key_path.name.removesuffix(".key"))
    notice = _build_notice(args, args.publisher or signer.name)
    envelope = Envelope.sign(notice, signer)
    status, body = _post_envelope(args.url, envelope)
    receipt = Receipt.parse(body)
    if args.log_key:
        verify_receipt(receipt, encode_entry(NoticeEntry(envelope)), Verifier.parse(args.log_key))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{notice.publisher}-{notice.sequence}"
    Path(f"{stem}.envelope.json").write_bytes(envelope.canonical_bytes())
    Path(f"{stem}.tlog-proof").write_bytes(body)
    verified = "verified" if args.log_key else "not verified: pass --log-key"
    kind = "logged" if status == 201 else "already logged"
    print(f"{kind} at index {receipt.index} ({verified}); receipt: {stem}.tlog-proof")
    return 0


def _cmd_verify_receipt(args: argparse.Namespace) -> int:
    receipt = Receipt.parse(args.receipt.read_bytes())
    if args.envelope is not None:
        leaf = encode_entry(
            NoticeEntry(Envelope.from_json(canonical.loads(args.envelope.read_bytes())))
        )
    elif args.leaf is not None:
        leaf = args.leaf.read_bytes()
        decode_entry(leaf)
    else:
        raise CLIError("give the logged data: --envelope FILE or --leaf FILE")
    checkpoint = verify_receipt(receipt, leaf, Verifier.parse(args.log_key))
    print(f"ok: entry {receipt.index} is in {checkpoint.origin} at tree size {checkpoint.size}")
    return 0


def _cmd_follow(args: argparse.Namespace) -> int:
    """Run a follower, printing each verified advance; Ctrl-C stops it."""
    trust = load_trust(args.log_key, args.policy)
    log_name = log_origin(trust)

    async def follow() -> None:
        async with Follower(args.url, trust, args.state, timeout=args.timeout) as follower:

            def report(result: SyncResult) -> None:
                print(
                    f"verified {log_name} at size {result.new_size} "
                    f"(was {result.old_size}; {len(result.tools)} tools changed)",
                    flush=True,
                )

            first = await follower.sync()
            print(f"trusted {log_name} at size {first.new_size}", flush=True)
            if not args.once:
                await follower.run(args.interval, on_advance=report)

    try:
        asyncio.run(follow())
    except KeyboardInterrupt:
        return 130
    except ForkError as err:
        raise CLIError(f"fork detected; evidence saved to {err.evidence}") from None
    except SuspectedForkError as err:
        raise CLIError(
            f"suspected_fork: the consistency proof served between two signed checkpoints "
            f"fails; not proven (the log never signs proofs, the network path may have "
            f"corrupted it); the state did not advance; run again to retry; unproven "
            f"evidence: {err.evidence}",
            auditcli.EXIT_NOT_PROVEN,
        ) from None
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    """A tool's status from the local follower state (no network)."""
    state = LocalState(args.state, None)
    try:
        trusted = state.trusted
        assert trusted is not None
        now = datetime.now(UTC)
        index, _ = state.tool_status(args.tool_id)
        if args.version is not None:
            out: dict[str, Any] = index.lookup(args.tool_id, args.version, now).to_json()
        else:
            out = index.describe(args.tool_id, now)
        out["processed_through"] = {
            "size": trusted.size,
            "verified_at": format_timestamp(trusted.verified_at),
            "checkpoint": trusted.note.decode(),
        }
        print(json.dumps(out, indent=2, sort_keys=True))
    finally:
        state.close()
    return 0


def _report_time(text: str | None) -> datetime:
    return parse_timestamp(text) if text else datetime.now(UTC).replace(microsecond=0)


def _emit(report: dict[str, Any], fmt: str) -> None:
    if fmt == "markdown":
        sys.stdout.write(inventory.to_markdown(report))
    else:
        sys.stdout.buffer.write(inventory.to_json(report))


def _cmd_inventory_check(args: argparse.Namespace) -> int:
    """The status of every inventory entry at the trusted checkpoint (local state only)."""
    items = inventory.parse_inventory(args.inventory.read_bytes())
    state = LocalState(args.state, None)
    try:
        _emit(inventory.check(state, items, _report_time(args.at)), args.format)
    finally:
        state.close()
    return 0


def _cmd_inventory_diff(args: argparse.Namespace) -> int:
    """What changed for the inventory between two signed checkpoints (local state only)."""
    items = inventory.parse_inventory(args.inventory.read_bytes())
    log_key = Verifier.parse(args.log_key)
    old, _ = open_checkpoint(args.from_checkpoint.read_bytes(), log_key)
    new, _ = open_checkpoint(args.to_checkpoint.read_bytes(), log_key)
    state = LocalState(args.state, log_key.name)
    try:
        _emit(inventory.diff(state, items, old, new, _report_time(args.at)), args.format)
    finally:
        state.close()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="deplog", description="Publish and verify deplog deprecation notices."
    )
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("keygen", help="create a publisher key pair")
    sp.add_argument("--name", required=True, help="key name, usually the publisher id")
    sp.add_argument("--out", type=Path, default=Path("keys"), help="directory (default: keys)")
    sp.set_defaults(func=_cmd_keygen)

    sp = sub.add_parser("publish", help="sign and submit a notice, keep its receipt")
    sp.add_argument("--url", required=True, help="authority base URL")
    sp.add_argument("--key", type=Path, required=True, help="publisher private key file")
    sp.add_argument("--log-key", help="log verifier key: verify the receipt before saving")
    sp.add_argument("--publisher", help="publisher id (default: the key name)")
    sp.add_argument("--tool", required=True, help="tool:<namespace>/<name>")
    sp.add_argument("--action", required=True, choices=("deprecate", "revoke", "withdraw"))
    sp.add_argument("--version", action="append", help="affected version (repeatable)")
    sp.add_argument(
        "--range", action="append", help="affected range A..B, A..=B or A.. (repeatable)"
    )
    sp.add_argument("--reason", action="append", required=True, help="reason (repeatable)")
    sp.add_argument("--advisory", action="append", help="CVE or GHSA id (repeatable)")
    sp.add_argument("--replacement", help="replacement as tool:<ns>/<name>@<version>")
    sp.add_argument("--effective-at", help="RFC 3339 UTC time (default: now)")
    sp.add_argument("--sunset-at", help="RFC 3339 UTC time (deprecate only)")
    sp.add_argument("--schema-digest", help="sha256:<hex> of the affected definition")
    sp.add_argument("--message", help="plain text, at most 500 characters")
    sp.add_argument("--withdraws", type=int, help="log index of the notice to withdraw")
    sp.add_argument("--sequence", type=int, help="sequence number (default: Unix time in ms)")
    sp.add_argument("--out", type=Path, default=Path("."), help="where to save (default: .)")
    sp.set_defaults(func=_cmd_publish)

    sp = sub.add_parser("verify-receipt", help="verify a receipt offline")
    sp.add_argument("--log-key", required=True, help="log verifier key")
    sp.add_argument("receipt", type=Path, help="the .tlog-proof file")
    sp.add_argument("--envelope", type=Path, help="the signed envelope JSON that was published")
    sp.add_argument("--leaf", type=Path, help="the exact leaf bytes")
    sp.set_defaults(func=_cmd_verify_receipt)

    sp = sub.add_parser("follow", help="follow an authority, verifying every step")
    sp.add_argument("url", help="authority base URL")
    add_follow_arguments(sp, DEFAULT_STATE)
    sp.add_argument(
        "--once",
        action="store_true",
        help=f"sync once and exit (exit {auditcli.EXIT_NOT_PROVEN}: a suspected, unproven fork)",
    )
    sp.set_defaults(func=_cmd_follow)

    sp = sub.add_parser("status", help="a tool's status from the local follower state")
    sp.add_argument("tool_id", help="tool:<namespace>/<name>")
    sp.add_argument("version", nargs="?", help="a SemVer version (default: every known one)")
    sp.add_argument(
        "--state",
        type=Path,
        default=Path(DEFAULT_STATE),
        help=f"local state file (default: {DEFAULT_STATE})",
    )
    sp.set_defaults(func=_cmd_status)

    inv = sub.add_parser("inventory", help="report on an inventory of cached tools")
    isub = inv.add_subparsers(dest="inventory_command", required=True)
    for name, fn, help_text in (
        ("check", _cmd_inventory_check, "each entry's status at the trusted checkpoint"),
        ("diff", _cmd_inventory_diff, "what changed for the inventory between two checkpoints"),
    ):
        sp = isub.add_parser(name, help=help_text)
        sp.add_argument("inventory", type=Path, help='JSON: [{"tool_id", "version"}, ...]')
        sp.add_argument(
            "--state",
            type=Path,
            default=Path(DEFAULT_STATE),
            help=f"local follower state (default: {DEFAULT_STATE})",
        )
        sp.add_argument("--format", choices=("json", "markdown"), default="json")
        sp.add_argument("--at", help="RFC 3339 UTC time to evaluate statuses at (default: now)")
        sp.set_defaults(func=fn)
        if name == "diff":
            sp.add_argument(
                "--from",
                dest="from_checkpoint",
                type=Path,
                required=True,
                help="the older signed checkpoint",
            )
            sp.add_argument(
                "--to",
                dest="to_checkpoint",
                type=Path,
                required=True,
                help="the newer signed checkpoint",
            )
            sp.add_argument("--log-key", required=True, help="the log's verifier key")

    auditcli.register(sub)
    monitorcli.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CLIError as err:
        print(f"deplog: {err.message}", file=sys.stderr)
        return err.exit_status
    except DeplogError as err:
        print(f"deplog: {err.code}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"deplog: {err.strerror or type(err).__name__}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
