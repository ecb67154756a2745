"""A small tlog-witness that cosigns like litewitness (torchwood up to v0.5.0): Ed25519
``cosignature/v1`` over the first three lines of a checkpoint only, whatever extension
lines follow. A real process on 127.0.0.1 for the integration tests.

It speaks tlog-witness ``POST /add-checkpoint`` (old size, consistency proof lines, a
blank line, the checkpoint): it checks the log's signature, the old size against the one
it cosigned (409 with ``text/x.tlog.size`` when they differ), the RFC 9162 consistency
proof, then signs. Its cosignature is computed here with PyNaCl, from the spec text, not
with deplog's cosigning code. State is in memory. ``GET /healthz`` answers 200.

    python -m tests.integration.three_line_witness --key-file F --log-key VKEY --port 0
"""

from __future__ import annotations

import argparse
import base64
import socket
import sys
import time

import nacl.signing
from aiohttp import web

from deplog.client.errors import DeplogError
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.note import Verifier
from deplog.client.tlog.proofs import verify_consistency


def parse_skey(text: str) -> tuple[str, bytes, bytes]:
    """Name, key ID and seed of a ``PRIVATE+KEY+name+hex8+base64(0x04||seed)`` key."""
    name, id_hex, blob = text.strip().removeprefix("PRIVATE+KEY+").split("+", 2)
    raw = base64.b64decode(blob)
    assert raw[0] == 0x04 and len(raw) == 33
    return name, bytes.fromhex(id_hex), raw[1:]


class ThreeLineWitness:
    def __init__(self, skey: str, log_key: Verifier) -> None:
        self.name, self.key_id, seed = parse_skey(skey)
        self.key = nacl.signing.SigningKey(seed)
        self.log_key = log_key
        self.size = 0
        self.root: bytes | None = None

    async def add_checkpoint(self, request: web.Request) -> web.Response:
        body = await request.read()
        head, sep, note = body.partition(b"\n\n")
        lines = head.decode().split("\n")
        if not sep or not lines[0].startswith("old "):
            return web.Response(status=400)
        old = int(lines[0][4:])
        proof = [base64.b64decode(line) for line in lines[1:]]
        try:
            checkpoint, _ = open_checkpoint(note, self.log_key)
        except DeplogError:
            return web.Response(status=403)
        if old > checkpoint.size:
            return web.Response(status=400)
        if old != self.size:
            return web.Response(status=409, text=f"{self.size}\n", content_type="text/x.tlog.size")
        if old and self.root is not None:
            try:
                verify_consistency(old, checkpoint.size, self.root, checkpoint.root_hash, proof)
            except DeplogError:
                return web.Response(status=422)
        self.size, self.root = checkpoint.size, checkpoint.root_hash
        timestamp = int(time.time())
        three = b"".join(line + b"\n" for line in note.split(b"\n")[:3])
        message = b"cosignature/v1\ntime " + str(timestamp).encode() + b"\n" + three
        signature = self.key.sign(message).signature
        blob = self.key_id + timestamp.to_bytes(8, "big") + signature
        line = f"\u2014 {self.name} {base64.b64encode(blob).decode()}\n"
        return web.Response(text=line, content_type="text/plain")

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--key-file", required=True)
    p.add_argument("--log-key", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    with open(args.key_file) as f:
        witness = ThreeLineWitness(f.read(), Verifier.parse(args.log_key))
    app = web.Application()
    app.router.add_post("/add-checkpoint", witness.add_checkpoint)
    app.router.add_get("/healthz", witness.healthz)
    sock = socket.socket()
    sock.bind((args.host, args.port))
    sock.listen(128)  # before "serving on": a client that reads it may connect at once
    print(f"serving on http://{args.host}:{sock.getsockname()[1]}", flush=True)
    web.run_app(app, sock=sock, print=None, handle_signals=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
