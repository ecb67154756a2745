"""``deplog publish`` against a real authority: nothing lost, nothing logged twice.

The envelope is on disk before the POST; after any failure the printed
``--resubmit`` command gets the original receipt; a receipt that does not verify
is kept aside; every bad flag is refused before anything is signed or sent; one
key publishing from 16 threads gets every notice receipted exactly once.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deplog.client.cli.main import main as deplog_main
from deplog.client.cli.publish import (
    EXIT_NOT_CONFIRMED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNVERIFIED,
    EXIT_USAGE,
)
from deplog.client.model.entries import NoticeEntry, decode_entry, encode_entry
from deplog.client.model.notice import Envelope
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import Receipt, verify_receipt
from tests.integration.harness import AuthorityProcess, WitnessProcess

pytestmark = pytest.mark.slow  # real authority processes

TOOL = "tool:org.acme/search"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def resubmit_command(self) -> list[str]:
        """The command the failure line printed, as argv for ``deplog``."""
        printed = self.stderr.split("resubmit it with: ", 1)[1].strip()
        words = shlex.split(printed)
        assert words[:2] == ["deplog", "publish"]
        return words[1:]


def deplog(*args: str, cwd: Path) -> Run:
    """The real ``deplog`` command in a subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "deplog.client.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def write_key(directory: Path, signer: Signer) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{signer.name}.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(signer.skey() + "\n")
    (directory / f"{signer.name}.pub").write_text(signer.verifier().vkey() + "\n")
    return path


def notice_flags(version: str = "1.0.0", *extra: str) -> list[str]:
    return [
        "--key",
        "keys/acme.key",
        "--tool",
        TOOL,
        "--action",
        "deprecate",
        "--version",
        version,
        "--reason",
        "superseded",
        "--out",
        "out",
        *extra,
    ]


def log_leaves(authority: AuthorityProcess) -> list[bytes]:
    """Every leaf under the authority's published checkpoint."""
    with urllib.request.urlopen(authority.url + "/checkpoint", timeout=30) as response:
        checkpoint, _ = open_checkpoint(response.read(), authority.log_verifier)
    leaves: list[bytes] = []
    while len(leaves) < checkpoint.size:
        end = min(checkpoint.size, len(leaves) + 1000)
        url = f"{authority.url}/v1/entries?start={len(leaves)}&end={end}"
        with urllib.request.urlopen(url, timeout=30) as response:
            leaves += [base64.b64decode(e) for e in json.loads(response.read())["entries"]]
    return leaves


def times_logged(authority: AuthorityProcess, envelope_file: Path) -> int:
    leaf = encode_entry(NoticeEntry(Envelope.parse(envelope_file.read_bytes())))
    return log_leaves(authority).count(leaf)


@pytest.fixture
def workdir(tmp_path: Path, publisher: Signer) -> Path:
    """A publisher's directory: ``keys/acme.key`` (0600) and ``keys/acme.pub``."""
    work = tmp_path / "publisher"
    write_key(work / "keys", publisher)
    return work


# --- the envelope is saved before the POST; resubmitting gets the original receipt ------------


@pytest.mark.both_backends
def test_an_unreachable_authority_leaves_the_envelope_and_the_command_to_resubmit_it(
    authority_files: AuthorityProcess, workdir: Path, free_port: int
) -> None:
    url = f"http://127.0.0.1:{free_port}"
    failed = deplog("publish", "--url", url, *notice_flags(), cwd=workdir)
    assert failed.code == EXIT_NOT_CONFIRMED, failed.stderr
    assert "no usable answer from the authority (connection refused" in failed.stderr
    assert "Traceback" not in failed.stderr
    [saved] = (workdir / "out").glob("*.envelope.json")
    assert f"the envelope is saved in {Path('out') / saved.name}" in failed.stderr

    authority_files.start(free_port)
    try:
        again = deplog(*failed.resubmit_command(), cwd=workdir)
        assert again.code == EXIT_OK, again.stderr
        assert "logged at index 1" in again.stdout
        assert times_logged(authority_files, saved) == 1
        receipt = Receipt.parse(
            saved.with_name(saved.name.replace(".envelope.json", ".tlog-proof")).read_bytes()
        )
        verify_receipt(
            receipt,
            encode_entry(NoticeEntry(Envelope.parse(saved.read_bytes()))),
            authority_files.log_verifier,
        )
    finally:
        authority_files.stop()


