"""Tests of client.policy against C2SP tlog-policy, and cosignature interop vectors.

Keys are real: fixed seeds make them reproducible, and checkpoints are signed
and cosigned with the same functions the authority and witnesses use.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.tlog.checkpoint import Checkpoint, sign_checkpoint
from deplog.client.tlog.cosignature import Cosignature, CosignatureError, cosign, cosigner
from deplog.client.tlog.note import (
    NoteSignature,
    Signer,
    UnverifiedNoteError,
    Verifier,
    add_signature_lines,
    cosigned_message,
    parse_note,
)
from deplog.client.tlog.policy import (
    MAX_CLOCK_SKEW,
    MAX_LOGS,
    MAX_POLICY_SIZE,
    MAX_WITNESSES,
    NO_QUORUM,
    Policy,
    PolicyError,
    PolicyFormatError,
    PolicyGroup,
    PolicyLog,
    PolicyWitness,
)

ORIGIN = "policy.deplog.example/log"
NOW = 1_767_225_600  # 2026-01-01T00:00:00Z


def log_signer(seed: int, name: str = ORIGIN) -> Signer:
    return Signer.from_seed(name, bytes([seed]) * 32)


def witness_signer(seed: int, name: str | None = None) -> Signer:
    return cosigner(Signer.from_seed(name or f"w{seed}.example", bytes([100 + seed]) * 32))


LOG = log_signer(1)
WITNESSES = [witness_signer(i) for i in range(8)]
"""A pool of witness keys: X1-X3 are 0-2, Y1-Y3 are 3-5; 6 and 7 are spare."""


def vkey(signer: Signer) -> str:
    return signer.verifier().vkey()


def example_policy_text() -> str:
    """tlog-policy's "Example policy", with real keys in place of ``<vkey>``."""
    w = [vkey(s) for s in WITNESSES]
    return f"""log {vkey(LOG)}

witness X1 {w[0]}
witness X2 {w[1]}
witness X3 {w[2]}
group X-witnesses 2 X1 X2 X3

witness Y1 {w[3]}
witness Y2 {w[4]}
witness Y3 {w[5]}
group Y-witnesses any Y1 Y2 Y3

group X-and-Y all X-witnesses Y-witnesses
quorum X-and-Y
"""


@pytest.fixture(scope="module")
def example() -> Policy:
    """Immutable, so shared by the whole module (and by hypothesis examples)."""
    return Policy.parse(example_policy_text())


def cosig(index: int, timestamp: int) -> Cosignature:
    """A (pretend-verified) cosignature by pool witness ``index``, for quorum_time."""
    v = WITNESSES[index].verifier()
    return Cosignature(v.name, v.key_id, timestamp)


# --- parsing ------------------------------------------------------------------


def test_spec_example_policy_parses_to_its_structure(example: Policy) -> None:
    assert [log.verifier for log in example.logs] == [LOG.verifier()]
    assert list(example.witnesses) == ["X1", "X2", "X3", "Y1", "Y2", "Y3"]
    assert example.witnesses["Y2"].verifier == WITNESSES[4].verifier()
    assert example.groups["X-witnesses"] == PolicyGroup("X-witnesses", 2, ("X1", "X2", "X3"))
    assert example.groups["Y-witnesses"].threshold == 1
    assert example.groups["X-and-Y"] == PolicyGroup("X-and-Y", 2, ("X-witnesses", "Y-witnesses"))
    assert example.quorum == "X-and-Y"


def test_whitespace_comments_and_urls_are_accepted() -> None:
    text = (
        "# a comment line\n"
        "\t  # an indented comment, with octets \xff\n"
        f"  log\t{vkey(LOG)}   https://log.example/#frag  \n"
        "   \t\n"
        f"witness\tA {vkey(WITNESSES[0])} https://w.example/\n"
        "quorum A"  # no final newline
    ).encode("latin-1")
    policy = Policy.parse(text)
    assert policy.logs[0].url == "https://log.example/#frag"
    assert policy.witnesses["A"].url == "https://w.example/"
    assert policy.quorum == "A"


