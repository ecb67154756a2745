"""Fuzz tlog-witness add-checkpoint bodies: ``authority.witness.parse_add_checkpoint``.

Invariants: only DeplogError escapes (malformed_request or too_large); a body that
parses is re-encoded byte for byte by the authority's own request builder
(``authority.witnessing.request_body``).

    python bench/fuzz/fuzz_add_checkpoint.py -atheris_runs=100000
"""

from __future__ import annotations

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client", "deplog.authority.witness.core"]):
    from deplog.authority.witness.core import parse_add_checkpoint
    from deplog.authority.witnessing import request_body
    from deplog.client.errors import DeplogError
    from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
    from deplog.client.tlog.note import Signer

LOG = Signer.from_seed("example.org/log", bytes(range(32)))
_NOTE = sign_checkpoint(Checkpoint("example.org/log", 5, bytes(range(32))), LOG)
SAMPLES = [
    request_body(0, (), _NOTE),
    request_body(3, (bytes(32), bytes(range(32)), bytes([255]) * 32), _NOTE),
    request_body(2**63 - 1, (bytes(32),) * 63, _NOTE),
]


def test_one_input(data: bytes) -> None:
    body = derive(data, SAMPLES)
    try:
        request = parse_add_checkpoint(body)
    except DeplogError:
        return
    assert request_body(request.old_size, request.proof, request.note) == body


if __name__ == "__main__":
    main(test_one_input)
