"""The checkpoint's ``deplog-map/v1`` extension line (``docs/fold-spec.md`` section 8).

Rules:

1. **One line, one encoding.** A line is ours when its first word is ``deplog-map/v1``;
   it is then exactly that word, one space and the canonical base64 of 32 bytes, and
   appears at most once (``malformed_map_line``). Other extension lines are ignored.
2. **No line, no map.** Where a map root is needed, a checkpoint without the line is
   ``missing_map_line``: a proof is never checked against a root the log did not sign.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from deplog.client.errors import ErrorCode
from deplog.client.map.errors import MapLineError
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import decode_base64, encode_base64

MAP_LINE_KEYWORD: Final = "deplog-map/v1"


def map_line(root: bytes) -> str:
    """The extension line committing to ``root`` (without its newline)."""
    if len(root) != 32:
        raise ValueError("a map root is 32 bytes")
    return f"{MAP_LINE_KEYWORD} {encode_base64(root)}"


def map_root_of(extensions: Sequence[str]) -> bytes | None:
    """The map root of a checkpoint's extension lines (rule 1), None if no line is ours."""
    found: bytes | None = None
    for line in extensions:
        word, space, rest = line.partition(" ")
        if word != MAP_LINE_KEYWORD:
            continue
        root = decode_base64(rest) if space else None
        if found is not None or root is None or len(root) != 32:
            raise MapLineError(ErrorCode.MALFORMED_MAP_LINE)
        found = root
    return found


def require_map_root(checkpoint: Checkpoint) -> bytes:
    """The checkpoint's map root; ``missing_map_line`` if it commits to none."""
    root = map_root_of(checkpoint.extensions)
    if root is None:
        raise MapLineError(ErrorCode.MISSING_MAP_LINE)
    return root
