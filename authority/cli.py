"""``authority``: the operator's command line (init, serve, publishers, check).

A thin layer over ``Log`` and the HTTP app. ``serve`` holds ``<data>/authority.lock``; the
publisher commands append directly when no server holds it (or the database is shared, and
orders every writer), and otherwise through the server's admin socket
(``<data>/admin.sock``, mode 0600), so its single writer stays the only one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

import aiohttp
from aiohttp import web

from deplog.authority.command import command_parser, key_file, run
from deplog.authority.config import (
    CONFIG_FILE,
    DEFAULT_ORIGIN,
    AuthorityConfig,
)
from deplog.authority.explorer.config import ExplorerConfig
from deplog.authority.http.plumbing import Listen, ServingRunner, bind, serve_until_signalled
from deplog.authority.http.server import ServerConfig, build_admin_app, build_app, error_response
from deplog.authority.log import Log
from deplog.authority.options import add_options, from_options, option
from deplog.authority.publication import Publication
from deplog.authority.sequencer import SequencerLimits
from deplog.authority.storage import schema_postgres
from deplog.authority.storage.audit import DB_ENV, audit_storage
from deplog.authority.storage.backends import is_postgres_url, open_database
from deplog.authority.storage.database import Database, reaching
from deplog.authority.witnessing import (
    RemoteWitness,
    Witnessing,
    WitnessingConfig,
    WitnessTrack,
    open_embedded_witness,
)
from deplog.client.errors import CLIError
from deplog.client.model import canonical
from deplog.client.model.entries import PublisherStatement
from deplog.client.plumbing.arguments import http_url, listen_port
from deplog.client.plumbing.files import exclusive_lock, require_writable
from deplog.client.plumbing.progress import Progress
from deplog.client.plumbing.storage_faults import CORRUPT, StorageFault
from deplog.client.tlog.keyfile import load_or_create_signer, load_signer
from deplog.client.tlog.note import SIG_TYPE_COSIGNATURE_V1, Signer, Verifier, is_valid_key_name
from deplog.client.tlog.policy import Policy
from deplog.client.tlog.timestamps import now_timestamp

DEFAULT_PORT = 7460
DB_FILE = "log.db"
MAX_DB_FILE = 4096
"""Bytes of a ``--db-file`` read at most."""
EMBEDDED_WITNESS_DB = "embedded-witness.db"
LOCK_FILE = "authority.lock"
_INIT = "authority init"
ADMIN_SOCKET = "admin.sock"


@dataclass(frozen=True)
class ServeOptions(Listen):
    """How ``authority serve`` starts: where it listens and what it checks first."""

    port: int = option(DEFAULT_PORT, "listen port, 0 picks a free one", parse=listen_port)
    verify_on_start: bool = option(
        False,
        "rehash every leaf and subtree before serving, O(n)",
        note="otherwise this runs in the background after start and stops appends on a problem",
    )


SERVE_CONFIGS = (ServeOptions, SequencerLimits, ServerConfig, WitnessingConfig, ExplorerConfig)
"""The config dataclasses whose fields are the options of ``authority serve``."""


@dataclass(frozen=True)
class Instance:
    """An initialized authority: its data directory, configuration and log key."""

    data: Path
    config: AuthorityConfig
    signer: Signer
    db_url: str | None = None
    """``--db``: a PostgreSQL database holding the log instead of ``<data>/log.db``."""

    @property
    def origin(self) -> str:
        return self.config.origin

    @property
    def db_path(self) -> Path:
        return self.data / DB_FILE

    @property
    def database(self) -> Database:
        return open_database(self.db_url if self.db_url is not None else self.db_path)


def init(data: Path, keys: Path, origin: str | None, out: IO[str]) -> Instance:
    """Create (or open: idempotent) the data directory, config and log key."""
    if origin is not None and not is_valid_key_name(origin):
        raise CLIError(
            f"--origin must be a key name, without spaces or '+' (e.g. {DEFAULT_ORIGIN}); "
            "nothing was created"
        )
    config_path = data / CONFIG_FILE
    exists = config_path.exists()
    if exists:
        config = AuthorityConfig.load(config_path)
        if origin is not None and origin != config.origin:
            raise CLIError(f"{config_path} already has a different origin")
    else:
        config = AuthorityConfig.new(origin)
    stems = (config.log_key, config.embedded_witness_key)
    keys_to_create = [keys] if any(not (keys / f"{s}.key").exists() for s in stems) else []
    require_writable(data, *keys_to_create)
    data.mkdir(parents=True, exist_ok=True)
    with key_file(keys / f"{config.log_key}.key", _INIT):
        signer, created = load_or_create_signer(keys, config.log_key, config.origin)
    if not exists:
        config.save(config_path)
    with key_file(keys / f"{config.embedded_witness_key}.key", _INIT):
        witness, witness_created = load_or_create_signer(
            keys, config.embedded_witness_key, config.embedded_witness_name, SIG_TYPE_COSIGNATURE_V1
        )
    if created:
        print(f"created log key {keys / (config.log_key + '.key')} (mode 0600)", file=out)
    if witness_created:
        print(f"created embedded witness key under {keys} (mode 0600)", file=out)
    print(f"log verifier key: {signer.verifier().vkey()}", file=out)
    print(f"embedded witness key: {witness.verifier().vkey()}", file=out)
    return Instance(data, config, signer)


def _load_config(data: Path) -> AuthorityConfig:
    config_path = data / CONFIG_FILE
    if not config_path.exists():
        raise CLIError(
            f"{data} holds no authority (no {CONFIG_FILE}): give --data the data directory of "
            "the authority you mean"
        )
    return AuthorityConfig.load(config_path)


def _open_instance(args: argparse.Namespace) -> Instance:
    config = _load_config(args.data)
    with key_file(args.keys / f"{config.log_key}.key", _INIT):
        signer = load_signer(args.keys, config.log_key)
    return Instance(args.data, config, signer, _db_url(args))


def _witness_setup(
    instance: Instance, keys: Path, options: WitnessingConfig
) -> Callable[[Publication], Witnessing] | None:
    """The embedded and external witnesses, as a factory the server's publication calls."""
    config = instance.config
    local = None
    if options.embedded:
        local = open_embedded_witness(
            instance.data / EMBEDDED_WITNESS_DB,
            keys,
            config.embedded_witness_key,
            config.embedded_witness_name,
            instance.signer.verifier(),
            instance.database,
        )
    if local is None and not config.witnesses:
        return None

    def build(publication: Publication) -> Witnessing:
        tracks = [] if local is None else [WitnessTrack(local.witness.verifier(), local, False)]
        session = aiohttp.ClientSession()
        for external in config.witnesses:
            remote = RemoteWitness(external.url, session, options.timeout)
            tracks.append(
                WitnessTrack(external.verifier(), remote, True, tree_lines=external.tree_lines)
            )
        witnessing = Witnessing(
            tracks,
            publication.consistency_proof,
            quorum=options.quorum,
            timeout=options.timeout,
            supervisor=publication.supervisor,
            shared=publication.cluster,
        )
        witnessing.session = session
        return witnessing

    return build


