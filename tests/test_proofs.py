"""Tests of client.proofs against RFC 9162 section 2.1 (and RFC 6962's test vectors)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable

import pymerkle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.errors import FormatError, VerificationError
from deplog.client.tlog.proofs import (
    EMPTY_ROOT,
    HASH_SIZE,
    ConsistencyProof,
    InclusionProof,
    ProofError,
    ProofFormatError,
    TreeFrontier,
    consistency_path,
    inclusion_path,
    leaf_hash,
    node_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)

MAX_EXHAUSTIVE = 64


def reference_mth(data: list[bytes]) -> bytes:
    """MTH(D[n]) written from RFC 9162 section 2.1.1 alone, over the raw leaves."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1
    while k * 2 < len(data):
        k *= 2
    return hashlib.sha256(b"\x01" + reference_mth(data[:k]) + reference_mth(data[k:])).digest()


def leaves(n: int) -> list[bytes]:
    return [b"leaf %d" % i for i in range(n)]


LEAVES = leaves(200)
HASHES = [leaf_hash(d) for d in LEAVES]
ROOTS = [root_from_leaf_hashes(HASHES[:n]) for n in range(MAX_EXHAUSTIVE + 2)]


def flip(h: bytes, i: int) -> bytes:
    return h[:i] + bytes([h[i] ^ 0x80]) + h[i + 1 :]


def flipped_proofs(proof: list[bytes]) -> list[list[bytes]]:
    """Every proof that differs from ``proof`` by one flipped byte."""
    return [
        [*proof[:j], flip(h, b), *proof[j + 1 :]]
        for j, h in enumerate(proof)
        for b in range(HASH_SIZE)
    ]


def fails(check: Callable[[], None]) -> bool:
    try:
        check()
    except ProofError:
        return True
    return False


# Hashing


def test_empty_root_is_sha256_of_nothing() -> None:
    assert hashlib.sha256(b"").digest() == EMPTY_ROOT
    assert root_from_leaf_hashes([]) == EMPTY_ROOT


def test_leaf_and_node_hashes_are_domain_separated() -> None:
    assert leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    assert node_hash(b"a", b"b") == hashlib.sha256(b"\x01ab").digest()


@pytest.mark.parametrize("size", range(201))
def test_root_matches_reference_mth(size: int) -> None:
    assert root_from_leaf_hashes(HASHES[:size]) == reference_mth(LEAVES[:size])


def test_roots_match_pymerkle_with_security_on() -> None:
    tree = pymerkle.InmemoryTree(algorithm="sha256")
    assert tree.get_root(0) == EMPTY_ROOT
    for size, data in enumerate(LEAVES, start=1):
        tree.append_entry(data)
        assert tree.get_root(size) == root_from_leaf_hashes(HASHES[:size])


# RFC 6962's published test tree (certificate-transparency reference tests).
RFC6962_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
RFC6962_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


@pytest.mark.parametrize("size", range(1, 9))
def test_rfc6962_test_vector_roots(size: int) -> None:
    hashes = [leaf_hash(d) for d in RFC6962_LEAVES[:size]]
    assert root_from_leaf_hashes(hashes).hex() == RFC6962_ROOTS[size - 1]


