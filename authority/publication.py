"""Publication: the checkpoint the authority serves, and how a checkpoint comes to be served.

The log signs a checkpoint as soon as its batch commits (``log.py``); it is *published*
(served, pushed, put into receipts and the tiles directory's ``checkpoint`` file) only once
cosigned as ``witnessing.py`` requires. ``Publication`` owns the sequencer, whose
``publish`` hook is :meth:`Publication.publish`, and the served checkpoint; the mechanism is
docs/architecture.md, "The authority's publication".

Rules, cited by name:

* **Serve forward.** The served checkpoint changes only in ``_serve``, under the
  publication lock, and never to a smaller size.
* **One rendering.** The served note is rendered only by ``_render``: the served
  checkpoint with the cosignature lines kept for that very size. ``GET /checkpoint``, every
  push (``on_note``) and the tiles directory's ``checkpoint`` file carry it.
* **Publish.** ``publish`` has a larger checkpoint witnessed as required, serves it, and
  returns once the tiles directory's ``checkpoint`` file holds it. Without the embedded
  cosignature the append fails with 503 ``embedded_witness_unavailable``, without the
  quorum with ``witness_quorum_unavailable``: the notice stays durable, and a resubmission
  returns its receipt once published. Failures are counted by reason
  (``deplog_publication_failures_total``); a run of them is logged once.
* **What publish returns.** The checkpoint actually served (``Published``), at least the
  size asked for; receipts prove into it (``prove``: from the database).
* **Entries before publication.** ``entries_size``, the largest checkpoint sent out for
  witnessing, bounds ``GET /v1/entries``: a map-verifying witness folds a checkpoint's
  entries before it cosigns. They are committed and signed; only their cosignatures are
  withheld. Proofs and the map stay at the served checkpoint.
* **Start.** Until a publication succeeds after start, the served checkpoint is the one
  last saved under a quorum, or else the one the embedded witness last cosigned, with its
  line (``witnessing.py`` rule 7): never one that was not published.
* **Background.** Re-cosigning, external rounds and learning run under the server's one
  ``Supervisor``; each of ``stop_steps`` runs even when an earlier one failed.
* **Rounds.** With a cluster (``storage/cluster.py``) publishing is a round; a row learned
  from another process (``_learn``) is served only once its signatures verify, else
  counted (``deplog_published_rejected_total``) and never served.
* **Health.** ``health`` names what is degraded, as stable codes: the storage while
  appends fail, and with a cluster while the published row has not been read for
  ``CONTACT_POLLS`` poll intervals (cut off, the process says so before anyone appends);
  a failed publication's code; ``embedded_witness_unavailable``; ``cosignatures_stale``
  past ``STALE_REFRESHES`` refresh intervals. A storage or embedded witness reason clears
  at the next success, or with a cluster once the database answers and the embedded
  witnesses cosign anew (``_reached_again``: a balancer sends no append to a process it
  took out). ``abilities`` says what the process still does.
* **Map proofs at the served checkpoint.** A map proof is made at the served checkpoint
  only: while the map is at a batch not yet served it waits at most ``map_proof_wait``
  seconds (``deplog_map_proofs_waiting``), then fails with 503 ``map_not_published``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from deplog.authority import collectors
from deplog.authority.log import Log
from deplog.authority.sequencer import Published, Sequencer, SequencerLimits
from deplog.authority.storage import store
from deplog.authority.storage.errors import IntegrityError, StorageError
from deplog.authority.storage.reader import LogReader, ReaderPool
from deplog.authority.supervise import Supervisor
from deplog.authority.tiles import TilesDirectory
from deplog.authority.witnessing import (
    EmbeddedWitnessUnavailableError,
    QuorumUnavailableError,
    Witnessing,
)
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.layer import ViewMoved
from deplog.client.map.proof import MapProof
from deplog.client.plumbing.storage_faults import StorageFault
from deplog.client.plumbing.waiting import wait_until
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import parse_note

if TYPE_CHECKING:  # psycopg is the optional postgres extra
    from deplog.authority.storage.cluster import Cluster

log = logging.getLogger("deplog.authority")

STALE_REFRESHES = 3
"""Refresh intervals after which the served embedded cosignature counts as stale."""
MAP_PROOF_WAIT = 5.0
"""Seconds a map proof waits for its batch's publication, by default (``--map-proof-wait``)."""
_CLEARED_BY_A_WRITE = frozenset({StorageError.code, EmbeddedWitnessUnavailableError.code})
"""Publication failures a successful write of the embedded witness clears (*Health*)."""
CONTACT_POLLS = 3
"""Poll intervals without a read of the published row after which the database counts as
unreachable (*Health*)."""
_PUBLICATION_FAILURES = (EmbeddedWitnessUnavailableError, QuorumUnavailableError, StorageError)
_PUBLICATION_CODES = frozenset(
    error.code for error in (EmbeddedWitnessUnavailableError, QuorumUnavailableError)
)


