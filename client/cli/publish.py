"""``deplog publish``: sign a notice once, keep it, and submit it until it is receipted.

Rules (exits: ``EXIT_CODES``):

1. Every flag is checked before anything is signed or sent; a bad one exits 2 naming
   it. A ``--log-key`` must also verify the checkpoint the authority serves (when it
   answers), so a wrong key is caught before the notice is logged.
2. The signed envelope is written to ``--out`` atomically (0644: it is public) before
   the POST, as ``<publisher>-<sequence>.envelope.json``, and never overwritten.
3. Every failure after that prints where the envelope is and, unless the refusal is
   permanent (exit 1: a 4xx answer other than 408 and 429, a redirect not followed), the
   exact ``--resubmit`` command. A resubmission posts the same bytes, which the authority
   answers with the original receipt, so a notice is never logged twice.
4. A receipt is saved as ``<stem>.tlog-proof`` only once it parses and, with
   ``--log-key``, verifies; otherwise it is kept aside as ``<stem>.tlog-proof.unverified``
   with its reason beside it, and the command exits 4.
5. Requests follow redirects by ``client.follow.http`` rule 6 only.
6. A receipt saved, the command prints both paths and points the links
   ``<publisher>-latest.envelope.json`` and ``<publisher>-latest.tlog-proof`` beside them
   at them (replaced atomically), so a script names the newest without a glob.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp

from deplog.client.cli.messages import explain, explain_code
from deplog.client.cli.trust import read_log_key, served_checkpoint
from deplog.client.errors import CLIError, DeplogError, ErrorCode
from deplog.client.follow.http import HttpClient, unreachable
from deplog.client.follow.source import FetchError
from deplog.client.model.entries import NoticeEntry, encode_entry
from deplog.client.model.notice import (
    MAX_ENVELOPE_BYTES,
    MAX_SAFE_INTEGER,
    REASONS,
    Envelope,
    Notice,
    Replacement,
    VersionRange,
    parse_publisher_id,
    parse_timestamp,
    parse_tool_id,
    parse_version,
)
from deplog.client.plumbing.arguments import http_url
from deplog.client.plumbing.files import write_atomic
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.keyfile import load_signer
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.receipt import Receipt, verify_receipt
from deplog.client.tlog.timestamps import now_timestamp

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_CONFIRMED: Final = 3
EXIT_UNVERIFIED: Final = 4
EXIT_CODES: Final[dict[int, str]] = {
    EXIT_OK: "logged (or already logged); the receipt is saved",
    EXIT_REFUSED: "refused by the authority; nothing was logged, the envelope is kept",
    EXIT_USAGE: "usage error: a flag or file is wrong; nothing was signed or sent",
    EXIT_NOT_CONFIRMED: "not confirmed (unreachable, rate limited, unavailable): resubmit",
    EXIT_UNVERIFIED: "logged, but the receipt did not verify: it is kept aside",
}

HTTP_TIMEOUT: Final = 30.0
MAX_RESPONSE: Final = 1 << 20
ENVELOPE_SUFFIX: Final = ".envelope.json"
RECEIPT_SUFFIX: Final = ".tlog-proof"
_ERROR_CODE: Final = re.compile(r"[a-z0-9_]{1,64}", re.ASCII)
# Answers after which the notice may be logged, or will be on a later try.
_RETRYABLE_STATUSES: Final = frozenset({408, 429})
# Flags a notice of each action cannot carry (the notice schema refuses the fields).
_FORBIDDEN_FLAGS: Final[dict[str, tuple[str, ...]]] = {
    "deprecate": ("withdraws",),
    "revoke": ("withdraws", "sunset_at"),
    "withdraw": ("version", "range", "sunset_at", "replacement", "schema_digest"),
}
_NOTICE_FLAGS: Final = (
    "key",
    "publisher",
    "tool",
    "action",
    "version",
    "range",
    "reason",
    "advisory",
    "replacement",
    "effective_at",
    "sunset_at",
    "schema_digest",
    "message",
    "withdraws",
    "sequence",
)


def _usage(flag: str, message: str) -> CLIError:
    return CLIError(f"{flag}: {message}; nothing was signed or sent", EXIT_USAGE)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class SequenceClock:
    """Default sequence numbers: microseconds since the epoch (a JSON safe integer until
    2255), strictly increasing in this process; numbers need only be unique per publisher.

    Two processes sharing a key collide only in the very same microsecond: the authority
    refuses the second (``sequence_reused``), which is published again."""

    def __init__(self, now_ns: Callable[[], int] = time.time_ns) -> None:
        self._now_ns = now_ns
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(self._now_ns() // 1000, self._last + 1)
            return self._last


_SEQUENCES = SequenceClock()


# --- step 1: every argument, before anything is signed -----------------------------


def _checked(flag: str, what: str, parse: Callable[[], object]) -> None:
    """Run the model's own parser on a flag's value; a refusal names ``flag`` and the form."""
    try:
        parse()
    except DeplogError as err:
        raise _usage(flag, f"{err.code}: {what}") from None


def _range_json(text: str) -> dict[str, Any]:
    """``A..B`` (B fixed, excluded), ``A..=B`` (B last affected) or ``A..`` (open)."""
    introduced, dots, rest = text.partition("..")
    if not dots:
        raise _usage("--range", "bad_range: a range is A..B, A..=B or A..")
    events: list[dict[str, str]] = [{"introduced": introduced or "0"}]
    if rest.startswith("="):
        events.append({"last_affected": rest[1:]})
    elif rest:
        events.append({"fixed": rest})
    obj = {"type": "SEMVER", "events": events}
    _checked(
        "--range",
        "a range is A..B, A..=B or A.. of SemVer versions",
        lambda: VersionRange.from_json(obj),
    )
    return obj


def _load_key(path: Path) -> Signer:
    """The publisher's private key from ``--key``, with a sentence for each way it fails."""
    if path.name.endswith(".pub"):
        raise _usage(
            "--key",
            f"{path} is a verifier key; give the private key file beside it "
            f"({path.name.removesuffix('.pub')}.key, written by deplog keygen)",
        )
    if not path.name.endswith(".key"):
        raise _usage("--key", f"{path} is not a private key file (<name>.key from deplog keygen)")
    if not path.is_file():
        raise _usage("--key", f"{path}: no such file (make one with deplog keygen)")
    try:
        return load_signer(path.parent, path.name.removesuffix(".key"))
    except DeplogError as err:
        why = {
            "key_permissions": "group or others can read it; run chmod 600 on it",
            "key_malformed": "it does not hold a private key (PRIVATE+KEY+...)",
        }.get(err.code, "it cannot be used")
        raise _usage("--key", f"{err.code}: {path}: {why}") from None


