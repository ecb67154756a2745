"""The authority's configuration file ``<data>/config.json``: one typed, validated record.

Rules:

1. The file is one JSON object with ``origin`` (the log's checkpoint origin and key name),
   ``log_key`` (the stem of the log key's files) and, once one is added, ``witnesses``: a
   list of ``{"url": ..., "key": ...}``, a tlog-witness submission prefix (http:// or
   https://) and its cosigner verifier key (rule 6).
2. A file that is anything else is refused whole with :class:`ConfigError`
   (``malformed_config``), whose message names the file and the field, never a value.
3. Unknown members are refused, at the top level and in each witness: ``authority``
   writes this file itself, and ignoring one could silently drop a required witness.
4. Two witnesses with the same key are refused: one witness could meet a quorum of two.
5. ``save`` writes exactly the bytes ``authority`` always wrote (the members in the order
   above, two-space indented, a final newline, no ``witnesses`` until there is one),
   atomically, mode 0644: it holds no secret.
6. A witness's key is Ed25519 (0x04) or ML-DSA-44 (0x06) (tlog-cosignature v1.1). An
   Ed25519 witness that signs a checkpoint's first three lines only (litewitness) carries
   ``"tree_lines": true`` (``authority witness add --tree-lines``): written only when true,
   refused with any other value or for an ML-DSA-44 key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from deplog.client.errors import DeplogError, ErrorCode, FormatError
from deplog.client.plumbing.files import write_atomic
from deplog.client.tlog.keyfile import is_key_file_stem, key_file_name
from deplog.client.tlog.note import SIG_TYPE_COSIGNATURE_V1, Verifier, is_valid_key_name

CONFIG_FILE: Final = "config.json"
DEFAULT_ORIGIN: Final = "localhost/deplog"
WITNESS_URL_SCHEMES: Final = ("http://", "https://")

_MEMBERS: Final = ("origin", "log_key", "witnesses")
_WITNESS_MEMBERS: Final = ("url", "key", "tree_lines")


class ConfigError(FormatError):
    """A configuration file that is not what rule 1 describes; the message names the file."""

    code = ErrorCode.MALFORMED_CONFIG


@dataclass(frozen=True)
class ExternalWitness:
    """An external witness: where to submit checkpoints, and the key its cosignatures carry."""

    url: str
    key: str
    """Its cosigner verifier key, as ``Verifier.vkey()`` writes it."""
    tree_lines: bool = False
    """Whether it may sign the checkpoint's first three lines only (rule 6)."""

    def verifier(self) -> Verifier:
        return Verifier.parse_cosigner(self.key)


@dataclass(frozen=True)
class AuthorityConfig:
    """What ``authority init`` decides once for a data directory (rule 1)."""

    origin: str
    log_key: str
    witnesses: tuple[ExternalWitness, ...] = ()

    @classmethod
    def new(cls, origin: str | None) -> AuthorityConfig:
        """A first configuration: ``origin`` (or the default) and a key stem made from it."""
        origin = origin or DEFAULT_ORIGIN
        return cls(origin, key_file_name(origin))

    @property
    def embedded_witness_key(self) -> str:
        """The stem of the embedded witness's key files, beside the log key."""
        return self.log_key + "-witness"

    @property
    def embedded_witness_name(self) -> str:
        """The embedded witness's key name."""
        return f"{self.origin}/witness"

    def with_witness(
        self, url: str, verifier: Verifier, tree_lines: bool = False
    ) -> AuthorityConfig:
        """This configuration plus the witness, replacing any entry with the same key."""
        vkey = verifier.vkey()
        kept = tuple(w for w in self.witnesses if w.key != vkey)
        return replace(self, witnesses=(*kept, ExternalWitness(url, vkey, tree_lines)))

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"origin": self.origin, "log_key": self.log_key}
        if self.witnesses:
            obj["witnesses"] = [
                {"url": w.url, "key": w.key, **({"tree_lines": True} if w.tree_lines else {})}
                for w in self.witnesses
            ]
        return obj

    @classmethod
    def from_json(cls, obj: object) -> AuthorityConfig:
        """Validate a parsed file (rules 1, 3, 4); the message does not name the file."""
        members = _object(obj, _MEMBERS, "the file", required=("origin", "log_key"))
        origin, log_key = members["origin"], members["log_key"]
        if not isinstance(origin, str) or not is_valid_key_name(origin):
            raise ConfigError(message="'origin' must be a key name (no spaces or '+')")
        if not isinstance(log_key, str) or not is_key_file_stem(log_key):
            raise ConfigError(message="'log_key' must be a key file stem (letters, digits, - _ .)")
        witnesses = members.get("witnesses", [])
        if not isinstance(witnesses, list):
            raise ConfigError(message="'witnesses' must be a list")
        parsed = tuple(_witness(entry, n) for n, entry in enumerate(witnesses))
        if len({w.verifier().vkey() for w in parsed}) != len(parsed):
            raise ConfigError(message="two witnesses have the same key")
        return cls(origin, log_key, parsed)

    def to_bytes(self) -> bytes:
        """The file's bytes (rule 5)."""
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()

    @classmethod
    def load(cls, path: Path) -> AuthorityConfig:
        """Read and validate the file at ``path`` (rule 2); OSError if it cannot be read."""
        data = path.read_bytes()
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            raise ConfigError(message=f"{path}: not valid JSON") from None
        try:
            return cls.from_json(obj)
        except ConfigError as problem:
            raise ConfigError(message=f"{path}: {problem}") from None

    def save(self, path: Path) -> None:
        """Write the file atomically (rule 5)."""
        write_atomic(path, [self.to_bytes()])


def _object(
    obj: object, known: tuple[str, ...], what: str, required: tuple[str, ...]
) -> dict[str, Any]:
    """``obj`` as a JSON object with no member outside ``known`` and every ``required`` one."""
    if not isinstance(obj, dict):
        raise ConfigError(message=f"{what} must be a JSON object")
    for name in obj:
        if name not in known:
            raise ConfigError(message=f"{what} has an unknown member")
    for name in required:
        if name not in obj:
            raise ConfigError(message=f"{what} lacks '{name}'")
    return obj


def _witness(obj: object, index: int) -> ExternalWitness:
    what = f"witness {index}"
    members = _object(obj, _WITNESS_MEMBERS, what, required=("url", "key"))
    url, key = members["url"], members["key"]
    if not isinstance(url, str) or not url.startswith(WITNESS_URL_SCHEMES):
        raise ConfigError(message=f"{what}: 'url' must be http:// or https://")
    try:
        verifier = Verifier.parse_cosigner(key) if isinstance(key, str) else None
    except DeplogError:
        verifier = None
    if verifier is None:
        raise ConfigError(message=f"{what}: 'key' must be a cosigner verifier key")
    if "tree_lines" not in members:
        return ExternalWitness(url, key)
    if members["tree_lines"] is not True:
        raise ConfigError(message=f"{what}: 'tree_lines' is true or absent")
    if verifier.sig_type != SIG_TYPE_COSIGNATURE_V1:
        raise ConfigError(message=f"{what}: 'tree_lines' applies to Ed25519 (0x04) keys only")
    return ExternalWitness(url, key, True)
