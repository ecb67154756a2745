"""The log's side of witnessing: get every new checkpoint cosigned, and keep cosignatures fresh.

Each witness is spoken to with C2SP tlog-witness, from the size it last cosigned; an
old-size conflict names the witness's size, and the log retries once from there. The
embedded witness is the same witness code in process, with the same errors.

Rules:

1. Cosignature lines are kept per (size, witness), for every size not below the served
   one (``forget_below``): a line for S+1 does not take one off the note served for S.
2. ``note_for`` is a pure function of a checkpoint and the lines kept for its very size.
3. ``witness_new`` raises ``EmbeddedWitnessUnavailableError`` (503
   ``embedded_witness_unavailable``; ``StorageError`` ``storage_full`` when its disk is
   full) unless every embedded witness cosigned, and
   ``QuorumUnavailableError`` (503 ``witness_quorum_unavailable``) unless the quorum of
   external witnesses did; without a quorum, external witnesses are asked in the
   background.
4. A witness that cannot cosign (timeout, HTTP, OS or storage error, refusal) is a failed
   round, never an exception out of ``cosign``: counted per witness, and a run of the same
   failure logged once, as is its end.
5. Requests to one witness are serialized; a witness already holding a larger size from
   this log is not asked for a smaller one, and one claiming a size this log never gave it
   is reported as a possible fork.
6. With ``shared`` (``storage/cluster.py`` rule 2), a request to a witness also holds its
   database lock and starts from the size the log's processes together got it to: "this
   log" in rule 5 is every process. In a publication round the round holds the locks of
   ``round_witnesses`` (``held``); any other request takes its witness's own.
7. ``last_embedded`` is the checkpoint the embedded witness last cosigned, with that very
   line signed again from its record, writing nothing: what was published before a
   restart, servable while the witness cannot write.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import aiohttp
from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.authority.options import option
from deplog.authority.storage.database import Database, reaching
from deplog.authority.storage.errors import StorageError
from deplog.authority.storage.store import StoredCheckpoint
from deplog.authority.supervise import Supervisor
from deplog.authority.witness.core import SizeConflictError, Witness, WitnessState
from deplog.authority.witness.server import SIZE_CONFLICT_STATUS, SIZE_CONTENT_TYPE
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.plumbing.storage_faults import database_fault
from deplog.client.tlog.cosignature import verify_cosignature
from deplog.client.tlog.keyfile import load_or_create_signer
from deplog.client.tlog.note import (
    SIG_TYPE_COSIGNATURE_V1,
    NoteSignature,
    Verifier,
    add_signature_lines,
    encode_base64,
    parse_note,
)

if TYPE_CHECKING:
    from deplog.authority.storage.cluster import WitnessProgress

log = logging.getLogger("deplog.witnessing")

MAX_WITNESS_RESPONSE = 64 * 1024

ProofSource = Callable[[int, int], Awaitable[Sequence[bytes]]]
"""Returns the RFC 9162 consistency proof between two sizes of this log."""


class QuorumUnavailableError(DeplogError):
    """Fewer witnesses than the publication quorum cosigned in time."""

    code = ErrorCode.WITNESS_QUORUM_UNAVAILABLE


class WitnessAnswerError(DeplogError):
    """A witness's answer the log cannot use (logged and counted, never served)."""

    codes = frozenset(
        {ErrorCode.WITNESS_REFUSED, ErrorCode.BAD_WITNESS_RESPONSE, ErrorCode.NO_COSIGNATURE}
    )


class EmbeddedWitnessUnavailableError(DeplogError):
    """The embedded witness did not cosign: no receipt or served checkpoint without it."""

    code = ErrorCode.EMBEDDED_WITNESS_UNAVAILABLE
    retry_after = 2


class SharedProgress(Protocol):
    """Rule 6: the database's lock and progress row per witness (``cluster.Cluster``)."""

    errors: tuple[type[Exception], ...]

    def witness(self, name: str) -> contextlib.AbstractAsyncContextManager[WitnessProgress]: ...


