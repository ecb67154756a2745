"""Cosignature costs: ML-DSA-44 (tlog-cosignature v1.1) beside Ed25519 ``cosignature/v1``.

Run by hand (not in CI):  python bench/bench_cosignature.py [--seconds 1.0]

Every figure is measured in this one run, on one thread, on the same checkpoint (a
deplog checkpoint: origin, size, root and its ``deplog-map/v1`` line), and each
ML-DSA-44 figure is also given as a whole ratio to the Ed25519 one:

* sign: one cosignature line, as a witness makes it (``cosign``: message built and
  signed, line encoded);
* verify: one line checked against its key (``verify_cosignature``), as every client,
  receipt check and the authority's publication quorum do;
* a policy check of a note with 3 cosignatures (``Policy.verify``, log signature
  included), all Ed25519 against all ML-DSA-44;
* sizes: a cosignature's bytes (timestamp and signature), its signature line, the
  verifier key, and a served checkpoint with 3 cosignatures.

Ed25519 is pynacl (libsodium); ML-DSA-44 is ``cryptography`` (OpenSSL). Signing with
ML-DSA-44 is hedged (randomized), so each signature is fresh, as a witness's are.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import cosign, cosigner, verify_cosignature
from deplog.client.tlog.note import Signer, add_signature_lines, encode_base64
from deplog.client.tlog.policy import Policy

ORIGIN = "bench.deplog.example/log"
CHECKPOINT = Checkpoint(
    ORIGIN, 1_234_567, bytes(range(32)), ("deplog-map/v1 " + encode_base64(bytes(32)),)
)


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn`` over about ``seconds`` (after a short warm-up)."""
    for _ in range(20):
        fn()
    n, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(20):
            fn()
        n += 20
    return n / elapsed


def measure(kind: str, seconds: float) -> dict[str, float]:
    text = CHECKPOINT.to_text()
    log = Signer.generate(ORIGIN)
    note = sign_checkpoint(CHECKPOINT, log)

    def witness(i: int) -> Signer:
        name = f"w{i}.bench.example"
        return (
            Signer.generate(name, 0x06) if kind == "ml-dsa-44" else cosigner(Signer.generate(name))
        )

    witnesses = [witness(i) for i in range(3)]
    line = cosign(text, witnesses[0], 1_767_225_600)
    key = witnesses[0].verifier()
    cosigned = add_signature_lines(note, *(cosign(text, w, 1_767_225_600) for w in witnesses))
    policy = Policy.k_of_n(log.verifier(), [w.verifier() for w in witnesses], 3)
    return {
        "sign": rate(lambda: cosign(text, witnesses[0], 1_767_225_600), seconds),
        "verify": rate(lambda: verify_cosignature(text, line, key), seconds),
        "policy": rate(lambda: policy.verify(cosigned, now=1_767_225_600, max_age=None), seconds),
        "cosignature_bytes": len(line.signature),
        "line_bytes": len(line.line().encode()),
        "vkey_bytes": len(key.vkey().encode()),
        "note_bytes": len(cosigned),
    }


def ratio(ml: float, ed: float, higher_is_better: bool) -> str:
    """A whole ratio: how many times slower (for rates) or larger (for sizes)."""
    value = ed / ml if higher_is_better else ml / ed
    return f"{round(value)}x" if value >= 1.5 else f"{value:.1f}x"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.0, help="time per rate measurement")
    args = p.parse_args()
    ed = measure("ed25519", args.seconds)
    ml = measure("ml-dsa-44", args.seconds)
    rows = [
        ("sign one cosignature", "sign", "/s", True),
        ("verify one cosignature", "verify", "/s", True),
        ("policy check, 3 cosignatures", "policy", "/s", True),
        ("cosignature (timestamp + signature)", "cosignature_bytes", " B", False),
        ("signature line", "line_bytes", " B", False),
        ("verifier key (vkey)", "vkey_bytes", " B", False),
        ("checkpoint note, 3 cosignatures", "note_bytes", " B", False),
    ]
    print(f"{'':38}{'Ed25519':>14}{'ML-DSA-44':>14}  ML-DSA-44 vs Ed25519")
    for label, field, unit, is_rate in rows:
        e, m = ed[field], ml[field]
        shown = (f"{e:,.0f}{unit}", f"{m:,.0f}{unit}")
        word = "slower" if is_rate else "larger"
        print(f"{label:38}{shown[0]:>14}{shown[1]:>14}  {ratio(m, e, is_rate)} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
