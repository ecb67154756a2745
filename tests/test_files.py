"""Atomic writes and the data-directory lock (client/plumbing/files.py), on real files and
processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.client.plumbing.files import exclusive_lock, write_atomic, write_private


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return tmp_path / "file"


@pytest.fixture
def strict_umask() -> Iterator[None]:
    """A umask that would make a plainly created file 0600."""
    old = os.umask(0o077)
    yield
    os.umask(old)


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


# write_atomic


def test_write_atomic_replaces_the_whole_file(target: Path) -> None:
    write_atomic(target, [b"a much longer first version"])
    write_atomic(target, [b"new", b"er"])
    assert target.read_bytes() == b"newer"


def test_while_writing_the_path_still_holds_the_old_file(target: Path) -> None:
    target.write_bytes(b"old")
    seen: list[bytes] = []

    def chunks() -> Iterator[bytes]:
        yield b"half of the new "
        seen.append(target.read_bytes())  # the writer is mid-way
        yield b"file"

    write_atomic(target, chunks())
    assert seen == [b"old"]
    assert target.read_bytes() == b"half of the new file"


def test_a_concurrent_reader_sees_only_whole_files(target: Path) -> None:
    size = 1 << 20
    versions = [bytes([n]) * size for n in range(2)]
    write_atomic(target, [versions[0]])
    done = threading.Event()
    torn: list[int] = []

    def read_until_done() -> None:
        while not done.is_set():
            data = target.read_bytes()
            if data not in versions:
                torn.append(len(data))

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for n in range(30):
            write_atomic(target, [versions[n % 2][: size // 2], versions[n % 2][size // 2 :]])
    finally:
        done.set()
        reader.join()
    assert torn == []


def test_a_failing_source_keeps_the_old_file_and_leaves_no_temporary(target: Path) -> None:
    target.write_bytes(b"old")

    def broken() -> Iterator[bytes]:
        yield b"new"
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        write_atomic(target, broken())
    assert target.read_bytes() == b"old"
    assert list(target.parent.iterdir()) == [target]


@pytest.mark.usefixtures("strict_umask")
def test_the_new_file_is_0644_whatever_the_umask(target: Path) -> None:
    write_atomic(target, [b"public"])
    assert mode_of(target) == 0o644


def test_the_new_file_does_not_inherit_the_old_files_mode(target: Path) -> None:
    target.write_bytes(b"old")
    target.chmod(0o600)
    write_atomic(target, [b"new"])
    assert mode_of(target) == 0o644


def test_the_mode_can_be_asked_for(target: Path) -> None:
    write_atomic(target, [b"private"], mode=0o600)
    assert mode_of(target) == 0o600


# write_private


def test_a_private_file_is_0600_in_a_new_0700_directory(tmp_path: Path) -> None:
    write_private(tmp_path / "keys" / "a.key", [b"secret"])
    assert (mode_of(tmp_path / "keys"), mode_of(tmp_path / "keys" / "a.key")) == (0o700, 0o600)


def test_a_private_file_closes_an_existing_directory_to_group_and_others(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    keys.chmod(0o755)  # as git checks out the repository's keys/
    write_private(keys / "a.key", [b"secret"])
    assert (mode_of(keys), mode_of(keys / "a.key")) == (0o700, 0o600)


def test_a_private_file_never_replaces_one_and_leaves_no_temporary(tmp_path: Path) -> None:
    write_private(tmp_path / "a.key", [b"first"])
    with pytest.raises(FileExistsError):
        write_private(tmp_path / "a.key", [b"second"])
    assert (tmp_path / "a.key").read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["a.key"]


# exclusive_lock


def test_the_first_holder_owns_the_lock(tmp_path: Path) -> None:
    with exclusive_lock(tmp_path / "lock") as owned:
        assert owned


def test_a_second_holder_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    with exclusive_lock(tmp_path / "lock") as first, exclusive_lock(tmp_path / "lock") as second:
        assert (first, second) == (True, False)


def test_the_lock_is_free_again_after_the_holder_leaves(tmp_path: Path) -> None:
    with exclusive_lock(tmp_path / "lock") as first:
        assert first
    with exclusive_lock(tmp_path / "lock") as again:
        assert again


def test_a_refused_holder_does_not_release_the_owners_lock(tmp_path: Path) -> None:
    with exclusive_lock(tmp_path / "lock") as owned:
        with exclusive_lock(tmp_path / "lock") as refused:
            assert owned and not refused
        with exclusive_lock(tmp_path / "lock") as still_refused:
            assert not still_refused


def test_the_lock_file_is_created_0600(tmp_path: Path) -> None:
    with exclusive_lock(tmp_path / "lock"):
        assert mode_of(tmp_path / "lock") == 0o600


HOLD = (
    "import sys, time; from pathlib import Path\n"
    "from deplog.client.plumbing.files import exclusive_lock\n"
    "with exclusive_lock(Path(sys.argv[1])) as owned:\n"
    "    print(owned, flush=True); time.sleep(60)\n"
)


def test_another_process_holding_the_lock_refuses_this_one_until_it_dies(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    command = [sys.executable, "-c", HOLD, str(lock)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "True"
            with exclusive_lock(lock) as owned:
                assert not owned
        finally:
            holder.kill()  # no cleanup: the kernel releases the lock with the process
    with exclusive_lock(lock) as owned:
        assert owned