def _check_log_key_against(url: str, log_key: Verifier) -> None:
    """Rule 1's check of ``--log-key`` (an unreachable authority leaves it to the receipt)."""
    try:
        note = served_checkpoint(url, HTTP_TIMEOUT)
    except FetchError as err:
        if err.code == ErrorCode.REDIRECT_REFUSED:
            raise _usage("--url", explain(err)) from None
        return
    try:
        open_checkpoint(note, log_key)
    except DeplogError as err:
        raise _usage(
            "--log-key",
            f"{err.code}: the checkpoint the authority at --url serves does not verify with "
            "this key; give that log's verifier key (its keys/<origin>.pub)",
        ) from None


def _notice(args: argparse.Namespace, signer: Signer) -> Notice:
    """The notice the flags describe, each flag checked on its own first so an error names it."""
    for name in _FORBIDDEN_FLAGS[args.action]:
        if getattr(args, name) is not None:
            raise _usage(_flag(name), f"field_not_allowed: a {args.action} notice cannot have it")
    publisher = args.publisher or signer.name
    _checked(
        "--publisher" if args.publisher else "--key",
        "the publisher id (lower-case letters, digits, '-'); the key name is used unless "
        "--publisher is given",
        lambda: parse_publisher_id(publisher),
    )
    _checked("--tool", "a tool id is tool:<namespace>/<name>", lambda: parse_tool_id(args.tool))
    obj: dict[str, Any] = {
        "tool_id": args.tool,
        "action": args.action,
        "reasons": args.reason,
        "effective_at": args.effective_at or now_timestamp(),
        "issued_at": now_timestamp(),
        "publisher": publisher,
        "sequence": args.sequence if args.sequence is not None else _SEQUENCES.next(),
    }
    if len(set(args.reason)) != len(args.reason):
        raise _usage("--reason", "duplicate_item: give each reason once")
    for name in ("effective_at", "sunset_at"):
        value = getattr(args, name)
        if value is not None:
            _checked(
                _flag(name),
                "a time is RFC 3339 UTC, 2026-06-01T00:00:00Z",
                functools.partial(parse_timestamp, value),
            )
    affected: dict[str, Any] = {}
    for version in args.version or ():
        _checked(
            "--version",
            "a SemVer 2.0.0 version, MAJOR.MINOR.PATCH",
            functools.partial(parse_version, version),
        )
    if args.version:
        affected["versions"] = args.version
    if args.range:
        affected["ranges"] = [_range_json(r) for r in args.range]
    if affected:
        obj["affected"] = affected
    elif args.action != "withdraw":
        raise _usage(
            "--version/--range", f"missing_field: a {args.action} names the affected versions"
        )
    if args.action == "withdraw":
        if args.withdraws is None:
            raise _usage(
                "--withdraws",
                "missing_field: a withdraw names the log index of the notice it retracts",
            )
        if not 0 <= args.withdraws <= MAX_SAFE_INTEGER:
            raise _usage("--withdraws", "bad_withdraw_index: a log index is 0 or more")
        obj["withdraws"] = args.withdraws
    if args.sequence is not None and not 1 <= args.sequence <= MAX_SAFE_INTEGER:
        raise _usage("--sequence", f"bad_sequence: a sequence number is 1 to {MAX_SAFE_INTEGER}")
    if args.advisory:
        obj["advisories"] = args.advisory
    if args.replacement is not None:
        tool, at, version = args.replacement.rpartition("@")
        replacement = {"tool_id": tool, "version": version}
        if not at:
            raise _usage("--replacement", "bad_replacement: give tool:<namespace>/<name>@<version>")
        _checked(
            "--replacement",
            "give tool:<namespace>/<name>@<version>",
            lambda: Replacement.from_json(replacement),
        )
        obj["replacement"] = replacement
    for name in ("sunset_at", "schema_digest", "message"):
        value = getattr(args, name)
        if value is not None:
            obj[name] = value
    try:
        return Notice.from_json(obj)
    except DeplogError as err:
        raise _usage(*_notice_error(err.code)) from None


