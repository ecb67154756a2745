"""Genuine sum.golang.org checkpoints (``tests/fixtures/sumdb``): a C2SP log whose key
name, ``sum.golang.org``, is not its origin, ``go.sum database tree``."""

from __future__ import annotations

from pathlib import Path

from deplog.client.tlog.note import Verifier

__all__ = ["FIXTURES", "KEY", "ORIGIN", "checkpoints", "tampered", "verifier"]

FIXTURES = Path(__file__).parent / "fixtures" / "sumdb"
KEY = (FIXTURES / "log-key").read_text().strip()
ORIGIN = (FIXTURES / "origin").read_text().rstrip("\n")


def checkpoints() -> list[bytes]:
    """Every stored tree head, smallest first, as sum.golang.org signed it."""
    paths = sorted(FIXTURES.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return [path.read_bytes() for path in paths]


def tampered(note: bytes) -> bytes:
    """``note`` with its tree size one larger: well-formed, no longer signed."""
    origin, size, rest = note.split(b"\n", 2)
    return b"\n".join((origin, str(int(size) + 1).encode(), rest))


def verifier() -> Verifier:
    return Verifier.parse(KEY)
