"""Key files: private keys 0600 and git-ignored, verifier keys beside them.

A private key file holds one line in the signed-note private key format, readable by
Go's ``note`` too; its verifier key is written beside it as ``<file>.pub``, which every
command taking a verifier key also accepts as a path. Key material is never logged or
put in an error message, and the type byte in both encodings keeps a witness's cosigner
key from being loaded as a log key.
"""

from __future__ import annotations

import stat
from collections.abc import Collection
from pathlib import Path
from typing import Final

from deplog.client.errors import DeplogError, ErrorCode, TooLargeError
from deplog.client.plumbing.files import write_atomic, write_private
from deplog.client.tlog.note import SIG_TYPE_ED25519, Signer, Verifier

MAX_VERIFIER_KEY_FILE: Final = 4096


class KeyFileError(DeplogError):
    """A key file that is missing, unreadable, malformed or readable by others."""

    codes = frozenset({ErrorCode.KEY_MISSING, ErrorCode.KEY_PERMISSIONS, ErrorCode.KEY_MALFORMED})


def key_file_name(name: str) -> str:
    """A file-system safe stem for a key name such as ``example.com/log``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def is_key_file_stem(stem: str) -> bool:
    """Whether ``stem`` is one :func:`key_file_name` could have made (no path separators)."""
    return bool(stem) and key_file_name(stem) == stem


def create_signer(keys_dir: Path, stem: str, name: str, sig_type: int = SIG_TYPE_ED25519) -> Signer:
    """Generate a key, write ``<stem>.key`` (``write_private``: 0600, whole, exclusively, in
    a 0700 directory if made here) and ``<stem>.pub``."""
    signer = Signer.generate(name, sig_type)
    write_private(keys_dir / f"{stem}.key", [(signer.skey() + "\n").encode()])
    write_atomic(keys_dir / f"{stem}.pub", [(signer.verifier().vkey() + "\n").encode()])
    return signer


def load_signer(
    keys_dir: Path, stem: str, sig_type: int | Collection[int] = SIG_TYPE_ED25519
) -> Signer:
    """Read ``<stem>.key`` of one of the given types, refusing one group or others can read."""
    private = keys_dir / f"{stem}.key"
    try:
        mode = private.stat().st_mode
    except FileNotFoundError:
        raise KeyFileError(ErrorCode.KEY_MISSING, "private key file not found") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(ErrorCode.KEY_PERMISSIONS, "private key file must be mode 0600")
    try:
        return Signer.parse(private.read_text().strip(), sig_type)
    except DeplogError:
        raise KeyFileError(ErrorCode.KEY_MALFORMED, "private key file is malformed") from None


def load_or_create_signer(
    keys_dir: Path, stem: str, name: str, sig_type: int = SIG_TYPE_ED25519
) -> tuple[Signer, bool]:
    """The key named ``stem``, created on first use; the flag says whether it is new."""
    if (keys_dir / f"{stem}.key").exists():
        return load_signer(keys_dir, stem, sig_type), False
    return create_signer(keys_dir, stem, name, sig_type), True


def read_verifier_key(value: str) -> Verifier:
    """A log verifier key given inline or as the path of a file holding one (up to 4 KiB)."""
    path = Path(value)
    if path.is_file():
        with open(path, "rb") as f:
            data = f.read(MAX_VERIFIER_KEY_FILE + 1)
        if len(data) > MAX_VERIFIER_KEY_FILE:
            raise TooLargeError(message="a verifier key file is at most 4 KiB")
        value = data.decode("utf-8", errors="replace").strip()
    return Verifier.parse(value)
