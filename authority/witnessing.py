"""The log's side of witnessing: get every new checkpoint cosigned, and keep cosignatures fresh.

Each configured witness is spoken to with the C2SP tlog-witness protocol: the
log sends ``old <size>``, a consistency proof from the size the witness last
cosigned, and the signed checkpoint; an old-size conflict (``SizeConflictError``,
a 409 over HTTP) names the witness's size and the log retries once from there.
The embedded witness (in this process, its own key and state) is the same
witness code without HTTP: its refusals are the witness's own errors, and a
remote witness's answers are read into the same errors. Requests to one
witness are serialized, so a witness never sees this log go backwards.

Publication: a new checkpoint is published (served by ``GET /checkpoint`` and
put into receipts) with the embedded witness's cosignature, plus, when the
operator sets a publication quorum of k, only after k external witnesses
cosigned it; otherwise external cosignatures are gathered in the background
and added to the served checkpoint as they arrive. A refresh loop re-submits
the current checkpoint to every witness on an interval, so the served
cosignatures always carry recent timestamps: that is what lets a client bound
staleness by witness time instead of trusting the log's word.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp

from deplog.authority.http.status import http_status
from deplog.authority.options import option
from deplog.authority.storage.store import StoredCheckpoint
from deplog.authority.witness.core import SizeConflictError, Witness, WitnessState
from deplog.authority.witness.server import SIZE_CONTENT_TYPE
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.tlog.checkpoint import Checkpoint
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

__all__ = [
    "MAX_WITNESS_RESPONSE",
    "Cosigner",
    "LocalWitness",
    "ProofSource",
    "QuorumUnavailableError",
    "RemoteWitness",
    "WitnessAnswerError",
    "WitnessTrack",
    "Witnessing",
    "WitnessingConfig",
    "open_embedded_witness",
    "request_body",
]

log = logging.getLogger("deplog.witnessing")

MAX_WITNESS_RESPONSE = 64 * 1024
_SIZE_CONFLICT = http_status(ErrorCode.OLD_SIZE_MISMATCH)

ProofSource = Callable[[int, int], Awaitable[Sequence[bytes]]]
"""Returns the RFC 9162 consistency proof between two sizes of this log."""


class QuorumUnavailableError(DeplogError):
    """Fewer witnesses than the publication quorum cosigned in time."""

    code = ErrorCode.WITNESS_QUORUM_UNAVAILABLE


class WitnessAnswerError(DeplogError):
    """A witness's answer the log cannot use: a refusal, a malformed old size, or no
    valid cosignature by the witness's key. Logged and counted, never served."""

    codes = frozenset(
        {ErrorCode.WITNESS_REFUSED, ErrorCode.BAD_WITNESS_RESPONSE, ErrorCode.NO_COSIGNATURE}
    )


class Cosigner(Protocol):
    """Something that answers tlog-witness add-checkpoint requests."""

    async def add_checkpoint(self, body: bytes) -> bytes:
        """Submit the body; returns the cosignature lines. A witness at another size
        raises SizeConflictError with that size; any other refusal raises too."""
        ...


class RemoteWitness:
    """A witness reached over HTTP at its submission prefix."""

    def __init__(self, url: str, session: aiohttp.ClientSession, timeout: float) -> None:
        self.url = url.rstrip("/") + "/add-checkpoint"
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def add_checkpoint(self, body: bytes) -> bytes:
        """POST the body; 200 is the cosignature, and an old-size conflict (the status
        tlog-witness gives it, with a ``text/x.tlog.size`` body) the witness's size."""
        async with self.session.post(self.url, data=body, timeout=self.timeout) as response:
            data = (await response.content.read(MAX_WITNESS_RESPONSE + 1))[:MAX_WITNESS_RESPONSE]
            status, content_type = response.status, response.content_type
        if status == _SIZE_CONFLICT and content_type == SIZE_CONTENT_TYPE:
            raise SizeConflictError(_parse_size(data))
        if status != 200:
            raise WitnessAnswerError(ErrorCode.WITNESS_REFUSED, f"the witness answered {status}")
        return data


class LocalWitness:
    """The embedded witness: the same tlog-witness code, in process, on its own thread.

    It has its own key and its own state file, and checks consistency like any
    witness, so its cosignatures mean what any cosignature means; it only
    cannot vouch against the operator of the machine it runs on.
    """

    def __init__(self, witness: Witness) -> None:
        self.witness = witness
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="witness")

    async def add_checkpoint(self, body: bytes) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.witness.add_checkpoint, body, int(time.time())
        )

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.witness.state.close()


def open_embedded_witness(
    path: Path, keys: Path, stem: str, name: str, log_key: Verifier
) -> LocalWitness:
    """The embedded witness of a log: key ``<stem>.key`` (created on first use), state at
    ``path``, trusting exactly this log's key."""
    signer, _ = load_or_create_signer(keys, stem, name, SIG_TYPE_COSIGNATURE_V1)
    state = WitnessState(path)
    state.add_log(log_key.vkey(), int(time.time()))
    return LocalWitness(Witness(state, signer))


