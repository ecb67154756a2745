"""Client: Guard.check latency per call, against a dict lookup + datetime comparison.

Run by hand (not in CI):  python bench/bench_guard.py [--tools 300] [--calls 100000]

Builds a real log in-process (tests/builders.py LocalLog) with one deprecate notice
for each of ``--tools`` tools, folds it into a follower's verified state the
way Follower.sync does, and times ``Guard.check`` over every tool at two
versions (one deprecated, one active) after a warm-up that fills the status
cache: the mean over ``--calls`` calls (one perf_counter_ns pair around the
whole loop) and the per-call p50/p99 (a perf_counter_ns pair around each
call, which adds the timer's own cost). The baseline, in the same run, is the
least a guard could do: a dict lookup of (tool, version) plus reading the
clock and comparing with a datetime. Target: < 10 microseconds per check.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, pct
from deplog.client.cache.guard import Guard, Verdict
from deplog.client.follow.state import LocalState
from deplog.client.follow.trust import TrustedState
from tests.builders import ORIGIN, LocalLog


def build_state(tmp: Path, tools: int) -> tuple[LocalState, list[str]]:
    local = LocalLog(tmp)
    names = [f"tool:org.acme/t{i}" for i in range(tools)]
    for name in names:
        local.publish(tool=name, affected={"versions": ["1.0.0"]})
    local.log.publish()
    state = LocalState(tmp / "state.db", ORIGIN)
    local.sync(TrustedState(state, local.signer.verifier()))
    return state, names


def per_call_ns(call: object, calls: list[tuple[str, str]]) -> list[int]:
    out = []
    clock = time.perf_counter_ns
    for tool, version in calls:
        started = clock()
        call(tool, version)  # type: ignore[operator]
        out.append(clock() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=300)
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state, names = build_state(Path(tmp), args.tools)
        guard = Guard(state)
        cached_at = datetime.now(UTC)
        pairs = [(name, version) for name in names for version in ("1.0.0", "2.0.0")]
        calls = [pairs[k % len(pairs)] for k in range(args.calls)]
        assert guard.check(names[0], "1.0.0", cached_at=cached_at).verdict == Verdict.WARN
        assert guard.check(names[0], "2.0.0", cached_at=cached_at).verdict == Verdict.SERVE

        def check(tool: str, version: str) -> object:
            return guard.check(tool, version, cached_at=cached_at)

        sunset = datetime.now(UTC) + timedelta(days=365)
        table = {pair: sunset for pair in pairs}

        def plain(tool: str, version: str) -> object:
            return table[tool, version] < datetime.now(UTC)

        results = {}
        for name, fn in (("Guard.check", check), ("dict + datetime", plain)):
            for tool, version in pairs * 20:  # warm-up: every status cached
                fn(tool, version)
            started = time.perf_counter_ns()
            for tool, version in calls:
                fn(tool, version)
            mean = (time.perf_counter_ns() - started) / len(calls)
            each = per_call_ns(fn, calls)
            results[name] = mean
            print(
                f"{name:16} mean {mean / 1000:7.2f} us/call; per call p50 "
                f"{median(each) / 1000:6.2f} us p99 {pct(each, 99) / 1000:6.2f} us "
                f"({len(calls)} calls, {args.tools} tools)"
            )
        ratio = results["Guard.check"] / results["dict + datetime"]
        print(f"Guard.check / baseline = {ratio:.1f}x (target: < 10 us per check)")
        state.close()


if __name__ == "__main__":
    main()