@pytest.mark.both_backends
def test_a_notice_logged_while_the_witness_quorum_was_down_is_receipted_once_on_resubmit(
    tmp_path: Path, authority_files: AuthorityProcess, workdir: Path
) -> None:
    """The issue's retry test: the POST logs the notice but its receipt is withheld (503);
    ``--resubmit`` after the witness is back gets the original entry's receipt."""
    witness = WitnessProcess(tmp_path / "witness", name="witness.test/w1")
    witness.init()
    log_key = authority_files.log_verifier
    assert witness.cli("add-log", "--origin", log_key.name, "--key", log_key.vkey()) == 0
    witness.start()
    witness_port = witness.port
    authority_files.add_witness(witness.url, witness.verifier)
    witness.stop()
    authority_files.extra_args = ["--publication-quorum", "1", "--witness-timeout", "1"]
    authority_files.start()
    try:
        key_file = str(authority_files.keys / "test.deplog.example_log.pub")
        args = ["publish", "--url", authority_files.url, "--log-key", key_file]
        failed = deplog(*args, *notice_flags(), cwd=workdir)
        assert failed.code == EXIT_NOT_CONFIRMED, failed.stderr
        assert "503 witness_quorum_unavailable" in failed.stderr
        [saved] = (workdir / "out").glob("*.envelope.json")

        witness.start(witness_port)
        again = deplog(*failed.resubmit_command(), cwd=workdir)
        assert again.code == EXIT_OK, again.stderr
        assert "already logged at index 1 (verified)" in again.stdout
        assert times_logged(authority_files, saved) == 1
        once_more = deplog(*failed.resubmit_command(), cwd=workdir)
        assert "already logged at index 1 (verified)" in once_more.stdout
        assert times_logged(authority_files, saved) == 1
    finally:
        authority_files.stop()
        witness.stop()


def test_a_notice_refused_with_429_is_logged_on_resubmit_after_a_later_one_landed(
    authority_files: AuthorityProcess, workdir: Path
) -> None:
    """Under the old increasing rule the refused notice could never be logged once a
    notice with a higher sequence was; with unique sequences its resubmission lands."""
    authority_files.extra_args = ["--rate-per-publisher", "0.25/1"]  # one notice per 4 s
    authority_files.start()
    try:
        url = ["--url", authority_files.url]
        assert deplog("publish", *url, *notice_flags("1.0.0"), cwd=workdir).code == EXIT_OK
        limited = deplog("publish", *url, *notice_flags("1.0.1"), cwd=workdir)
        assert limited.code == EXIT_NOT_CONFIRMED, limited.stderr
        assert "429 publisher_rate_limited" in limited.stderr
        time.sleep(4.2)
        assert deplog("publish", *url, *notice_flags("1.0.2"), cwd=workdir).code == EXIT_OK
        time.sleep(4.2)
        retried = deplog(*limited.resubmit_command(), cwd=workdir)
        assert retried.code == EXIT_OK, retried.stderr
        assert "logged at index 3" in retried.stdout
    finally:
        authority_files.stop()