def test_names_are_opaque_octets() -> None:
    # "K" and the Kelvin sign (U+212A) are different names; invalid UTF-8 is allowed too.
    text = (
        f"witness K {vkey(WITNESSES[0])}\n".encode()
        + f"witness \u212a {vkey(WITNESSES[1])}\n".encode()
        + f"witness \xff\xfe {vkey(WITNESSES[2])}\n".encode("latin-1")
        + b"group g all K \xe2\x84\xaa \xff\xfe\nquorum g\n"
    )
    policy = Policy.parse(text)
    assert len(policy.witnesses) == 3
    assert Policy.parse(policy.to_text()) == policy
    assert policy.to_text().encode("utf-8", "surrogateescape").count(b"\xff\xfe") == 2


def test_quorum_none_needs_no_witnesses() -> None:
    policy = Policy.parse(f"log {vkey(LOG)}\nquorum none\n")
    assert policy.quorum == "none"
    assert policy == Policy.single_log(LOG.verifier())


def test_a_log_key_may_also_be_a_witness_key() -> None:
    # Duplicates are forbidden within logs and within witnesses, not across them.
    policy = Policy.parse(f"log {vkey(LOG)}\nwitness W {vkey(cosigner(LOG))}\nquorum W\n")
    assert policy.witnesses["W"].verifier.public_key == LOG.public_key


def test_spec_minimum_of_32_logs_witnesses_and_groups_is_supported() -> None:
    logs = [f"log {vkey(log_signer(i, f'log{i}.example'))}" for i in range(32)]
    witnesses = [f"witness w{i} {vkey(witness_signer(i + 10))}" for i in range(32)]
    groups = [f"group g{i} any w{i}" for i in range(32)]
    text = "\n".join(
        [*logs, *witnesses, *groups, "group q 32 " + " ".join(f"g{i}" for i in range(32))]
    )
    policy = Policy.parse(text + "\nquorum q\n")
    assert (len(policy.logs), len(policy.witnesses), len(policy.groups)) == (32, 32, 33)


# Each case: a policy breaking one rule, and the line number the error must name.
SECOND_X1 = vkey(witness_signer(0, "other.example/name"))  # X1's key under another name
REFUSALS: dict[str, tuple[Callable[[list[str]], str], int]] = {
    "unknown_keyword": (lambda w: f"witness A {w[0]}\nwitnes B {w[1]}\nquorum A\n", 2),
    "unknown_name": (lambda w: f"witness A {w[0]}\ngroup g any A B\nquorum g\n", 2),
    "forward_reference": (
        lambda w: f"group g any A\nwitness A {w[0]}\nquorum g\n",
        1,
    ),
    "forward_quorum": (lambda w: f"quorum A\nwitness A {w[0]}\n", 1),
    "undefined_quorum": (lambda w: f"witness A {w[0]}\nquorum B\n", 2),
    "duplicate_member": (
        lambda w: f"witness A {w[0]}\nwitness B {w[1]}\ngroup g 2 A B A\nquorum g\n",
        3,
    ),
    "member_of_two_groups": (
        lambda w: f"witness A {w[0]}\ngroup g any A\ngroup h any A\nquorum h\n",
        3,
    ),
    "none_as_member": (lambda w: f"witness A {w[0]}\ngroup g any A none\nquorum g\n", 2),
    "none_redefined": (lambda w: f"witness none {w[0]}\nquorum none\n", 1),
    "name_defined_twice": (
        lambda w: f"witness A {w[0]}\nwitness B {w[1]}\ngroup A any B\nquorum A\n",
        3,
    ),
    "duplicate_witness_key": (
        lambda w: f"witness A {w[0]}\n# same key, other name\nwitness B {SECOND_X1}\nquorum A\n",
        3,
    ),
    "duplicate_log_key": (
        lambda w: f"log {vkey(LOG)}\nlog {vkey(log_signer(1, 'renamed.example'))}\nquorum none\n",
        2,
    ),
    "k_zero": (lambda w: f"witness A {w[0]}\ngroup g 0 A\nquorum g\n", 2),
    "k_above_n": (lambda w: f"witness A {w[0]}\ngroup g 2 A\nquorum g\n", 2),
    "k_huge": (lambda w: f"witness A {w[0]}\ngroup g {'9' * 4000} A\nquorum g\n", 2),
    "k_signed": (lambda w: f"witness A {w[0]}\ngroup g +1 A\nquorum g\n", 2),
    "k_not_ascii_decimal": (lambda w: f"witness A {w[0]}\ngroup g \uff11 A\nquorum g\n", 2),
    "group_without_members": (lambda w: f"witness A {w[0]}\ngroup g any\nquorum A\n", 2),
    "two_quorum_lines": (lambda w: f"witness A {w[0]}\nquorum A\nquorum none\n", 3),
    "no_quorum_line": (lambda w: f"witness A {w[0]}\n\n", 3),
    "bad_vkey": (lambda w: f"witness A {w[0][:-4]}AAA=\nquorum A\n", 1),
    "vkey_with_bad_key_id": (lambda w: f"witness A {w[1][:-45]}{w[0][-45:]}\nquorum A\n", 1),
    "log_key_as_witness": (lambda w: f"witness A {vkey(LOG)}\nquorum A\n", 1),
    "witness_key_as_log": (lambda w: f"quorum none\nlog {w[0]}\n", 2),
    "extra_item": (lambda w: f"witness A {w[0]} https://w.example/ extra\nquorum A\n", 1),
    "carriage_return": (lambda w: f"witness A {w[0]}\r\nquorum A\n", 1),
    "nul": (lambda w: f"witness A {w[0]}\nquorum A\n# \x00\n", 3),
    "delete": (lambda w: f"witness A\x7f {w[0]}\nquorum A\n", 1),
    "vertical_tab_as_space": (lambda w: f"witness A\x0b{w[0]}\nquorum A\n", 1),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_rule_violation_is_refused_with_its_line_number(case: str) -> None:
    build, line = REFUSALS[case]
    text = build([vkey(s) for s in WITNESSES])
    with pytest.raises(PolicyFormatError) as caught:
        Policy.parse(text)
    assert caught.value.code == "malformed_policy"
    assert caught.value.line == line
    assert str(caught.value).startswith(f"line {line}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"witness A {vkey(LOG)}\nquorum A\n", "line 1: vkey has signature type 0x01, not 0x04"),
        (
            f"log {vkey(WITNESSES[0])}\nquorum none\n",
            "line 1: vkey has signature type 0x04, not 0x01",
        ),
    ],
    ids=["log_key_as_witness", "witness_key_as_log"],
)
def test_wrong_key_type_is_named_in_the_error(text: str, message: str) -> None:
    with pytest.raises(PolicyFormatError, match=message):
        Policy.parse(text)


