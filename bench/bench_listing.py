"""Agent side: checking a guarded tools/list's proofs, against deciding it with a local guard.

Run by hand (not in CI):  python bench/bench_listing.py [--tools 1000] [--rounds 7]

Builds a real log in-process (tests/builders.py LocalLog) with one deprecate notice for
each of ``--tools`` tools, folds it into a follower's verified state as Follower.sync
does, and has a gateway guard list all of them with proofs (``guard_tools_list(...,
with_proof=True)``). Then, in the same run, each round times:

* ``verify_listing``: what an agent without a follower pays (``ProvenClientSession``,
  ``deplog audit tools``): one checkpoint signature, then each tool's proof (record
  decode and fold, path, root);
* the baseline, ``guard_tools_list`` without proofs over the same upstream listing:
  what an agent that runs its own follower pays (``GuardedClientSession``);
* the gateway's own cost of attaching the proofs (``with_proof=True``), for scale: its
  first listing at a checkpoint reads each proof from the follower's map, later ones
  find it in the guard's memo.

Reported: the medians over ``--rounds`` rounds, us a tool, the ratio of the agent's check
to the baseline, and the listing's JSON size a tool with and without proofs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median
from deplog.client.cache.guard import Guard
from deplog.client.cache.listing_proofs import verify_listing
from deplog.client.cache.mcp import IDENTITY_KEY, guard_tools_list
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from tests.builders import ORIGIN, LocalLog, make_envelope


def upstream(tools: int) -> dict[str, Any]:
    """A server's listing of ``tools`` tools, each with a deplog identity."""
    return {
        "tools": [
            {
                "name": f"t{i}",
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
                "_meta": {IDENTITY_KEY: {"tool_id": f"tool:org.acme/t{i}", "version": "1.0.0"}},
            }
            for i in range(tools)
        ]
    }


def timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalLog(Path(tmp))
        envelopes = [
            make_envelope(local.publisher, i + 1, tool=f"tool:org.acme/t{i}")
            for i in range(args.tools)
        ]
        for start in range(0, len(envelopes), 512):
            local.log.sequence(envelopes[start : start + 512])
        state = LocalState(Path(tmp) / "state.db", ORIGIN)
        local.sync(TrustedState(state, local.signer.verifier()))
        guard = Guard(state)
        listed = upstream(args.tools)
        cached_at = datetime.now(UTC) + timedelta(seconds=1)
        started = time.perf_counter()
        proven = guard_tools_list(listed, guard, cached_at=cached_at, with_proof=True)
        first = time.perf_counter() - started
        log_key = local.signer.verifier()

        def verify(note: bytes) -> Checkpoint:
            return open_checkpoint(note, log_key)[0]

        checked = verify_listing(proven, verify, datetime.now(UTC))
        assert len(checked) == args.tools and all(t.status is not None for t in checked)
        agent, local_guard, gateway = [], [], []
        for _ in range(args.rounds):  # interleaved, so drift hits all three alike
            agent.append(timed(lambda: verify_listing(proven, verify, datetime.now(UTC))))
            local_guard.append(timed(lambda: guard_tools_list(listed, guard, cached_at=cached_at)))
            gateway.append(
                timed(lambda: guard_tools_list(listed, guard, cached_at=cached_at, with_proof=True))
            )
        state.close()
    per_tool = 1e6 / args.tools
    a, b, g = median(agent) * per_tool, median(local_guard) * per_tool, median(gateway) * per_tool
    with_proofs = len(json.dumps(proven)) / args.tools
    without = len(json.dumps(guard_tools_list(listed, guard, cached_at=cached_at))) / args.tools
    print(
        f"{args.tools} tools, {args.rounds} rounds (medians, us a tool): agent verify_listing "
        f"{a:.0f}; baseline, a local guard's guard_tools_list {b:.1f} (ratio {a / b:.1f}); the "
        f"gateway attaching proofs {first * per_tool:.0f} at its first listing at a "
        f"checkpoint, {g:.0f} at later ones; listing {with_proofs:.0f} B a tool with proofs, "
        f"{without:.0f} B without"
    )


if __name__ == "__main__":
    main()
