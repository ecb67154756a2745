"""Power-cut campaigns: record a real authority's writes, rebuild every crash state, check each.

``record`` runs ``authority serve`` under strace while batches of notices are
appended (concurrently, so that batches form) and the checkpoint is read
between batches, then stops it with SIGTERM, so the recording also holds the
shutdown's WAL checkpoint. ``crash_states`` (the model) turns the recording
into the files a power cut could leave; ``check_state`` starts a real
authority on each and checks, against what had been sent to clients before
the crash point:

* it starts, or refuses with a clear message (exit status, no traceback);
* every notice acknowledged (201 with receipt) is in the log exactly once;
* no checkpoint signed and sent has a second root: the restarted log proves
  consistency from each, also after it has grown past them with new notices;
* the embedded witness's record, before anything new is appended, is at least every
  size it had cosigned;
* it stops cleanly.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from deplog.client.errors import DeplogError
from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.cosignature import cosignatures
from deplog.client.tlog.note import Signer, Verifier
from deplog.client.tlog.proofs import ConsistencyProof, ProofError, verify_consistency
from deplog.client.tlog.receipt import HEADER, Receipt
from tests.builders import make_envelope
from tests.integration.crash_states import (
    CrashState,
    FileOp,
    Snapshot,
    write_files,
)
from tests.integration.harness import ORIGIN, AuthorityProcess, embedded_witness_size
from tests.integration.syscall_trace import STRACE_ARGS, parse_trace, snapshot_of

__all__ = [
    "Campaign",
    "Outcome",
    "Sent",
    "Tally",
    "check_state",
    "record",
    "sample",
]

JSON = {"Content-Type": "application/json"}
RECORDED_SEQUENCE = 100_000
"""The first sequence number of the recorded notices, above those filling the WAL."""
FRESH_SEQUENCE = 1_000_000
"""Sequence numbers for notices appended after a restart, above every recorded one."""
AUTOCHECKPOINT_FRAMES = 1000
"""SQLite's default ``wal_autocheckpoint``: a commit that leaves this many frames in the
WAL copies them into the database."""
CHECKPOINT_MARGIN = 25
"""How many frames short of it ``fill_wal`` stops: a few commits of the recording."""
WAL_HEADER = 32
WAL_FRAME = 24 + 4096


@dataclass(frozen=True)
class Sent:
    """A signed checkpoint the authority sent (in a receipt or from /checkpoint) and when:
    ``place`` is the number of recorded file operations issued before the send."""

    place: int
    checkpoint: Checkpoint
    embedded_cosigned: bool
    acknowledged: bytes | None
    """The notice a receipt acknowledged, or None for a served checkpoint."""


@dataclass
class Campaign:
    """A recording and everything needed to check crash states against it."""

    root: Path
    publisher: Signer
    snapshot: Snapshot
    ops: list[FileOp]
    sent: list[Sent]
    log_verifier: Verifier
    witness_verifier: Verifier

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    def before(self, point: int) -> list[Sent]:
        """What clients had been sent when the power failed at ``point``."""
        return [s for s in self.sent if s.place <= point]


@dataclass
class Outcome:
    """What one crash state did: started or refused, and what (if anything) was wrong."""

    started: bool
    refusal: str = ""
    acknowledged_checked: int = 0
    lost: int = 0
    second_roots: int = 0
    witness_regressions: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass
class Tally:
    """The campaign's figures, summed over the crash states checked."""

    states: int = 0
    started: int = 0
    refused: int = 0
    acknowledged_checked: int = 0
    lost: int = 0
    second_roots: int = 0
    witness_regressions: int = 0
    refusals: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def add(self, state: CrashState, outcome: Outcome) -> None:
        self.states += 1
        self.started += outcome.started
        self.refused += not outcome.started
        if outcome.refusal:
            self.refusals.add(outcome.refusal)
        self.acknowledged_checked += outcome.acknowledged_checked
        self.lost += outcome.lost
        self.second_roots += outcome.second_roots
        self.witness_regressions += outcome.witness_regressions
        self.problems.extend(f"point {state.point}, {state.kind}: {p}" for p in outcome.problems)

    def lines(self) -> list[str]:
        """The figures, one per line, for a report."""
        return [
            f"crash states explored: {self.states}",
            f"started: {self.started}",
            f"refused to start: {self.refused}",
            f"acknowledged notices checked: {self.acknowledged_checked}",
            f"acknowledged notices lost: {self.lost}",
            f"signed checkpoints contradicted (second roots): {self.second_roots}",
            f"embedded witness records gone back: {self.witness_regressions}",
            *(f"refusal: {r}" for r in sorted(self.refusals)),
            *(f"PROBLEM {p}" for p in self.problems),
        ]


