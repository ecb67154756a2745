"""A writer process for the many-writers tests: ``python -m tests.pg_writer COMMAND ...``.

``append URL LOG_SKEY PUB_SKEY FIRST COUNT BATCH``: open the log in URL and append the
notices of publisher PUB_SKEY with sequence numbers FIRST.. (COUNT of them, BATCH per
transaction); print one JSON line ``{"sequence": s, "index": i}`` per acknowledged notice.

``hold URL LOG_SKEY PUB_SKEY FIRST COUNT``: open the log, start a write transaction (the
log's order), write COUNT notices in it, print ``holding`` and wait, never committing:
what a process killed mid-transaction leaves behind.
"""

from __future__ import annotations

import json
import sys
import time

from deplog.authority.log import Log
from deplog.client.tlog.note import Signer
from tests.builders import make_envelope


def main(argv: list[str]) -> int:
    command, url, log_skey, pub_skey = argv[:4]
    first, count = int(argv[4]), int(argv[5])
    signer = Signer.parse(log_skey)
    publisher = Signer.parse(pub_skey)
    log = Log(url, signer, signer.name)
    envelopes = [make_envelope(publisher, s) for s in range(first, first + count)]
    if command == "append":
        batch = int(argv[6])
        for start in range(0, count, batch):
            for envelope, result in zip(
                envelopes[start : start + batch],
                log.sequence(envelopes[start : start + batch]),
                strict=True,
            ):
                assert result.index is not None, result.error
                line = {"sequence": envelope.notice.sequence, "index": result.index}
                print(json.dumps(line), flush=True)
        log.close()
        return 0
    if command == "hold":
        log._begin()
        logged: dict[tuple[str, int], tuple[int, bytes]] = {}  # fresh sequence numbers
        for envelope in envelopes:
            log._admit_notice(envelope, log._prepare(envelope), False, logged)
        print("holding", flush=True)
        time.sleep(600)
        return 1
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
