"""``deplog export``: a log copied for offline audit, the one auditor's command that fetches.

It reads through the follower's log sources (``HttpLogSource``, ``TilesLogSource``), so
every answer has their bounds, checks and ``FetchError`` codes, and writes what ``deplog
audit replay`` reads: ``DIR/checkpoint`` (the signed note, verbatim) and ``DIR/entries``
(every leaf, one tlog-tiles entry bundle), or with ``--tiles-dir`` a mirror of the log's
tiles (``client.audit.tiledir``). Rules:

1. Leaves are checked against the checkpoint's root before anything is renamed into
   place (``entries_root_mismatch``), and ``entries`` is written before ``checkpoint``,
   so an interrupted export never pairs a new checkpoint with old entries.
2. With ``--log-key`` the checkpoint's signature is verified before anything is
   written; without, the copy is only self-consistent, and the output says so.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

from deplog.client.audit.bundle import write_entries
from deplog.client.audit.offline import audit_checkpoint
from deplog.client.audit.tiledir import MirrorReport, mirror_tiles
from deplog.client.cli.audit import counting, describe, guarded, result
from deplog.client.cli.trust import read_log_key
from deplog.client.errors import CLIError, ErrorCode
from deplog.client.follow.http import HttpLogSource
from deplog.client.follow.source import PAGE_SIZE, LogSource, fetch_page
from deplog.client.follow.tiles import TilesLogSource
from deplog.client.plumbing.arguments import http_url
from deplog.client.plumbing.files import write_atomic
from deplog.client.plumbing.progress import Progress
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import Verifier, parse_note
from deplog.client.tlog.proofs import TreeFrontier, TreeMismatchError, leaf_hash

_UNVERIFIED = "root checked, signature not verified: pass --log-key"


def export(
    url: str,
    out: Path,
    log_key: Verifier | None,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[Checkpoint, bool]:
    """Copy the log at ``url`` into ``out`` (rules 1, 2); whether its signature was verified."""
    with asyncio.Runner() as runner:
        source = HttpLogSource(url)
        try:
            note = runner.run(source.checkpoint())
            if log_key is not None:
                checkpoint = audit_checkpoint(note, log_key)
            else:
                checkpoint = Checkpoint.from_text(parse_note(note)[0])
            out.mkdir(parents=True, exist_ok=True)
            leaves = _leaves_under(checkpoint, source, runner)
            if on_progress is not None:
                leaves = counting(leaves, checkpoint.size, on_progress)
            write_entries(out / "entries", leaves)
            write_atomic(out / "checkpoint", [note])
        finally:
            runner.run(source.close())
    return checkpoint, log_key is not None


def _leaves_under(
    checkpoint: Checkpoint, source: LogSource, runner: asyncio.Runner
) -> Iterator[bytes]:
    """Every leaf of ``checkpoint``'s tree, a page at a time, checked against its root (rule 1)."""
    frontier = TreeFrontier()
    while frontier.size < checkpoint.size:
        end = min(frontier.size + PAGE_SIZE, checkpoint.size)
        for leaf in runner.run(fetch_page(source, frontier.size, end)):
            frontier.append(leaf_hash(leaf))
            yield leaf
    if frontier.root() != checkpoint.root_hash:
        raise TreeMismatchError(ErrorCode.ENTRIES_ROOT_MISMATCH, None)


def mirror(url: str, out: Path, log_key: Verifier | None) -> tuple[MirrorReport, bool]:
    """Mirror the tlog-tiles at ``url`` into the tiles directory ``out``, resumably (rule 2)."""
    source = TilesLogSource(url)

    async def run() -> MirrorReport:
        async with source:
            note = await source.checkpoint()
            if log_key is not None:
                audit_checkpoint(note, log_key)
            out.mkdir(parents=True, exist_ok=True)
            return await mirror_tiles(out, note, source.fetch_tile)

    return asyncio.run(run()), log_key is not None


def _cmd_export(args: argparse.Namespace) -> int:
    log_key = read_log_key(args.log_key) if args.log_key else None
    if args.tiles_dir is not None:
        report, _ = mirror(args.tiles or args.url, args.tiles_dir, log_key)
        how = "verified" if log_key else _UNVERIFIED
        line = (
            f"mirrored the tiles of {describe(report.checkpoint)} to {args.tiles_dir}: "
            f"{report.fetched} fetched, {report.kept} already there ({how})"
        )
        shape = {
            "checkpoint": report.checkpoint.to_json(),
            "tiles_dir": str(args.tiles_dir),
            "fetched": report.fetched,
            "kept": report.kept,
            "verified": log_key is not None,
        }
        result(args, [line], shape)
        return 0
    if args.tiles is not None:
        raise CLIError("--tiles applies to --tiles-dir", 2)
    with Progress("exporting entries", quiet=args.json) as progress:
        checkpoint, verified = export(args.url, args.out, log_key, progress.update)
    how = "verified" if verified else _UNVERIFIED
    line = f"exported {checkpoint.size} entries of {describe(checkpoint)} to {args.out} ({how})"
    shape = {"checkpoint": checkpoint.to_json(), "out": str(args.out), "verified": verified}
    result(args, [line], shape)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``export`` to ``deplog``."""
    sp = subparsers.add_parser("export", help="download a log for offline audit")
    sp.add_argument("url", type=http_url, help="authority base URL")
    where = sp.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="directory to write (checkpoint, entries)")
    where.add_argument(
        "--tiles-dir",
        type=Path,
        help="mirror the log's C2SP tlog-tiles into this directory instead (resumable)",
    )
    sp.add_argument(
        "--tiles", type=http_url, help="with --tiles-dir: where the tiles are (default: the URL)"
    )
    sp.add_argument("--log-key", help="log verifier key, or a file holding it")
    sp.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    sp.set_defaults(func=guarded("export", _cmd_export))