@contextlib.contextmanager
def proof_tampering_proxy(upstream: str) -> Iterator[str]:
    """A hostile network path to the authority: every request is forwarded, and in every
    receipt the first inclusion proof hash is replaced (it still parses, it no longer
    proves anything). Yields the proxy's base URL."""

    class Forward(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers["Content-Length"])))

        def _forward(self, body: bytes | None) -> None:
            request = urllib.request.Request(upstream + self.path, data=body, method=self.command)
            if body is not None:
                request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status, answer = response.status, response.read()
            except urllib.error.HTTPError as refused:
                status, answer = refused.code, refused.read()
            if body is not None and status in (200, 201):
                lines = answer.split(b"\n")
                at = next(i for i, line in enumerate(lines) if line.startswith(b"index ")) + 1
                lines[at] = base64.b64encode(bytes(32))
                answer = b"\n".join(lines)
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test's output is the CLI's."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_receipt_that_does_not_verify_is_kept_aside_with_its_reason(
    authority: AuthorityProcess, workdir: Path
) -> None:
    log_key = authority.log_verifier.vkey()
    with proof_tampering_proxy(authority.url) as proxy:
        run = deplog(
            "publish",
            "--url",
            proxy,
            "--log-key",
            log_key,
            *notice_flags("1.0.0", "--sequence", "9"),
            cwd=workdir,
        )
    assert run.code == EXIT_UNVERIFIED, run.stderr
    out = workdir / "out"
    assert "kept aside as out/acme-9.tlog-proof.unverified" in run.stderr
    assert Receipt.parse((out / "acme-9.tlog-proof.unverified").read_bytes()).index == 1
    reason = (out / "acme-9.tlog-proof.unverified.reason").read_text()
    assert "verifies against --log-key" in reason
    assert not (out / "acme-9.tlog-proof").exists()

    command = run.resubmit_command()
    command[command.index("--url") + 1] = authority.url  # the direct path this time
    again = deplog(*command, cwd=workdir)
    assert again.code == EXIT_OK, again.stderr
    assert "already logged at index 1 (verified)" in again.stdout
    assert times_logged(authority, out / "acme-9.envelope.json") == 1


def test_a_log_key_that_is_not_the_authoritys_is_refused_before_anything_is_logged(
    authority: AuthorityProcess, workdir: Path
) -> None:
    before = log_leaves(authority)
    run = deplog(
        "publish",
        "--url",
        authority.url,
        "--log-key",
        "keys/acme.pub",
        *notice_flags(),
        cwd=workdir,
    )
    assert run.code == EXIT_USAGE, run.stderr
    assert "--log-key" in run.stderr and "does not verify" in run.stderr
    assert not (workdir / "out").exists()
    assert log_leaves(authority) == before


def test_log_key_may_be_the_authoritys_pub_file_for_publish_and_verify_receipt(
    authority: AuthorityProcess, workdir: Path
) -> None:
    key_file = str(authority.keys / "test.deplog.example_log.pub")
    published = deplog(
        "publish",
        "--url",
        authority.url,
        "--log-key",
        key_file,
        *notice_flags("1.0.0", "--sequence", "3"),
        cwd=workdir,
    )
    assert published.code == EXIT_OK, published.stderr
    assert "logged at index 1 (verified)" in published.stdout
    verified = deplog(
        "verify-receipt",
        "--log-key",
        key_file,
        "out/acme-3.tlog-proof",
        "--envelope",
        "out/acme-3.envelope.json",
        cwd=workdir,
    )
    assert verified.code == EXIT_OK, verified.stderr


def test_a_notice_the_authority_refuses_exits_1_and_keeps_the_envelope(
    authority: AuthorityProcess, workdir: Path
) -> None:
    run = deplog(
        "publish",
        "--url",
        authority.url,
        *notice_flags("1.0.0", "--tool", "tool:org.beta/x"),
        cwd=workdir,
    )
    assert run.code == EXIT_REFUSED, run.stderr
    assert "refused (403 namespace_not_authorized)" in run.stderr
    assert "the envelope is saved in out/acme-" in run.stderr
    assert "--resubmit" not in run.stderr  # a permanent refusal: resubmitting cannot help


# --- every flag is checked before anything is signed or sent -------------------------------


@dataclass(frozen=True)
class Refusal:
    args: tuple[str, ...]
    named: tuple[str, ...]
    """What the message must name: the flag, the file."""


