"""Fuzz tlog-proof receipts: ``Receipt.parse``.

Invariants: only DeplogError escapes; a receipt that parses formats back to the
same bytes (``Receipt.parse(x).to_bytes() == x``); verifying a parsed
receipt against a leaf also raises nothing but DeplogError.

    python bench/fuzz/fuzz_receipt.py -atheris_runs=100000
"""

from __future__ import annotations

import contextlib

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.errors import DeplogError
    from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
    from deplog.client.tlog.note import Signer
    from deplog.client.tlog.proofs import inclusion_path, leaf_hash, root_from_leaf_hashes
    from deplog.client.tlog.receipt import Receipt, verify_receipt

ORIGIN = "example.org/log"
LOG = Signer.from_seed(ORIGIN, bytes(range(32)))
LEAVES = [b"leaf %d" % i for i in range(7)]
_HASHES = [leaf_hash(leaf) for leaf in LEAVES]
_NOTE = sign_checkpoint(Checkpoint(ORIGIN, 7, root_from_leaf_hashes(_HASHES)), LOG)
SAMPLES = [
    Receipt(3, tuple(inclusion_path(_HASHES, 3, 7)), _NOTE).to_bytes(),
    Receipt(6, tuple(inclusion_path(_HASHES, 6, 7)), _NOTE, b"extra data").to_bytes(),
    Receipt(0, tuple(inclusion_path(_HASHES, 0, 7)), _NOTE).to_bytes(),
]


def test_one_input(data: bytes) -> None:
    raw = derive(data, SAMPLES)
    try:
        receipt = Receipt.parse(raw)
    except DeplogError:
        return
    assert receipt.to_bytes() == raw
    if receipt.index < len(LEAVES):
        with contextlib.suppress(DeplogError):
            verify_receipt(receipt, LEAVES[receipt.index], LOG.verifier())


if __name__ == "__main__":
    main(test_one_input)
