"""Real I/O faults injected into a running server: ``strace`` attached for a while.

``strace -e inject`` makes chosen system calls on chosen files fail with a
chosen errno inside the real process, as a failing disk would, and detaching
ends the fault: the server under test is never modified or mocked. Needs
``strace`` and the right to trace the process (root, as CI runs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

__all__ = ["injected", "needs_strace"]

if os.environ.get("CI") == "true" and (shutil.which("strace") is None or os.geteuid() != 0):
    # CI installs strace and runs as root (.ci/run): these tests must run there, never skip.
    raise RuntimeError("attached fault injection needs strace and root: CI must provide both")

needs_strace = pytest.mark.skipif(
    shutil.which("strace") is None or os.geteuid() != 0,
    reason="INJECTED FAULTS NOT RUN: they need strace and root (apt-get install strace)",
)

ATTACH_TIMEOUT = 10.0


def _traced(pid: int) -> bool:
    """Whether every thread of ``pid`` has a tracer."""
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    for task in tasks:
        status = (task / "status").read_text()
        tracer = next(line for line in status.splitlines() if line.startswith("TracerPid:"))
        if tracer.split()[1] == "0":
            return False
    return bool(tasks)


@contextlib.contextmanager
def injected(
    pid: int, paths: Sequence[Path], syscalls: Sequence[str], errno: str = "EIO"
) -> Iterator[None]:
    """While inside, every call of ``syscalls`` on ``paths`` by ``pid`` fails with ``errno``."""
    names = ",".join(syscalls)
    command = ["strace", "-f", "-qq", "-o", "/dev/null", "-p", str(pid)]
    for path in paths:
        command += ["-P", str(path)]
    command += ["-e", f"trace={names}", "-e", f"inject={names}:error={errno}"]
    tracer = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + ATTACH_TIMEOUT
        while not _traced(pid):
            if time.monotonic() > deadline or tracer.poll() is not None:
                raise RuntimeError("strace did not attach")
            time.sleep(0.01)
        yield
    finally:
        tracer.terminate()  # detaches cleanly: the process runs on, unfaulted
        tracer.wait(timeout=30)