def _publish(
    *overrides: str, action: str = "deprecate", version: bool = True, key: str = "keys/acme.key"
) -> tuple[str, ...]:
    """Flags of a valid notice (unless ``action``/``version`` say otherwise), then overrides."""
    base = ["--key", key, "--tool", TOOL, "--action", action, "--reason", "superseded"]
    if version:
        base += ["--version", "1.0.0"]
    return (*base, "--out", "out", *overrides)


REFUSALS = {
    "missing_key_file": Refusal(_publish(key="keys/nobody.key"), ("--key", "keys/nobody.key")),
    "verifier_key_as_key": Refusal(_publish(key="keys/acme.pub"), ("--key", "acme.key")),
    "bad_log_key": Refusal((*_publish(), "--log-key", "not-a-key"), ("--log-key",)),
    "bad_log_key_file": Refusal((*_publish(), "--log-key", "keys/acme.key"), ("--log-key",)),
    "bad_effective_at": Refusal(
        _publish("--effective-at", "yesterday"), ("--effective-at", "RFC 3339")
    ),
    "bad_sunset_at": Refusal(_publish("--sunset-at", "2026-13-01T00:00:00Z"), ("--sunset-at",)),
    "bad_version": Refusal(_publish("--version", "1.0"), ("--version", "SemVer")),
    "bad_range": Refusal(_publish("--range", "1.0.0-2.0.0"), ("--range",)),
    "bad_range_version": Refusal(_publish("--range", "1..2"), ("--range",)),
    "bad_reason": Refusal(
        _publish("--reason", "boredom"), ("--reason", "superseded", "end_of_life")
    ),
    "bad_replacement": Refusal(
        _publish("--replacement", "tool:org.acme/search"), ("--replacement",)
    ),
    "bad_tool": Refusal((*_publish(), "--tool", "search"), ("--tool", "tool:<namespace>/<name>")),
    "no_versions": Refusal(_publish(version=False), ("--version/--range",)),
    "withdraw_without_target": Refusal(
        _publish(action="withdraw", version=False), ("--withdraws",)
    ),
    "negative_withdraw_target": Refusal(
        _publish("--withdraws", "-1", action="withdraw", version=False), ("--withdraws",)
    ),
    "sunset_on_revoke": Refusal(
        _publish("--sunset-at", "2030-01-01T00:00:00Z", action="revoke"), ("--sunset-at", "revoke")
    ),
    "security_revoke_without_advisory": Refusal(
        (*_publish(action="revoke"), "--reason", "security"), ("--advisory",)
    ),
    "bad_sequence": Refusal(_publish("--sequence", "0"), ("--sequence",)),
    "bad_url": Refusal((), ("--url",)),
}


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AuthorityProcess, Path]]:
    """One authority for the refusal table (nothing ever reaches it), and acme's keys."""
    root = tmp_path_factory.mktemp("refusals")
    publisher = Signer.generate("acme")
    authority = AuthorityProcess(root / "authority")
    authority.init()
    authority.add_publisher(publisher, "org.acme")
    authority.start()
    write_key(root / "publisher" / "keys", publisher)
    try:
        yield authority, root / "publisher"
    finally:
        authority.stop()


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_a_bad_flag_is_refused_before_anything_is_signed_or_sent(
    running: tuple[AuthorityProcess, Path], case: str
) -> None:
    authority, workdir = running
    refusal = REFUSALS[case]
    before = log_leaves(authority)
    url = "ftp://nowhere" if case == "bad_url" else authority.url
    args = refusal.args or _publish()
    run = deplog("publish", "--url", url, *args, cwd=workdir)
    assert run.code == EXIT_USAGE, run.stderr
    assert "Traceback" not in run.stderr
    line = run.stderr.strip().splitlines()[-1]  # argparse prints its usage before it
    assert line.startswith(("deplog: ", "deplog publish: error: "))
    for named in refusal.named:
        assert named in line
    assert not (workdir / "out").exists()  # nothing signed, nothing written
    assert log_leaves(authority) == before


