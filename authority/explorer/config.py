"""Where the explorer is served and what it tells clients to require.

Rules:

1. The prefix is empty (the explorer at ``/``) or ``/`` and path segments of
   ``[a-z0-9-]``, without a trailing slash, and never an API path (refused).
2. The policy quorum is ``authority policy``'s default: one witness, the embedded one
   included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from deplog.authority.options import option

RESERVED_PREFIXES: Final = ("/v1", "/checkpoint", "/tile", "/healthz", "/metrics", "/admin")
_PREFIX = re.compile(r"(/[a-z0-9-]+)*", re.ASCII)


def parse_prefix(text: str) -> str:
    """A mount prefix as rule 1 allows it; ``ValueError`` otherwise."""
    prefix = text.rstrip("/")
    if _PREFIX.fullmatch(prefix) is None:
        raise ValueError("the explorer prefix is /segment[/segment...] of [a-z0-9-]")
    head = prefix.split("/")[1] if prefix else ""
    if head and "/" + head in RESERVED_PREFIXES:
        raise ValueError("the explorer prefix cannot be an API path")
    return prefix


@dataclass(frozen=True)
class ExplorerConfig:
    """The explorer's mount point and whether it is served at all."""

    enabled: bool = option(True, "serve the explorer web pages", flag="--explorer")
    prefix: str = option(
        "", "URL prefix of the explorer (empty: at /)", flag="--explorer-prefix", parse=parse_prefix
    )
    policy_quorum: int = option(
        1, "witnesses the explorer's policy requires", flag="--explorer-policy-quorum"
    )

    def __post_init__(self) -> None:
        parse_prefix(self.prefix)