def _notice_error(code: str) -> tuple[str, str]:
    """The flag behind a notice schema refusal the per-flag checks leave to the schema."""
    flag, why = {
        "bad_advisory": ("--advisory", "an advisory is a CVE-YYYY-NNNN or GHSA-xxxx-xxxx-xxxx id"),
        "advisory_required": ("--advisory", "a revoke for reason security names its CVE or GHSA"),
        "bad_digest": ("--schema-digest", "a digest is sha256:<64 lower-case hex digits>"),
        "sunset_before_effective": ("--sunset-at", "the sunset cannot come before --effective-at"),
        "too_long": ("--message", "a message is at most 500 characters of plain text"),
    }.get(code, ("the notice", ""))
    if not why:  # the one sentence every command prints for the code
        return flag, explain_code(code)
    return flag, f"{code}: {why}"


def _prepare(args: argparse.Namespace) -> tuple[Envelope, Path]:
    """Steps 1 and 2: check every flag, sign, and save the envelope before anything is sent."""
    for name in ("key", "tool", "action", "reason"):
        if getattr(args, name) is None:
            raise _usage(_flag(name), "required (unless --resubmit ENVELOPE)")
    signer = _load_key(args.key)
    notice = _notice(args, signer)
    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _usage("--out", f"cannot create {out}: {err.strerror}") from None
    path = out / f"{notice.publisher}-{notice.sequence}{ENVELOPE_SUFFIX}"
    if path.exists():
        raise _usage(
            "--sequence",
            f"{path} already exists: resubmit it with --resubmit {shlex.quote(str(path))}, "
            "or pick another --sequence",
        )
    envelope = Envelope.sign(notice, signer)
    try:
        write_atomic(path, [envelope.canonical_bytes()])
    except OSError as err:
        raise _usage("--out", f"cannot write {path}: {err.strerror}") from None
    return envelope, path


def _saved(path: Path) -> Envelope:
    """The envelope of ``--resubmit``, exactly as it was saved."""
    try:
        with open(path, "rb") as f:
            body = f.read(MAX_ENVELOPE_BYTES + 1)
    except OSError as err:
        raise _usage("--resubmit", f"cannot read {path}: {err.strerror}") from None
    if len(body) > MAX_ENVELOPE_BYTES:
        raise _usage("--resubmit", f"too_large: {path} is larger than any envelope")
    try:
        envelope = Envelope.parse(body)
    except DeplogError as err:
        raise _usage("--resubmit", f"{err.code}: {path} is not a signed envelope") from None
    if envelope.canonical_bytes() != body:
        raise _usage("--resubmit", f"noncanonical: {path} is not an envelope as deplog saves it")
    return envelope


# --- steps 3 and 4: submit, then keep the receipt ------------------------------------


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes


