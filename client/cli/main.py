"""``deplog``: the command line of publishers, cache operators and auditors.

Thin over the library. Here: ``keygen``, ``verify-receipt``, ``follow``, ``status`` and
``inventory``; the other commands live in the modules beside this one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deplog.client.cache import inventory
from deplog.client.cli import audit as auditcli
from deplog.client.cli import export as exportcli
from deplog.client.cli import monitor as monitorcli
from deplog.client.cli import publish as publishcli
from deplog.client.cli import verdicts
from deplog.client.cli.messages import explain
from deplog.client.cli.trust import (
    EXIT_NOT_PROVEN,
    add_follow_arguments,
    add_tiles_argument,
    another_log_error,
    follow_log,
    load_trust,
    log_origin,
    read_bounded,
    read_log_key,
)
from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.follow.follower import Follower, SyncResult
from deplog.client.follow.source import FetchError
from deplog.client.follow.state import StateError
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry, decode_entry, encode_entry
from deplog.client.model.notice import Envelope, parse_publisher_id
from deplog.client.model.table import tool_status, version_row
from deplog.client.plumbing.arguments import Parser, http_url
from deplog.client.plumbing.files import output_closed
from deplog.client.plumbing.progress import Progress
from deplog.client.plumbing.storage_faults import file_fault
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.keyfile import create_signer, key_file_name
from deplog.client.tlog.policy import MAX_POLICY_SIZE, Policy, PolicyLog
from deplog.client.tlog.receipt import Receipt, verify_receipt, verify_receipt_with_policy
from deplog.client.tlog.timestamps import format_timestamp

DEFAULT_STATE = "deplog-state.db"


def _cmd_keygen(args: argparse.Namespace) -> int:
    try:
        parse_publisher_id(args.name)
    except DeplogError:
        raise CLIError(
            f"--name: {ErrorCode.BAD_KEY}: a publisher key is named for its publisher id: "
            "1 to 63 lower-case letters, digits and '-', starting with a letter or digit "
            "(e.g. acme); nothing was written",
            2,
        ) from None
    stem = key_file_name(args.name)
    if (args.out / f"{stem}.key").exists():
        raise CLIError(
            f"--name: {args.out / (stem + '.key')} already exists; keygen never overwrites a "
            "key: pick another --out directory or --name",
            2,
        )
    signer = create_signer(args.out, stem, args.name)
    print(f"wrote {args.out / (stem + '.key')} (mode 0600) and {args.out / (stem + '.pub')}")
    print(signer.verifier().vkey())
    return 0


def _cmd_verify_receipt(args: argparse.Namespace) -> int:
    log_key = None if args.log_key is None else read_log_key(args.log_key)
    receipt = Receipt.parse(args.receipt.read_bytes())
    if args.envelope is not None:
        leaf = encode_entry(
            NoticeEntry(Envelope.from_json(canonical.loads(args.envelope.read_bytes())))
        )
    elif args.leaf is not None:
        leaf = args.leaf.read_bytes()
        decode_entry(leaf)
    else:
        raise CLIError("give the logged data: --envelope FILE or --leaf FILE", 2)
    if args.policy is None:
        if log_key is None:
            raise CLIError("give the log key (--log-key) or a witness policy (--policy FILE)", 2)
        checkpoint = verify_receipt(receipt, leaf, log_key)
        print(f"ok: entry {receipt.index} is in {checkpoint.origin} at tree size {checkpoint.size}")
        return 0
    policy = Policy.parse(read_bounded(args.policy, MAX_POLICY_SIZE))
    if log_key is not None:  # then the only log accepted, as for deplog audit
        policy = replace(policy, logs=(PolicyLog(log_key),))
    verified = verify_receipt_with_policy(receipt, leaf, policy, now=time.time())
    where = f"{verified.checkpoint.origin} at tree size {verified.checkpoint.size}"
    lines = auditcli.with_policy(
        f"ok: entry {receipt.index} is in {where}", auditcli.policy_lines(verified)
    )
    print("\n".join(lines))
    return 0


async def _first_sync(follower: Follower, args: argparse.Namespace) -> SyncResult:
    """The first verified step, with progress; without ``--once``, retried with backoff."""
    delay, told = 1.0, set()
    while True:
        with Progress("verifying entries", quiet=args.json) as progress:
            try:
                return await follower.sync(progress.update)
            except FetchError as err:
                if args.once or err.code == ErrorCode.REDIRECT_REFUSED:
                    raise
                if err.code not in told:
                    told.add(err.code)
                    print(
                        f"deplog: {explain(err)}; retrying with backoff until it answers "
                        "(Ctrl-C stops)",
                        file=sys.stderr,
                        flush=True,
                    )
        await asyncio.sleep(delay)
        delay = min(delay * 2, args.interval)


def _cmd_follow(args: argparse.Namespace) -> int:
    """Run a follower, printing each verified advance; Ctrl-C stops it."""
    trust = load_trust(args.log_key, args.policy)
    log_name = log_origin(trust)

    def report(result: SyncResult) -> None:
        print(
            f"verified {log_name} at size {result.new_size} "
            f"(was {result.old_size}; {len(result.tools)} tools changed)",
            flush=True,
        )
        _warn_invalid(result)

    async def follow(follower: Follower) -> None:
        first = await _first_sync(follower, args)
        if args.json:
            print(json.dumps(_sync_json(log_name, first), sort_keys=True), flush=True)
        else:
            print(f"trusted {log_name} at size {first.new_size}", flush=True)
        _warn_invalid(first)
        if not args.once:
            await follower.run(args.interval, on_advance=report)

    return follow_log(args, trust, follow)


def _sync_json(origin: str, result: SyncResult) -> dict[str, Any]:
    """``follow --once --json``: one object for the verified step."""
    return {
        "origin": origin,
        "old_size": result.old_size,
        "new_size": result.new_size,
        "tools_changed": sorted(result.tools),
        "verified_at": format_timestamp(result.verified_at),
        "invalid": [entry.to_json() for entry in result.invalid],
    }


def _warn_invalid(result: SyncResult) -> None:
    """One line on stderr per entry of the advance that fails validation (fold-spec 3.1)."""
    for entry in result.invalid:
        cause = f" ({entry.cause})" if entry.cause else ""
        tool = f"; {entry.tool_id} is unknown from now on" if entry.tool_id else ""
        print(
            f"deplog: warning: log entry {entry.index} fails validation: {entry.code}{cause}"
            f"{tool} (kept as evidence in the state; docs/fold-spec.md, entries that fail "
            "validation)",
            file=sys.stderr,
            flush=True,
        )


def _cmd_status(args: argparse.Namespace) -> int:
    """A tool's status table (or one version's row) from the local follower state (no
    network); exit by the worst row, like ``inventory check``."""
    state = verdicts.open_state(args.state)
    try:
        verdicts.warn_if_behind(args.url, state)
        trusted = state.trusted
        assert trusted is not None
        now = datetime.now(UTC)
        index, _ = state.tool_status(args.tool_id)
        if args.version is not None:
            row = version_row(index, args.tool_id, args.version, now)
            out: dict[str, Any] = {"tool_id": args.tool_id, **row.to_json()}
            lines = [verdicts.row_line(args.tool_id, out)]
        else:
            out = tool_status(index, args.tool_id, now).to_json()
            lines = verdicts.table_lines(out, trusted.size)
        out["processed_through"] = verdicts.processed_through(trusted)
        stale = verdicts.is_stale(trusted, args.max_age)
    finally:
        state.close()
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))
        through = out["processed_through"]
        print(f"processed through size {through['size']}, verified at {through['verified_at']}")
        if stale:
            print("stale: the state is older than --max-age; run deplog follow", file=sys.stderr)
    code = verdicts.status_exit(out["status"])
    return verdicts.exit_for([code, verdicts.EXIT_STALE if stale else 0])


def _emit(report: dict[str, Any], fmt: str) -> None:
    if fmt == "markdown":
        sys.stdout.write(inventory.to_markdown(report))
    else:
        sys.stdout.buffer.write(inventory.to_json(report))


def _cmd_inventory_check(args: argparse.Namespace) -> int:
    """Every inventory entry's status at the trusted checkpoint; exit by verdict."""
    items = inventory.parse_inventory(args.inventory.read_bytes())
    at = verdicts.time_flag("--at", args.at)
    state = verdicts.open_state(args.state)
    try:
        verdicts.warn_if_behind(args.url, state)
        report = inventory.check(state, items, at)
        trusted = state.trusted
        assert trusted is not None
        stale = verdicts.is_stale(trusted, args.max_age)
    finally:
        state.close()
    _emit(report, args.format)
    refused = [
        verdicts.EXIT_REFUSE
        if item.get("schema_mismatch")
        else verdicts.status_exit(item["status"])
        for item in report["items"]
    ]
    return verdicts.exit_for([*refused, verdicts.EXIT_STALE if stale else 0])


