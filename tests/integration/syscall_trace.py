"""Read an strace recording into file operations on one directory and acknowledgments.

The recording is made with ``STRACE_ARGS``: every thread and child (``-f``),
file descriptors annotated with their paths (``-y``), every byte in hex
(``-xx``) and in full (``-s``). A syscall split by another thread
(``<unfinished ...>`` / ``<... resumed>``) is joined again.

Ordering rule: an operation takes the place of the line where it was entered,
except ``fsync``/``fdatasync``, which take the place where they returned (only
then is anything durable). Bytes sent on a TCP socket are placed where the send
was entered, so an acknowledgment is never placed later than the client could
have seen it.

Only regular files directly in the data directory are modelled; the SQLite
shared-memory index (``-shm``) is left out, since SQLite rebuilds it from the
WAL when the first connection opens the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.crash_states import (
    DIRECTORY,
    Create,
    FileOp,
    Rename,
    Snapshot,
    Sync,
    Truncate,
    Unlink,
    Write,
)

__all__ = ["STRACE_ARGS", "Recording", "TraceError", "parse_trace", "snapshot_of"]

STRACE_ARGS = [
    "-f",
    "-qq",
    "-y",
    "-xx",
    "-s",
    "4194304",
    "-e",
    "trace=openat,creat,write,pwrite64,writev,pwritev,pwritev2,fsync,fdatasync,ftruncate,"
    "rename,renameat,renameat2,unlink,unlinkat,sendto,sendmsg",
]

_COMPLETE = re.compile(r"^(\d+) +(\w+)\((.*)\) += (.*)$")
_UNFINISHED = re.compile(r"^(\d+) +(\w+)\((.*) <unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. (\w+) resumed>(.*)\) += (.*)$")
_HEX = re.compile(r'"((?:\\x[0-9a-f]{2})*)"(\.\.\.)?')
_FD = re.compile(r"^(?:\d+|AT_FDCWD)<(.*)>$")


class TraceError(Exception):
    """The recording holds something the model cannot represent."""


@dataclass
class Recording:
    """The directory's operations in order, and each TCP send with its place among them."""

    ops: list[FileOp] = field(default_factory=list)
    sends: list[tuple[int, bytes]] = field(default_factory=list)


def snapshot_of(directory: Path) -> Snapshot:
    """The directory's regular files (without ``-shm``) as the recording's starting point."""
    names: dict[str, int] = {}
    contents: dict[int, bytes] = {}
    for inode, path in enumerate(sorted(p for p in directory.iterdir() if _modelled(p.name))):
        if path.is_file() and not path.is_symlink():
            names[path.name] = inode
            contents[inode] = path.read_bytes()
    return Snapshot(names, contents)


def _modelled(name: str) -> bool:
    return not name.endswith("-shm")


def _split(args: str) -> list[str]:
    """Top-level arguments: commas inside brackets, braces or quotes do not split."""
    parts: list[str] = []
    depth = 0
    quoted = False
    start = 0
    for i, char in enumerate(args):
        if char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(args[start:i].strip())
            start = i + 1
    parts.append(args[start:].strip())
    return parts


def _unhex(text: str) -> str:
    return re.sub(
        r"((?:\\x[0-9a-f]{2})+)",
        lambda m: bytes.fromhex(m.group(1).replace("\\x", "")).decode("utf-8", "replace"),
        text,
    )


def _strings(args: str) -> bytes:
    """Every quoted buffer in the arguments, concatenated (write, writev, sendmsg)."""
    out = b""
    for match in _HEX.finditer(args):
        if match.group(2):
            raise TraceError("a buffer was cut short: raise -s")
        out += bytes.fromhex(match.group(1).replace("\\x", ""))
    return out


def _fd_path(arg: str) -> str | None:
    match = _FD.match(arg)
    return None if match is None else _unhex(match.group(1))


def _result(text: str) -> int | None:
    """The return value, or None for a failed call; the fd annotation is dropped."""
    head = text.split("<", 1)[0].split()[0]
    value = int(head, 0)
    return None if value < 0 else value


