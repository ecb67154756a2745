"""The authority's config.json: today's bytes kept, and refusals that name the file.

The expected file contents are written out by hand, as ``authority`` wrote them
before there was a typed config, so an existing data directory keeps working.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deplog.authority.cli import main as authority_main
from deplog.authority.config import CONFIG_FILE, AuthorityConfig, ConfigError, ExternalWitness
from deplog.client.tlog.cosignature import cosigner
from deplog.client.tlog.note import Signer

WITNESS_A = cosigner(Signer.generate("a.witness.example")).verifier().vkey()
WITNESS_B = cosigner(Signer.generate("b.witness.example")).verifier().vkey()

INITIALIZED = '{\n  "origin": "example.com/log",\n  "log_key": "example.com_log"\n}\n'
WITH_A_WITNESS = (
    "{\n"
    '  "origin": "example.com/log",\n'
    '  "log_key": "example.com_log",\n'
    '  "witnesses": [\n'
    "    {\n"
    '      "url": "https://a.witness.example/",\n'
    f'      "key": "{WITNESS_A}"\n'
    "    }\n"
    "  ]\n"
    "}\n"
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / CONFIG_FILE


def write(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


def valid(**changes: Any) -> dict[str, Any]:
    """A valid file's members with ``changes`` applied (None removes a member)."""
    obj: dict[str, Any] = {
        "origin": "example.com/log",
        "log_key": "example.com_log",
        "witnesses": [{"url": "https://a.witness.example/", "key": WITNESS_A}],
    }
    obj.update(changes)
    return {k: v for k, v in obj.items() if v is not None}


