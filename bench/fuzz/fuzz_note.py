"""Fuzz signed notes: ``client.note.parse_note`` and ``open_note``.

Invariants: only DeplogError escapes; a note that parses re-encodes from its
text and signature lines to the very same bytes (one note, one encoding); a
note that opens has at least one verified signature, every one by a
configured key.

    python bench/fuzz/fuzz_note.py -atheris_runs=100000
"""

from __future__ import annotations

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.errors import DeplogError
    from deplog.client.tlog.cosignature import cosign, cosigner
    from deplog.client.tlog.note import (
        Signer,
        add_signature_lines,
        open_note,
        parse_note,
        sign_note,
    )

LOG = Signer.from_seed("example.org/log", bytes(range(32)))
OTHER = Signer.from_seed("other.example/log", bytes(32))
WITNESS = cosigner(Signer.from_seed("witness.example/w1", bytes([7]) * 32))
VERIFIERS = [LOG.verifier(), WITNESS.verifier()]
_TEXT = "example.org/log\n42\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
SAMPLES = [
    sign_note(_TEXT, LOG),
    sign_note(_TEXT, LOG, OTHER),
    sign_note("a\n\nb\n", OTHER, LOG),
    add_signature_lines(sign_note(_TEXT, LOG), cosign(_TEXT, WITNESS, 1_700_000_000)),
]


def test_one_input(data: bytes) -> None:
    msg = derive(data, SAMPLES)
    try:
        text, sigs = parse_note(msg)
    except DeplogError:
        return
    assert (text + "\n" + "".join(sig.line() for sig in sigs)).encode("utf-8") == msg
    try:
        note = open_note(msg, VERIFIERS)
    except DeplogError:
        return
    known = {(v.name, v.key_id) for v in VERIFIERS}
    assert note.signatures and all((s.name, s.key_id) in known for s in note.signatures)


if __name__ == "__main__":
    main(test_one_input)