_RESERVED = (("GET", "/healthz"), ("POST", "/v1/notices"))
"""What a reserve connection serves (``http/plumbing.py``, *Bounded connections*)."""


async def _serve(
    instance: Instance,
    sock: socket.socket,
    serve: ServeOptions,
    config: ServerConfig,
    witnessing: Callable[[Publication], Witnessing] | None,
) -> None:
    app = build_app(config, instance.signer, witnessing)
    runner = ServingRunner(
        app, error_response, serve, _RESERVED, access_log=None, keepalive_timeout=30
    )
    await runner.setup()
    admin_runner = web.AppRunner(build_admin_app(app), access_log=None)
    await admin_runner.setup()
    socket_path = instance.data / ADMIN_SOCKET
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    old_umask = os.umask(0o177)
    try:
        await web.UnixSite(admin_runner, str(socket_path)).start()
    finally:
        os.umask(old_umask)
    banner = f"authority {instance.origin}"
    await serve_until_signalled(runner, sock, banner, on_stop=admin_runner.cleanup)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()


def _audit(db: Database) -> tuple[int, str | None]:
    """The full storage audit, its progress on stderr; an unreadable database is one line."""
    if not db.exists():
        raise CLIError(f"{db.describe()} does not exist: run 'authority init' first")
    try:
        with Progress(f"checking {db.describe()}", unit="leaves") as shown:
            return audit_storage(db, shown.update)
    except db.errors as err:
        raise db.fault(err) from None


