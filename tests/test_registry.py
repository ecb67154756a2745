"""Tests for client/registry.py: publisher authorization as a fold of the log."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deplog.authority.http.status import http_status
from deplog.client.model.entries import (
    EntrySignatureError,
    PublisherStatement,
    sign_publisher_statement,
)
from deplog.client.model.notice import Envelope, NoticeSignatureError
from deplog.client.model.registry import (
    AuthorizationError,
    ConflictError,
    PublisherRegistry,
    RegistryError,
)
from deplog.client.tlog.note import Signer
from tests.builders import (
    PUBLISHER,
    make_notice,
    publisher_statement,
    register_statement,
)


@pytest.fixture
def registry(authority: Signer, publisher_key: Signer) -> PublisherRegistry:
    reg = PublisherRegistry()
    entry = sign_publisher_statement(register_statement(keys=(publisher_key,)), authority)
    reg.apply(0, entry, authority.verifier())
    return reg


def apply(
    reg: PublisherRegistry, authority: Signer, st_: PublisherStatement, index: int = 1
) -> None:
    reg.apply(index, sign_publisher_statement(st_, authority), authority.verifier())


def reg_code(reg: PublisherRegistry, authority: Signer, st_: PublisherStatement) -> str:
    before = json.dumps(reg.to_json(), sort_keys=True)
    with pytest.raises(RegistryError) as e:
        apply(reg, authority, st_)
    assert json.dumps(reg.to_json(), sort_keys=True) == before  # refused changes nothing
    return e.value.code


def auth_code(reg: PublisherRegistry, env: Envelope) -> tuple[str, int | None]:
    """The code an envelope is refused with, and the status the authority answers it with."""
    with pytest.raises((AuthorizationError, NoticeSignatureError)) as e:
        reg.authorize(env)
    return e.value.code, http_status(e.value.code)


# --- authorize ------------------------------------------------------------------


def test_registered_key_is_authorized(registry: PublisherRegistry, publisher_key: Signer) -> None:
    registry.authorize(Envelope.sign(make_notice(), publisher_key))


def test_unknown_publisher_is_401(registry: PublisherRegistry, publisher_key: Signer) -> None:
    env = Envelope.sign(make_notice(publisher="nobody"), publisher_key)
    assert auth_code(registry, env) == ("unknown_publisher", 401)


def test_unknown_key_is_401(registry: PublisherRegistry) -> None:
    env = Envelope.sign(make_notice(), Signer.generate("stranger"))
    assert auth_code(registry, env) == ("unknown_key", 401)


def test_bad_signature_is_401(registry: PublisherRegistry, publisher_key: Signer) -> None:
    good = Envelope.sign(make_notice(), publisher_key)
    forged = Envelope(make_notice(sequence=2), good.key_id, good.signature)
    assert auth_code(registry, forged) == ("bad_signature", 401)


def test_revoked_key_is_403(
    registry: PublisherRegistry, authority: Signer, publisher_key: Signer
) -> None:
    apply(registry, authority, publisher_statement("revoke_key", keys=(publisher_key,)))
    env = Envelope.sign(make_notice(), publisher_key)
    assert auth_code(registry, env) == ("key_revoked", 403)


def test_revoked_publisher_is_403(
    registry: PublisherRegistry, authority: Signer, publisher_key: Signer
) -> None:
    apply(registry, authority, publisher_statement("revoke_publisher"))
    env = Envelope.sign(make_notice(), publisher_key)
    assert auth_code(registry, env) == ("publisher_revoked", 403)


def test_foreign_namespace_is_403(registry: PublisherRegistry, publisher_key: Signer) -> None:
    env = Envelope.sign(make_notice(tool_id="tool:com.other/search"), publisher_key)
    assert auth_code(registry, env) == ("namespace_not_authorized", 403)


def test_sub_namespace_is_not_covered(registry: PublisherRegistry, publisher_key: Signer) -> None:
    env = Envelope.sign(make_notice(tool_id="tool:org.example.sub/search"), publisher_key)
    assert auth_code(registry, env)[0] == "namespace_not_authorized"


def test_added_key_is_authorized(registry: PublisherRegistry, authority: Signer) -> None:
    new = Signer.generate("example-key-2")
    apply(registry, authority, publisher_statement("add_key", keys=(new,)))
    registry.authorize(Envelope.sign(make_notice(), new))


# --- apply refusals -------------------------------------------------------------


def test_entry_signed_by_other_key_is_refused(registry: PublisherRegistry) -> None:
    entry = sign_publisher_statement(
        publisher_statement("revoke_publisher"), Signer.generate("evil")
    )
    with pytest.raises(EntrySignatureError) as e:
        registry.apply(1, entry, Signer.generate("log").verifier())
    assert e.value.code == "bad_authority_signature"


def test_forged_entry_is_refused(registry: PublisherRegistry, authority: Signer) -> None:
    real = sign_publisher_statement(
        publisher_statement("add_key", keys=(Signer.generate("a"),)), authority
    )
    forged = type(real)(publisher_statement("revoke_publisher"), real.signature, real.key_id)
    with pytest.raises(EntrySignatureError) as e:
        registry.apply(1, forged, authority.verifier())
    assert e.value.code == "bad_authority_signature"


def test_registering_existing_publisher_is_refused(
    registry: PublisherRegistry, authority: Signer
) -> None:
    st_ = register_statement(namespaces=("org.new",), keys=(Signer.generate("n"),))
    assert reg_code(registry, authority, st_) == "publisher_exists"


def test_registering_owned_namespace_is_refused(
    registry: PublisherRegistry, authority: Signer
) -> None:
    st_ = register_statement(publisher="other", keys=(Signer.generate("n"),))
    assert reg_code(registry, authority, st_) == "namespace_in_use"


def test_key_of_another_publisher_is_refused(
    registry: PublisherRegistry, authority: Signer, publisher_key: Signer
) -> None:
    st_ = register_statement(publisher="other", namespaces=("org.other",), keys=(publisher_key,))
    assert reg_code(registry, authority, st_) == "key_in_use"


def test_same_raw_key_under_another_name_is_refused(
    registry: PublisherRegistry, authority: Signer, publisher_key: Signer
) -> None:
    renamed = Signer.from_seed("renamed", b"\x01" * 32)
    twin = Signer.from_seed("twin", b"\x01" * 32)
    apply(registry, authority, publisher_statement("add_key", keys=(renamed,)))
    assert (
        reg_code(registry, authority, publisher_statement("add_key", keys=(twin,))) == "key_in_use"
    )


def test_readding_own_key_is_refused(
    registry: PublisherRegistry, authority: Signer, publisher_key: Signer
) -> None:
    assert (
        reg_code(registry, authority, publisher_statement("add_key", keys=(publisher_key,)))
        == "key_in_use"
    )


def test_adding_key_to_unknown_publisher_is_refused(
    registry: PublisherRegistry, authority: Signer
) -> None:
    st_ = publisher_statement("add_key", publisher="ghost", keys=(Signer.generate("g"),))
    assert reg_code(registry, authority, st_) == "publisher_not_registered"


def test_adding_key_to_revoked_publisher_is_refused(
    registry: PublisherRegistry, authority: Signer
) -> None:
    apply(registry, authority, publisher_statement("revoke_publisher"))
    st_ = publisher_statement("add_key", keys=(Signer.generate("g"),))
    assert reg_code(registry, authority, st_) == "publisher_already_revoked"


def test_revoking_key_not_owned_is_refused(registry: PublisherRegistry, authority: Signer) -> None:
    st_ = publisher_statement("revoke_key", keys=(Signer.generate("g"),))
    assert reg_code(registry, authority, st_) == "key_not_registered"


def test_revoking_key_twice_is_refused(
    registry: PublisherRegistry, authority: Signer, publisher_key: Signer
) -> None:
    apply(registry, authority, publisher_statement("revoke_key", keys=(publisher_key,)))
    st_ = publisher_statement("revoke_key", keys=(publisher_key,))
    assert reg_code(registry, authority, st_) == "key_already_revoked"


def test_revoked_namespace_stays_reserved(registry: PublisherRegistry, authority: Signer) -> None:
    apply(registry, authority, publisher_statement("revoke_publisher"))
    st_ = register_statement(publisher="usurper", keys=(Signer.generate("u"),))
    assert reg_code(registry, authority, st_) == "namespace_in_use"


# --- withdraws ------------------------------------------------------------------


def test_withdraw_of_own_notice_is_accepted() -> None:
    target = make_notice()
    w = make_notice(action="withdraw", affected=None, sunset_at=None, withdraws=0)
    PublisherRegistry.check_withdraw(w, target)


@pytest.mark.parametrize(
    "target",
    [
        None,
        make_notice(publisher="other"),
        make_notice(tool_id="tool:org.example/other"),
        make_notice(action="withdraw", affected=None, sunset_at=None, withdraws=0),
    ],
)
def test_bad_withdraw_target_is_409(target: object) -> None:
    w = make_notice(action="withdraw", affected=None, sunset_at=None, withdraws=0)
    with pytest.raises(ConflictError) as e:
        PublisherRegistry.check_withdraw(w, target)  # type: ignore[arg-type]
    assert (e.value.code, http_status(e.value.code)) == ("bad_withdraw_target", 409)


# --- snapshots ------------------------------------------------------------------


def test_snapshot_round_trips_state(
    registry: PublisherRegistry, authority: Signer, publisher_key: Signer
) -> None:
    new = Signer.generate("example-key-2")
    apply(registry, authority, publisher_statement("add_key", keys=(new,)), index=3)
    apply(registry, authority, publisher_statement("revoke_key", keys=(publisher_key,)), index=4)
    snap = json.loads(json.dumps(registry.to_json()))
    restored = PublisherRegistry.from_json(snap)
    assert restored.to_json() == registry.to_json()
    restored.authorize(Envelope.sign(make_notice(sequence=8), new))
    assert auth_code(restored, Envelope.sign(make_notice(), publisher_key))[0] == "key_revoked"


def test_snapshot_from_the_increasing_sequence_rule_still_loads(
    registry: PublisherRegistry,
) -> None:
    """Follower state files written before sequences became unique hold a highest
    sequence per publisher; the registry no longer keeps it and reads past it."""
    old = {**registry.to_json(), "sequences": {"example": 7}}
    assert PublisherRegistry.from_json(old).to_json() == registry.to_json()


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s.update(format="other"),
        lambda s: s["publishers"][0].update(registered_at=-1),
        lambda s: s["publishers"][0]["keys"][0].update(key="junk"),
        lambda s: s["publishers"].append(s["publishers"][0]),
        lambda s: s.pop("publishers"),
    ],
)
def test_corrupt_snapshot_is_bad_snapshot(registry: PublisherRegistry, mutate: object) -> None:
    snap = json.loads(json.dumps(registry.to_json()))
    mutate(snap)  # type: ignore[operator]
    with pytest.raises(RegistryError) as e:
        PublisherRegistry.from_json(snap)
    assert e.value.code == "bad_snapshot"


def test_publishers_listing(registry: PublisherRegistry, publisher_key: Signer) -> None:
    [p] = registry.publishers()
    assert p.publisher == PUBLISHER and p.namespaces == ("org.example",)
    assert registry.namespace_owner("org.example") == PUBLISHER
    assert p.to_json()["keys"][0]["key"] == publisher_key.verifier().vkey()


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=3),
        max_leaves=12,
    )
)
def test_arbitrary_snapshot_raises_only_registry_error(value: object) -> None:
    with contextlib.suppress(RegistryError):
        PublisherRegistry.from_json(value)
