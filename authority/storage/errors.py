"""What a failure of the log's storage means, whichever layer finds it (both are 503).

* :class:`StorageError`: the database failed; nothing was changed, and a retry may succeed;
  ``storage_full`` when the evidence shows a full disk (``storage_faults.disk_full``).
* :class:`IntegrityError`: stored data fails its own hash check or no longer matches what
  the authority signed; it is never served, and the authority does not start on it.
"""

from __future__ import annotations

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.plumbing.storage_faults import disk_full


class StorageError(DeplogError):
    """The database failed (disk full, read-only, I/O error): nothing was changed."""

    codes = frozenset({ErrorCode.STORAGE_UNAVAILABLE, ErrorCode.STORAGE_FULL})
    code = ErrorCode.STORAGE_UNAVAILABLE

    @classmethod
    def of(cls, err: BaseException) -> StorageError:
        """``storage_full`` when ``err`` shows a full disk (by evidence), else unavailable."""
        return cls(ErrorCode.STORAGE_FULL if disk_full(err) else ErrorCode.STORAGE_UNAVAILABLE)


class IntegrityError(DeplogError):
    """Stored data that fails its own check or what the authority signed: never served."""

    codes = frozenset(
        {
            ErrorCode.STORAGE_CORRUPT,
            ErrorCode.STORED_ROOT_MISMATCH,
            ErrorCode.CHECKPOINT_INVALID,
            ErrorCode.TREE_TRUNCATED,
            ErrorCode.REGISTRY_MISMATCH,
        }
    )
    code = ErrorCode.STORAGE_CORRUPT