def test_error_message_never_echoes_the_line() -> None:
    secret = "https://user:hunter2@w.example/"
    with pytest.raises(PolicyFormatError) as caught:
        Policy.parse(f"witness A {vkey(WITNESSES[0])} {secret} extra\nquorum A\n")
    assert caught.value.line == 1
    assert "hunter2" not in str(caught.value)
    assert "w0.example" not in str(caught.value)


def test_over_long_file_is_refused_at_the_line_crossing_the_limit() -> None:
    comment = "#" + "x" * 99 + "\n"  # 101 octets
    text = comment * (MAX_POLICY_SIZE // len(comment) + 1) + "quorum none\n"
    with pytest.raises(PolicyFormatError) as caught:
        Policy.parse(text)
    assert caught.value.line == MAX_POLICY_SIZE // len(comment) + 1


def test_more_witnesses_than_the_limit_are_refused_at_the_first_extra_one() -> None:
    lines = [
        f"witness w{i} {vkey(cosigner(Signer.generate(f'w{i}.example')))}"
        for i in range(MAX_WITNESSES + 1)
    ]
    with pytest.raises(PolicyFormatError) as caught:
        Policy.parse("\n".join([*lines, "quorum none", ""]))
    assert caught.value.line == MAX_WITNESSES + 1


def test_more_logs_than_the_limit_are_refused() -> None:
    lines = [f"log {vkey(Signer.generate(f'l{i}.example'))}" for i in range(MAX_LOGS + 1)]
    with pytest.raises(PolicyFormatError) as caught:
        Policy.parse("\n".join([*lines, "quorum none", ""]))
    assert caught.value.line == MAX_LOGS + 1


def test_policy_built_in_code_obeys_the_same_rules() -> None:
    w = WITNESSES[0].verifier()
    with pytest.raises(PolicyFormatError, match="earlier line"):
        Policy((), {}, {"g": PolicyGroup("g", 1, ("A",))}, "g")
    with pytest.raises(PolicyFormatError, match="whitespace"):
        Policy((), {"a b": PolicyWitness("a b", w)}, {}, "none")
    with pytest.raises(PolicyFormatError, match="type 0x04"):
        Policy((), {"A": PolicyWitness("A", LOG.verifier())}, {}, "A")
    with pytest.raises(PolicyFormatError, match="type 0x01"):
        Policy((PolicyLog(w),), {}, {}, "none")


def test_k_of_n_builds_a_threshold_group_over_the_witness_keys() -> None:
    keys = [s.verifier() for s in WITNESSES[:3]]
    policy = Policy.k_of_n(LOG.verifier(), keys, 2)
    assert policy.quorum_time([cosig(0, 10), cosig(2, 20)]) == 10
    assert policy.quorum_time([cosig(1, 10)]) is None
    assert Policy.parse(policy.to_text()) == policy
    with pytest.raises(PolicyFormatError):
        Policy.k_of_n(LOG.verifier(), keys, 4)


# --- round trip -------------------------------------------------------------------

_NAME_OCTETS = [*range(0x21, 0x7F), *range(0x80, 0x100)]
names = st.lists(st.sampled_from(_NAME_OCTETS), min_size=1, max_size=6).map(
    lambda octets: bytes(octets).decode("utf-8", "surrogateescape")
)
urls = st.none() | names.map(lambda n: "https://" + n)
LOG_POOL = [log_signer(i, f"log{i}.example") for i in range(4)]


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    """Valid policies: some logs, witnesses under random names, nested groups, a quorum."""
    logs = draw(st.lists(st.sampled_from(LOG_POOL), unique=True, max_size=3))
    keys = draw(st.lists(st.sampled_from(WITNESSES), unique=True, max_size=len(WITNESSES)))
    witness_names = draw(
        st.lists(
            names.filter(lambda n: n != "none"),
            unique=True,
            min_size=len(keys),
            max_size=len(keys),
        )
    )
    witnesses = {
        n: PolicyWitness(n, k.verifier(), draw(urls))
        for n, k in zip(witness_names, keys, strict=True)
    }
    free = list(witnesses)  # names not yet used as a member
    groups: dict[str, PolicyGroup] = {}
    for _ in range(draw(st.integers(0, 4))):
        if not free:
            break
        name = draw(names.filter(lambda n: n != "none" and n not in witnesses and n not in groups))
        members = draw(st.lists(st.sampled_from(free), unique=True, min_size=1))
        for m in members:
            free.remove(m)
        groups[name] = PolicyGroup(name, draw(st.integers(1, len(members))), tuple(members))
        free.append(name)
    quorum = draw(st.sampled_from(["none", *witnesses, *groups]))
    return Policy(
        tuple(PolicyLog(s.verifier(), draw(urls)) for s in logs), witnesses, groups, quorum
    )


@settings(max_examples=150, deadline=None)
@given(policies())
def test_to_text_parses_back_to_an_equal_policy(policy: Policy) -> None:
    text = policy.to_text()
    assert Policy.parse(text) == policy
    assert Policy.parse(text.encode("utf-8", "surrogateescape")) == policy
    assert Policy.parse(text).to_text() == text


# --- quorum time ------------------------------------------------------------------


def test_quorum_time_is_the_kth_largest_time_at_each_level(example: Policy) -> None:
    # X-witnesses (2 of 3): 2nd largest of {100, 300, 200} = 200.
    # Y-witnesses (any): largest of {50, 400} = 400. X-and-Y (all): min(200, 400) = 200.
    cosigs = [cosig(0, 100), cosig(1, 300), cosig(2, 200), cosig(3, 50), cosig(5, 400)]
    assert example.quorum_time(cosigs) == 200


def test_quorum_time_follows_the_older_group(example: Policy) -> None:
    cosigs = [cosig(0, 500), cosig(1, 600), cosig(4, 70)]
    assert example.quorum_time(cosigs) == 70


def test_quorum_not_met_when_a_group_falls_short(example: Policy) -> None:
    assert example.quorum_time([cosig(0, 100), cosig(3, 100), cosig(4, 100)]) is None


def test_quorum_not_met_without_cosignatures(example: Policy) -> None:
    assert example.quorum_time([]) is None


def test_a_witness_counts_at_its_newest_cosignature(example: Policy) -> None:
    assert example.quorum_time([cosig(0, 10), cosig(0, 90), cosig(1, 80), cosig(3, 99)]) == 80


def test_cosignatures_by_unknown_keys_do_not_count(example: Policy) -> None:
    stranger = witness_signer(0, "w0.example").verifier()
    renamed = Cosignature("elsewhere.example", stranger.key_id, 100)  # right ID, wrong name
    cosigs = [cosig(0, 100), cosig(6, 100), cosig(7, 100), cosig(3, 100), renamed]
    assert example.quorum_time(cosigs) is None


def test_quorum_none_has_no_time() -> None:
    assert Policy.single_log(LOG.verifier()).quorum_time([cosig(0, 5)]) is NO_QUORUM


def _met(policy: Policy, name: str, present: set[str]) -> bool:
    """The boolean quorum rule of tlog-policy, independently: at least k members witnessed."""
    if name in policy.witnesses:
        return name in present
    group = policy.groups[name]
    return sum(_met(policy, m, present) for m in group.members) >= group.threshold


@settings(max_examples=200, deadline=None)
@given(times=st.lists(st.none() | st.integers(0, 20), min_size=6, max_size=6))
def test_quorum_time_is_the_latest_time_the_boolean_quorum_holds_at(
    example: Policy, times: list[int | None]
) -> None:
    # T is right if the witnesses that signed at or after T meet the quorum,
    # and those that signed after T do not.
    cosigs = [cosig(i, t) for i, t in enumerate(times) if t is not None]
    when = example.quorum_time(cosigs)
    names = list(example.witnesses)

    def signed_since(t: int) -> set[str]:
        return {names[i] for i, s in enumerate(times) if s is not None and s >= t}

    if when is None:
        assert not _met(example, example.quorum, signed_since(0))
    else:
        assert isinstance(when, int)
        assert _met(example, example.quorum, signed_since(when))
        assert not _met(example, example.quorum, signed_since(when + 1))


# --- verify -------------------------------------------------------------------------


@dataclass
class Signed:
    """A checkpoint signed by LOG, and a way to add cosignatures to it."""

    checkpoint: Checkpoint
    note: bytes

    def cosigned(self, *by: tuple[Signer, int]) -> bytes:
        text = self.checkpoint.to_text()
        return add_signature_lines(self.note, *(cosign(text, s, t) for s, t in by))


@pytest.fixture
def signed() -> Signed:
    checkpoint = Checkpoint(ORIGIN, 42, bytes(range(32)))
    return Signed(checkpoint, sign_checkpoint(checkpoint, LOG))


def quorum_cosigs(at: int = NOW - 100) -> list[tuple[Signer, int]]:
    """Enough for the example policy: X1, X2 and Y1, all at ``at``."""
    return [(WITNESSES[0], at), (WITNESSES[1], at), (WITNESSES[3], at)]


def test_verify_accepts_a_checkpoint_cosigned_by_the_quorum(
    example: Policy, signed: Signed
) -> None:
    note = signed.cosigned((WITNESSES[0], NOW - 30), (WITNESSES[1], NOW - 20), (WITNESSES[3], NOW))
    verified = example.verify(note, now=NOW, max_age=60)
    assert verified.checkpoint == signed.checkpoint
    assert verified.log == LOG.verifier()
    assert verified.witnessed_at == NOW - 30
    assert {c.name for c in verified.cosignatures} == {"w0.example", "w1.example", "w3.example"}


def test_verify_refuses_a_checkpoint_short_of_the_quorum(example: Policy, signed: Signed) -> None:
    note = signed.cosigned((WITNESSES[0], NOW), (WITNESSES[3], NOW), (WITNESSES[4], NOW))
    with pytest.raises(PolicyError) as caught:
        example.verify(note, now=NOW, max_age=None)
    assert caught.value.code == "quorum_not_met"


def test_verify_refuses_a_stale_checkpoint(example: Policy, signed: Signed) -> None:
    note = signed.cosigned(*quorum_cosigs(at=NOW - 100))
    assert example.verify(note, now=NOW, max_age=100).witnessed_at == NOW - 100
    with pytest.raises(PolicyError) as caught:
        example.verify(note, now=NOW, max_age=99)
    assert caught.value.code == "stale_checkpoint"


def test_verify_ignores_cosignatures_dated_beyond_the_clock_skew(
    example: Policy, signed: Signed
) -> None:
    future = NOW + MAX_CLOCK_SKEW + 1
    note = signed.cosigned((WITNESSES[0], NOW), (WITNESSES[1], future), (WITNESSES[3], NOW))
    with pytest.raises(PolicyError) as caught:
        example.verify(note, now=NOW, max_age=None)
    assert caught.value.code == "quorum_not_met"


def test_verify_accepts_cosignatures_within_the_clock_skew(example: Policy, signed: Signed) -> None:
    note = signed.cosigned(*quorum_cosigs(at=NOW + MAX_CLOCK_SKEW))
    assert example.verify(note, now=NOW, max_age=0).witnessed_at == NOW + MAX_CLOCK_SKEW


def test_verify_ignores_cosignatures_by_unknown_keys(example: Policy, signed: Signed) -> None:
    note = signed.cosigned(*quorum_cosigs(), (WITNESSES[6], NOW))
    verified = example.verify(note, now=NOW, max_age=None)
    assert "w6.example" not in {c.name for c in verified.cosignatures}


def test_verify_refuses_a_tampered_cosignature(example: Policy, signed: Signed) -> None:
    note = signed.cosigned(*quorum_cosigs())
    _, sigs = parse_note(note)
    forged = sigs[1].signature[:8] + bytes(64)  # X1's line, signature zeroed
    tampered = note.replace(
        base64.b64encode(sigs[1].key_id + sigs[1].signature),
        base64.b64encode(sigs[1].key_id + forged),
    )
    assert tampered != note
    with pytest.raises(CosignatureError) as caught:
        example.verify(tampered, now=NOW, max_age=None)
    assert caught.value.code == "bad_cosignature"


def test_verify_refuses_a_checkpoint_from_a_log_not_in_the_policy(example: Policy) -> None:
    other = log_signer(9, "other.example/log")
    note = sign_checkpoint(Checkpoint("other.example/log", 1, bytes(32)), other)
    with pytest.raises(PolicyError) as caught:
        example.verify(note, now=NOW, max_age=None)
    assert caught.value.code == "log_not_in_policy"


def test_verify_refuses_a_log_signature_by_another_key_of_the_same_name(example: Policy) -> None:
    impostor = log_signer(9)  # named ORIGIN, but not the policy's key
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, bytes(32)), impostor)
    with pytest.raises(UnverifiedNoteError) as caught:
        example.verify(note, now=NOW, max_age=None)
    assert caught.value.code == "unverified_note"


