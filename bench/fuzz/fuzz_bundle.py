"""Fuzz export bundles: ``client.bundle.read_entries`` on a file of arbitrary bytes.

Invariants: only DeplogError escapes (BundleFormatError, naming the index of
the entry where the file broke, which is the number of entries yielded
before it); a file that reads completely is rewritten byte for byte by
``write_entries``.

The files live in /dev/shm when it exists, so ``write_entries``' fsyncs cost
nothing. Run:

    python bench/fuzz/fuzz_bundle.py -atheris_runs=100000
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.audit.bundle import BundleFormatError, read_entries, write_entries

_SHM = Path("/dev/shm")
DIRECTORY = Path(tempfile.mkdtemp(prefix="deplog-fuzz-", dir=_SHM if _SHM.is_dir() else None))
atexit.register(shutil.rmtree, DIRECTORY, ignore_errors=True)
INPUT, OUTPUT = DIRECTORY / "input", DIRECTORY / "output"
SAMPLES = [
    b"",
    b"\x00\x00",
    b"\x00\x03abc\x00\x01x\x00\x00",
    b"\x00\x05" + b'{"a":1}'[:5] + b"\x01\x00" + bytes(256),
]


def test_one_input(data: bytes) -> None:
    raw = derive(data, SAMPLES)
    INPUT.write_bytes(raw)
    entries: list[bytes] = []
    try:
        entries.extend(read_entries(INPUT))
    except BundleFormatError as err:
        assert err.index == len(entries)
        return
    write_entries(OUTPUT, entries)
    assert OUTPUT.read_bytes() == raw


if __name__ == "__main__":
    main(test_one_input)
