"""Shared helpers of the atheris fuzz targets in this directory (run by hand, see README.md).

Each ``fuzz_<name>.py`` imports deplog under atheris' coverage instrumentation,
then feeds every input through :func:`derive`: half of the inputs reach the
parser as raw bytes, the other half are a valid sample of the format with a few
input-driven edits, so the fuzzer spends its time past the first syntax check
instead of rediscovering the format. A target returns quietly when the parser
raises a ``DeplogError`` (the documented way to refuse input); any other
exception, or a failed round-trip assertion, is a crash that atheris reports
with the input that caused it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.builders import HOSTILE_TOKENS as TOKENS


def derive(data: bytes, samples: Sequence[bytes]) -> bytes:
    """The parser input for fuzzer input ``data``: raw, or a mutated copy of a sample."""
    fdp = atheris.FuzzedDataProvider(data)
    if not samples or fdp.ConsumeBool():
        return fdp.ConsumeBytes(fdp.remaining_bytes())
    out = bytearray(samples[fdp.ConsumeIntInRange(0, len(samples) - 1)])
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        at = fdp.ConsumeIntInRange(0, len(out))
        op = fdp.ConsumeIntInRange(0, 4)
        if op == 0:
            out[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 8))
        elif op == 1:
            del out[at : at + fdp.ConsumeIntInRange(1, 16)]
        elif op == 2 and at < len(out):
            out[at] = fdp.ConsumeInt(1) & 0xFF
        elif op == 3:
            out[at:at] = TOKENS[fdp.ConsumeIntInRange(0, len(TOKENS) - 1)]
        else:
            del out[at:]
    return bytes(out)


def main(test_one_input: Callable[[bytes], None]) -> None:
    """Run ``test_one_input`` under libFuzzer with the command line's options."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