def refusal(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        AuthorityConfig.load(path)
    return refused.value


# Today's files


def test_a_new_config_takes_its_key_stem_from_the_origin() -> None:
    config = AuthorityConfig.new("example.com/log")
    assert (config.origin, config.log_key, config.witnesses) == (
        "example.com/log",
        "example.com_log",
        (),
    )


def test_a_new_config_without_an_origin_gets_the_default() -> None:
    assert AuthorityConfig.new(None).origin == "localhost/deplog"


def test_saving_a_new_config_writes_todays_bytes(path: Path) -> None:
    AuthorityConfig.new("example.com/log").save(path)
    assert path.read_text() == INITIALIZED


def test_saving_with_a_witness_writes_todays_bytes(path: Path) -> None:
    config = AuthorityConfig.new("example.com/log")
    witness = ExternalWitness("https://a.witness.example/", WITNESS_A).verifier()
    config.with_witness("https://a.witness.example/", witness).save(path)
    assert path.read_text() == WITH_A_WITNESS


@pytest.mark.parametrize("text", [INITIALIZED, WITH_A_WITNESS])
def test_todays_files_load_and_save_back_byte_for_byte(path: Path, text: str) -> None:
    path.write_text(text)
    AuthorityConfig.load(path).save(path)
    assert path.read_text() == text


def test_the_file_is_saved_0644(path: Path) -> None:
    AuthorityConfig.new(None).save(path)
    assert path.stat().st_mode & 0o777 == 0o644


def test_adding_a_witness_with_a_known_key_replaces_its_url() -> None:
    a, b = (ExternalWitness("http://x/", k).verifier() for k in (WITNESS_A, WITNESS_B))
    config = AuthorityConfig.new(None).with_witness("http://a1/", a).with_witness("http://b/", b)
    config = config.with_witness("http://a2/", a)
    assert [(w.url, w.key) for w in config.witnesses] == [
        ("http://b/", WITNESS_B),
        ("http://a2/", WITNESS_A),
    ]


def test_the_embedded_witness_is_named_after_the_log() -> None:
    config = AuthorityConfig.new("example.com/log")
    assert (config.embedded_witness_key, config.embedded_witness_name) == (
        "example.com_log-witness",
        "example.com/log/witness",
    )


# Refusals (rule 2): one line naming the file, code malformed_config, no value quoted

SECRET = "s3cr3t-value"
"""Put where a value belongs; no message may repeat it."""

MALFORMED: dict[str, bytes] = {
    "not JSON": b"{origin: " + SECRET.encode(),
    "not UTF-8": b'{"origin": "\xff"}',
    "empty": b"",
    "not an object": json.dumps([SECRET]).encode(),
    "no origin": json.dumps(valid(origin=None)).encode(),
    "no log key": json.dumps(valid(log_key=None)).encode(),
    "origin not a string": json.dumps(valid(origin=7)).encode(),
    "origin not a key name": json.dumps(valid(origin=f"two words {SECRET}")).encode(),
    "log key a path": json.dumps(valid(log_key=f"../{SECRET}")).encode(),
    "log key empty": json.dumps(valid(log_key="")).encode(),
    "unknown member": json.dumps(valid(**{SECRET: 1})).encode(),
    "witnesses not a list": json.dumps(valid(witnesses={"url": SECRET})).encode(),
    "witness not an object": json.dumps(valid(witnesses=[SECRET])).encode(),
    "witness without key": json.dumps(valid(witnesses=[{"url": "http://w/"}])).encode(),
    "witness unknown member": json.dumps(
        valid(witnesses=[{"url": "http://w/", "key": WITNESS_A, SECRET: 1}])
    ).encode(),
    "witness url not http": json.dumps(
        valid(witnesses=[{"url": f"file:///{SECRET}", "key": WITNESS_A}])
    ).encode(),
    "witness key malformed": json.dumps(
        valid(witnesses=[{"url": "http://w/", "key": SECRET}])
    ).encode(),
    "witness key of a log, not a cosigner": json.dumps(
        valid(witnesses=[{"url": "http://w/", "key": Signer.generate("w").verifier().vkey()}])
    ).encode(),
    "the same witness twice": json.dumps(
        valid(
            witnesses=[
                {"url": "http://one/", "key": WITNESS_A},
                {"url": "http://two/", "key": WITNESS_A},
            ]
        )
    ).encode(),
}


@pytest.mark.parametrize("content", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_file_is_refused_in_one_line_naming_it(path: Path, content: bytes) -> None:
    path.write_bytes(content)
    refused = refusal(path)
    message = str(refused)
    assert refused.code == "malformed_config"
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    assert SECRET not in message


def test_a_missing_member_is_named(path: Path) -> None:
    assert "'log_key'" in str(refusal(write(path, valid(log_key=None))))


def test_a_bad_witness_is_named_by_its_position(path: Path) -> None:
    second_bad = [
        {"url": "http://w/", "key": WITNESS_A},
        {"url": "ftp://w/", "key": WITNESS_B},
    ]
    assert "witness 1" in str(refusal(write(path, valid(witnesses=second_bad))))


def test_an_unreadable_path_is_not_reported_as_malformed(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        AuthorityConfig.load(tmp_path / "missing.json")


# The CLI reads and writes it only through AuthorityConfig


def authority(*args: str | Path) -> int:
    return authority_main([str(a) for a in args])


def test_init_writes_todays_file(tmp_path: Path) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    assert authority("init", "--data", data, "--keys", keys, "--origin", "example.com/log") == 0
    assert (data / CONFIG_FILE).read_text() == INITIALIZED


def test_witness_add_appends_to_todays_file(tmp_path: Path) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    authority("init", "--data", data, "--keys", keys, "--origin", "example.com/log")
    added = authority(
        "witness", "add", "--data", data, "--keys", keys,
        "--url", "https://a.witness.example/", "--key", WITNESS_A,
    )  # fmt: skip
    assert added == 0
    assert (data / CONFIG_FILE).read_text() == WITH_A_WITNESS


def test_a_malformed_config_stops_the_cli_with_one_line_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    data.mkdir()
    config = write(data / CONFIG_FILE, valid(witnesses="not a list"))
    before = config.read_bytes()
    added = authority(
        "witness", "add", "--data", data, "--keys", keys,
        "--url", "https://b.witness.example/", "--key", WITNESS_B,
    )  # fmt: skip
    err = capsys.readouterr().err
    assert added == 1
    assert err == f"authority: malformed_config: {config}: 'witnesses' must be a list\n"
    assert config.read_bytes() == before


def test_witness_add_on_an_uninitialized_directory_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    added = authority(
        "witness", "add", "--data", data, "--keys", tmp_path / "keys",
        "--url", "https://b.witness.example/", "--key", WITNESS_B,
    )  # fmt: skip
    assert added == 1
    assert "holds no authority" in capsys.readouterr().err
    assert not (data / CONFIG_FILE).exists()


def test_tree_lines_is_true_or_absent_and_only_for_ed25519_keys(path: Path) -> None:
    from deplog.client.tlog.cosignature import cosigner
    from deplog.client.tlog.note import Signer

    ed = cosigner(Signer.generate("ed.example")).verifier().vkey()
    pq = Signer.generate("pq.example", 0x06).verifier().vkey()
    base = {"origin": "o.example/log", "log_key": "o.example_log"}
    good = {**base, "witnesses": [{"url": "https://e/", "key": ed, "tree_lines": True}]}
    assert AuthorityConfig.from_json(good).witnesses[0].tree_lines
    assert AuthorityConfig.from_json(good).to_json() == good
    for entry, message in (
        ({"url": "https://e/", "key": ed, "tree_lines": False}, "true or absent"),
        ({"url": "https://e/", "key": ed, "tree_lines": "yes"}, "true or absent"),
        ({"url": "https://p/", "key": pq, "tree_lines": True}, "Ed25519 (0x04) keys only"),
    ):
        with pytest.raises(ConfigError) as err:
            AuthorityConfig.from_json({**base, "witnesses": [entry]})
        assert message in str(err.value)
    pq_only = {**base, "witnesses": [{"url": "https://p/", "key": pq}]}
    assert AuthorityConfig.from_json(pq_only).witnesses[0].verifier().sig_type == 0x06