def test_rfc6962_test_vector_consistency_2_to_5() -> None:
    hashes = [leaf_hash(d) for d in RFC6962_LEAVES]
    proof = [
        bytes.fromhex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
        bytes.fromhex("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
    ]
    assert consistency_path(hashes, 2, 5) == proof
    old, new = bytes.fromhex(RFC6962_ROOTS[1]), bytes.fromhex(RFC6962_ROOTS[4])
    verify_consistency(2, 5, old, new, proof)


# Inclusion: every (index, size) up to 64 leaves


@pytest.mark.parametrize("size", range(1, MAX_EXHAUSTIVE + 1))
def test_every_inclusion_proof_verifies(size: int) -> None:
    for index in range(size):
        proof = inclusion_path(HASHES, index, size)
        verify_inclusion(HASHES[index], index, size, proof, ROOTS[size])


@pytest.mark.parametrize("size", range(1, MAX_EXHAUSTIVE + 1))
def test_every_inclusion_proof_fails_after_any_byte_flip(size: int) -> None:
    for index in range(size):
        proof = inclusion_path(HASHES, index, size)
        for bad in flipped_proofs(proof):
            assert fails(lambda: verify_inclusion(HASHES[index], index, size, bad, ROOTS[size]))  # noqa: B023


@pytest.mark.parametrize("size", range(1, MAX_EXHAUSTIVE + 1))
def test_inclusion_fails_with_wrong_leaf_index_size_or_root(size: int) -> None:
    root = ROOTS[size]
    for index in range(size):
        proof = inclusion_path(HASHES, index, size)
        leaf = HASHES[index]
        for other in {index - 1, index + 1, size - 1 - index} - {index}:
            if 0 <= other < size:
                assert fails(lambda: verify_inclusion(leaf, other, size, proof, root))  # noqa: B023
        for other_size in (size - 1, size + 1):
            if other_size > index:
                other_root = ROOTS[other_size]
                assert fails(lambda: verify_inclusion(leaf, index, other_size, proof, other_root))  # noqa: B023
        assert fails(lambda: verify_inclusion(flip(leaf, 0), index, size, proof, root))  # noqa: B023
        assert fails(lambda: verify_inclusion(leaf, index, size, proof, flip(root, 31)))  # noqa: B023


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 9, 64])
def test_inclusion_fails_with_extra_or_missing_hash(size: int) -> None:
    for index in range(size):
        proof = inclusion_path(HASHES, index, size)
        longer = [*proof, HASHES[0]]
        assert fails(lambda: verify_inclusion(HASHES[index], index, size, longer, ROOTS[size]))  # noqa: B023
        if proof:
            shorter = proof[:-1]
            assert fails(lambda: verify_inclusion(HASHES[index], index, size, shorter, ROOTS[size]))  # noqa: B023


def test_single_leaf_tree_has_empty_inclusion_proof() -> None:
    assert inclusion_path(HASHES, 0, 1) == []
    verify_inclusion(HASHES[0], 0, 1, [], HASHES[0])


def test_size_comes_from_checkpoint_not_proof() -> None:
    # The proof for leaf 0 of 3 leaves also "verifies" as leaf 0 of 4 leaves
    # against the 3-leaf root: a proof never pins the tree size, so sizes and
    # roots must both come from one verified checkpoint.
    proof = inclusion_path(HASHES, 0, 3)
    verify_inclusion(HASHES[0], 0, 4, proof, ROOTS[3])
    assert fails(lambda: verify_inclusion(HASHES[0], 0, 4, proof, ROOTS[4]))


@pytest.mark.parametrize(
    ("index", "size"), [(0, 0), (1, 1), (5, 3), (-1, 3), (0, -1), (True, 3), (0, 2**63)]
)
def test_inclusion_refuses_impossible_positions(index: int, size: int) -> None:
    with pytest.raises(ProofError) as info:
        verify_inclusion(HASHES[0], index, size, [], HASHES[0])
    assert info.value.code == "bad_inclusion_proof"


@pytest.mark.parametrize("length", [0, 31, 33])
def test_inclusion_refuses_wrong_hash_lengths(length: int) -> None:
    proof = inclusion_path(HASHES, 0, 2)
    bad = bytes(length)
    for args in [(bad, proof, ROOTS[2]), (HASHES[0], [bad], ROOTS[2]), (HASHES[0], proof, bad)]:
        leaf, path, root = args
        with pytest.raises(ProofError):
            verify_inclusion(leaf, 0, 2, path, root)


def test_inclusion_refuses_over_long_proof() -> None:
    with pytest.raises(ProofError):
        verify_inclusion(HASHES[0], 0, 2**63 - 1, [HASHES[0]] * 65, HASHES[0])


def test_inclusion_path_refuses_index_outside_tree() -> None:
    with pytest.raises(ProofError) as info:
        inclusion_path(HASHES, 3, 3)
    assert info.value.code == "bad_proof_request"