def sample(states: list[CrashState], limit: int, rng: random.Random) -> list[CrashState]:
    """At most ``limit`` states: those with nothing or everything in flight persisted at
    each crash point first (the barrier states), then a seeded random choice of the rest."""
    if len(states) <= limit:
        return states
    barrier = [s for s in states if s.kind.startswith("prefix 0/") or _whole_prefix(s.kind)]
    rest = [s for s in states if s not in barrier]
    chosen = barrier[:limit] + rng.sample(rest, max(0, limit - len(barrier)))
    return sorted(chosen, key=states.index)


def _whole_prefix(kind: str) -> bool:
    if not kind.startswith("prefix "):
        return False
    done, total = kind.removeprefix("prefix ").split("/")
    return done == total


class _TracedAuthority(AuthorityProcess):
    """``authority serve`` as the child of strace, writing its syscalls to ``trace``."""

    @property
    def trace(self) -> Path:
        return self.root / "trace.txt"

    def command(self) -> list[str]:
        return ["strace", *STRACE_ARGS, "-o", str(self.trace), "--", *super().command()]

    def stop(self) -> int:
        """SIGTERM the authority itself (strace's child) and wait for strace to finish."""
        assert self.process is not None
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert len(children) == 1, "strace runs exactly the authority"
        os.kill(int(children[0]), signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self.process = None
        return code


async def _append_batches(
    url: str, publisher: Signer, batches: int, per_batch: int
) -> dict[int, bytes]:
    """Append ``batches`` rounds of concurrent notices, reading the checkpoint after each;
    returns the receipts' notices by leaf index."""
    acknowledged: dict[int, bytes] = {}
    async with aiohttp.ClientSession() as http:

        async def append(sequence: int) -> None:
            body = make_envelope(publisher, sequence).canonical_bytes()
            async with http.post(url + "/v1/notices", data=body, headers=JSON) as response:
                assert response.status == 201, "every recorded append is acknowledged"
                acknowledged[Receipt.parse(await response.read()).index] = body

        for batch in range(batches):
            first = RECORDED_SEQUENCE + batch * per_batch
            await asyncio.gather(*(append(first + i) for i in range(per_batch)))
            async with http.get(url + "/checkpoint") as response:
                assert response.status == 200
    return acknowledged


def _wal_frames(authority: AuthorityProcess) -> int:
    wal = authority.data / "log.db-wal"
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - WAL_HEADER) // WAL_FRAME


async def _fill_wal(authority: AuthorityProcess, publisher: Signer, frames: int) -> None:
    """Append notices one by one until the log's WAL holds ``frames`` frames."""
    async with aiohttp.ClientSession() as http:
        sequence = 1
        while _wal_frames(authority) < frames:
            body = make_envelope(publisher, sequence).canonical_bytes()
            sequence += 1
            async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as r:
                assert r.status == 201


def record(
    root: Path, publisher: Signer, batches: int, per_batch: int, *, fill_wal: bool = False
) -> Campaign:
    """Initialize an authority under ``root``, snapshot it, and record the appends.

    With ``fill_wal``, notices are appended before the snapshot until the log's WAL is
    a few commits short of SQLite's automatic checkpoint, so the recording holds a
    checkpoint (WAL pages copied into the database, its sync, the WAL restarted)."""
    authority = _TracedAuthority(root)
    authority.init()
    authority.add_publisher(publisher, "org.acme")
    # One plain start and stop first, so every file exists and the snapshot is at rest.
    plain = AuthorityProcess(root)
    plain.start()
    try:
        if fill_wal:
            asyncio.run(_fill_wal(plain, publisher, AUTOCHECKPOINT_FRAMES - CHECKPOINT_MARGIN))
    finally:
        assert plain.stop() == 0
    snapshot_dir = root / "snapshot"
    shutil.copytree(authority.data, snapshot_dir)
    snapshot = snapshot_of(snapshot_dir)
    authority.start()
    try:
        acknowledged = asyncio.run(_append_batches(authority.url, publisher, batches, per_batch))
    finally:
        assert authority.stop() == 0
    recording = parse_trace(authority.trace.read_text(), authority.data, snapshot)
    log_verifier = authority.log_verifier
    witness_verifier = Verifier.parse_cosigner(
        (authority.keys / f"{ORIGIN.replace('/', '_')}-witness.pub").read_text().strip()
    )
    sent = []
    for place, data in recording.sends:
        head, _, body = data.partition(b"\r\n\r\n")
        note, notice = None, None
        if head.startswith(b"HTTP/1.1 201") and body.startswith(HEADER):
            receipt = Receipt.parse(body)
            note, notice = receipt.checkpoint, acknowledged[receipt.index]
        elif head.startswith(b"HTTP/1.1 200") and body.startswith(ORIGIN.encode() + b"\n"):
            note = body
        if note is not None:
            checkpoint, _ = open_checkpoint(note, log_verifier)
            cosigned = bool(cosignatures(note, [witness_verifier]))
            sent.append(Sent(place, checkpoint, cosigned, notice))
    assert len([s for s in sent if s.acknowledged]) == len(acknowledged), "a receipt is missing"
    return Campaign(root, publisher, snapshot, recording.ops, sent, log_verifier, witness_verifier)