def _cmd_inventory_diff(args: argparse.Namespace) -> int:
    """What changed for the inventory between two signed checkpoints (local state only)."""
    items = inventory.parse_inventory(args.inventory.read_bytes())
    log_key = read_log_key(args.log_key)
    old, _ = open_checkpoint(args.from_checkpoint.read_bytes(), log_key)
    new, _ = open_checkpoint(args.to_checkpoint.read_bytes(), log_key)
    at = verdicts.time_flag("--at", args.at)
    state = verdicts.open_state(args.state)
    try:
        state.bind_log_key(log_key)  # reads only: a state of another log is refused
        _emit(inventory.diff(state, items, old, new, at), args.format)
    finally:
        state.close()
    return 0


def _version() -> str:
    try:
        return importlib.metadata.version("deplog")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="deplog",
        description="Publish and verify deplog deprecation notices.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EXIT_EPILOG,
    )
    p.add_argument("--version", action="version", version=f"deplog {_version()}")
    sub: Any = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sp = sub.add_parser("keygen", help="create a publisher key pair")
    sp.add_argument(
        "--name",
        required=True,
        help="the publisher id the key signs for: lower-case letters, digits and '-'",
    )
    sp.add_argument(
        "--out", type=Path, default=Path("keys"), help="directory (default: %(default)s)"
    )
    sp.set_defaults(func=_cmd_keygen)

    publishcli.register(sub)

    sp = sub.add_parser("verify-receipt", help="verify a receipt offline")
    sp.add_argument("--log-key", help="log verifier key, or a file holding it")
    sp.add_argument(
        "--policy",
        type=Path,
        help="a C2SP tlog-policy file: also verify the receipt's cosignatures and quorum "
        "(then --log-key, if given, is the only log accepted)",
    )
    sp.add_argument("receipt", type=Path, help="the .tlog-proof file")
    sp.add_argument("--envelope", type=Path, help="the signed envelope JSON that was published")
    sp.add_argument("--leaf", type=Path, help="the exact leaf bytes")
    sp.set_defaults(func=_cmd_verify_receipt)

    sp = sub.add_parser(
        "follow",
        help="follow an authority, verifying every step",
        description=(
            "Follow an authority into the local state file, verifying every step. "
            "Without --once it runs until stopped, and retries with backoff while the "
            "authority is unreachable, also at start-up; --once fails at once."
        ),
    )
    sp.add_argument("url", type=http_url, help="authority base URL")
    add_follow_arguments(sp, DEFAULT_STATE)
    add_tiles_argument(sp)
    sp.add_argument(
        "--once",
        action="store_true",
        help=f"sync once and exit (exit {EXIT_NOT_PROVEN}: a suspected, unproven fork)",
    )
    sp.add_argument(
        "--json", action="store_true", help="print the first verified step as one JSON object"
    )
    sp.set_defaults(func=_cmd_follow)

    sp = sub.add_parser(
        "status",
        help="a tool's status from the local follower state",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EXIT_EPILOG,
    )
    sp.add_argument("tool_id", type=verdicts.tool_id, help="tool:<namespace>/<name>")
    sp.add_argument(
        "version",
        nargs="?",
        type=verdicts.version,
        help="a SemVer version (default: every known one)",
    )
    verdicts.add_state_arguments(sp, DEFAULT_STATE)
    sp.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    sp.set_defaults(func=_cmd_status)

    verdicts.register(sub, DEFAULT_STATE)

    inv = sub.add_parser("inventory", help="report on an inventory of cached tools")
    isub = inv.add_subparsers(dest="inventory_command", required=True, metavar="COMMAND")
    for name, fn, help_text in (
        ("check", _cmd_inventory_check, "each entry's status at the trusted checkpoint"),
        ("diff", _cmd_inventory_diff, "what changed for the inventory between two checkpoints"),
    ):
        sp = isub.add_parser(
            name,
            help=help_text,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=_EXIT_EPILOG if name == "check" else None,
        )
        sp.add_argument("inventory", type=Path, help='JSON: [{"tool_id", "version"}, ...]')
        if name == "check":
            verdicts.add_state_arguments(sp, DEFAULT_STATE)
        else:
            sp.add_argument(
                "--state",
                type=Path,
                default=Path(DEFAULT_STATE),
                help="local follower state file, written by deplog follow (default: %(default)s)",
            )
        sp.add_argument(
            "--format",
            choices=("json", "markdown"),
            default="json",
            help="report format: json (the documented shape) or markdown (default: %(default)s)",
        )
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
            sp.add_argument(
                "--log-key", required=True, help="the log's verifier key, or a file holding it"
            )

    auditcli.register(sub)
    exportcli.register(sub)
    monitorcli.register(sub)
    return p


_EXIT_EPILOG = (
    "exit codes of status, check and inventory check:\n"
    "  0  every entry may be served (active or deprecated)\n"
    "  1  an error\n"
    "  2  a usage error\n"
    f"  {verdicts.EXIT_REFUSE}  an entry must be refused (revoked, sunset, schema mismatch)\n"
    f"  {verdicts.EXIT_STALE}  stale: the state is older than --max-age; run deplog follow\n"
    f"  {verdicts.EXIT_UNKNOWN}  unknown: the log holds entries about the tool that fail validation"
)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CLIError as err:
        print(f"deplog: {err.message}", file=sys.stderr)
        return err.exit_status
    except StateError as err:
        failure = (
            another_log_error(err)
            if err.code == ErrorCode.STATE_FOR_ANOTHER_LOG
            else CLIError(explain(err))
        )
        print(f"deplog: {failure.message}", file=sys.stderr)
        return failure.exit_status
    except DeplogError as err:
        print(f"deplog: {explain(err)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return output_closed()
    except OSError as err:
        fault = file_fault(err)
        print(f"deplog: {fault.message}", file=sys.stderr)
        return fault.exit_status


if __name__ == "__main__":
    sys.exit(main())