def test_a_key_file_others_can_read_is_refused_naming_the_fix(
    running: tuple[AuthorityProcess, Path], tmp_path: Path
) -> None:
    authority, _ = running
    loose = write_key(tmp_path / "keys", Signer.generate("acme"))
    loose.chmod(0o644)
    run = deplog("publish", "--url", authority.url, *_publish(), cwd=tmp_path)
    assert run.code == EXIT_USAGE
    assert (
        "--key" in run.stderr
        and "chmod 600" in run.stderr
        and str(Path("keys/acme.key")) in run.stderr
    )


def test_a_prepared_envelope_is_never_overwritten(
    running: tuple[AuthorityProcess, Path], tmp_path: Path
) -> None:
    authority, _ = running
    write_key(tmp_path / "keys", Signer.generate("acme"))
    (tmp_path / "out").mkdir()
    prepared = tmp_path / "out" / "acme-5.envelope.json"
    prepared.write_bytes(b"{}")
    run = deplog("publish", "--url", authority.url, *_publish("--sequence", "5"), cwd=tmp_path)
    assert run.code == EXIT_USAGE
    assert "out/acme-5.envelope.json already exists" in run.stderr and "--resubmit" in run.stderr
    assert prepared.read_bytes() == b"{}"


def test_resubmit_takes_no_notice_flags_and_only_a_saved_envelope(
    running: tuple[AuthorityProcess, Path], tmp_path: Path
) -> None:
    authority, _ = running
    (tmp_path / "junk.envelope.json").write_text("{}")
    with_flags = deplog(
        "publish",
        "--url",
        authority.url,
        "--resubmit",
        "junk.envelope.json",
        "--tool",
        TOOL,
        cwd=tmp_path,
    )
    assert with_flags.code == EXIT_USAGE and "--tool" in with_flags.stderr
    not_envelope = deplog(
        "publish", "--url", authority.url, "--resubmit", "junk.envelope.json", cwd=tmp_path
    )
    assert not_envelope.code == EXIT_USAGE
    assert "--resubmit" in not_envelope.stderr and "junk.envelope.json" in not_envelope.stderr
    missing = deplog(
        "publish", "--url", authority.url, "--resubmit", "gone.envelope.json", cwd=tmp_path
    )
    assert missing.code == EXIT_USAGE and "gone.envelope.json" in missing.stderr


# --- one key, 16 threads ---------------------------------------------------------------