def test_verify_accepts_either_of_two_keys_for_one_origin(signed: Signed) -> None:
    rotated = log_signer(2)
    policy = Policy((PolicyLog(rotated.verifier()), PolicyLog(LOG.verifier())), {}, {}, "none")
    assert policy.verify(signed.note, now=NOW, max_age=None).log == LOG.verifier()


def test_verify_under_quorum_none_has_no_witnessed_time(signed: Signed) -> None:
    policy = Policy.single_log(LOG.verifier())
    verified = policy.verify(signed.note, now=NOW, max_age=1)  # max_age cannot apply
    assert verified.witnessed_at is None
    assert verified.cosignatures == ()


# --- tlog-cosignature interop vectors -----------------------------------------------

SPEC_TEXT = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SPEC_NOTE = (
    SPEC_TEXT
    + "\n"
    + "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7"
    "u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    "\u2014 witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJ"
    "sX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n"
)


def test_cosigned_message_matches_the_spec_example_byte_for_byte() -> None:
    # tlog-cosignature v1.0.1, "Ed25519 signed message".
    expected = (
        b"cosignature/v1\n"
        b"time 1679315147\n"
        b"example.com/behind-the-sofa\n"
        b"20852163\n"
        b"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    )
    assert cosigned_message(SPEC_TEXT.encode(), 1679315147) == expected


def test_spec_example_cosignature_has_the_cosignature_v1_layout() -> None:
    """The witness.example.com/w1 line is key ID (4) + big-endian timestamp (8) + Ed25519 (64).

    The spec does not publish that witness's public key, so only the structure
    can be checked, not the signature.
    """
    text, sigs = parse_note(SPEC_NOTE.encode())
    assert text == SPEC_TEXT
    witness = sigs[1]
    assert witness.name == "witness.example.com/w1"
    assert len(witness.key_id) == 4
    assert len(witness.signature) == 8 + 64
    assert int.from_bytes(witness.signature[:8], "big") == 1679315147


def test_our_cosignature_has_the_spec_layout_and_verifies_with_a_type_4_key() -> None:
    w = WITNESSES[0]
    line = cosign(SPEC_TEXT, w, 1679315147)
    assert line.key_id == w.key_id != cosigner(w).with_sig_type(1).key_id
    assert line.signature[:8] == (1679315147).to_bytes(8, "big")
    assert Verifier.parse_cosigner(vkey(w)).verify(
        cosigned_message(SPEC_TEXT.encode(), 1679315147), line.signature[8:]
    )


# --- ML-DSA-44 witnesses, tree-lines witnesses and the map quorum (deplog's lines) ----

MLDSA = [Signer.from_seed(f"pq{i}.example", bytes([200 + i]) * 32, 0x06) for i in range(2)]
MAP_LINE = "deplog-map/v1 " + base64.b64encode(bytes(32)).decode()


def mapped() -> Signed:
    checkpoint = Checkpoint(ORIGIN, 42, bytes(range(32)), (MAP_LINE,))
    return Signed(checkpoint, sign_checkpoint(checkpoint, LOG))


def three_lines(signer: Signer, checkpoint: Checkpoint, timestamp: int) -> NoteSignature:
    """litewitness's form: cosignature/v1 over the first three lines only."""
    text = "".join(line + "\n" for line in checkpoint.to_text().split("\n")[:3]).encode()
    sig = signer.sign(cosigned_message(text, timestamp))
    return NoteSignature(signer.name, signer.key_id, timestamp.to_bytes(8, "big") + sig)


def mixed_policy(extra: str = "") -> Policy:
    return Policy.parse(
        f"log {vkey(LOG)}\n"
        f"witness E {vkey(WITNESSES[0])}\n"
        f"witness L {vkey(WITNESSES[1])}\n"
        "#deplog: tree-lines L\n"
        f"witness P {vkey(MLDSA[0])}\n"
        "group all-three all E L P\n"
        "quorum all-three\n" + extra
    )


def test_mldsa_witness_lines_parse_and_render_back() -> None:
    policy = mixed_policy()
    assert policy.witnesses["P"].verifier.sig_type == 0x06
    assert policy.witnesses["L"].tree_lines and not policy.witnesses["E"].tree_lines
    assert Policy.parse(policy.to_text()) == policy
    assert "#deplog: tree-lines L\n" in policy.to_text()


def test_a_mixed_quorum_counts_ed25519_and_mldsa_cosignatures() -> None:
    signed = mapped()
    text = signed.checkpoint.to_text()
    lines = [
        cosign(text, WITNESSES[0], NOW - 10),
        three_lines(WITNESSES[1], signed.checkpoint, NOW - 20),
        cosign(text, MLDSA[0], NOW - 30),
    ]
    policy = mixed_policy()
    verified = policy.verify(add_signature_lines(signed.note, *lines), now=NOW, max_age=60)
    assert verified.witnessed_at == NOW - 30
    shown = {(c.name, c.algorithm, c.statement) for c in verified.cosignatures}
    assert shown == {
        ("w0.example", "ed25519", "full_body"),
        ("w1.example", "ed25519", "tree_lines"),
        ("pq0.example", "ml-dsa-44", "tree_lines"),
    }
    with pytest.raises(PolicyError) as err:
        policy.verify(add_signature_lines(signed.note, *lines[:2]), now=NOW, max_age=None)
    assert err.value.code == "quorum_not_met"


def test_only_a_tree_lines_witness_may_sign_the_tree_lines_only() -> None:
    signed = mapped()
    text = signed.checkpoint.to_text()
    # E is not marked: its three-line cosignature is a bad cosignature, as the spec says.
    note = add_signature_lines(
        signed.note,
        three_lines(WITNESSES[0], signed.checkpoint, NOW),
        three_lines(WITNESSES[1], signed.checkpoint, NOW),
        cosign(text, MLDSA[0], NOW),
    )
    with pytest.raises(CosignatureError) as err:
        mixed_policy().verify(note, now=NOW, max_age=None)
    assert err.value.code == "bad_cosignature"
    # A marked witness's full-body cosignature is still accepted, and says so.
    note = add_signature_lines(signed.note, cosign(text, WITNESSES[1], NOW))
    (found,) = mixed_policy().cosignatures(note)
    assert found.statement == "full_body"


def test_the_directives_are_comments_to_every_other_parser() -> None:
    text = mixed_policy("#deplog: map-quorum E\n").to_text()
    stripped = "".join(
        line + "\n" for line in text.splitlines() if not line.lstrip().startswith("#")
    )
    other = Policy.parse(stripped)  # what a parser that skips comments reads
    assert not any(w.tree_lines for w in other.witnesses.values())
    assert other.map_quorum is None
    # "# deplog:" (with a space) is an ordinary comment to deplog too.
    spaced = Policy.parse(text.replace("#deplog:", "# deplog:"))
    assert spaced == other


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("#deplog: tree-lines X\n", "no witness defined on an earlier line"),
        ("#deplog: tree-lines L\n", "twice"),
        ("#deplog: tree-lines P\n", "Ed25519 (0x04) witness"),
        ("#deplog: tree-lines all-three\n", "no witness"),
        ("#deplog: tree-lines\n", "wrong number of items"),
        ("#deplog: tree-lines E E\n", "wrong number of items"),
        ("#deplog: treelines E\n", "unknown #deplog: line"),
        ("#deplog:\n", "unknown #deplog: line"),
        ("  #deplog:map-quorum nothing\n", "map-quorum is not a witness or group"),
        ("#deplog: map-quorum none\n", "map-quorum is not a witness or group"),
        ("#deplog: map-quorum E\n#deplog: map-quorum E\n", "more than one map-quorum"),
        ("#deplog: map-quorum L\n", "can never be met"),
        ("#deplog: map-quorum P\n", "can never be met"),
        ("#deplog: map-quorum all-three\n", "can never be met"),
    ],
)
def test_bad_deplog_lines_are_refused_with_their_line_number(extra: str, message: str) -> None:
    with pytest.raises(PolicyFormatError) as err:
        mixed_policy(extra)
    assert message in err.value.detail
    assert err.value.line is not None and err.value.line >= 8
    assert err.value.code == "malformed_policy"


