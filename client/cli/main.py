"""``deplog``: the publisher's and auditor's command line.

Thin over the library: ``keygen`` writes a publisher key pair, ``publish``
(``client.cli.publish``) signs a notice, saves it, submits it and keeps its
receipt, ``verify-receipt`` checks a receipt offline with nothing but the log's
verifier key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deplog.client.cache import inventory
from deplog.client.cli import audit as auditcli
from deplog.client.cli import monitor as monitorcli
from deplog.client.cli import publish as publishcli
from deplog.client.cli.trust import (
    add_follow_arguments,
    add_tiles_argument,
    load_trust,
    log_origin,
    open_log,
)
from deplog.client.errors import CLIError, DeplogError
from deplog.client.follow.follower import Follower, SyncResult
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import ForkError, SuspectedForkError
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry, decode_entry, encode_entry
from deplog.client.model.notice import (
    Envelope,
    parse_timestamp,
)
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.keyfile import create_signer, key_file_name, read_verifier_key
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.receipt import Receipt, verify_receipt
from deplog.client.tlog.timestamps import format_timestamp

__all__ = [
    "DEFAULT_STATE",
    "main",
    "parser",
]

DEFAULT_STATE = "deplog-state.db"


def _cmd_keygen(args: argparse.Namespace) -> int:
    stem = key_file_name(args.name)
    signer = create_signer(args.out, stem, args.name)
    print(f"wrote {args.out / (stem + '.key')} (mode 0600) and {args.out / (stem + '.pub')}")
    print(signer.verifier().vkey())
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
    checkpoint = verify_receipt(receipt, leaf, read_verifier_key(args.log_key))
    print(f"ok: entry {receipt.index} is in {checkpoint.origin} at tree size {checkpoint.size}")
    return 0


def _cmd_follow(args: argparse.Namespace) -> int:
    """Run a follower, printing each verified advance; Ctrl-C stops it."""
    trust = load_trust(args.log_key, args.policy)
    log_name = log_origin(trust)

    async def follow() -> None:
        async with (
            open_log(args.url, args.tiles, args.timeout) as (source, fallback),
            Follower(
                source, trust, args.state, fallback=fallback, memory_mib=args.memory_budget
            ) as follower,
        ):

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

    publishcli.register(sub)

    sp = sub.add_parser("verify-receipt", help="verify a receipt offline")
    sp.add_argument("--log-key", required=True, help="log verifier key, or a file holding it")
    sp.add_argument("receipt", type=Path, help="the .tlog-proof file")
    sp.add_argument("--envelope", type=Path, help="the signed envelope JSON that was published")
    sp.add_argument("--leaf", type=Path, help="the exact leaf bytes")
    sp.set_defaults(func=_cmd_verify_receipt)

    sp = sub.add_parser("follow", help="follow an authority, verifying every step")
    sp.add_argument("url", help="authority base URL")
    add_follow_arguments(sp, DEFAULT_STATE)
    add_tiles_argument(sp)
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