def _db_url(args: argparse.Namespace) -> str | None:
    """The PostgreSQL URL of ``--db``, ``--db-file`` or ``$DEPLOG_DB`` (in that order), or
    None for the SQLite file in the data directory; a password in ``--db`` is warned of."""
    if not hasattr(args, "db"):
        return None
    db: str | None = args.db
    if args.db_file is not None:
        db = _read_db_file(args.db_file)
    elif db is None:
        db = os.environ.get(DB_ENV) or None
    else:
        _warn_of_password("--db", db)
    if db is not None and not is_postgres_url(db):
        raise CLIError(
            "--db must be a postgresql:// URL (the SQLite log lives in --data as log.db)"
        )
    return db


def _warn_of_password(flag: str, target: str) -> None:
    """One line on stderr when a command-line URL holds a password (``ps`` shows it)."""
    if is_postgres_url(target) and open_database(target).redact(target) != target:
        print(
            f"authority: warning: the {flag} URL holds a password, which other local users can "
            f"read (ps, /proc): give it in a --db-file, ${DB_ENV} or libpq's password file instead",
            file=sys.stderr,
        )


def _copy_end(flag: str, target: str) -> Database:
    """``--from`` or ``--to``: ``-`` is the URL in ``$DEPLOG_DB``."""
    if target == "-":
        target = os.environ.get(DB_ENV, "")
        if not is_postgres_url(target):
            raise CLIError(f"{flag} -: ${DB_ENV} must hold a postgresql:// URL")
    _warn_of_password(flag, target)
    return open_database(target)


