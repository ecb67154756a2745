"""``witness``: run a C2SP tlog-witness server for any C2SP log (init, logs, serve).

A thin layer over :mod:`authority.witness`. The data directory holds ``witness.json``
(name and key file stem) and ``witness.db``; the keys directory the cosigning key
``<stem>.key`` (0600; Ed25519, type 0x04, or ML-DSA-44, type 0x06, by ``init --type``) and
``<stem>.pub``. ``serve --verify-map`` needs an Ed25519 key: an ML-DSA-44 cosignature does
not sign the ``deplog-map/v1`` line. Logs can be added while it serves: every request reads
the trusted keys from the database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from deplog.authority.command import command_parser, key_file, run
from deplog.authority.http.plumbing import Listen, ServingRunner, bind, serve_until_signalled
from deplog.authority.options import add_options, from_options, option
from deplog.authority.witness.core import Witness, WitnessState, parse_logs_file
from deplog.authority.witness.mapverify import MapVerifier, http_entries
from deplog.authority.witness.server import build_app, render_error
from deplog.client.errors import CLIError
from deplog.client.plumbing.arguments import http_url, listen_port
from deplog.client.plumbing.files import exclusive_lock, require_writable, write_atomic
from deplog.client.tlog.cosignature import ALGORITHMS
from deplog.client.tlog.keyfile import create_signer, is_key_file_stem, key_file_name, load_signer
from deplog.client.tlog.note import (
    COSIGNER_TYPES,
    SIG_TYPE_COSIGNATURE_V1,
    Signer,
    is_valid_key_name,
)
from deplog.client.tlog.timestamps import format_timestamp

DEFAULT_PORT = 7461
CONFIG_FILE = "witness.json"
DB_FILE = "witness.db"
MAP_DB_FILE = "map.db"
LOCK_FILE = "witness.lock"


@dataclass(frozen=True)
class ServeOptions(Listen):
    """Where ``witness serve`` listens."""

    port: int = option(DEFAULT_PORT, "listen port, 0 picks a free one", parse=listen_port)


@dataclass(frozen=True)
class WitnessConfig:
    """An initialized witness: its data directory, name and key file stem."""

    data: Path
    name: str
    key_stem: str

    @property
    def db_path(self) -> Path:
        return self.data / DB_FILE


KEY_TYPES = {name: sig_type for sig_type, name in ALGORITHMS.items()}
"""``init --type`` names: ``ed25519`` (type 0x04) and ``ml-dsa-44`` (type 0x06)."""


def init(
    data: Path, keys: Path, name: str, out: IO[str], sig_type: int = SIG_TYPE_COSIGNATURE_V1
) -> tuple[WitnessConfig, Signer]:
    """Create (or reopen: idempotent) the data directory, config, database and key."""
    if not is_valid_key_name(name):
        raise CLIError(
            "--name must be a key name, without spaces or '+' (e.g. witness.example/w1); "
            "nothing was created"
        )
    config_path = data / CONFIG_FILE
    if config_path.exists():
        config = _read_config(data)
        if config.name != name:
            raise CLIError(f"{config_path} already names another witness")
    else:
        config = WitnessConfig(data, name, key_file_name(name))
    private = keys / f"{config.key_stem}.key"
    require_writable(data, *([] if private.exists() else [keys]))
    data.mkdir(parents=True, exist_ok=True)
    if private.exists():
        with key_file(private, "witness init"):
            signer = load_signer(keys, config.key_stem, COSIGNER_TYPES)
        if signer.sig_type != sig_type:
            raise CLIError(
                f"{private} is an {ALGORITHMS[signer.sig_type]} key, not {ALGORITHMS[sig_type]}: "
                "give its --type, or another --name for a new witness"
            )
    else:
        signer = create_signer(keys, config.key_stem, name, sig_type)
        print(f"created {ALGORITHMS[sig_type]} witness key {private} (mode 0600)", file=out)
    if not config_path.exists():
        text = json.dumps({"name": name, "key": config.key_stem}, indent=2) + "\n"
        write_atomic(config_path, [text.encode()])
    WitnessState(config.db_path).close()
    print(f"witness verifier key: {signer.verifier().vkey()}", file=out)
    return config, signer


def _read_config(data: Path) -> WitnessConfig:
    config_path = data / CONFIG_FILE
    if not config_path.exists():
        raise CLIError(
            f"{data} holds no witness (no {CONFIG_FILE}): give --data the data directory of the "
            "witness you mean, or make one with 'witness init'"
        )
    try:
        raw = json.loads(config_path.read_bytes())
    except (ValueError, RecursionError):
        raw = None
    name, stem = (raw.get("name"), raw.get("key")) if isinstance(raw, dict) else (None, None)
    if not isinstance(name, str) or not isinstance(stem, str) or not is_key_file_stem(stem):
        raise CLIError(f"{config_path} is malformed: it needs a 'name' and a key file stem 'key'")
    return WitnessConfig(data, name, stem)


def _add_logs_from_file(state: WitnessState, path: Path, out: IO[str]) -> None:
    """Trust every ``log <vkey>`` line of a tlog-policy file."""
    for verifier in parse_logs_file(path.read_text()):
        _, added = state.add_log(verifier.vkey(), int(time.time()))
        print(f"{'added' if added else 'known'} log {verifier.name}", file=out)


async def _serve(
    config: WitnessConfig, witness: Witness, sock: socket.socket, listen: Listen
) -> None:
    reserved = (("GET", "/healthz"), ("POST", "/add-checkpoint"))
    runner = ServingRunner(build_app(witness), render_error, listen, reserved, access_log=None)
    await runner.setup()
    await serve_until_signalled(runner, sock, f"witness {config.name}")


def _cmd_init(args: argparse.Namespace) -> int:
    init(args.data, args.keys, args.name, sys.stdout, KEY_TYPES[args.type])
    return 0


def _cmd_add_log(args: argparse.Namespace) -> int:
    _read_config(args.data)
    with contextlib.closing(WitnessState(args.data / DB_FILE)) as state:
        if args.logs is not None:
            _add_logs_from_file(state, args.logs, sys.stdout)
            return 0
        if args.key is None:
            raise CLIError("give --key VKEY or --logs FILE")
        verifier, added = state.add_log(args.key, int(time.time()), args.origin)
    origin = verifier.name if args.origin is None else args.origin
    named = "" if origin == verifier.name else f" (key {verifier.name})"
    print(f"{'added' if added else 'known'} log {origin}{named}")
    return 0


def _when(timestamp: int) -> str:
    return format_timestamp(datetime.fromtimestamp(timestamp, UTC))


def _cmd_list_logs(args: argparse.Namespace) -> int:
    _read_config(args.data)
    with contextlib.closing(WitnessState(args.data / DB_FILE)) as state:
        logs = state.logs()
    shown = [
        {
            "origin": status.origin,
            "vkey": status.vkey,
            "size": None if (recorded := status.recorded) is None else recorded.size,
            "cosigned_at": None if recorded is None else _when(recorded.updated_at),
        }
        for status in logs
    ]
    if args.json:
        print(json.dumps({"logs": shown}, indent=2))
        return 0
    print("origin\tsize\tcosigned_at\tvkey")
    for row in shown:
        size, when = row["size"], row["cosigned_at"]
        print(f"{row['origin']}\t{'-' if size is None else size}\t{when or '-'}\t{row['vkey']}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    listen = from_options(ServeOptions, args)
    with contextlib.closing(bind(listen.host, listen.port)) as sock:
        return _start(args, sock, listen)


def _start(args: argparse.Namespace, sock: socket.socket, listen: Listen) -> int:
    """Everything ``serve`` does once its port is bound: read, lock, open, serve."""
    config = _read_config(args.data)
    with key_file(args.keys / f"{config.key_stem}.key", "witness init"):
        signer = load_signer(args.keys, config.key_stem, COSIGNER_TYPES)
    if args.verify_map is not None and signer.sig_type != SIG_TYPE_COSIGNATURE_V1:
        raise CLIError(
            "--verify-map needs an Ed25519 witness key: an ML-DSA-44 cosignature does not sign "
            "the map line; run the map-verifying witness under its own name "
            "('witness init --type ed25519 --name ...')"
        )
    with exclusive_lock(args.data / LOCK_FILE) as owned:
        if not owned:
            raise CLIError(f"another witness is already serving {args.data}")
        with contextlib.closing(WitnessState(config.db_path)) as state:
            if args.logs is not None:
                _add_logs_from_file(state, args.logs, sys.stdout)
            print(f"witness verifier key: {signer.verifier().vkey()}", flush=True)
            witness = Witness(state, signer)
            verifier = None
            if args.verify_map is not None:
                verifier = MapVerifier(
                    args.data / MAP_DB_FILE, http_entries(args.verify_map), state.log_verifier
                )
                witness.statement = verifier.check
            try:
                asyncio.run(_serve(config, witness, sock, listen))
            finally:
                if verifier is not None:
                    verifier.close()
    return 0


def parser() -> argparse.ArgumentParser:
    """The ``witness`` command line."""
    p, sub = command_parser("witness", "Run a C2SP tlog-witness server for any C2SP log.")

    def command(name: str, help_text: str, func: object) -> argparse.ArgumentParser:
        """A subcommand with the data directory."""
        sp: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
        sp.set_defaults(func=func)
        sp.add_argument("--data", type=Path, required=True, help="witness data directory")
        return sp

    sp = command("init", "create the data directory and the cosigning key", _cmd_init)
    sp.add_argument("--keys", type=Path, required=True, help="directory of key files")
    sp.add_argument("--name", required=True, help="witness key name, e.g. witness.example/w1")
    sp.add_argument(
        "--type",
        choices=list(KEY_TYPES),
        default="ed25519",
        help="cosignature type (tlog-cosignature v1.1): ed25519 (cosignature/v1, type 0x04, "
        "the default) or ml-dsa-44 (type 0x06, post-quantum); --verify-map needs ed25519",
    )

    sp = command("add-log", "trust a log's key for its checkpoints' origin", _cmd_add_log)
    sp.add_argument(
        "--origin",
        help="the checkpoints' origin line (default: the key name, which SHOULD match it)",
    )
    sp.add_argument("--key", help="log verifier key (type 0x01 vkey)")
    sp.add_argument("--logs", type=Path, help="tlog-policy file: every 'log <vkey>' line")

    sp = command("list-logs", "configured logs and the latest size cosigned", _cmd_list_logs)
    sp.add_argument(
        "--json",
        action="store_true",
        help='print JSON ({"logs": [{"origin", "vkey", "size", "cosigned_at"}]}) instead of '
        "a tab-separated table",
    )

    sp = command("serve", "serve the tlog-witness HTTP API", _cmd_serve)
    sp.add_argument("--keys", type=Path, required=True, help="directory of key files")
    add_options(sp, ServeOptions)
    sp.add_argument("--logs", type=Path, help="tlog-policy file of logs to trust at startup")
    sp.add_argument(
        "--verify-map",
        type=http_url,
        metavar="URL",
        help="cosign only checkpoints whose deplog-map/v1 root this witness reproduced from "
        "the log's entries at URL (run it under its own name and key)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run("witness", parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