class Cosigner(Protocol):
    """Something that answers tlog-witness add-checkpoint requests."""

    async def add_checkpoint(self, body: bytes) -> bytes:
        """The cosignature lines; SizeConflictError names a witness's other size."""
        ...


class RemoteWitness:
    """A witness reached over HTTP at its submission prefix."""

    def __init__(self, url: str, session: aiohttp.ClientSession, timeout: float) -> None:
        self.url = url.rstrip("/") + "/add-checkpoint"
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def add_checkpoint(self, body: bytes) -> bytes:
        """POST the body: 200 is the cosignature, an old-size conflict the witness's size."""
        async with self.session.post(self.url, data=body, timeout=self.timeout) as response:
            data = (await response.content.read(MAX_WITNESS_RESPONSE + 1))[:MAX_WITNESS_RESPONSE]
            status, content_type = response.status, response.content_type
        if status == SIZE_CONFLICT_STATUS and content_type == SIZE_CONTENT_TYPE:
            raise SizeConflictError(_parse_size(data))
        if status != 200:
            raise WitnessAnswerError(ErrorCode.WITNESS_REFUSED, f"the witness answered {status}")
        return data


class LocalWitness:
    """The embedded witness: the same witness code, its own key and state and thread."""

    def __init__(self, witness: Witness) -> None:
        self.witness = witness
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="witness")

    async def add_checkpoint(self, body: bytes) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.witness.add_checkpoint, body, int(time.time())
        )

    async def recorded_size(self, origin: str) -> int | None:
        """The size of the checkpoint last cosigned for ``origin``."""
        loop = asyncio.get_running_loop()
        recorded = await loop.run_in_executor(self._thread, self.witness.state.recorded, origin)
        return None if recorded is None else recorded.size

    async def cosigned_again(self, note: bytes) -> bytes | None:
        """``Witness.cosigned_again`` on the witness's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self.witness.cosigned_again, note)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.witness.state.close()


def open_embedded_witness(
    path: Path, keys: Path, stem: str, name: str, log_key: Verifier, database: Database
) -> LocalWitness:
    """The embedded witness of the log in ``database``, trusting exactly its key."""
    signer, _ = load_or_create_signer(keys, stem, name, SIG_TYPE_COSIGNATURE_V1)
    store = database.embedded_witness_store()
    with reaching(database):  # a shared database that cannot be reached is one line
        state = WitnessState(path) if store is None else WitnessState.over(store)
        try:
            state.add_log(log_key.vkey(), int(time.time()))
        except BaseException as err:
            state.close()
            if isinstance(err, sqlite3.Error):
                raise database_fault(err, path) from None
            raise
    return LocalWitness(Witness(state, signer))


@dataclass
class WitnessTrack:
    """One witness as the log sees it: how to reach it and what it last cosigned."""

    verifier: Verifier
    client: Cosigner
    external: bool
    size: int | None = None
    cosigned_size: int | None = None
    cosigned_at: float | None = None
    failures: int = 0
    failing: str | None = None
    """Why the latest request failed, None once it cosigned again (rule 4)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tree_lines: bool = False
    """An external witness that may sign the first three lines only (``config.py`` rule 6)."""

    @property
    def name(self) -> str:
        return self.verifier.name


@dataclass(frozen=True)
class WitnessingConfig:
    """Which witnesses cosign, how many must before publication, how long each may take."""

    embedded: bool = option(
        True, "cosign every checkpoint with the embedded witness", flag="--embedded-witness"
    )
    quorum: int = option(
        0,
        "external witnesses that must cosign before a checkpoint is published",
        flag="--publication-quorum",
        note="the embedded witness always cosigns",
    )
    timeout: float = option(5.0, "seconds to wait for one witness", flag="--witness-timeout")