@dataclass
class WitnessTrack:
    """One witness as the log sees it: how to reach it and what it last cosigned."""

    verifier: Verifier
    client: Cosigner
    external: bool
    size: int | None = None
    cosignature: NoteSignature | None = None
    cosigned_size: int | None = None
    cosigned_at: float | None = None
    failures: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

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
    """The witnesses of one log, and the checkpoint it currently publishes."""

    def __init__(
        self,
        witnesses: Sequence[WitnessTrack],
        proofs: ProofSource,
        *,
        quorum: int,
        timeout: float,
    ) -> None:
        externals = [w for w in witnesses if w.external]
        if not 0 <= quorum <= len(externals):
            raise ValueError("the publication quorum cannot exceed the external witnesses")
        self.witnesses = list(witnesses)
        self.proofs = proofs
        self.quorum = quorum
        self.timeout = timeout
        self.on_change: Callable[[], None] | None = None
        self.session: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task[None]] = set()

    async def cosign(self, witness: WitnessTrack, checkpoint: StoredCheckpoint) -> bool:
        """Ask one witness to cosign; True if it did (its line is kept on the track)."""
        async with witness.lock:
            try:
                return await asyncio.wait_for(self._cosign(witness, checkpoint), self.timeout)
            except (TimeoutError, aiohttp.ClientError, OSError, DeplogError) as err:
                witness.failures += 1
                reason = type(err).__name__
                if isinstance(err, DeplogError):  # messages are value-free: safe to log
                    reason = err.code if str(err) == err.code else f"{err.code} ({err})"
                log.warning("witness %s: %s", witness.name, reason)
                return False

    async def _cosign(self, witness: WitnessTrack, checkpoint: StoredCheckpoint) -> bool:
        for _ in range(2):  # a size conflict teaches us the witness's size; retry once from there
            old = witness.size if witness.size is not None else 0
            if old > checkpoint.size:
                log.error("witness %s is ahead of this log: a fork?", witness.name)
                witness.failures += 1
                return False
            proof = [] if old in (0, checkpoint.size) else await self.proofs(old, checkpoint.size)
            try:
                body = await witness.client.add_checkpoint(
                    request_body(old, proof, checkpoint.note)
                )
            except SizeConflictError as conflict:
                witness.size = conflict.recorded_size
                continue
            witness.cosignature = self._accept(witness, checkpoint, body)
            witness.size = witness.cosigned_size = checkpoint.size
            witness.cosigned_at = time.time()
            if self.on_change is not None:
                self.on_change()
            return True
        return False

    def _accept(
        self, witness: WitnessTrack, checkpoint: StoredCheckpoint, body: bytes
    ) -> NoteSignature:
        """The witness's valid cosignature line on ``checkpoint`` among the response lines."""
        text, _ = parse_note(checkpoint.note)
        _, lines = parse_note(text.encode() + b"\n" + body)
        for line in lines:
            if (line.name, line.key_id) == (witness.name, witness.verifier.key_id):
                verify_cosignature(text, line, witness.verifier)
                return line
        raise WitnessAnswerError(
            ErrorCode.NO_COSIGNATURE, "the witness answered without its cosignature"
        )

    async def cosign_all(
        self, checkpoint: StoredCheckpoint, witnesses: Sequence[WitnessTrack]
    ) -> int:
        """Ask several witnesses in parallel; returns how many cosigned."""
        done = await asyncio.gather(*(self.cosign(w, checkpoint) for w in witnesses))
        return sum(done)

    def published_note(self, checkpoint: StoredCheckpoint) -> bytes:
        """The checkpoint with every cosignature the witnesses gave for this very size."""
        lines = [
            w.cosignature
            for w in self.witnesses
            if w.cosignature is not None and w.cosigned_size == checkpoint.size
        ]
        return add_signature_lines(checkpoint.note, *lines) if lines else checkpoint.note

    async def witness_new(self, checkpoint: StoredCheckpoint) -> bytes:
        """Cosign a new checkpoint as publication requires; returns the note to publish."""
        embedded = [w for w in self.witnesses if not w.external]
        externals = [w for w in self.witnesses if w.external]
        if self.quorum:
            await self.cosign_all(checkpoint, [*embedded, *externals])
            if sum(1 for w in externals if w.cosigned_size == checkpoint.size) < self.quorum:
                raise QuorumUnavailableError()
        else:
            await self.cosign_all(checkpoint, embedded)
            if externals:
                self._spawn(self.cosign_all(checkpoint, externals))
        return self.published_note(checkpoint)

    def _spawn(self, work: Awaitable[int]) -> None:
        async def run() -> None:
            await work

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.session is not None:
            await self.session.close()
        for witness in self.witnesses:
            if isinstance(witness.client, LocalWitness):
                witness.client.close()

    def lag(self, published: Checkpoint | StoredCheckpoint) -> dict[str, float]:
        """Entries each witness is behind the published checkpoint (for /metrics)."""
        return {w.name: float(published.size - (w.cosigned_size or 0)) for w in self.witnesses}

    def cosignature_age(self, now: float) -> dict[str, float]:
        return {
            w.name: (now - w.cosigned_at) if w.cosigned_at is not None else float("inf")
            for w in self.witnesses
        }


def _parse_size(body: bytes) -> int:
    text = body.decode("ascii", "replace")
    if not text.endswith("\n") or not text[:-1].isdigit() or len(text) > 21:
        raise WitnessAnswerError(ErrorCode.BAD_WITNESS_RESPONSE, "malformed size in a 409 answer")
    return int(text[:-1])
