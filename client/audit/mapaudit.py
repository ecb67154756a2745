"""``deplog audit map``: every archived checkpoint's map root against a fold of the entries.

Rules:

1. Each checkpoint is verified first (the log's signature, its origin).
2. The entries are judged once, in log order, by the one validator and folded by the one
   map function (``fold_notices``); at each checkpoint's size the entries' tree root
   must be its root (``entries_root_mismatch``) and the map root its ``deplog-map/v1``
   root, else ``bad_map_root`` names the first false size.
3. A checkpoint without a line is counted, not checked; a malformed one is refused.
4. Entries that fail validation do not stop the audit (``deplog audit replay`` reports them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from deplog.client.audit.offline import audit_checkpoint
from deplog.client.errors import ErrorCode, VerificationError
from deplog.client.map.line import map_root_of
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.notice import Notice
from deplog.client.model.rules import LogReplay, fold_item
from deplog.client.model.status import InvalidMark
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.proofs import TreeFrontier, TreeMismatchError, leaf_hash

_FOLD_CHUNK = 4096
"""Entries folded per batch between two checkpoints (bounds memory, not the result)."""


class MapRootError(VerificationError):
    """A signed checkpoint whose map root is not the fold of its entries, the first's ``size``."""

    code = ErrorCode.BAD_MAP_ROOT

    def __init__(self, size: int) -> None:
        super().__init__(message=f"first bad size {size}")
        self.size = size


@dataclass(frozen=True)
class MapAuditReport:
    """The sizes whose map root matched, and those of checkpoints without a line."""

    entries: int
    matched: tuple[int, ...]
    without_line: tuple[int, ...]


def audit_map(
    leaves: Iterable[bytes],
    notes: Iterable[bytes],
    log_key: Verifier,
    origin: str | None = None,
) -> MapAuditReport:
    """Check every checkpoint of ``notes`` against the map folded from ``leaves`` (rule 2)."""
    checkpoints = sorted(
        (audit_checkpoint(note, log_key, origin) for note in notes), key=lambda c: c.size
    )
    vmap, frontier, history = VerifiableMap(), TreeFrontier(), LogReplay(log_key)
    matched: list[int] = []
    without_line: list[int] = []
    entries = iter(leaves)
    for checkpoint in checkpoints:
        while frontier.size < checkpoint.size:
            start = frontier.size
            want = min(_FOLD_CHUNK, checkpoint.size - start)
            chunk = list(islice(entries, want))
            if len(chunk) < want:
                raise TreeMismatchError(ErrorCode.MISSING_ENTRIES, start + len(chunk))
            items: list[tuple[int, Notice | InvalidMark]] = []
            for index, leaf in enumerate(chunk, start):
                frontier.append(leaf_hash(leaf))
                if (item := fold_item(history.judge(index, leaf))) is not None:
                    items.append((index, item))
            vmap.fold(items)
        _check(checkpoint, frontier, vmap, matched, without_line)
    return MapAuditReport(frontier.size, tuple(matched), tuple(without_line))


def _check(
    checkpoint: Checkpoint,
    frontier: TreeFrontier,
    vmap: VerifiableMap,
    matched: list[int],
    without_line: list[int],
) -> None:
    if frontier.root() != checkpoint.root_hash:
        raise TreeMismatchError(ErrorCode.ENTRIES_ROOT_MISMATCH, None)
    committed = map_root_of(checkpoint.extensions)
    if committed is None:
        without_line.append(checkpoint.size)
    elif committed != vmap.root():
        raise MapRootError(checkpoint.size)
    else:
        matched.append(checkpoint.size)