def request_body(old: int, proof: Sequence[bytes], note: bytes) -> bytes:
    """A tlog-witness add-checkpoint body: old size, proof lines, blank line, checkpoint."""
    lines = [f"old {old}", *(encode_base64(h) for h in proof), ""]
    return "".join(line + "\n" for line in lines).encode("ascii") + note


class Witnessing:
    """The witnesses of one log and the cosignature lines they gave, per size (rules 1 to 5)."""

    def __init__(
        self,
        witnesses: Sequence[WitnessTrack],
        proofs: ProofSource,
        *,
        quorum: int,
        timeout: float,
        supervisor: Supervisor | None = None,
        shared: SharedProgress | None = None,
    ) -> None:
        externals = [w for w in witnesses if w.external]
        if not 0 <= quorum <= len(externals):
            raise ValueError("the publication quorum cannot exceed the external witnesses")
        self.witnesses = list(witnesses)
        self.proofs = proofs
        self.quorum = quorum
        self.timeout = timeout
        self.supervisor = supervisor or Supervisor()
        self.shared = shared
        self._failures: tuple[type[Exception], ...] = (
            TimeoutError,
            aiohttp.ClientError,
            OSError,
            DeplogError,
            sqlite3.Error,
            *(() if shared is None else shared.errors),
        )
        """What a failed round raises (rule 4)."""
        self.on_change: Callable[[int], None] | None = None
        """Called with the size a witness just cosigned."""
        self.session: aiohttp.ClientSession | None = None
        self._lines: dict[int, dict[str, tuple[NoteSignature, float]]] = {}

    @property
    def embedded(self) -> list[WitnessTrack]:
        return [w for w in self.witnesses if not w.external]

    @property
    def externals(self) -> list[WitnessTrack]:
        return [w for w in self.witnesses if w.external]

    @property
    def round_witnesses(self) -> list[str]:
        """The witnesses ``witness_new`` asks before it returns (rule 3)."""
        return [w.name for w in (self.witnesses if self.quorum else self.embedded)]

    async def cosign(
        self,
        witness: WitnessTrack,
        checkpoint: StoredCheckpoint,
        held: WitnessProgress | None = None,
    ) -> bool:
        """Ask one witness to cosign; True if it did (its line is kept for that size)."""
        async with witness.lock:
            try:
                done = await asyncio.wait_for(
                    self._cosign_shared(witness, checkpoint, held), self.timeout
                )
            except self._failures as err:
                reason = type(err).__name__
                if isinstance(err, DeplogError):  # messages are value-free: safe to log
                    reason = err.code if str(err) == err.code else f"{err.code} ({err})"
                self._failed(witness, reason)
                return False
        if done and witness.failing is not None:
            log.info("witness %s cosigns again", witness.name)
            witness.failing = None
        return done

    def _failed(self, witness: WitnessTrack, reason: str) -> None:
        witness.failures += 1
        if witness.failing != reason:
            log.warning("witness %s cannot cosign: %s", witness.name, reason)
            witness.failing = reason

    async def _cosign_shared(
        self, witness: WitnessTrack, checkpoint: StoredCheckpoint, held: WitnessProgress | None
    ) -> bool:
        """``_cosign``, under rule 6 when processes share the log."""
        if held is not None:
            return await self._cosign_from(witness, checkpoint, held)
        if self.shared is None:
            return await self._cosign(witness, checkpoint)
        async with self.shared.witness(witness.name) as progress:
            return await self._cosign_from(witness, checkpoint, progress)

    async def _cosign_from(
        self, witness: WitnessTrack, checkpoint: StoredCheckpoint, progress: WitnessProgress
    ) -> bool:
        if progress.size is not None:
            witness.size = max(witness.size or 0, progress.size)
            witness.cosigned_size = max(witness.cosigned_size or 0, progress.size)
        done = await self._cosign(witness, checkpoint)
        if done:
            progress.cosigned(checkpoint.size)
        return done

    async def _cosign(self, witness: WitnessTrack, checkpoint: StoredCheckpoint) -> bool:
        for _ in range(2):  # a size conflict teaches us the witness's size; retry once from there
            old = witness.size if witness.size is not None else 0
            if old > checkpoint.size:
                if (witness.cosigned_size or 0) >= old:
                    return False  # superseded: it already cosigned a larger size for us
                log.error("witness %s is ahead of this log: a fork?", witness.name)
                self._failed(witness, "witness_ahead")
                return False
            proof = [] if old in (0, checkpoint.size) else await self.proofs(old, checkpoint.size)
            try:
                body = await witness.client.add_checkpoint(
                    request_body(old, proof, checkpoint.note)
                )
            except SizeConflictError as conflict:
                witness.size = conflict.recorded_size
                continue
            line = self._accept(witness, checkpoint, body)
            self._keep(checkpoint.size, witness, line, time.time())
            witness.size = witness.cosigned_size = checkpoint.size
            witness.cosigned_at = time.time()
            if self.on_change is not None:
                self.on_change(checkpoint.size)
            return True
        return False

    def _keep(self, size: int, witness: WitnessTrack, line: NoteSignature, at: float) -> None:
        """Keep ``line`` unless a line of the same witness for ``size`` is newer."""
        kept = self._lines.setdefault(size, {})
        if witness.name not in kept or kept[witness.name][1] <= at:
            kept[witness.name] = (line, at)

    def _accept(
        self, witness: WitnessTrack, checkpoint: StoredCheckpoint, body: bytes
    ) -> NoteSignature:
        """The witness's valid cosignature line on ``checkpoint`` among the response lines."""
        text, _ = parse_note(checkpoint.note)
        _, lines = parse_note(text.encode() + b"\n" + body)
        for line in _lines_of(witness, lines):
            verify_cosignature(text, line, witness.verifier, tree_lines=witness.tree_lines)
            return line
        raise WitnessAnswerError(
            ErrorCode.NO_COSIGNATURE, "the witness answered without its cosignature"
        )

    async def cosign_all(
        self,
        checkpoint: StoredCheckpoint,
        witnesses: Sequence[WitnessTrack],
        held: Mapping[str, WitnessProgress] | None = None,
    ) -> None:
        """Ask several witnesses in parallel (``held``: those a round holds, rule 6)."""
        held = held or {}
        await asyncio.gather(*(self.cosign(w, checkpoint, held.get(w.name)) for w in witnesses))

    def note_for(self, checkpoint: StoredCheckpoint) -> bytes:
        """The checkpoint with every line kept for its very size, in witness order (rule 2)."""
        kept = self._lines.get(checkpoint.size, {})
        lines = [kept[w.name][0] for w in self.witnesses if w.name in kept]
        return add_signature_lines(checkpoint.note, *lines) if lines else checkpoint.note

    def cosigned_by_embedded(self, size: int) -> bool:
        """Whether every embedded witness gave a line for ``size`` (true without any)."""
        kept = self._lines.get(size, {})
        return all(w.name in kept for w in self.embedded)

    def embedded_age(self, size: int, now: float) -> float | None:
        """Seconds since the oldest embedded line for ``size`` (inf if one is missing)."""
        if not self.embedded:
            return None
        kept = self._lines.get(size, {})
        return max(now - kept[w.name][1] if w.name in kept else float("inf") for w in self.embedded)

    def forget_below(self, size: int) -> None:
        """Drop the lines of sizes below ``size``: nothing will serve them again (rule 1)."""
        for old in [s for s in self._lines if s < size]:
            del self._lines[old]

    def remember(self, checkpoint: StoredCheckpoint, note: bytes) -> None:
        """Keep this log's witnesses' valid lines on a saved ``note``, dated by themselves."""
        text, lines = parse_note(note)
        for witness in self.witnesses:
            for line in _lines_of(witness, lines):
                cosigned = verify_cosignature(
                    text, line, witness.verifier, tree_lines=witness.tree_lines
                )
                self._keep(checkpoint.size, witness, line, float(cosigned.timestamp))

    async def last_embedded(
        self, origin: str, checkpoint_at: Callable[[int], Awaitable[StoredCheckpoint | None]]
    ) -> tuple[StoredCheckpoint, bytes] | None:
        """Rule 7: the checkpoint and note with every embedded line, or None."""
        clients = [w.client for w in self.embedded if isinstance(w.client, LocalWitness)]
        if not clients:
            return None
        size = await clients[0].recorded_size(origin)
        stored = None if size is None else await checkpoint_at(size)
        if stored is None:
            return None
        lines = [await client.cosigned_again(stored.note) for client in clients]
        if None in lines:
            return None
        return stored, stored.note + b"".join(line for line in lines if line is not None)

    async def witness_new(
        self, checkpoint: StoredCheckpoint, held: Mapping[str, WitnessProgress] | None = None
    ) -> None:
        """Cosign a new checkpoint as publication requires (rule 3), or raise; ``held``: the
        round's hold on ``round_witnesses`` (rule 6)."""
        if self.quorum:
            await self.cosign_all(checkpoint, self.witnesses, held)
        else:
            await self.cosign_all(checkpoint, self.embedded, held)
            if self.externals:
                self.supervisor.spawn(
                    "external_witnessing",
                    lambda: self.cosign_all(checkpoint, self.externals),
                    restart=False,  # the refresh loop is its retry
                )
        if not self.cosigned_by_embedded(checkpoint.size):
            if any(
                isinstance(w.client, LocalWitness)
                and w.client.witness.state.failing == ErrorCode.STORAGE_FULL
                for w in self.embedded
            ):
                raise StorageError(ErrorCode.STORAGE_FULL)
            raise EmbeddedWitnessUnavailableError()
        kept = self._lines.get(checkpoint.size, {})
        if sum(1 for w in self.externals if w.name in kept) < self.quorum:
            raise QuorumUnavailableError()

    @property
    def embedded_failing(self) -> bool:
        """Whether an embedded witness's latest request failed."""
        return any(w.failing is not None for w in self.embedded)

    async def stop(self) -> None:
        """Close the witnesses' connections; the supervisor's owner stops its tasks."""
        if self.session is not None:
            await self.session.close()
        for witness in self.witnesses:
            if isinstance(witness.client, LocalWitness):
                witness.client.close()

    def register_metrics(
        self, registry: CollectorRegistry, served: Callable[[], StoredCheckpoint]
    ) -> None:
        """Each witness's lag behind the ``served`` checkpoint and its cosignature's age."""
        collectors.labeled_gauge(
            registry,
            "deplog_witness_lag_entries",
            "Entries the witness's latest cosignature is behind the published checkpoint.",
            "witness",
            lambda: {w.name: float(served().size - (w.cosigned_size or 0)) for w in self.witnesses},
        )
        collectors.labeled_gauge(
            registry,
            "deplog_witness_cosignature_age_seconds",
            "Seconds since the witness last cosigned.",
            "witness",
            lambda: {w.name: time.time() - (w.cosigned_at or -math.inf) for w in self.witnesses},
        )


def _lines_of(witness: WitnessTrack, lines: Sequence[NoteSignature]) -> list[NoteSignature]:
    key = (witness.name, witness.verifier.key_id)
    return [line for line in lines if (line.name, line.key_id) == key]


def _parse_size(body: bytes) -> int:
    text = body.decode("ascii", "replace")
    if not text.endswith("\n") or not text[:-1].isdigit() or len(text) > 21:
        raise WitnessAnswerError(ErrorCode.BAD_WITNESS_RESPONSE, "malformed size in a 409 answer")
    return int(text[:-1])
