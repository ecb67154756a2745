"""Fuzz witness policies: ``client.policy.Policy.parse`` (C2SP tlog-policy files).

Invariants: only DeplogError escapes; a policy that parses renders to a file
that parses back to an equal policy, and that rendering is a fixed point.

    python bench/fuzz/fuzz_policy.py -atheris_runs=100000
"""

from __future__ import annotations

import atheris
from _fuzzlib import derive, main

with atheris.instrument_imports(include=["deplog.client"]):
    from deplog.client.errors import DeplogError
    from deplog.client.tlog.cosignature import cosigner
    from deplog.client.tlog.note import Signer
    from deplog.client.tlog.policy import Policy

LOG = Signer.from_seed("example.org/log", bytes(range(32))).verifier()
_W = [cosigner(Signer.from_seed(f"w{i}.example", bytes([i]) * 32)).verifier() for i in range(4)]
SAMPLES = [
    Policy.single_log(LOG).to_text().encode(),
    Policy.k_of_n(LOG, _W, 2).to_text().encode(),
    (
        "# a comment\n"
        f"log {LOG.vkey()} https://log.example/\n"
        f"witness a {_W[0].vkey()}\n"
        f"  witness\tb {_W[1].vkey()} https://b.example/add \n"
        f"witness c\xe9 {_W[2].vkey()}\n"
        f"witness d {_W[3].vkey()}\n"
        "group g1 any a b\n"
        "group g2 2 c\xe9 d\n"
        "group top all g1 g2\n"
        "quorum top"
    ).encode(),
]


def test_one_input(data: bytes) -> None:
    text = derive(data, SAMPLES)
    try:
        policy = Policy.parse(text)
    except DeplogError:
        return
    rendered = policy.to_text()
    assert Policy.parse(rendered) == policy
    assert Policy.parse(rendered).to_text() == rendered


if __name__ == "__main__":
    main(test_one_input)