def test_inclusion_path_refuses_size_beyond_known_leaves() -> None:
    with pytest.raises(ProofError):
        inclusion_path(HASHES[:3], 0, 4)


# Consistency: every (old, new) up to 64 leaves


@pytest.mark.parametrize("new", range(MAX_EXHAUSTIVE + 1))
def test_every_consistency_proof_verifies(new: int) -> None:
    for old in range(new + 1):
        proof = consistency_path(HASHES, old, new)
        verify_consistency(old, new, ROOTS[old], ROOTS[new], proof)


@pytest.mark.parametrize("new", range(2, MAX_EXHAUSTIVE + 1))
def test_every_consistency_proof_fails_after_any_byte_flip(new: int) -> None:
    for old in range(1, new):
        proof = consistency_path(HASHES, old, new)
        for bad in flipped_proofs(proof):
            assert fails(lambda: verify_consistency(old, new, ROOTS[old], ROOTS[new], bad))  # noqa: B023


@pytest.mark.parametrize("new", range(2, MAX_EXHAUSTIVE + 1))
def test_consistency_fails_with_wrong_sizes_or_roots(new: int) -> None:
    for old in range(1, new):
        proof = consistency_path(HASHES, old, new)
        old_root, new_root = ROOTS[old], ROOTS[new]
        assert fails(lambda: verify_consistency(old, new, flip(old_root, 0), new_root, proof))  # noqa: B023
        assert fails(lambda: verify_consistency(old, new, old_root, flip(new_root, 0), proof))  # noqa: B023
        for o, n in [(old - 1, new), (old + 1, new), (old, new - 1), (old, new + 1)]:
            if 0 < o < n and (o, n) != (old, new):
                assert fails(lambda: verify_consistency(o, n, ROOTS[o], ROOTS[n], proof))  # noqa: B023


@pytest.mark.parametrize("new", [2, 3, 5, 8, 9, 33, 64])
def test_consistency_fails_with_extra_or_missing_hash(new: int) -> None:
    for old in range(1, new):
        proof = consistency_path(HASHES, old, new)
        for bad in ([*proof, HASHES[0]], proof[:-1], proof[1:]):
            assert fails(lambda: verify_consistency(old, new, ROOTS[old], ROOTS[new], bad))  # noqa: B023


@pytest.mark.parametrize("new", [0, 1, 2, 17, 64])
def test_consistency_proof_from_size_zero_is_empty(new: int) -> None:
    assert consistency_path(HASHES, 0, new) == []
    verify_consistency(0, new, EMPTY_ROOT, ROOTS[new], [])


def test_consistency_from_size_zero_refuses_a_non_empty_proof() -> None:
    with pytest.raises(ProofError):
        verify_consistency(0, 4, EMPTY_ROOT, ROOTS[4], [ROOTS[4]])


def test_consistency_from_size_zero_refuses_non_empty_old_root() -> None:
    with pytest.raises(ProofError):
        verify_consistency(0, 4, ROOTS[1], ROOTS[4], [])


def test_consistency_between_equal_sizes_needs_equal_roots() -> None:
    verify_consistency(5, 5, ROOTS[5], ROOTS[5], [])
    with pytest.raises(ProofError):
        verify_consistency(5, 5, ROOTS[5], ROOTS[6], [])
    with pytest.raises(ProofError):
        verify_consistency(5, 5, ROOTS[5], ROOTS[5], [ROOTS[5]])


def test_consistency_refuses_empty_proof_between_different_sizes() -> None:
    with pytest.raises(ProofError) as info:
        verify_consistency(4, 8, ROOTS[4], ROOTS[8], [])
    assert info.value.code == "bad_consistency_proof"


@pytest.mark.parametrize(("old", "new"), [(5, 4), (-1, 4), (1, -1), (True, 4), (0, 2**63)])
def test_consistency_refuses_impossible_sizes(old: int, new: int) -> None:
    with pytest.raises(ProofError):
        verify_consistency(old, new, ROOTS[1], ROOTS[4], [])


