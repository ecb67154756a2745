"""Fuzz checkpoint bodies: ``Checkpoint.from_text``, and ``open_checkpoint`` on whole notes.

Invariants: only DeplogError escapes; a body that parses formats back to the
same text (``from_text(x).to_text() == x``); an opened checkpoint's origin is
the log key's name.

    python bench/fuzz/fuzz_checkpoint.py -atheris_runs=100000
"""

from __future__ import annotations

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.errors import DeplogError
    from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
    from deplog.client.tlog.note import Signer

ORIGIN = "example.org/log"
LOG = Signer.from_seed(ORIGIN, bytes(range(32)))
_CHECKPOINTS = [
    Checkpoint(ORIGIN, 0, bytes(32)),
    Checkpoint(ORIGIN, 1234567, bytes(range(32))),
    Checkpoint(ORIGIN, 2**63 - 1, bytes([255]) * 32, ("ext one", "\u00e9xt")),
]
SAMPLES = [c.to_text().encode("utf-8") for c in _CHECKPOINTS] + [
    sign_checkpoint(c, LOG) for c in _CHECKPOINTS
]


def test_one_input(data: bytes) -> None:
    raw = derive(data, SAMPLES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    try:
        checkpoint = Checkpoint.from_text(text)
    except DeplogError:
        pass
    else:
        assert checkpoint.to_text() == text
        assert Checkpoint.from_text(checkpoint.to_text()) == checkpoint
    try:
        opened, _ = open_checkpoint(raw, LOG.verifier())
    except DeplogError:
        return
    assert opened.origin == ORIGIN


if __name__ == "__main__":
    main(test_one_input)