def _read_db_file(path: Path) -> str:
    """``--db-file``: the URL on the first line of a file only its owner can read."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_mode & 0o077:
                raise CLIError(f"--db-file: {path} is readable by others: chmod 600 {path}")
            text = f.read(MAX_DB_FILE + 1)
    except OSError as err:
        raise CLIError(f"--db-file: cannot read {path}: {err.strerror}") from None
    lines = text.decode("utf-8", "replace").splitlines()
    if len(text) > MAX_DB_FILE or not lines:
        raise CLIError(f"--db-file: {path} must hold one postgresql:// URL")
    return lines[0].strip()


def _cmd_init(args: argparse.Namespace) -> int:
    instance = replace(init(args.data, args.keys, args.origin, sys.stdout), db_url=_db_url(args))
    with exclusive_lock(args.data / LOCK_FILE) as owned:
        if not owned:
            raise CLIError(f"an authority is serving {args.data}; it is initialized")
        Log(instance.database, instance.signer, instance.origin).close()
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    url = _db_url(args)
    if url is None:
        raise CLIError(
            f"authority migrate needs --db postgresql://..., --db-file or ${DB_ENV}: a "
            "SQLite log's tables are created when it opens"
        )
    db = open_database(url)
    with reaching(db), contextlib.closing(db.connect()) as conn:
        before, after = schema_postgres.migrate(conn, db.describe())
    if args.json:
        print(json.dumps({"database": db.describe(), "before": before, "after": after}))
    elif before == after:
        print(f"{db.describe()}: schema version {after} is current; nothing changed")
    else:
        print(f"{db.describe()}: schema version {before} -> {after}")
    return 0


def _cmd_copy(args: argparse.Namespace) -> int:
    from deplog.authority.storage.copy import copy_log

    verifier = _open_instance(args).signer.verifier()
    source, target = _copy_end("--from", args.source), _copy_end("--to", args.target)

    def progress(line: str) -> None:
        if not args.json:
            print(line, file=sys.stderr)

    report = copy_log(source, target, verifier, progress)
    if args.json:
        ends = {"from": source.describe(), "to": target.describe()}
        print(json.dumps(ends | asdict(report)))
    else:
        print(
            f"copied {report.size} leaves and every checkpoint up to {report.checkpoint} from "
            f"{source.describe()} to {target.describe()}; the copy verified (roots, "
            "signatures, every table's rows)"
        )
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    serve = from_options(ServeOptions, args)
    with contextlib.closing(bind(serve.host, serve.port)) as sock:
        return _start(args, serve, sock)


def _start(args: argparse.Namespace, serve: ServeOptions, sock: socket.socket) -> int:
    """Everything ``serve`` does once its port is bound: init, lock, check, serve."""
    url = _db_url(args)
    instance = replace(init(args.data, args.keys, args.origin, sys.stdout), db_url=url)
    with exclusive_lock(args.data / LOCK_FILE) as owned:
        if not owned:
            raise CLIError(f"another authority is already serving {args.data}")
        if serve.verify_on_start:
            db = instance.database
            size, problem = _audit(db) if db.exists() else (0, None)
            if problem is not None:
                raise StorageFault(CORRUPT, db.describe(), f"{problem}, {size} leaves")
        config = from_options(
            ServerConfig,
            args,
            db_path=instance.db_path,
            db_url=url,
            origin=instance.origin,
            limits=from_options(SequencerLimits, args),
            explorer=from_options(ExplorerConfig, args),
        )
        witnesses = _witness_setup(instance, args.keys, from_options(WitnessingConfig, args))
        with reaching(instance.database):  # a database lost in any window of the start
            asyncio.run(_serve(instance, sock, serve, config, witnesses))
    return 0


def _statement(args: argparse.Namespace, action: str) -> PublisherStatement:
    obj: dict[str, object] = {
        "action": action,
        "publisher": args.publisher,
        "issued_at": now_timestamp(),
    }
    if action == "register":
        obj["namespaces"] = args.namespace
    if action in ("register", "add_key", "revoke_key"):
        obj["keys"] = args.key
    return PublisherStatement.from_json(obj)


async def _admin_post(socket_path: Path, statement: PublisherStatement) -> int:
    """Append through the serving authority's admin socket; its refusal is its code."""
    connector = aiohttp.UnixConnector(path=str(socket_path))
    timeout = aiohttp.ClientTimeout(total=30)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            body = canonical.dumps(statement.to_json())
            async with session.post(
                "http://authority/admin/publishers",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as response:
                reply = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        raise CLIError(
            f"cannot reach the authority serving this data directory through {socket_path}: "
            "check that 'authority serve' runs (or stop it and run this command alone)"
        ) from None
    if response.status != 201 or not isinstance(reply, dict):
        code = reply.get("error") if isinstance(reply, dict) else None
        raise CLIError(f"{code or response.status}: the authority refused the statement")
    return int(reply["index"])


def _append_statement(args: argparse.Namespace, statement: PublisherStatement) -> int:
    instance = _open_instance(args)
    db = instance.database
    with exclusive_lock(args.data / LOCK_FILE) as owned:
        if owned or db.shared:
            with contextlib.closing(Log(db, instance.signer, instance.origin)) as log:
                index = log.append_publisher(statement)
                checkpoint = log.publish()
                if db.shared:  # the servers publish it now, not at a refresh
                    _announce_signed(log, checkpoint.size)
                return index
    return asyncio.run(_admin_post(args.data / ADMIN_SOCKET, statement))


def _announce_signed(log: Log, size: int) -> None:
    """Best effort: without it, the servers publish the statement at their next refresh."""
    from deplog.authority.storage.cluster import announce_signed

    with contextlib.suppress(*log.db.errors):
        announce_signed(log.conn, size)


def _cmd_publisher_change(action: str) -> object:
    def run(args: argparse.Namespace) -> int:
        index = _append_statement(args, _statement(args, action))
        if args.json:
            print(json.dumps({"publisher": args.publisher, "action": action, "index": index}))
        else:
            print(f"publisher {args.publisher}: {action} appended at index {index}")
        return 0

    return run


def _cmd_publisher_list(args: argparse.Namespace) -> int:
    from deplog.authority.storage.reader import LogReader

    instance = _open_instance(args)
    db = instance.database
    with reaching(db):
        reader = LogReader(db)
    with contextlib.closing(reader):
        publishers = reader.publishers()
    if args.json:
        print(json.dumps(publishers, indent=2, sort_keys=True))
        return 0
    if not publishers["publishers"]:
        print("no publishers registered: add one with 'authority publisher add'")
    for publisher in publishers["publishers"]:
        print(f"{publisher['publisher']} ({publisher['status']})")
        print(f"  namespaces: {', '.join(publisher['namespaces'])}")
        for key in publisher["keys"]:
            print(f"  key {key['key_id']} ({key['status']}): {key['key']}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    instance = _open_instance(args)
    db = instance.database
    size, problem = _audit(db)
    if problem is not None:
        raise StorageFault(CORRUPT, db.describe(), f"{problem}, {size} leaves")
    with exclusive_lock(args.data / LOCK_FILE) as owned:
        # opening the log checks its latest checkpoint against the tree
        if owned or db.shared:
            Log(db, instance.signer, instance.origin).close()
    if args.json:
        print(json.dumps({"size": size, "problem": None}))
    else:
        print(f"ok: {size} leaves and their subtree hashes recomputed; latest checkpoint matches")
    return 0


def _cmd_witness_add(args: argparse.Namespace) -> int:
    verifier = Verifier.parse_cosigner(args.key)
    if args.tree_lines and verifier.sig_type != SIG_TYPE_COSIGNATURE_V1:
        raise CLIError(
            "--tree-lines applies to Ed25519 (type 0x04) witness keys: an ML-DSA-44 "
            "cosignature covers the tree lines only already; add it without --tree-lines"
        )
    config = _load_config(args.data)
    known = [w for w in config.witnesses if w.key == verifier.vkey()]
    config.with_witness(args.url, verifier, args.tree_lines).save(args.data / CONFIG_FILE)
    if known and known[0].tree_lines != args.tree_lines:
        form = "first three lines only" if args.tree_lines else "whole checkpoint"
        print(f"witness {verifier.name} now accepted signing the {form}; restart the authority")
    elif not known:
        print(f"witness {verifier.name} added; restart the authority to use it")
    elif known[0].url == args.url:
        print(f"witness {verifier.name} is already configured at that URL; nothing changed")
    else:
        print(
            f"witness {verifier.name}: its URL {known[0].url} replaced by {args.url}; restart "
            "the authority to use it"
        )
    return 0


def _cmd_witness_list(args: argparse.Namespace) -> int:
    config = _load_config(args.data)
    if args.json:
        witnesses = [
            {"name": w.verifier().name, "url": w.url, "key": w.key, "tree_lines": w.tree_lines}
            for w in config.witnesses
        ]
        print(json.dumps({"witnesses": witnesses}, indent=2))
        return 0
    if not config.witnesses:
        print("no external witnesses: add one with 'authority witness add'")
    for witness in config.witnesses:
        form = "  (signs the tree lines only)" if witness.tree_lines else ""
        print(f"{witness.verifier().name}  {witness.url}  {witness.key}{form}")
    return 0


def _cmd_witness_remove(args: argparse.Namespace) -> int:
    config = _load_config(args.data)
    kept = tuple(w for w in config.witnesses if args.witness not in (w.key, w.verifier().name))
    if len(kept) == len(config.witnesses):
        raise CLIError(
            "no external witness has that name or key: 'authority witness list' shows them"
        )
    replace(config, witnesses=kept).save(args.data / CONFIG_FILE)
    print(f"witness {args.witness} removed; restart the authority to stop using it")
    return 0


def _cmd_policy(args: argparse.Namespace) -> int:
    instance = _open_instance(args)
    config = instance.config
    stem = config.embedded_witness_key
    with key_file(args.keys / f"{stem}.key", _INIT):
        embedded = load_signer(args.keys, stem, SIG_TYPE_COSIGNATURE_V1).verifier()
    witnesses = [embedded, *(w.verifier() for w in config.witnesses)]
    k = args.quorum if args.quorum is not None else 1
    if k < 1:
        raise CLIError("--quorum must be at least 1")
    if k > len(witnesses):
        raise CLIError(
            f"--quorum {k} needs {k} witnesses, but this authority has {len(witnesses)} (the "
            f"embedded one and {len(witnesses) - 1} external): add witnesses with 'authority "
            "witness add --url URL --key VKEY', or lower --quorum"
        )
    tree_lines = [w.verifier() for w in config.witnesses if w.tree_lines]
    policy = Policy.k_of_n(instance.signer.verifier(), witnesses, k, tree_lines)
    print(policy.to_text(), end="")
    return 0


def parser() -> argparse.ArgumentParser:
    p, sub = command_parser("authority", "Run and operate a deplog deprecation authority.")

    def command(group: Any, name: str, help_text: str, func: object) -> argparse.ArgumentParser:
        """A subcommand with the data and key directories."""
        sp: argparse.ArgumentParser = group.add_parser(name, help=help_text)
        sp.set_defaults(func=func)
        sp.add_argument(
            "--data", type=Path, default=Path("data"), help="data directory (default: ./data)"
        )
        sp.add_argument(
            "--keys", type=Path, default=Path("keys"), help="key directory (default: ./keys)"
        )
        return sp

    def db_flag(sp: argparse.ArgumentParser, what: str = "holding the log") -> None:
        db = sp.add_mutually_exclusive_group()
        db.add_argument(
            "--db",
            metavar="URL",
            help=f"a postgresql:// database {what} (default: ${DB_ENV}, else <data>/log.db)",
        )
        db.add_argument(
            "--db-file",
            type=Path,
            metavar="PATH",
            help="a file (mode 0600) holding the --db URL, kept out of ps and /proc",
        )

    def json_flag(sp: argparse.ArgumentParser, shape: str) -> None:
        sp.add_argument("--json", action="store_true", help=f"print JSON ({shape}) instead of text")

    sp = command(sub, "init", "create the log key, config and database", _cmd_init)
    sp.add_argument("--origin", help=f"log origin and key name (default: {DEFAULT_ORIGIN})")
    db_flag(sp)

    sp = sub.add_parser("migrate", help="create or upgrade the schema of a PostgreSQL --db")
    sp.set_defaults(func=_cmd_migrate)
    db_flag(sp, "to migrate")
    json_flag(sp, '{"database", "before", "after"}')

    sp = command(
        sub,
        "copy",
        "copy the log into an empty database (SQLite <-> PostgreSQL), verified",
        _cmd_copy,
    )
    sp.add_argument(
        "--from",
        dest="source",
        metavar="DB",
        required=True,
        help=f"a log.db path, URL or - (${DB_ENV})",
    )
    sp.add_argument(
        "--to",
        dest="target",
        metavar="DB",
        required=True,
        help=f"an empty path, URL or - (${DB_ENV})",
    )
    json_flag(sp, '{"from", "to", "size", "checkpoint", "rows"}')

    sp = command(sub, "serve", "serve the HTTP API (runs init on first start)", _cmd_serve)
    sp.add_argument("--origin", help=f"log origin on first start (default: {DEFAULT_ORIGIN})")
    db_flag(sp)
    for serve_config in SERVE_CONFIGS:
        add_options(sp, serve_config)

    sp = command(sub, "check", "rehash every leaf and check the latest checkpoint", _cmd_check)
    db_flag(sp)
    json_flag(sp, '{"size", "problem": null}; a problem exits 65')

    def group(name: str, help_text: str) -> Any:
        """A command with subcommands."""
        return sub.add_parser(name, help=help_text).add_subparsers(
            dest=f"{name}_command", required=True, metavar="COMMAND", help="what to do"
        )

    wsub = group("witness", "configure external witnesses")
    sp = command(wsub, "add", "add an external witness, or change its URL", _cmd_witness_add)
    sp.add_argument(
        "--url", type=http_url, required=True, help="the witness's submission prefix URL"
    )
    sp.add_argument(
        "--key",
        required=True,
        help="its cosigner verifier key: Ed25519 (type 0x04) or ML-DSA-44 (type 0x06)",
    )
    sp.add_argument(
        "--tree-lines",
        action="store_true",
        help="an Ed25519 witness that signs a checkpoint's first three lines only "
        "(litewitness): accept that form of its cosignature too",
    )
    sp = command(wsub, "list", "list the external witnesses", _cmd_witness_list)
    json_flag(sp, '{"witnesses": [{"name", "url", "key", "tree_lines"}]}')
    sp = command(wsub, "remove", "remove an external witness", _cmd_witness_remove)
    sp.add_argument("witness", help="the witness's key name or its whole verifier key")

    sp = command(sub, "policy", "print the C2SP tlog-policy for clients", _cmd_policy)
    sp.add_argument(
        "--quorum", type=int, help="witnesses (of embedded + external) required (default: 1)"
    )

    psub = group("publisher", "register, list and revoke publishers")
    for name, action, help_text in (
        ("add", "register", "register a publisher with namespaces and keys"),
        ("add-key", "add_key", "authorize another key of a publisher"),
        ("revoke-key", "revoke_key", "revoke keys of a publisher"),
        ("revoke", "revoke_publisher", "revoke a publisher and all its keys"),
    ):
        sp = command(psub, name, help_text, _cmd_publisher_change(action))
        db_flag(sp)
        sp.add_argument("publisher", help="publisher id, e.g. example-org")
        if action == "register":
            sp.add_argument(
                "--namespace",
                action="append",
                required=True,
                help="reverse-DNS namespace it owns (repeatable)",
            )
        if action != "revoke_publisher":
            sp.add_argument(
                "--key",
                action="append",
                required=True,
                help="publisher verifier key name+id+base64 (repeatable)",
            )
        json_flag(sp, '{"publisher", "action", "index"}')
    sp = command(psub, "list", "list publishers (from the local database)", _cmd_publisher_list)
    db_flag(sp)
    json_flag(sp, '{"publishers": [...]}, the shape of GET /v1/publishers')
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run("authority", parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