class MapNotPublishedError(DeplogError):
    """The map is at a batch whose checkpoint is not served yet: retry."""

    code = ErrorCode.MAP_NOT_PUBLISHED
    retry_after = 1


class Publication:
    """The sequencer, the served checkpoint and note (changed on the event loop only)."""

    def __init__(
        self,
        log: Log,
        readers: ReaderPool,
        supervisor: Supervisor,
        *,
        limits: SequencerLimits | None = None,
        witnessing: Callable[[Publication], Witnessing] | None = None,
        tiles: TilesDirectory | None = None,
        cluster: Cluster | None = None,
        refresh_interval: float = 10.0,
        map_proof_wait: float = MAP_PROOF_WAIT,
        on_note: Callable[[bytes], None] = lambda _: None,
    ) -> None:
        self.readers = readers
        self.supervisor = supervisor
        self.cluster = cluster
        self.refresh_interval = refresh_interval
        self.map_proof_wait = map_proof_wait
        self.on_note = on_note
        """Called with every note rendered (*One rendering*): the push stream's feed."""
        self.sequencer = Sequencer(log, limits, publish=self.publish, tiles=tiles, prove=self.prove)
        self._checkpoint_file: asyncio.Future[None] | None = None
        self._publishing = asyncio.Lock()
        published = log.published
        assert published is not None  # Log always publishes on open
        self.checkpoint = published
        self.entries_size = published.size
        self.note = published.note
        self.published_at = time.time()
        self._next_serve = asyncio.Event()
        self._learned_note: bytes | None = None
        self.map_proofs_waiting = 0
        self.failures: dict[str, int] = {}
        """Failed publications by reason (``deplog_publication_failures_total``)."""
        self._failing: str | None = None
        self.published_rejected = 0
        self.poll_failures = 0
        self.contact_at = time.monotonic()
        """When the published row was last read (*Health*)."""
        self._rejected_size: int | None = None
        self._learn_now = asyncio.Event()
        self._signed_elsewhere = asyncio.Event()
        self.witnessing = witnessing(self) if witnessing is not None else None
        if self.witnessing is not None:
            self.witnessing.on_change = self._cosigned

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Publication's metrics, the sequencer's and the witnessing's."""
        collectors.gauge(
            registry,
            "deplog_entries",
            "Leaves in the latest published checkpoint.",
            lambda: float(self.checkpoint.size),
        )
        collectors.gauge(
            registry,
            "deplog_checkpoint_age_seconds",
            "Seconds since the latest checkpoint was published.",
            lambda: time.time() - self.published_at,
        )
        collectors.gauge(
            registry,
            "deplog_map_proofs_waiting",
            "Map proof requests waiting for the publication of the batch the map is at.",
            lambda: float(self.map_proofs_waiting),
        )
        collectors.labeled_counter(
            registry,
            "deplog_publication_failures_total",
            "Checkpoints not published (appends answered 503), by reason.",
            "reason",
            lambda: self.failures,
        )
        collectors.counter(
            registry,
            "deplog_published_rejected_total",
            "Published rows from the shared database not served: they did not verify.",
            lambda: float(self.published_rejected),
        )
        collectors.counter(
            registry,
            "deplog_published_poll_failures_total",
            "Polls of the shared database's published checkpoint that failed.",
            lambda: float(self.poll_failures),
        )
        self.sequencer.register_metrics(registry)
        if self.witnessing is not None:
            self.witnessing.register_metrics(registry, lambda: self.checkpoint)

    async def start(self) -> None:
        """Publish the latest checkpoint (*Start*), start the sequencer, then the loops."""
        if self.cluster is not None:
            await self.cluster.prepare()
        try:
            await self.publish(self.checkpoint, force=True)
        except _PUBLICATION_FAILURES:
            # Serve what last met the quorum (*Start*); the refresh loop keeps trying.
            saved = await self.sequencer.call(self.sequencer.log.last_published)
            if saved is None and self.witnessing is not None:
                origin = self.checkpoint.note.split(b"\n", 1)[0].decode()
                with contextlib.suppress(DeplogError):  # its record unreadable too
                    saved = await self.witnessing.last_embedded(
                        origin, lambda size: self.readers.read(lambda r: r.checkpoint_at(size))
                    )
            async with self._publishing:
                if saved is not None and self.witnessing is not None:
                    self.witnessing.remember(*saved)
                    self.checkpoint = saved[0]
                self._render()
        await self.sequencer.start()
        if self.cluster is not None:
            self.supervisor.spawn("published_listener", self._listen_published)
            self.supervisor.spawn("published_poll", self._poll_published)
        if self.witnessing is not None and self.refresh_interval > 0:
            self.supervisor.spawn("cosignature_refresh", self._refresh_cosignatures)

    def stop_steps(self) -> list[tuple[str, Callable[[], Any]]]:
        """The shutdown steps of this part, in order (*Background*)."""
        # The sequencer drains its queue: publishing still needs the witnesses.
        steps: list[tuple[str, Callable[[], Any]]] = [("sequencer", self.sequencer.stop)]
        if self.witnessing is not None:
            steps.append(("witnesses", self.witnessing.stop))
        if self.cluster is not None:
            steps.append(("cluster connections", self.cluster.close))
        return steps

    async def publish(self, checkpoint: store.StoredCheckpoint, force: bool = False) -> Published:
        """Witness a larger checkpoint and serve it (*Publish*, *What publish returns*)."""
        async with self._publishing:
            try:
                if checkpoint.size > self.checkpoint.size or force:
                    if self.cluster is None:
                        await self._witness(checkpoint)
                        self._serve(checkpoint)
                    else:
                        await self._publish_round(checkpoint, force)
                    if self._checkpoint_file is not None:
                        await asyncio.shield(self._checkpoint_file)
                if self.checkpoint.size < checkpoint.size:
                    raise StorageError()  # a round that could not read what it published
                if self.witnessing is not None and not self.witnessing.cosigned_by_embedded(
                    self.checkpoint.size
                ):
                    raise EmbeddedWitnessUnavailableError()
            except _PUBLICATION_FAILURES as err:
                self._failed(err.code, checkpoint.size)
                raise
            if self._failing is not None:
                log.info("publication resumed at size %d", self.checkpoint.size)
                self._failing = None
            return Published(self.checkpoint, self.note)

    async def _publish_round(self, checkpoint: store.StoredCheckpoint, force: bool) -> None:
        """One round (*Rounds*; ``force``: even if published); the caller holds the lock."""
        assert self.cluster is not None
        try:
            witnesses = [] if self.witnessing is None else self.witnessing.round_witnesses
            async with self.cluster.round(witnesses) as round_:
                row = round_.published
                if not force and row is not None and row[0] >= checkpoint.size:
                    await self._learn(*row)
                    if self.checkpoint.size >= checkpoint.size:
                        return
                latest = round_.latest
                if latest is None or latest.size < checkpoint.size:
                    raise StorageError()
                self._verified(latest)
                note = latest.note
                if self.witnessing is not None:
                    await self.witnessing.witness_new(latest, round_.witnesses)
                    note = self.witnessing.note_for(latest)
                round_.save(latest.size, note)
        except self.cluster.errors as err:
            log.warning("publication round failed: %s", type(err).__name__)
            raise StorageError() from None
        self._serve(latest)

    async def _latest_signed(self) -> store.StoredCheckpoint | None:
        """The database's latest checkpoint, once its log signature verified."""
        latest = await self.readers.read(lambda r: r.latest_checkpoint())
        if latest is not None:
            self._verified(latest)
        return latest

    def _verified(self, stored: store.StoredCheckpoint) -> None:
        """Raise ``IntegrityError`` unless ``stored`` is signed by this log's key as stored."""
        try:
            checkpoint, _ = open_checkpoint(stored.note, self.sequencer.log.verifier)
        except DeplogError:
            raise IntegrityError(
                ErrorCode.CHECKPOINT_INVALID, "a stored checkpoint is not signed by the log key"
            ) from None
        if (checkpoint.size, checkpoint.root_hash) != (stored.size, stored.root):
            raise IntegrityError(ErrorCode.CHECKPOINT_INVALID, "a checkpoint row disagrees")

    async def _learn(self, size: int, note: bytes) -> None:
        """Serve a ``published`` row not behind ours if it verifies; the caller holds the lock."""
        if size < self.checkpoint.size:
            return
        stored = await self.readers.read(lambda r: r.checkpoint_at(size))
        try:
            if stored is None:
                raise IntegrityError(ErrorCode.CHECKPOINT_INVALID, "no checkpoint row")
            self._verified(stored)
            if parse_note(note)[0] != parse_note(stored.note)[0]:
                raise IntegrityError(ErrorCode.CHECKPOINT_INVALID, "another checkpoint text")
            if self.witnessing is not None:
                self.witnessing.remember(stored, note)
        except DeplogError as err:
            self.published_rejected += 1
            if self._rejected_size != size:
                log.error("published checkpoint %d not served: %s (%s)", size, err.code, err)
                self._rejected_size = size
            return
        if size > self.checkpoint.size:
            self._serve(stored)
        else:
            self._render()  # the same size with fresher lines

    async def _listen_published(self) -> None:
        assert self.cluster is not None
        await self.cluster.listen(self._learn_now.set, self._signed_elsewhere_now)

    def _signed_elsewhere_now(self) -> None:
        self._signed_elsewhere.set()
        self._learn_now.set()

    async def _poll_published(self) -> None:
        """Supervised: learn the published row when notified and every poll interval."""
        assert self.cluster is not None
        failing = False
        recovered = 0.0
        failures: tuple[type[Exception], ...] = (*self.cluster.errors, StorageError)
        while True:
            await wait_until(self._learn_now, self.cluster.poll_interval)
            self._learn_now.clear()
            try:
                await self._poll_once()
                self.contact_at = time.monotonic()
                if self._signed_elsewhere.is_set():
                    self._signed_elsewhere.clear()
                    await self._publish_signed_elsewhere()
            except failures as err:
                self.poll_failures += 1
                if not failing:
                    log.warning("reading the published checkpoint failed: %s", type(err).__name__)
                    failing = True
                continue
            if failing:
                log.info("reading the published checkpoint works again")
                failing = False
            if self._writes_failed() and time.monotonic() - recovered > self.cluster.poll_interval:
                recovered = time.monotonic()
                await self._reached_again()

    def _writes_failed(self) -> bool:
        """Whether a reason ``_reached_again`` can clear stands."""
        return (
            self.sequencer.failing == StorageError.code
            or self._failing in _CLEARED_BY_A_WRITE
            or (self.witnessing is not None and self.witnessing.embedded_failing)
        )

    async def _reached_again(self) -> None:
        """The database answers (*Health*), and an earlier write failed: out of a balancer's
        rotation no append comes to clear the reason, so the embedded witnesses cosign the
        served checkpoint anew, a write on the appends' path (at most once a poll interval)."""
        if self.witnessing is not None:
            async with self._publishing:
                await self.witnessing.cosign_all(self.checkpoint, self.witnessing.embedded)
            if self.witnessing.embedded_failing:
                return
        self.sequencer.reached_again()
        cosigned = self.witnessing is None or self.witnessing.cosigned_by_embedded(
            self.checkpoint.size
        )
        if cosigned and self._failing in _CLEARED_BY_A_WRITE:
            log.info("publication resumed at size %d", self.checkpoint.size)
            self._failing = None

    async def _publish_signed_elsewhere(self) -> None:
        """Publish a checkpoint an admin command signed now, not at the next refresh."""
        latest = await self._latest_signed()
        if latest is not None and latest.size > self.checkpoint.size:
            with contextlib.suppress(*_PUBLICATION_FAILURES):  # withheld: the refresh retries
                await self.publish(latest)

    async def _poll_once(self) -> None:
        assert self.cluster is not None
        row = await self.cluster.published()
        if row is None or row[0] < self.checkpoint.size:
            return
        if row[0] == self.checkpoint.size and row[1] == self._learned_note:
            return
        async with self._publishing:
            await self._learn(*row)
        self._learned_note = row[1]

    async def _share_lines(self) -> None:
        """Save the served checkpoint's fresh lines as the published row (*Rounds*)."""
        assert self.cluster is not None and self.witnessing is not None
        async with self._publishing:
            try:
                async with self.cluster.round() as round_:
                    row = round_.published
                    if row is not None and row[0] > self.checkpoint.size:
                        await self._learn(*row)
                        return
                    if row is not None and row[0] == self.checkpoint.size:
                        with contextlib.suppress(DeplogError):
                            self.witnessing.remember(self.checkpoint, row[1])
                    if self.witnessing.cosigned_by_embedded(self.checkpoint.size):
                        round_.save(self.checkpoint.size, self.witnessing.note_for(self.checkpoint))
            except self.cluster.errors as err:
                log.warning("sharing cosignatures failed: %s", type(err).__name__)
                return
            self._render()

    async def prove(self, indexes: Sequence[int], size: int) -> list[tuple[bytes, ...]]:
        """Inclusion proofs at ``size`` from the database (*What publish returns*)."""
        proofs = await self.readers.read(lambda r: [r.inclusion(i, size).hashes for i in indexes])
        return [tuple(p) for p in proofs]

    async def consistency_proof(self, old: int, new: int) -> Sequence[bytes]:
        """The consistency proof between two sizes, for the witnesses' requests."""
        return (await self.readers.read(lambda r: r.consistency(old, new))).hashes

    async def _witness(self, checkpoint: store.StoredCheckpoint) -> None:
        if self.witnessing is None:
            return
        # Its entries are served from now on (*Entries before publication*).
        self.entries_size = max(self.entries_size, checkpoint.size)
        await self.witnessing.witness_new(checkpoint)
        if self.witnessing.quorum:
            note = self.witnessing.note_for(checkpoint)
            await self.sequencer.call(self.sequencer.log.save_published, checkpoint, note)

    def _failed(self, code: str, size: int) -> None:
        self.failures[code] = self.failures.get(code, 0) + 1
        if self._failing != code:
            log.warning("checkpoint %d not published: %s; appends get 503 until it is", size, code)
            self._failing = code

    def _serve(self, checkpoint: store.StoredCheckpoint) -> None:
        """Make ``checkpoint`` the served one (*Serve forward*); the caller holds the lock."""
        assert self._publishing.locked() and checkpoint.size >= self.checkpoint.size
        self.checkpoint, self.published_at = checkpoint, time.time()
        if self.witnessing is not None:
            self.witnessing.forget_below(checkpoint.size)
        self._render()
        self._next_serve.set()
        self._next_serve = asyncio.Event()

    def _render(self) -> None:
        """Render the served note and hand it on (*One rendering*)."""
        if self.witnessing is not None:
            self.note = self.witnessing.note_for(self.checkpoint)
        else:
            self.note = self.checkpoint.note
        self.on_note(self.note)
        self._queue_checkpoint_file()

    def _queue_checkpoint_file(self) -> None:
        """Queue the served note for the tiles directory's ``checkpoint`` file (*Publish*)."""
        tiles = self.sequencer.tiles
        if tiles is None:
            return
        try:
            written = self.sequencer.schedule(
                _write_checkpoint_file, tiles, self.checkpoint.size, self.note
            )
        except RuntimeError:  # the writer thread has stopped: we are shutting down
            return
        written.add_done_callback(_consume_failure)
        self._checkpoint_file = written

    def _cosigned(self, size: int) -> None:
        """A witness gave a line for ``size``: the served note changes only if it is its size."""
        if size == self.checkpoint.size:
            self._render()

    async def _refresh_cosignatures(self) -> None:
        """Re-submit the served checkpoint to every witness; publish a withheld one."""
        assert self.witnessing is not None
        while True:
            await asyncio.sleep(self.refresh_interval)
            if self.cluster is None:
                latest = self.sequencer.log.published
            else:  # the database's latest, whichever process signed it
                latest = await self._latest_signed()
            if latest is not None and latest.size > self.checkpoint.size:
                with contextlib.suppress(*_PUBLICATION_FAILURES):  # withheld: try again later
                    await self.publish(latest)
                continue
            await self.witnessing.cosign_all(self.checkpoint, self.witnessing.witnesses)
            if self.cluster is not None:
                await self._share_lines()

    def health(self, now: float) -> list[str]:
        """Why publication is degraded, as stable codes (*Health*); empty when it is ok."""
        reasons = []
        failing = self.sequencer.failing
        if failing is not None and failing not in _PUBLICATION_CODES:
            reasons.append(failing)  # the storage: clears when a write succeeds
        if self._failing is not None:
            reasons.append(self._failing)  # clears when a publication succeeds
        if self.cluster is not None:
            silent = time.monotonic() - self.contact_at
            if silent > CONTACT_POLLS * self.cluster.poll_interval:
                reasons.append(ErrorCode.STORAGE_UNAVAILABLE)  # clears at the next read
        if self.witnessing is not None:
            if self.witnessing.embedded_failing:
                reasons.append(EmbeddedWitnessUnavailableError.code)
            age = self.witnessing.embedded_age(self.checkpoint.size, now)
            bound = STALE_REFRESHES * self.refresh_interval
            if age is not None and bound > 0 and age > bound:
                reasons.append("cosignatures_stale")
        return sorted(set(reasons))

    @staticmethod
    def abilities(reasons: Sequence[str]) -> dict[str, bool]:
        """What a process degraded for ``reasons`` still does (*Health*): appends need all
        but fresh cosignatures, reads need the database; the served checkpoint, from
        memory, is always served."""
        return {
            "append": set(reasons) <= {"cosignatures_stale"},
            "read": ErrorCode.STORAGE_UNAVAILABLE not in reasons,
            "checkpoint": True,
        }

    async def map_proof(self, tool_id: str) -> tuple[bytes, MapProof]:
        """The served note and ``tool_id``'s proof (*Map proofs at the served checkpoint*)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.map_proof_wait
        while True:
            served = self._next_serve
            stored = self.sequencer.log.map
            view = stored.view  # the rows the writer holds, as of its last commit
            try:
                size, proof = await self.readers.read(
                    functools.partial(
                        LogReader.map_proof,
                        tool_id=tool_id,
                        view=view,
                        moved=lambda: stored.slices != view.slices,  # noqa: B023
                    )
                )
            except ViewMoved:  # the writer wrote a slice meanwhile: read again
                size = -1
            if size == self.checkpoint.size:
                return self.note, proof
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise MapNotPublishedError()
            if size > self.checkpoint.size:
                self.map_proofs_waiting += 1
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(served.wait(), remaining)
                finally:
                    self.map_proofs_waiting -= 1


def _write_checkpoint_file(tiles: TilesDirectory, size: int, note: bytes) -> None:
    """Writer thread: a checkpoint file that cannot be written fails the publication."""
    try:
        tiles.publish_checkpoint(size, note)
    except (OSError, StorageFault) as err:
        log.error("writing the tiles directory's checkpoint failed: %s", err)
        raise StorageError.of(err) from None


def _consume_failure(future: asyncio.Future[None]) -> None:
    """Failures are logged where they happen; a write nobody awaits must not warn again."""
    if not future.cancelled():
        future.exception()