def test_sixteen_threads_publishing_with_one_key_each_get_every_notice_logged_once(
    authority: AuthorityProcess, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default sequence numbers, posted concurrently and so arriving out of order: under the
    old increasing rule some were refused; now each is receipted exactly once."""
    monkeypatch.chdir(workdir)
    per_thread = 4
    codes: list[int] = []
    lock = threading.Lock()

    def publisher(thread: int) -> None:
        for n in range(per_thread):
            argv = [
                "publish",
                "--url",
                authority.url,
                "--log-key",
                authority.log_verifier.vkey(),
                *notice_flags(f"{thread}.{n}.0"),
            ]
            code = deplog_main(argv)
            with lock:
                codes.append(code)

    threads = [threading.Thread(target=publisher, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [EXIT_OK] * 16 * per_thread
    envelopes = sorted(p for p in (workdir / "out").glob("*.envelope.json") if not p.is_symlink())
    assert len(envelopes) == 16 * per_thread
    latest = (workdir / "out" / "acme-latest.envelope.json").resolve()
    assert latest in {p.resolve() for p in envelopes}  # each thread's link, replaced whole
    leaves = log_leaves(authority)
    logged = [decode_entry(leaf) for leaf in leaves[1:]]
    assert sorted(
        e.envelope.canonical_bytes() for e in logged if isinstance(e, NoticeEntry)
    ) == sorted(path.read_bytes() for path in envelopes)
    indexes = {
        Receipt.parse(Path(str(p).replace(".envelope.json", ".tlog-proof")).read_bytes()).index
        for p in envelopes
    }
    assert indexes == set(range(1, len(leaves)))


# --- notices the verifiers once refused after the authority admitted them -------------------
# ``canonical.loads_checked`` called canonical leaves non-canonical when they held more
# than 16 brackets or a ``\u`` escape: three ranges, or a backslash in the message, got a
# 201 and then stopped every follower (``noncanonical_entry``). Each trigger, as a user
# types it, must be followed, replayed and browsed like any other notice.


def assert_every_verifier_takes_it(
    authority: AuthorityProcess, workdir: Path, tool: str, index: int
) -> None:
    """``deplog follow --once`` goes through with no entry failing validation, the offline
    replay of an export passes, and the API's and the explorer's pages of the tool and of
    the entry answer 200."""
    key = str(authority.keys / "test.deplog.example_log.pub")
    followed = deplog("follow", authority.url, "--once", "--log-key", key, cwd=workdir)
    assert followed.code == 0, followed.stderr
    assert "fails validation" not in followed.stderr, followed.stderr
    exported = deplog("export", authority.url, "--out", "export", "--log-key", key, cwd=workdir)
    assert exported.code == 0, exported.stderr
    replayed = deplog("audit", "replay", "--log-key", key, "export", cwd=workdir)
    assert replayed.code == 0, replayed.stdout + replayed.stderr
    with urllib.request.urlopen(f"{authority.url}/v1/tools/{tool}", timeout=30) as response:
        described = json.loads(response.read())
    assert [n["index"] for n in described["notices"]] == [index]
    assert described["invalid"] == []
    for page in (f"/tools/{tool}", f"/notices/{index}"):
        with urllib.request.urlopen(authority.url + page, timeout=30) as response:
            assert response.status == 200
            assert response.headers.get_content_type() == "text/html"


def publish_revoke(authority: AuthorityProcess, workdir: Path, *flags: str) -> None:
    key = str(authority.keys / "test.deplog.example_log.pub")
    run = deplog(
        "publish",
        "--url",
        authority.url,
        "--log-key",
        key,
        "--key",
        "keys/acme.key",
        "--tool",
        TOOL,
        "--action",
        "revoke",
        "--reason",
        "critical_bug",
        "--out",
        "out",
        *flags,
        cwd=workdir,
    )
    assert run.code == EXIT_OK, run.stderr
    assert "logged at index 1 (verified)" in run.stdout


def test_a_notice_with_three_ranges_is_followed_replayed_and_browsed(
    authority: AuthorityProcess, workdir: Path
) -> None:
    ranges = ("1.0.0..1.1.0", "2.0.0..2.1.0", "3.0.0..3.1.0")
    publish_revoke(authority, workdir, *(arg for r in ranges for arg in ("--range", r)))
    assert_every_verifier_takes_it(authority, workdir, TOOL, 1)
    # The follower folded it: versions in the ranges are revoked, the others are not.
    assert deplog("check", TOOL, "3.0.5", cwd=workdir).code == 5
    assert deplog("check", TOOL, "2.1.0", cwd=workdir).code == 0


def test_a_notice_whose_message_holds_backslashes_is_followed_replayed_and_browsed(
    authority: AuthorityProcess, workdir: Path
) -> None:
    message = "moved to C:\\users\\shared"
    publish_revoke(authority, workdir, "--version", "1.0.0", "--message", message)
    assert_every_verifier_takes_it(authority, workdir, TOOL, 1)
    assert deplog("check", TOOL, "1.0.0", cwd=workdir).code == 5
    saved = workdir / "out" / "acme-latest.envelope.json"
    assert Envelope.parse(saved.read_bytes()).notice.message == message
    with urllib.request.urlopen(f"{authority.url}/notices/1", timeout=30) as response:
        assert "moved to C:\\users\\shared" in response.read().decode()
