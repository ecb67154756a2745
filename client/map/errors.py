"""The tool-status map's errors: one class per meaning, each with its stable codes.

``MapStorageError`` is the one only altered or damaged storage causes, never a request:
a writer rolls its batch back, a reader refuses to answer, and nothing is proven from
such a row.
"""

from __future__ import annotations

from deplog.client.errors import DeplogError, ErrorCode, FormatError, VerificationError


class MapFormatError(FormatError):
    """A map proof or status record that is not the format's one encoding."""

    codes = frozenset({ErrorCode.MALFORMED_MAP_PROOF, ErrorCode.MALFORMED_MAP_RECORD})
    code = ErrorCode.MALFORMED_MAP_PROOF


class MapLineError(FormatError):
    """A checkpoint whose ``deplog-map/v1`` line is malformed, repeated, or missing."""

    codes = frozenset({ErrorCode.MALFORMED_MAP_LINE, ErrorCode.MISSING_MAP_LINE})
    code = ErrorCode.MALFORMED_MAP_LINE


class MapProofError(VerificationError):
    """A well-formed map proof that does not show its claim under the given root."""

    codes = frozenset({ErrorCode.BAD_MAP_PROOF, ErrorCode.MAP_CHECKPOINT_MISMATCH})
    code = ErrorCode.BAD_MAP_PROOF


class MapStorageError(DeplogError):
    """A row of the map's own storage that is missing or does not decode; never its bytes."""

    code = ErrorCode.MAP_ROW_UNREADABLE