def test_a_tree_lines_witness_never_counts_toward_the_map_quorum() -> None:
    signed = mapped()
    text = signed.checkpoint.to_text()
    policy = Policy.parse(
        f"log {vkey(LOG)}\n"
        f"witness M {vkey(WITNESSES[0])}\n"
        f"witness L {vkey(WITNESSES[1])}\n"
        "#deplog: tree-lines L\n"
        f"witness P {vkey(MLDSA[0])}\n"
        "group map any M L\n"
        "group tree any map P\n"
        "quorum tree\n"
        "#deplog: map-quorum map\n"
    )
    # The tree quorum is met by L or P, but the map quorum only by M's full body.
    for lines in (
        [three_lines(WITNESSES[1], signed.checkpoint, NOW)],
        [cosign(text, WITNESSES[1], NOW)],  # L's full body: still a tree-lines witness
        [cosign(text, MLDSA[0], NOW)],
    ):
        with pytest.raises(PolicyError) as err:
            policy.verify(add_signature_lines(signed.note, *lines), now=NOW, max_age=None)
        assert err.value.code == "quorum_not_met"
        assert "map" in str(err.value)
    note = add_signature_lines(
        signed.note, cosign(text, WITNESSES[0], NOW - 50), cosign(text, MLDSA[0], NOW)
    )
    verified = policy.verify(note, now=NOW, max_age=None)
    assert (verified.witnessed_at, verified.map_witnessed_at) == (NOW - 50, NOW - 50)
    assert Policy.parse(policy.to_text()) == policy


def test_k_of_n_marks_tree_lines_witnesses() -> None:
    witnesses = [WITNESSES[0].verifier(), WITNESSES[1].verifier(), MLDSA[0].verifier()]
    policy = Policy.k_of_n(LOG.verifier(), witnesses, 2, tree_lines=[witnesses[1]])
    assert [w.tree_lines for w in policy.witnesses.values()] == [False, True, False]
    assert Policy.parse(policy.to_text()) == policy
    with pytest.raises(PolicyFormatError):
        Policy.k_of_n(LOG.verifier(), witnesses, 1, tree_lines=[witnesses[2]])