def check_state(campaign: Campaign, state: CrashState, work: Path) -> Outcome:
    """Start a real authority on ``state`` (laid out under ``work``) and check it."""
    authority = AuthorityProcess(work)
    write_files(state.files, authority.data)
    authority.keys.symlink_to(campaign.keys)
    try:
        authority.start()
    except RuntimeError:
        assert authority.process is not None
        if authority.process.poll() is None:
            authority.kill()
            return Outcome(started=False, problems=["neither started nor refused in time"])
        return _refused(authority)
    try:
        outcome = asyncio.run(_check_running(campaign, state, authority))
    except (aiohttp.ClientError, TimeoutError, DeplogError) as error:
        outcome = Outcome(started=True, problems=[f"checking it failed: {error!r}"])
    finally:
        code = authority.stop()
    if code != 0:
        outcome.problems.append(f"exit status {code} on SIGTERM")
    return outcome


def _refused(authority: AuthorityProcess) -> Outcome:
    printed = authority.output.read_text()
    last = printed.strip().splitlines()[-1] if printed.strip() else ""
    outcome = Outcome(started=False, refusal=last)
    if "Traceback" in printed or not last:
        outcome.problems.append("refused without a clear one-line message")
    return outcome


async def _check_running(
    campaign: Campaign, state: CrashState, authority: AuthorityProcess
) -> Outcome:
    outcome = Outcome(started=True)
    before = campaign.before(state.point)
    signed = {(s.checkpoint.size, s.checkpoint.root_hash): s.checkpoint for s in before}
    acknowledged = [s.acknowledged for s in before if s.acknowledged is not None]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        current = await _checkpoint(http, authority)
        logged = await _notices(http, authority, current.size)
        outcome.acknowledged_checked = len(acknowledged)
        outcome.lost = sum(1 for notice in acknowledged if logged.count(notice) != 1)
        if len(logged) != len(set(logged)):
            outcome.problems.append("a notice is in the log twice")
        # Before anything new is appended (and cosigned), the witness's record must be at
        # least every size it had cosigned for a client.
        cosigned = max((s.checkpoint.size for s in before if s.embedded_cosigned), default=0)
        if embedded_witness_size(authority) < cosigned:
            outcome.witness_regressions += 1
            outcome.problems.append("the embedded witness's record went back")
        # Grow past every size signed before the crash: a lost signed leaf would now be
        # replaced by another, and the consistency proofs below would fail.
        target = max((size for size, _ in signed), default=0) + 1
        sequence = FRESH_SEQUENCE
        while current.size < target:
            body = make_envelope(campaign.publisher, sequence).canonical_bytes()
            sequence += 1
            async with http.post(authority.url + "/v1/notices", data=body, headers=JSON) as r:
                if r.status != 201:
                    outcome.problems.append(f"an append after the restart answered {r.status}")
                    break
            current = await _checkpoint(http, authority)
        for old in signed.values():
            if not await _consistent(http, authority, old, current):
                outcome.second_roots += 1
    if outcome.lost:
        outcome.problems.append(f"{outcome.lost} acknowledged notices lost")
    if outcome.second_roots:
        outcome.problems.append(f"{outcome.second_roots} signed checkpoints contradicted")
    return outcome


async def _checkpoint(http: aiohttp.ClientSession, authority: AuthorityProcess) -> Checkpoint:
    async with http.get(authority.url + "/checkpoint") as response:
        checkpoint, _ = open_checkpoint(await response.read(), authority.log_verifier)
        return checkpoint


async def _notices(
    http: aiohttp.ClientSession, authority: AuthorityProcess, size: int
) -> list[bytes]:
    logged: list[bytes] = []
    for start in range(0, size, 1000):
        end = min(size, start + 1000)
        async with http.get(f"{authority.url}/v1/entries?start={start}&end={end}") as response:
            for leaf in (await response.json())["entries"]:
                entry = decode_entry(base64.b64decode(leaf))
                if isinstance(entry, NoticeEntry):
                    logged.append(entry.envelope.canonical_bytes())
    return logged


async def _consistent(
    http: aiohttp.ClientSession, authority: AuthorityProcess, old: Checkpoint, new: Checkpoint
) -> bool:
    if old.size == new.size:
        return old.root_hash == new.root_hash
    url = f"{authority.url}/v1/proofs/consistency?old={old.size}&new={new.size}"
    async with http.get(url) as response:
        if response.status != 200:
            return False
        proof = ConsistencyProof.from_json(await response.json())
    try:
        verify_consistency(old.size, new.size, old.root_hash, new.root_hash, proof.hashes)
    except ProofError:
        return False
    return True