async def _send(url: str, body: bytes) -> tuple[_Answer, str]:
    """POST ``body`` to the authority's notices: the answer (bounded) and its Retry-After."""
    async with (
        HttpClient(HTTP_TIMEOUT, None) as client,
        client.request(
            url.rstrip("/") + "/v1/notices",
            method="POST",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        read = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            read += chunk
            if len(read) >= MAX_RESPONSE:
                break
        answer = _Answer(response.status, bytes(read[:MAX_RESPONSE]))
        return answer, response.headers.get("Retry-After", "")


def _post(url: str, envelope: Envelope) -> _Answer:
    """POST the envelope; a failure says whether resubmitting can help (exit 3) or not (1)."""
    try:
        answer, retry_after = asyncio.run(_send(url, envelope.canonical_bytes()))
    except FetchError as err:  # a redirect it does not follow: nothing was logged there
        raise CLIError(f"not logged: {explain(err)}", EXIT_REFUSED) from None
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
        raise CLIError(f"not confirmed: {explain(unreachable(err))}", EXIT_NOT_CONFIRMED) from None
    if answer.status < 300:
        return answer
    try:
        code = str(json.loads(answer.body[:4096])["error"])
    except (ValueError, KeyError, TypeError):
        code = ""
    if _ERROR_CODE.fullmatch(code) is None:  # printed: only a well-formed code
        code = "no error code"
    later = f", retry after {retry_after} s" if retry_after.isdigit() else ""
    sentence = explain_code(code).partition(": ")[2] or "no sentence for that code"
    if answer.status in _RETRYABLE_STATUSES or answer.status >= 500:
        raise CLIError(
            f"not confirmed ({answer.status} {code}{later}): {sentence}", EXIT_NOT_CONFIRMED
        )
    raise CLIError(f"refused ({answer.status} {code}): {sentence}", EXIT_REFUSED)


def _resubmit_command(envelope_path: Path, args: argparse.Namespace) -> str:
    words = ["deplog", "publish", "--resubmit", str(envelope_path), "--url", args.url]
    if args.log_key is not None:
        words += ["--log-key", args.log_key]
    return shlex.join(words)


def _keep_receipt(
    stem: str, answer: _Answer, envelope: Envelope, log_key: Verifier | None
) -> Receipt:
    """Save a receipt that verifies; keep one that does not aside, with the reason."""
    try:
        receipt = Receipt.parse(answer.body)
        if log_key is not None:
            verify_receipt(receipt, encode_entry(NoticeEntry(envelope)), log_key)
    except DeplogError as err:
        aside = Path(f"{stem}.tlog-proof.unverified")
        write_atomic(aside, [answer.body])
        reason = f"{err.code}: the authority's answer ({answer.status}) is not a receipt"
        if log_key is not None:
            reason += " that verifies against --log-key for this envelope"
        write_atomic(Path(f"{aside}.reason"), [reason.encode() + b"\n"])
        raise CLIError(
            f"logged ({answer.status}) but the receipt did not verify ({err.code}); "
            f"kept aside as {aside}, reason in {aside}.reason",
            EXIT_UNVERIFIED,
        ) from None
    write_atomic(Path(stem + RECEIPT_SUFFIX), [answer.body])
    return receipt


def _link_latest(envelope: Path, receipt: Path, signed: Envelope) -> tuple[Path, Path]:
    """Point ``<publisher>-latest.*`` beside the files at them (rule 6)."""
    links = []
    for target, suffix in ((envelope, ENVELOPE_SUFFIX), (receipt, RECEIPT_SUFFIX)):
        link = target.with_name(f"{signed.notice.publisher}-latest{suffix}")
        # a name of this thread's own: publishers may share --out
        staged = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}")
        staged.unlink(missing_ok=True)
        staged.symlink_to(target.name)
        staged.replace(link)
        links.append(link)
    return links[0], links[1]


def _cmd_publish(args: argparse.Namespace) -> int:
    """Rules 1 to 6; every failure is a ``CLIError`` with its exit code."""
    log_key = None if args.log_key is None else read_log_key(args.log_key)
    if log_key is not None:
        _check_log_key_against(args.url, log_key)
    if args.resubmit is not None:
        given = [_flag(n) for n in _NOTICE_FLAGS if getattr(args, n) is not None]
        if given:
            raise _usage(
                given[0],
                "--resubmit sends the saved envelope as it is; drop the other notice flags",
            )
        envelope_path: Path = args.resubmit
        if envelope_path.is_symlink():  # a -latest link: the envelope it names (rule 6)
            envelope_path = envelope_path.parent / envelope_path.readlink()
        envelope = _saved(envelope_path)
    else:
        envelope, envelope_path = _prepare(args)
    name = str(envelope_path)
    stem = name.removesuffix(ENVELOPE_SUFFIX) if name.endswith(ENVELOPE_SUFFIX) else name
    try:
        answer = _post(args.url, envelope)
        if answer.status not in (200, 201):
            raise CLIError(f"not confirmed (unexpected answer {answer.status})", EXIT_NOT_CONFIRMED)
        try:
            receipt = _keep_receipt(stem, answer, envelope, log_key)
            latest = _link_latest(envelope_path, Path(stem + RECEIPT_SUFFIX), envelope)
        except OSError as err:
            raise CLIError(
                f"logged, but the receipt cannot be written ({err.strerror})", EXIT_NOT_CONFIRMED
            ) from None
    except CLIError as failure:
        kept = f"{failure.message}; the envelope is saved in {envelope_path}"
        if failure.exit_status != EXIT_REFUSED:
            kept += f"; resubmit it with: {_resubmit_command(envelope_path, args)}"
        raise CLIError(kept, failure.exit_status) from None
    kind = "logged" if answer.status == 201 else "already logged"
    if args.json:
        shape = {
            "result": kind.replace(" ", "_"),
            "index": receipt.index,
            "envelope": str(envelope_path),
            "receipt": stem + RECEIPT_SUFFIX,
            "verified": log_key is not None,
        }
        print(json.dumps(shape, sort_keys=True))
        return EXIT_OK
    verified = "verified" if log_key is not None else "not verified: pass --log-key"
    print(f"{kind} at index {receipt.index} ({verified})")
    print(f"envelope: {envelope_path} (also {latest[0]})")
    print(f"receipt: {stem}{RECEIPT_SUFFIX} (also {latest[1]})")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``publish`` to the ``deplog`` subcommands."""
    reasons = ", ".join(sorted(REASONS))
    codes = "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())
    sp = sub.add_parser(
        "publish",
        help="sign and submit a notice, keep the envelope and its receipt",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Sign a notice, save the envelope under --out, then submit it. If anything\n"
            "fails after saving, resubmit the same envelope with --resubmit: the\n"
            "authority answers with the original receipt and never logs it twice."
        ),
        epilog=f"exit codes:\n{codes}",
    )
    sp.add_argument(
        "--url", type=http_url, required=True, help="authority base URL, http(s)://host[:port]"
    )
    sp.add_argument(
        "--resubmit",
        type=Path,
        metavar="ENVELOPE",
        help="submit a saved .envelope.json again (after a failure), with no other notice flags",
    )
    sp.add_argument("--key", type=Path, help="publisher private key file (<name>.key)")
    sp.add_argument(
        "--log-key",
        help="log verifier key, or a file holding it: the receipt must verify before it is saved",
    )
    sp.add_argument("--publisher", help="publisher id (default: the key name)")
    sp.add_argument("--tool", help="tool:<namespace>/<name>")
    sp.add_argument(
        "--action", choices=("deprecate", "revoke", "withdraw"), help="what the notice does"
    )
    sp.add_argument("--version", action="append", help="affected version (repeatable)")
    sp.add_argument(
        "--range", action="append", help="affected range A..B, A..=B or A.. (repeatable)"
    )
    sp.add_argument(
        "--reason",
        action="append",
        choices=sorted(REASONS),
        metavar="REASON",
        help=f"reason (repeatable), one of: {reasons}",
    )
    sp.add_argument("--advisory", action="append", help="CVE or GHSA id (repeatable)")
    sp.add_argument("--replacement", help="replacement as tool:<ns>/<name>@<version>")
    sp.add_argument("--effective-at", help="RFC 3339 UTC time (default: now)")
    sp.add_argument("--sunset-at", help="RFC 3339 UTC time (deprecate only)")
    sp.add_argument("--schema-digest", help="sha256:<hex> of the affected definition")
    sp.add_argument("--message", help="plain text, at most 500 characters")
    sp.add_argument("--withdraws", type=int, help="log index of the notice to withdraw")
    sp.add_argument(
        "--sequence",
        type=int,
        help="sequence number, unique per publisher (default: the time in microseconds)",
    )
    sp.add_argument(
        "--out", type=Path, default=Path("."), help="where the envelope and receipt go (default: .)"
    )
    sp.add_argument(
        "--json", action="store_true", help="print the outcome as one JSON object instead of text"
    )
    sp.set_defaults(func=_cmd_publish)