def test_consistency_refuses_wrong_hash_lengths() -> None:
    proof = consistency_path(HASHES, 3, 4)
    with pytest.raises(ProofError):
        verify_consistency(3, 4, ROOTS[3], ROOTS[4], [*proof[:-1], proof[-1][:31]])
    with pytest.raises(ProofError):
        verify_consistency(3, 4, ROOTS[3][:31], ROOTS[4], proof)


def test_consistency_path_refuses_old_beyond_new() -> None:
    with pytest.raises(ProofError):
        consistency_path(HASHES, 5, 4)


# JSON shapes


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.fixture
def inclusion() -> InclusionProof:
    return InclusionProof(3, 7, HASHES[3], tuple(inclusion_path(HASHES, 3, 7)))


@pytest.fixture
def consistency() -> ConsistencyProof:
    return ConsistencyProof(3, 7, tuple(consistency_path(HASHES, 3, 7)))


def test_inclusion_json_shape(inclusion: InclusionProof) -> None:
    assert inclusion.to_json() == {
        "index": 3,
        "size": 7,
        "leaf_hash": b64(HASHES[3]),
        "proof": [b64(h) for h in inclusion.hashes],
    }


def test_inclusion_json_round_trip_and_verify(inclusion: InclusionProof) -> None:
    parsed = InclusionProof.from_json(inclusion.to_json())
    assert parsed == inclusion
    parsed.verify(ROOTS[7])


def test_consistency_json_shape(consistency: ConsistencyProof) -> None:
    assert consistency.to_json() == {
        "old": 3,
        "new": 7,
        "proof": [b64(h) for h in consistency.hashes],
    }


def test_consistency_json_round_trip_and_verify(consistency: ConsistencyProof) -> None:
    parsed = ConsistencyProof.from_json(consistency.to_json())
    assert parsed == consistency
    parsed.verify(ROOTS[3], ROOTS[7])


def _with(base: dict[str, object], **changes: object) -> dict[str, object]:
    out = dict(base)
    for key, value in changes.items():
        if value is KeyError:
            del out[key]
        else:
            out[key] = value
    return out


INCLUSION_JSON = InclusionProof(3, 7, HASHES[3], tuple(inclusion_path(HASHES, 3, 7))).to_json()
CONSISTENCY_JSON = ConsistencyProof(3, 7, tuple(consistency_path(HASHES, 3, 7))).to_json()


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        "x",
        _with(INCLUSION_JSON, extra=1),
        _with(INCLUSION_JSON, index=KeyError),
        _with(INCLUSION_JSON, index=True),
        _with(INCLUSION_JSON, index=-1),
        _with(INCLUSION_JSON, index=3.0),
        _with(INCLUSION_JSON, index="3"),
        _with(INCLUSION_JSON, index=7),
        _with(INCLUSION_JSON, size=2**63),
        _with(INCLUSION_JSON, leaf_hash=b64(HASHES[3])[:-1]),
        _with(INCLUSION_JSON, leaf_hash=b64(HASHES[3][:31])),
        _with(INCLUSION_JSON, leaf_hash=HASHES[3].hex()),
        _with(INCLUSION_JSON, proof="AAAA"),
        _with(INCLUSION_JSON, proof=[1]),
        _with(INCLUSION_JSON, proof=[b64(bytes(33))]),
        _with(INCLUSION_JSON, proof=[base64.urlsafe_b64encode(b"\xff" * 32).decode()]),
        _with(INCLUSION_JSON, proof=[b64(bytes(32))] * 65),
    ],
)
def test_malformed_inclusion_json_is_refused(obj: object) -> None:
    with pytest.raises(ProofFormatError) as info:
        InclusionProof.from_json(obj)
    assert info.value.code == "malformed_proof"


