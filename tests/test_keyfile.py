"""Key files: created 0600, refused when others can read them, never leaked in errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deplog.client.tlog.keyfile import (
    KeyFileError,
    create_signer,
    load_or_create_signer,
    load_signer,
)
from deplog.client.tlog.note import Verifier


def test_private_key_is_created_with_mode_0600(tmp_path: Path) -> None:
    create_signer(tmp_path, "acme", "acme")
    assert (tmp_path / "acme.key").stat().st_mode & 0o777 == 0o600


def test_verifier_key_is_written_beside_the_private_key(tmp_path: Path) -> None:
    signer = create_signer(tmp_path, "acme", "acme")
    written = Verifier.parse((tmp_path / "acme.pub").read_text().strip())
    assert written == signer.verifier()


def test_loaded_key_signs_like_the_created_one(tmp_path: Path) -> None:
    created = create_signer(tmp_path, "acme", "acme")
    assert load_signer(tmp_path, "acme").sign(b"m") == created.sign(b"m")


def test_existing_key_is_never_overwritten(tmp_path: Path) -> None:
    first, new = load_or_create_signer(tmp_path, "acme", "acme")
    second, again = load_or_create_signer(tmp_path, "acme", "acme")
    assert (new, again) == (True, False)
    assert second.public_key == first.public_key
    with pytest.raises(FileExistsError):
        create_signer(tmp_path, "acme", "acme")


def test_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    create_signer(tmp_path, "acme", "acme")
    os.chmod(tmp_path / "acme.key", 0o644)
    with pytest.raises(KeyFileError) as refused:
        load_signer(tmp_path, "acme")
    assert refused.value.code == "key_permissions"


def test_malformed_key_file_error_does_not_echo_its_content(tmp_path: Path) -> None:
    path = tmp_path / "acme.key"
    path.write_text("PRIVATE+KEY+acme+deadbeef+SECRETMATERIAL\n")
    os.chmod(path, 0o600)
    with pytest.raises(KeyFileError) as refused:
        load_signer(tmp_path, "acme")
    assert refused.value.code == "key_malformed"
    assert "SECRETMATERIAL" not in str(refused.value)


def test_missing_key_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError) as refused:
        load_signer(tmp_path, "nobody")
    assert refused.value.code == "key_missing"