class _Builder:
    def __init__(self, directory: Path, snapshot: Snapshot) -> None:
        self.directory = str(directory)
        self.names = dict(snapshot.names)
        self.next_inode = max(snapshot.contents, default=-1) + 1
        self.recording = Recording()

    def name(self, path: str | None) -> str | None:
        """The file's name if ``path`` is a modelled file in the directory."""
        if path is None or not path.startswith(self.directory + "/"):
            return None
        name = path[len(self.directory) + 1 :]
        return name if "/" not in name and _modelled(name) else None

    def inode(self, path: str | None) -> int | None:
        name = self.name(path)
        return None if name is None else self.names.get(name)

    def add(self, op: FileOp) -> None:
        self.recording.ops.append(op)

    def call(self, syscall: str, args: str, result: str) -> None:
        if result.startswith("?"):
            # Its process was killed in the call (strace cannot tell its result): nothing
            # waited on it, so leaving it out only leaves out crash states, never makes one
            # up. A helper process killed at the stop while it opened a file did this.
            return
        returned = _result(result)
        parts = _split(args)
        if returned is None:
            if syscall in ("fsync", "fdatasync") and self.inode(_fd_path(parts[0])) is not None:
                raise TraceError("an fsync of the directory's files failed")
            return
        if syscall in ("sendto", "sendmsg", "write", "writev"):
            target = _fd_path(parts[0]) or ""
            if target.startswith("socket:"):
                data = _strings(args)[:returned]
                self.recording.sends.append((len(self.recording.ops), data))
                return
        if syscall in ("openat", "creat"):
            path = _unhex(result.split("<", 1)[1].rsplit(">", 1)[0]) if "<" in result else None
            name = self.name(path)
            if name is None:
                return
            flags = parts[2] if syscall == "openat" else "O_CREAT|O_TRUNC"
            if "O_CREAT" in flags and name not in self.names:
                self.names[name] = self.next_inode
                self.add(Create(name, self.next_inode))
                self.next_inode += 1
            if "O_TRUNC" in flags:
                self.add(Truncate(self.names[name], 0))
            return
        if syscall in ("unlink", "unlinkat", "rename", "renameat", "renameat2"):
            self.namespace(syscall, parts)
            return
        path = _fd_path(parts[0])
        if syscall in ("fsync", "fdatasync"):
            if path == self.directory:
                self.add(Sync(DIRECTORY))
            elif (inode := self.inode(path)) is not None:
                self.add(Sync(inode))
            return
        inode = self.inode(path)
        if inode is None:
            return
        if syscall in ("pwrite64", "pwritev", "pwritev2"):
            offset = int(parts[3], 0)
            self.add(Write(inode, offset, _strings(args)[:returned]))
        elif syscall == "ftruncate":
            self.add(Truncate(inode, int(parts[1], 0)))
        else:
            raise TraceError(f"{syscall} on a modelled file: only positioned writes are modelled")

    def namespace(self, syscall: str, parts: list[str]) -> None:
        def path_at(dirfd: str | None, arg: str) -> str:
            text = _unhex(arg.strip('"'))
            if text.startswith("/") or dirfd is None:
                return text
            return f"{_fd_path(dirfd)}/{text}"

        if syscall == "unlink":
            paths = [path_at(None, parts[0])]
        elif syscall == "unlinkat":
            paths = [path_at(parts[0], parts[1])]
        elif syscall == "rename":
            paths = [path_at(None, parts[0]), path_at(None, parts[1])]
        else:
            paths = [path_at(parts[0], parts[1]), path_at(parts[2], parts[3])]
        names = [self.name(p) for p in paths]
        if names[0] is None or names[0] not in self.names:
            return
        if len(names) == 1:
            del self.names[names[0]]
            self.add(Unlink(names[0]))
        else:
            if names[1] is None:
                raise TraceError("a file was renamed out of the directory")
            self.names[names[1]] = self.names.pop(names[0])
            self.add(Rename(names[0], names[1]))


def parse_trace(text: str, directory: Path, snapshot: Snapshot) -> Recording:
    """The file operations on ``directory`` and the TCP sends, in the ordering rule's order."""
    pending: dict[str, tuple[str, str, int]] = {}
    calls: list[tuple[int, str, str, str]] = []
    for number, line in enumerate(text.splitlines()):
        if match := _COMPLETE.match(line):
            _, syscall, args, result = match.groups()
            calls.append((number, syscall, args, result))
        elif match := _UNFINISHED.match(line):
            pid, syscall, args = match.groups()
            pending[pid] = (syscall, args, number)
        elif match := _RESUMED.match(line):
            pid, syscall, rest, result = match.groups()
            began, args, entered = pending.pop(pid)
            if began != syscall:
                raise TraceError("a resumed call does not match the one left unfinished")
            synced = syscall in ("fsync", "fdatasync")
            calls.append((number if synced else entered, syscall, args + rest, result))
    builder = _Builder(directory, snapshot)
    for _, syscall, args, result in sorted(calls, key=lambda call: call[0]):
        builder.call(syscall, args, result)
    return builder.recording