@pytest.mark.parametrize(
    "obj",
    [
        {},
        _with(CONSISTENCY_JSON, size=1),
        _with(CONSISTENCY_JSON, proof=KeyError),
        _with(CONSISTENCY_JSON, old=False),
        _with(CONSISTENCY_JSON, old=8),
        _with(CONSISTENCY_JSON, new=None),
        _with(CONSISTENCY_JSON, proof=None),
        _with(CONSISTENCY_JSON, proof=["not base64!"]),
    ],
)
def test_malformed_consistency_json_is_refused(obj: object) -> None:
    with pytest.raises(ProofFormatError):
        ConsistencyProof.from_json(obj)


# Properties

sizes = st.integers(min_value=1, max_value=300)


@settings(max_examples=60, deadline=None)
@given(sizes.flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))))
def test_random_inclusion_proofs_verify(case: tuple[int, int]) -> None:
    size, index = case
    hashes = [leaf_hash(b"%d" % i) for i in range(size)]
    verify_inclusion(
        hashes[index],
        index,
        size,
        inclusion_path(hashes, index, size),
        root_from_leaf_hashes(hashes),
    )


@settings(max_examples=60, deadline=None)
@given(sizes.flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_random_consistency_proofs_verify(case: tuple[int, int]) -> None:
    old, new = case
    hashes = [leaf_hash(b"%d" % i) for i in range(new)]
    verify_consistency(
        old,
        new,
        root_from_leaf_hashes(hashes[:old]),
        root_from_leaf_hashes(hashes),
        consistency_path(hashes, old, new),
    )


proof_lists = st.lists(st.binary(min_size=32, max_size=32), max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.integers(), st.integers(), proof_lists, st.binary(max_size=40))
def test_arbitrary_inclusion_inputs_do_not_verify(
    index: int, size: int, proof: list[bytes], root: bytes
) -> None:
    with pytest.raises(ProofError):
        verify_inclusion(HASHES[0], index, size, proof, root)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1), st.integers(min_value=1), proof_lists)
def test_arbitrary_consistency_proofs_do_not_verify(old: int, new: int, proof: list[bytes]) -> None:
    with pytest.raises(ProofError):
        verify_consistency(old, new, ROOTS[1], ROOTS[2], proof)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
        max_leaves=10,
    )
)
def test_arbitrary_json_only_raises_format_errors(obj: object) -> None:
    for parse in (InclusionProof.from_json, ConsistencyProof.from_json):
        with contextlib.suppress(FormatError):
            parse(obj)


def test_proof_errors_are_verification_errors() -> None:
    assert issubclass(ProofError, VerificationError)
    assert issubclass(ProofFormatError, FormatError)


# --- TreeFrontier ---------------------------------------------------------------


def test_frontier_root_equals_rfc9162_root_at_every_size_up_to_200() -> None:
    frontier = TreeFrontier()
    hashes: list[bytes] = []
    for i in range(201):
        assert frontier.size == i
        assert frontier.root() == root_from_leaf_hashes(hashes)
        hashes.append(leaf_hash(b"%d" % i))
        frontier.append(hashes[-1])


def test_frontier_reports_every_completed_subtree_exactly_once() -> None:
    frontier = TreeFrontier()
    hashes = [leaf_hash(b"%d" % i) for i in range(64)]
    completed = [node for h in hashes for node in frontier.append(h)]
    assert len(completed) == 63  # a perfect tree of 64 leaves has 63 interior nodes
    for level, index, digest in completed:
        width = 1 << level
        assert digest == root_from_leaf_hashes(hashes[index * width : (index + 1) * width])


@given(st.integers(0, 300), st.integers(0, 50))
def test_frontier_survives_a_round_trip_through_its_hashes(size: int, more: int) -> None:
    hashes = [leaf_hash(b"%d" % i) for i in range(size + more)]
    frontier = TreeFrontier()
    for h in hashes[:size]:
        frontier.append(h)
    resumed = TreeFrontier(frontier.size, frontier.hashes)
    for h in hashes[size:]:
        resumed.append(h)
    assert resumed.root() == root_from_leaf_hashes(hashes)


def test_frontier_with_the_wrong_number_of_hashes_is_refused() -> None:
    with pytest.raises(ProofFormatError):
        TreeFrontier(3, [EMPTY_ROOT])
