"""deplog's client library: wire formats, every verifier, the follower and the cache guard.

The names below are the public API (what the README's cache example uses), loaded on
first use, so importing one sub-package (``deplog.client.tlog`` in a witness) does not
import the follower. Everything else is reached through its sub-package (the layout is
``docs/architecture.md``'s). This package never imports ``deplog.authority``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deplog.client.cache.guard import Decision, Guard, Verdict
    from deplog.client.cache.guarded_cache import GuardedCache
    from deplog.client.cache.listing_proofs import verify_listing
    from deplog.client.errors import DeplogError
    from deplog.client.follow.follower import Follower, SyncFollower
    from deplog.client.map.proof import verify_tool_status
    from deplog.client.tlog.note import Verifier
    from deplog.client.tlog.policy import Policy
    from deplog.client.tlog.receipt import verify_receipt

__all__ = [
    "Decision",
    "DeplogError",
    "Follower",
    "Guard",
    "GuardedCache",
    "Policy",
    "SyncFollower",
    "Verdict",
    "Verifier",
    "verify_listing",
    "verify_receipt",
    "verify_tool_status",
]

_HOME = {
    "Decision": "deplog.client.cache.guard",
    "DeplogError": "deplog.client.errors",
    "Follower": "deplog.client.follow.follower",
    "Guard": "deplog.client.cache.guard",
    "GuardedCache": "deplog.client.cache.guarded_cache",
    "Policy": "deplog.client.tlog.policy",
    "SyncFollower": "deplog.client.follow.follower",
    "Verdict": "deplog.client.cache.guard",
    "Verifier": "deplog.client.tlog.note",
    "verify_listing": "deplog.client.cache.listing_proofs",
    "verify_receipt": "deplog.client.tlog.receipt",
    "verify_tool_status": "deplog.client.map.proof",
}


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
