"""How every command line refuses its arguments: one line, and one check of a URL and a port.

Rules:

1. A URL flag or argument takes ``http://`` or ``https://``, a host and, if given, a port
   from 1 to 65535; anything else (``127.0.0.1:7460``, no scheme) is a usage error naming
   the value, exit 2, before anything is read, written or fetched.
2. A listen port is 0 to 65535 (0: the system picks a free one); past it is a usage
   error, never a port taken modulo 65536.
3. A usage error is one line on stderr, ``<prog>: error: <what is wrong>; <prog> -h ...``, exit 2,
   never argparse's usage block first (``Parser``, which subcommands inherit).
"""

from __future__ import annotations

import argparse
import urllib.parse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (rule 3)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; {self.prog} -h describes every argument\n")


def http_url(text: str) -> str:
    """``text`` if it is an http(s) URL with a host (rule 1), for argparse's ``type``."""
    parts = urllib.parse.urlsplit(text)
    try:
        port_ok = parts.port != 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(
            f"{text} is not a URL: give http://host[:port] or https://host[:port]"
        )
    return text


def listen_port(text: str) -> int:
    """A port from 0 to 65535 (rule 2), for argparse's ``type``."""
    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port: give 0 to 65535, 0 for a free one")
    return port
