"""Tests for client/map/: the deplog-map/v1 tree, records, proofs and line.

The oracle is tests/vmap_reference.py (a from-scratch recursive partition, sharing no
code with client/map/) and the checked-in vectors in tests/vectors/vmap-v1.json.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.map.errors import MapFormatError, MapLineError, MapStorageError
from deplog.client.map.hashing import EMPTY_ROOT, bit_of, leaf_hash, map_key, node_hash, value_hash
from deplog.client.map.line import map_line, map_root_of, require_map_root
from deplog.client.map.nodes import ChildRef, InnerNode, MemoryNodeStore
from deplog.client.map.proof import (
    MapProof,
    MapProofDocument,
    verify_map_proof,
    verify_proof_document,
    verify_status,
    verify_tool_status,
)
from deplog.client.map.record import (
    RecordNotice,
    StatusRecord,
    evaluate,
    extend_record_bytes,
    fold_notices,
    record_item_bytes,
)
from deplog.client.map.tree import KeyPath, PathStep, PrefixTree, root_from_path
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry
from deplog.client.model.notice import Notice
from deplog.client.model.registry import PublisherRegistry
from deplog.client.model.rules import EntryChecker
from deplog.client.model.status import StatusError, StatusIndex
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from deplog.client.tlog.note import Signer, Verifier, decode_base64, encode_base64
from deplog.client.tlog.proofs import leaf_hash as log_leaf_hash
from deplog.client.tlog.proofs import node_hash as log_node_hash
from tests.builders import (
    TOOL,
    admitted,
    make_notice,
    notices,
    revoke_json,
    semvers,
    withdraw_json,
)
from tests.vmap_reference import reference_lookup, reference_root
from tests.vmap_vectors import VECTORS, accumulated_items, generate, vector_leaves

OTHER_TOOL = "tool:org.example/fetch"
NOW = datetime(2026, 3, 15, tzinfo=UTC)

Items = dict[bytes, bytes]


# --- helpers ----------------------------------------------------------------------------


def random_items(rng: random.Random, n: int) -> Items:
    return {rng.randbytes(32): rng.randbytes(32) for _ in range(n)}


def tree_of(items: Mapping[bytes, bytes]) -> PrefixTree:
    tree = PrefixTree()
    tree.update(items)
    return tree


def flip(key: bytes, bit: int) -> bytes:
    out = bytearray(key)
    out[bit >> 3] ^= 0x80 >> (bit & 7)
    return bytes(out)


def shared_prefix_keys(base: bytes) -> list[bytes]:
    """``base`` and, for every bit i, base with bit i flipped: keys sharing 0..255-bit
    prefixes, so base's leaf sits under 256 inner nodes."""
    return [base, *(flip(base, bit) for bit in range(256))]


def record_of(*signed: Notice, first_index: int = 1) -> StatusRecord:
    return StatusRecord.of(signed[0].tool_id, enumerate(signed, first_index))


@pytest.fixture
def tool_map() -> VerifiableMap:
    """A map of two tools with records and 200 filler tools, so paths are a few levels."""
    vmap = VerifiableMap()
    fillers = [
        record_of(make_notice(tool_id=f"tool:org.filler/t{i}", sequence=i + 1)) for i in range(200)
    ]
    vmap.apply(
        [
            record_of(make_notice(), Notice.from_json(revoke_json(sequence=2))),
            record_of(make_notice(tool_id=OTHER_TOOL)),
            *fillers,
        ]
    )
    return vmap


def absent_tool(vmap: VerifiableMap) -> str:
    return next(t for i in range(1000) if (t := f"tool:org.example/absent{i}") not in vmap.records)


def rejected(call: Any) -> ErrorCode:
    """The code a verification raises; fails the test if it accepts."""
    with pytest.raises(DeplogError) as info:
        call()
    return info.value.code


# --- hashing and keys -------------------------------------------------------------------


def test_the_empty_map_root_is_the_hash_of_its_tag() -> None:
    assert hashlib.sha256(b"\x12").digest() == EMPTY_ROOT
    assert PrefixTree().root() == EMPTY_ROOT


def test_hashes_are_tagged_apart_from_rfc_9162() -> None:
    a, b = b"a" * 32, b"b" * 32
    assert leaf_hash(a, b) != log_leaf_hash(a + b)
    assert node_hash(0, a, b) != log_node_hash(a, b)
    assert leaf_hash(a, b) == hashlib.sha256(b"\x10" + a + b).digest()
    assert node_hash(7, a, b) == hashlib.sha256(b"\x11\x07" + a + b).digest()
    assert value_hash(b"{}") == hashlib.sha256(b"\x13{}").digest()


def test_a_key_is_the_sha256_of_the_tool_id() -> None:
    assert map_key(TOOL) == hashlib.sha256(TOOL.encode("ascii")).digest()


@pytest.mark.parametrize(
    "tool_id", ["org.example/search", "tool:Org.example/search", "tool:org.example/a/b", ""]
)
def test_a_key_needs_a_valid_tool_id(tool_id: str) -> None:
    assert rejected(lambda: map_key(tool_id)) == ErrorCode.BAD_TOOL_ID


def test_a_one_key_map_root_is_its_leaf_hash() -> None:
    key, value = b"k" * 32, b"v" * 32
    assert tree_of({key: value}).root() == leaf_hash(key, value)


# --- the tree against the reference model -----------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_roots_match_the_reference_after_every_random_batch(seed: int) -> None:
    rng = random.Random(seed)
    tree, items = PrefixTree(), Items()
    for _ in range(25):
        batch = random_items(rng, rng.choice([0, 1, 2, 5, 17]))
        for key in rng.sample(sorted(items), min(len(items), rng.randint(0, 4))):
            batch[key] = rng.randbytes(32)  # updates of present keys
        tree.update(batch)
        items.update(batch)
        assert tree.root() == reference_root(items)


def near(rng: random.Random, key: bytes) -> bytes:
    """A key sharing a random number of leading bits with ``key`` (0 to 255), then parting."""
    shared = rng.randrange(256)
    flipped = int.from_bytes(key, "big") ^ (1 << (255 - shared))
    low = rng.getrandbits(255 - shared) if shared < 255 else 0
    value = (flipped >> (255 - shared) << (255 - shared)) | low
    return value.to_bytes(32, "big")


@pytest.mark.parametrize("seed", range(4))
def test_keys_parting_from_a_stored_one_at_any_bit_give_the_reference_root(seed: int) -> None:
    """A key alone in its range walks its bits to a leaf and parts from it where they
    first differ: inside a compressed edge at any depth, above the root, or beside the
    leaf. New keys made to share 0 to 255 leading bits with stored ones, one a batch and
    several, and updates of stored ones, all give the reference root."""
    rng = random.Random(seed)
    tree, items = PrefixTree(), Items()
    tree.update(first := random_items(rng, 40))
    items.update(first)
    for round_ in range(60):
        stored = sorted(items)
        batch = {near(rng, rng.choice(stored)): rng.randbytes(32)}
        if round_ % 3:
            batch.update({near(rng, rng.choice(stored)): rng.randbytes(32) for _ in range(3)})
            batch[rng.choice(stored)] = rng.randbytes(32)
        assert tree.update(batch) == reference_root(items | batch)
        items.update(batch)
        for key in rng.sample(sorted(items), 3):
            path = tree.lookup(key)
            assert path.leaf_key == key and root_from_path(key, path) == tree.root()


def test_roots_match_the_reference_up_to_ten_thousand_keys() -> None:
    rng = random.Random(10_000)
    tree, items = PrefixTree(), Items()
    for size in (1, 10, 100, 1000, 8889):
        batch = random_items(rng, size)
        batch.update({k: rng.randbytes(32) for k in rng.sample(sorted(items), len(items) // 10)})
        tree.update(batch)
        items.update(batch)
        assert tree.root() == reference_root(items)
    assert len(items) == 10_000


def test_the_root_does_not_depend_on_batch_order_or_partition() -> None:
    rng = random.Random(7)
    final = random_items(rng, 2000)
    stale = {k: rng.randbytes(32) for k in rng.sample(sorted(final), 300)}
    roots = set()
    for cut in (1, 7, 500, 2000):
        keys = list(final)
        rng.shuffle(keys)
        tree = PrefixTree()
        tree.update(stale)  # earlier values, overwritten below
        for start in range(0, len(keys), cut):
            tree.update({k: final[k] for k in keys[start : start + cut]})
        roots.add(tree.root())
    assert roots == {reference_root(final)}


def test_an_empty_batch_changes_nothing() -> None:
    tree = tree_of(random_items(random.Random(1), 10))
    before = tree.root()
    assert tree.update({}) == before


def test_keys_and_values_are_32_bytes() -> None:
    with pytest.raises(ValueError):
        PrefixTree().update({b"short": b"v" * 32})


@pytest.fixture(scope="module")
def big_tree() -> tuple[PrefixTree, Items]:
    items = random_items(random.Random(42), 10_000)
    return tree_of(items), items


def test_every_present_key_has_a_lookup_that_leads_to_the_root(
    big_tree: tuple[PrefixTree, Items],
) -> None:
    tree, items = big_tree
    root = tree.root()
    for key, value in items.items():
        path = tree.lookup(key)
        assert (path.leaf_key, path.leaf_value) == (key, value)
        assert root_from_path(key, path) == root


def test_random_absent_keys_reach_another_leaf_that_leads_to_the_root(
    big_tree: tuple[PrefixTree, Items],
) -> None:
    tree, items = big_tree
    rng = random.Random(5)
    for _ in range(2000):
        key = rng.randbytes(32)
        path = tree.lookup(key)
        assert path.leaf_key in items and path.leaf_key != key
        assert root_from_path(key, path) == tree.root()


def test_lookups_match_the_reference(big_tree: tuple[PrefixTree, Items]) -> None:
    _, items = big_tree
    small = dict(list(items.items())[:300])
    small_tree = tree_of(small)
    rng = random.Random(9)
    for key in [*list(small)[:30], *(rng.randbytes(32) for _ in range(30))]:
        leaf, steps = reference_lookup(small, key)
        path = small_tree.lookup(key)
        assert path.leaf_key == leaf
        assert [(s.bit, s.sibling) for s in path.steps] == steps


class CountingStore(MemoryNodeStore):
    """A memory store that counts the rows a batch reads and writes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.written = 0
        self.queries = 0
        """``inner`` calls and ``inner_many`` calls: one query each in a database."""

    def inner(self, node: bytes) -> InnerNode:
        self.reads += 1
        return super().inner(node)

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        self.queries += 1
        return [super(CountingStore, self).inner(node) for node in nodes]

    def held(self) -> Mapping[bytes, InnerNode]:
        return {}  # as a database without a cache

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        self.written = len(inners)
        super().write(root, inners, leaves)


def test_a_one_key_update_reads_and_rewrites_only_its_path(
    big_tree: tuple[PrefixTree, Items],
) -> None:
    _, items = big_tree
    store = CountingStore()
    tree = PrefixTree(store)
    tree.update(items)
    key = next(iter(items))
    depth = len(tree.lookup(key).steps)
    store.reads = 0
    tree.update({key: b"\x01" * 32})
    assert store.queries and store.reads == 0  # the path was read ahead, not row by row
    assert store.written == depth


def test_a_batch_reads_its_paths_with_one_query_per_depth(
    big_tree: tuple[PrefixTree, Items],
) -> None:
    """On PostgreSQL a query is a round trip under the log's lock: a batch of changed
    keys reads the rows on their paths depth by depth, never one by one."""
    _, items = big_tree
    store = CountingStore()
    tree = PrefixTree(store)
    tree.update(items)
    changes = dict(random_items(random.Random(7), 50))
    changes.update({key: b"\x02" * 32 for key in list(items)[:50]})
    store.queries = store.reads = 0
    tree.update(changes)
    reads, queries = store.reads, store.queries
    deepest = max(len(tree.lookup(key).steps) for key in changes)
    assert reads == 0 and 0 < queries <= deepest


def test_a_new_key_adds_one_node_above_its_path(big_tree: tuple[PrefixTree, Items]) -> None:
    _, items = big_tree
    store = CountingStore()
    tree = PrefixTree(store)
    tree.update(items)
    key = random.Random(3).randbytes(32)
    depth_before = len(tree.lookup(key).steps)
    store.reads = 0
    tree.update({key: b"\x01" * 32})
    assert store.reads <= depth_before and store.written <= depth_before + 1
    assert len(tree.lookup(key).steps) <= depth_before + 1


def test_a_batch_costs_at_most_changed_keys_times_depth(
    big_tree: tuple[PrefixTree, Items],
) -> None:
    _, items = big_tree
    store = CountingStore()
    tree = PrefixTree(store)
    tree.update(items)
    rng = random.Random(4)
    batch = {k: rng.randbytes(32) for k in rng.sample(sorted(items), 100)}
    batch.update(random_items(rng, 100))
    bound = sum(len(tree.lookup(k).steps) + 1 for k in batch)
    store.reads = 0
    tree.update(batch)
    assert store.reads <= bound and store.written <= bound


# --- adversarial key shapes -------------------------------------------------------------


def test_keys_sharing_every_prefix_length_match_the_reference() -> None:
    keys = shared_prefix_keys(hashlib.sha256(b"base").digest())
    items = {k: hashlib.sha256(k).digest() for k in keys}
    tree = tree_of(items)
    assert tree.root() == reference_root(items)
    path = tree.lookup(keys[0])
    assert [s.bit for s in path.steps] == list(range(255, -1, -1))
    for key in keys:
        assert root_from_path(key, tree.lookup(key)) == tree.root()


@pytest.mark.parametrize("order", ["deepest first", "shallowest first", "shuffled"])
def test_shared_prefix_keys_give_one_root_whatever_the_insertion_order(order: str) -> None:
    keys = shared_prefix_keys(hashlib.sha256(b"other base").digest())
    items = {k: hashlib.sha256(k).digest() for k in keys}
    sequence = [keys[0], *keys[1:][:: -1 if order == "deepest first" else 1]]
    if order == "shuffled":
        random.Random(2).shuffle(sequence)
    tree = PrefixTree()
    for key in sequence:
        tree.update({key: items[key]})
    assert tree.root() == reference_root(items)


def test_a_full_depth_path_round_trips_in_both_forms() -> None:
    keys = shared_prefix_keys(hashlib.sha256(b"deep").digest())
    tree = tree_of({k: k for k in keys})
    steps = tree.lookup(keys[0]).steps
    proof = MapProof("absent", steps, alt_key=keys[0], alt_value=keys[0])
    assert len(steps) == 256
    assert MapProof.from_binary(proof.to_binary()) == proof
    assert MapProof.from_json(proof.to_json()) == proof


@settings(max_examples=60, deadline=None)
@given(
    prefix=st.integers(0, 255),
    tails=st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=40, unique=True),
    shuffle_seed=st.integers(0, 2**32),
)
def test_property_roots_match_the_reference_for_clustered_keys(
    prefix: int, tails: list[bytes], shuffle_seed: int
) -> None:
    """Keys forced to share their first ``prefix`` bits, set one at a time in any order."""
    head = hashlib.sha256(b"cluster").digest()
    mask = (1 << 256) - (1 << (256 - prefix)) if prefix else 0
    keys = {
        ((int.from_bytes(head, "big") & mask) | (int.from_bytes(t, "big") & ~mask)).to_bytes(
            32, "big"
        )
        for t in tails
    }
    items = {k: hashlib.sha256(k).digest() for k in keys}
    order = sorted(items)
    random.Random(shuffle_seed).shuffle(order)
    tree = PrefixTree()
    for key in order:
        tree.update({key: items[key]})
    assert tree.root() == reference_root(items)
    for key in order:
        assert root_from_path(key, tree.lookup(key)) == tree.root()


# --- records ------------------------------------------------------------------------------


def test_a_record_is_every_notice_in_log_order() -> None:
    deprecate, revoke = make_notice(), Notice.from_json(revoke_json(sequence=2))
    record = record_of(deprecate, revoke)
    assert [item.index for item in record.notices] == [1, 2]
    assert record.notices == (RecordNotice.of(1, deprecate), RecordNotice.of(2, revoke))
    assert record.encode()[:1] == b"\x01"


def test_a_record_keeps_what_the_fold_reads_and_not_the_rest() -> None:
    """issued_at, publisher, sequence and message do not change a record's bytes."""
    plain = record_of(make_notice())
    chatty = record_of(
        make_notice(
            issued_at="2020-01-01T00:00:00Z",
            publisher="someone-else",
            sequence=77,
            message="moved to the new search tool",
        )
    )
    assert plain.encode() == chatty.encode()
    assert record_of(make_notice(effective_at="2026-02-01T00:00:01Z")).encode() != plain.encode()


def test_a_one_notice_record_is_small() -> None:
    """The bench's one-notice record (two versions, one reason, a sunset): 45 bytes."""
    assert len(record_of(make_notice()).encode()) == 45


def test_a_record_decodes_to_itself() -> None:
    record = record_of(make_notice(), Notice.from_json(withdraw_json(1, sequence=2)))
    assert StatusRecord.decode(record.encode(), TOOL) == record


notice_lists = given(raw=st.lists(notices(), min_size=1, max_size=6))


@settings(settings.get_profile("fast"))
@notice_lists
def test_property_every_notice_shape_round_trips_through_a_record(
    raw: list[dict[str, Any]],
) -> None:
    """Every optional field, range shape and time the notice schema allows survives (a few
    examples; 200 in the slow lane)."""
    assert_round_trips_through_a_record(raw)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@notice_lists
def test_property_every_notice_shape_round_trips_through_a_record_thoroughly(
    raw: list[dict[str, Any]],
) -> None:
    assert_round_trips_through_a_record(raw)


def assert_round_trips_through_a_record(raw: list[dict[str, Any]]) -> None:
    items = []
    for index, obj in enumerate(raw):
        if obj["action"] == "withdraw":
            continue
        items.append(RecordNotice.of(index, Notice.from_json({**obj, "tool_id": TOOL})))
    if not items:
        return
    record = StatusRecord.build(TOOL, items)
    assert StatusRecord.decode(record.encode(), TOOL) == record


def test_a_record_refuses_notices_out_of_log_order() -> None:
    items = [RecordNotice.of(5, make_notice()), RecordNotice.of(4, make_notice())]
    with pytest.raises(StatusError):
        StatusRecord.build(TOOL, items)


def test_a_record_refuses_a_withdraw_without_its_target() -> None:
    withdraw = Notice.from_json(withdraw_json(0, sequence=2))
    with pytest.raises(StatusError):
        StatusRecord.build(TOOL, [RecordNotice.of(1, withdraw)])


def test_a_record_refuses_another_tools_notice() -> None:
    item = RecordNotice.of(1, make_notice(tool_id=OTHER_TOOL))
    assert rejected(lambda: StatusRecord.build(TOOL, [item])) == ErrorCode.MALFORMED_MAP_RECORD


def test_a_record_holds_at_least_one_notice() -> None:
    assert rejected(lambda: StatusRecord.build(TOOL, [])) == ErrorCode.MALFORMED_MAP_RECORD


def _record_edits() -> dict[str, bytes]:
    """Byte edits of records, each a case the decoder must refuse."""
    good = record_of(make_notice()).encode()
    revoke = record_of(Notice.from_json(revoke_json(sequence=1))).encode()
    withdrawn = record_of(make_notice(), Notice.from_json(withdraw_json(1, sequence=2))).encode()
    first = 1  # the first item starts after the format byte
    reasons_at = first + 2 + 8 + 8
    versions_at = reasons_at + 2 + 1  # one reason, no advisories
    sunset_at = versions_at + 2 + 6 + 6 + 1

    def at(data: bytes, offset: int, new: bytes) -> bytes:
        return data[:offset] + new + data[offset + len(new) :]

    big = (2**53).to_bytes(8, "big")
    return {
        "nothing": b"",
        "format byte only": b"\x01",
        "format 0": at(good, 0, b"\x00"),
        "format 2": at(good, 0, b"\x02"),
        "trailing byte": good + b"\x00",
        "truncated": good[:-1],
        "action 3": at(good, first, b"\x03"),
        "unknown flag": at(good, first + 1, b"\x09"),
        "index over 2^53-1": at(good, first + 2, big),
        "time before year 1": at(good, first + 10, (-(2**62)).to_bytes(8, "big", signed=True)),
        "no reasons": at(good, reasons_at, b"\x00"),
        "reason code 8": at(good, reasons_at + 1, b"\x08"),
        "no versions or ranges": good[:versions_at] + b"\x00\x00\x00" + good[sunset_at:],
        "a version that is not semver": at(good, versions_at + 3, b"v"),
        "a repeated version": at(good, versions_at + 2 + 6 + 1, b"1.0.0"),
        "a non-ASCII version": at(good, versions_at + 3, b"\xff"),
        "sunset before effective": at(good, sunset_at, b"\x00" * 8),
        "a revoke with a sunset": at(revoke, first + 1, b"\x01") + b"\x00" * 8,
        "a security revoke without advisories": at(
            revoke, first + 1 + 1 + 16 + 2, b"\x00" + revoke[first + 1 + 1 + 16 + 2 + 15 :]
        )[: len(revoke) - 14],
        "a withdraw with flags": at(withdrawn, len(withdrawn) - 28, b"\x01"),  # 29-byte item
        "a withdraw of a later index": withdrawn[:-8] + (9).to_bytes(8, "big"),
        "a withdraw target over 2^53-1": withdrawn[:-8] + big,
    }


@pytest.mark.parametrize("edit", list(_record_edits()))
def test_a_record_that_is_not_the_one_encoding_is_malformed(edit: str) -> None:
    data = _record_edits()[edit]
    assert rejected(lambda: StatusRecord.decode(data, TOOL)) == ErrorCode.MALFORMED_MAP_RECORD


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=120), cut=st.integers(0, 60))
def test_property_any_bytes_decode_to_a_record_or_malformed_map_record(
    data: bytes, cut: int
) -> None:
    """No input escapes as another error (or a traceback); accepted bytes re-encode."""
    good = record_of(make_notice(), Notice.from_json(revoke_json(sequence=2))).encode()
    for candidate in (data, good[:cut] + data, b"\x01" + data):
        try:
            record = StatusRecord.decode(candidate, TOOL)
        except MapFormatError as err:
            assert err.code == ErrorCode.MALFORMED_MAP_RECORD
        else:
            assert record.encode() == candidate


@st.composite
def tool_logs(draw: st.DrawFn) -> list[Notice]:
    """Admitted-shaped logs over two tools and two publishers: deprecates and revokes with
    versions, ranges and sunsets, and withdraws aimed at an earlier notice of the same tool
    and publisher, at effective times around a few fixed instants."""
    instants = [datetime(2026, 3, d, tzinfo=UTC) for d in (1, 10, 20)]
    log: list[Notice] = []
    for raw in draw(st.lists(notices(), min_size=1, max_size=8)):
        tool = draw(st.sampled_from([TOOL, OTHER_TOOL]))
        publisher = draw(st.sampled_from(["example", "other"]))
        effective = draw(st.sampled_from(instants)) + timedelta(seconds=draw(st.integers(-1, 1)))
        obj = {**raw, "tool_id": tool, "publisher": publisher, "sequence": len(log) + 1}
        obj["effective_at"] = effective.strftime("%Y-%m-%dT%H:%M:%SZ")
        if "sunset_at" in obj:
            sunset = effective + timedelta(days=draw(st.integers(0, 15)))
            obj["sunset_at"] = sunset.strftime("%Y-%m-%dT%H:%M:%SZ")
        if obj["action"] == "withdraw":
            targets = [
                i
                for i, n in enumerate(log)
                if n.action != "withdraw" and n.tool_id == tool and n.publisher == publisher
            ]
            if not targets:
                continue
            obj["withdraws"] = draw(st.sampled_from(targets))
        log.append(Notice.from_json(obj))
    return log


tool_logs_and_moments = given(
    log=tool_logs(),
    extra_versions=st.lists(semvers, max_size=3),
    offsets=st.lists(st.integers(-2 * 86400, 40 * 86400), min_size=1, max_size=4),
)


@settings(settings.get_profile("fast"))
@tool_logs_and_moments
def test_property_a_proven_record_evaluates_as_the_full_log_fold(
    log: list[Notice], extra_versions: list[str], offsets: list[int]
) -> None:
    """The guard's answer from the whole log (StatusIndex over the signed notices) equals
    the answer from a compact record, sent as a binary proof and verified, for every
    version any notice names, range bounds included, and random ones, at every instant
    around the effective, sunset and withdraw times (a few examples; 150 in the slow
    lane)."""
    assert_proven_record_evaluates_as_the_fold(log, extra_versions, offsets)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@tool_logs_and_moments
def test_property_a_proven_record_evaluates_as_the_full_log_fold_thoroughly(
    log: list[Notice], extra_versions: list[str], offsets: list[int]
) -> None:
    assert_proven_record_evaluates_as_the_fold(log, extra_versions, offsets)


def assert_proven_record_evaluates_as_the_fold(
    log: list[Notice], extra_versions: list[str], offsets: list[int]
) -> None:
    whole = StatusIndex()
    for index, notice in enumerate(log):
        whole.apply(index, notice)
    tool_map = VerifiableMap()
    tool_map.apply(
        StatusRecord.of(tool, [(i, n) for i, n in enumerate(log) if n.tool_id == tool])
        for tool in {n.tool_id for n in log}
    )
    versions = set(extra_versions)
    for notice in log:
        if notice.affected is not None:
            versions.update(v.text for v in notice.affected.versions)
            versions.update(
                text for r in notice.affected.ranges for _, text in r.events if text != "0"
            )
    moments = {
        t + timedelta(seconds=s)
        for n in log
        for t in (n.effective_at, n.sunset_at)
        if t is not None
        for s in (-1, 0, 1)
    }
    moments.update(datetime(2026, 3, 1, tzinfo=UTC) + timedelta(seconds=o) for o in offsets)
    for tool in (TOOL, OTHER_TOOL):
        proof = MapProof.from_binary(tool_map.prove(tool).to_binary())
        record = verify_map_proof(tool_map.root(), tool, proof)
        folded = StatusIndex() if record is None else record.status_index()
        for now in sorted(moments):
            assert folded.next_transition(tool, now) == whole.next_transition(tool, now)
            for version in sorted(versions):
                got = verify_status(tool_map.root(), tool, version, now, proof)
                assert got == whole.lookup(tool, version, now)


def test_an_absent_tool_is_active_in_every_version() -> None:
    assert evaluate(TOOL, None, "1.0.0", NOW).status == "active"


def test_fold_notices_skips_publisher_entries_and_appends_in_log_order() -> None:
    leaves = vector_leaves()
    records = fold_notices(admitted(leaves), lambda _: None)
    search = records["tool:org.example/search"]
    assert [item.index for item in search.notices] == [1, 2, 4, 5]


def test_fold_notices_extends_the_records_it_is_given() -> None:
    leaves = vector_leaves()
    whole = fold_notices(admitted(leaves), lambda _: None)
    first = fold_notices(admitted(leaves[:3]), lambda _: None)
    rest = fold_notices(admitted(leaves[3:], 3), first.get)
    assert {**first, **rest} == whole


# --- proofs: the good cases ---------------------------------------------------------------


def test_a_present_proof_verifies_and_returns_the_record(tool_map: VerifiableMap) -> None:
    proof = tool_map.prove(TOOL)
    assert proof.result == "present"
    assert verify_map_proof(tool_map.root(), TOOL, proof) == tool_map.records[TOOL]


def test_a_present_proof_evaluates_the_status_at_a_time(tool_map: VerifiableMap) -> None:
    proof = tool_map.prove(TOOL)
    status = verify_status(tool_map.root(), TOOL, "1.0.0", NOW, proof)
    assert status == tool_map.records[TOOL].status_index().lookup(TOOL, "1.0.0", NOW)
    assert status.status == "revoked"


def test_an_absent_proof_shows_every_version_active(tool_map: VerifiableMap) -> None:
    tool = absent_tool(tool_map)
    proof = tool_map.prove(tool)
    assert proof.result == "absent"
    assert verify_status(tool_map.root(), tool, "9.9.9", NOW, proof).status == "active"


def test_an_absent_proof_holds_for_every_id_reaching_the_same_leaf(
    tool_map: VerifiableMap,
) -> None:
    """Not bound to one id: every id whose lookup ends at the alternate leaf is absent."""
    tool = absent_tool(tool_map)
    proof = tool_map.prove(tool)
    reaching = [
        other
        for i in range(3000)
        if (other := f"tool:org.example/other{i}") not in tool_map.records
        and tool_map.prove(other) == proof
    ]
    assert reaching
    for other in reaching:
        assert verify_map_proof(tool_map.root(), other, proof) is None


def test_the_empty_map_proves_every_tool_active() -> None:
    proof = VerifiableMap().prove(TOOL)
    assert proof == MapProof("empty")
    assert verify_status(EMPTY_ROOT, TOOL, "1.0.0", NOW, proof).status == "active"


@pytest.mark.parametrize("tool", [TOOL, "absent"])
def test_proofs_round_trip_in_binary_and_json(tool_map: VerifiableMap, tool: str) -> None:
    tool_id = absent_tool(tool_map) if tool == "absent" else tool
    proof = tool_map.prove(tool_id)
    assert MapProof.from_binary(proof.to_binary()) == proof
    assert MapProof.from_json(proof.to_json()) == proof


def test_the_empty_proof_is_four_bytes() -> None:
    assert MapProof("empty").to_binary() == b"\x01\x02\x00\x00"


def test_every_lookup_of_a_map_verifies(tool_map: VerifiableMap) -> None:
    root = tool_map.root()
    for tool_id, record in tool_map.records.items():
        assert verify_map_proof(root, tool_id, tool_map.prove(tool_id)) == record


# --- proofs: every negative case of the design's test plan --------------------------------


@pytest.mark.parametrize("tool", [TOOL, "absent"])
def test_any_flipped_bit_of_a_binary_proof_is_rejected(tool_map: VerifiableMap, tool: str) -> None:
    tool_id = absent_tool(tool_map) if tool == "absent" else tool
    root, data = tool_map.root(), tool_map.prove(tool_id).to_binary()
    for bit in range(len(data) * 8):
        bad = flip(data, bit)
        code = rejected(lambda bad=bad: verify_map_proof(root, tool_id, MapProof.from_binary(bad)))
        assert code in {
            ErrorCode.MALFORMED_MAP_PROOF,
            ErrorCode.MALFORMED_MAP_RECORD,
            ErrorCode.BAD_MAP_PROOF,
        }


def test_a_flipped_bit_of_the_root_rejects_the_proof(tool_map: VerifiableMap) -> None:
    proof = tool_map.prove(TOOL)
    for bit in range(256):
        root = flip(tool_map.root(), bit)
        assert rejected(lambda r=root: verify_map_proof(r, TOOL, proof)) == ErrorCode.BAD_MAP_PROOF


def steps_of(vmap: VerifiableMap, tool_id: str) -> tuple[PathStep, ...]:
    steps = vmap.prove(tool_id).path
    assert len(steps) >= 2
    return steps


def test_reordered_path_bits_are_rejected(tool_map: VerifiableMap) -> None:
    proof = tool_map.prove(TOOL)
    steps = steps_of(tool_map, TOOL)
    swapped = replace(proof, path=(steps[1], steps[0], *steps[2:]))
    assert rejected(lambda: verify_map_proof(tool_map.root(), TOOL, swapped)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_a_repeated_path_bit_is_rejected(tool_map: VerifiableMap) -> None:
    proof = tool_map.prove(TOOL)
    steps = steps_of(tool_map, TOOL)
    repeated = replace(proof, path=(steps[0], replace(steps[1], bit=steps[0].bit), *steps[2:]))
    assert rejected(lambda: verify_map_proof(tool_map.root(), TOOL, repeated)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_a_dropped_or_added_step_is_rejected(tool_map: VerifiableMap) -> None:
    proof = tool_map.prove(TOOL)
    dropped = replace(proof, path=proof.path[1:])
    added = replace(proof, path=(*proof.path, PathStep(0, b"\x00" * 32)))
    root = tool_map.root()
    assert rejected(lambda: verify_map_proof(root, TOOL, dropped)) == ErrorCode.BAD_MAP_PROOF
    assert rejected(lambda: verify_map_proof(root, TOOL, added)) == ErrorCode.BAD_MAP_PROOF


def key_with_bits(zeros: Sequence[int]) -> bytes:
    """A key (a hash, so realistic) whose bits at ``zeros`` are all 0."""
    return next(
        key
        for i in range(1000)
        if all(bit_of(key := hashlib.sha256(bytes([i])).digest(), b) == 0 for b in zeros)
    )


def zero_bits_of(key: bytes) -> list[int]:
    return [b for b in range(256) if bit_of(key, b) == 0]


def hand_built(bits: tuple[int, int]) -> tuple[bytes, MapProof]:
    """TOOL's record under two hand-made nodes, ``bits[0]`` next to the leaf: the root and
    the proof that walks it."""
    record = record_of(make_notice())
    s1, s2 = b"\x01" * 32, b"\x02" * 32
    leaf = leaf_hash(map_key(TOOL), record.value())
    root = node_hash(bits[1], node_hash(bits[0], leaf, s1), s2)
    path = (PathStep(bits[0], s1), PathStep(bits[1], s2))
    return root, MapProof("present", path, record=record.encode())


def test_a_hand_built_tree_with_decreasing_bits_verifies() -> None:
    low, high = zero_bits_of(map_key(TOOL))[:2]
    root, proof = hand_built((high, low))
    assert verify_map_proof(root, TOOL, proof) is not None


@pytest.mark.parametrize("shape", ["increasing", "repeated"])
def test_path_bits_must_decrease_toward_the_root_even_when_the_root_commits_to_them(
    shape: str,
) -> None:
    """A malformed tree (a node under a node of a later or equal bit) hashes fine: the order
    check is what refuses it, so no root can hold two shapes for one key."""
    low, high = zero_bits_of(map_key(TOOL))[:2]
    root, proof = hand_built((low, high) if shape == "increasing" else (low, low))
    assert rejected(lambda: verify_map_proof(root, TOOL, proof)) == ErrorCode.BAD_MAP_PROOF


def test_an_alternate_leaf_on_the_wrong_side_is_rejected_even_when_the_root_commits_to_it() -> None:
    """The authority hangs a leaf whose bit 0 is 1 on the left of a bit-0 node: a key with
    bit 0 clear reaches it, but it says nothing about that key."""
    key = key_with_bits([0])
    alt = next(k for i in range(1000) if bit_of(k := hashlib.sha256(b"a" + bytes([i])).digest(), 0))
    value, sibling = b"v" * 32, b"\x03" * 32
    root = node_hash(0, leaf_hash(alt, value), sibling)
    proof = MapProof("absent", (PathStep(0, sibling),), alt_key=alt, alt_value=value)
    tool = next(t for i in range(5000) if bit_of(map_key(t := f"tool:org.example/w{i}"), 0) == 0)
    assert rejected(lambda: verify_map_proof(root, tool, proof)) == ErrorCode.BAD_MAP_PROOF
    assert rejected(lambda: root_from_path(key, KeyPath(alt, value, proof.path))) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_an_absent_proof_whose_alternate_is_the_key_itself_is_rejected(
    tool_map: VerifiableMap,
) -> None:
    tool = absent_tool(tool_map)
    proof = tool_map.prove(tool)
    claimed = replace(proof, alt_key=map_key(tool))
    assert rejected(lambda: verify_map_proof(tool_map.root(), tool, claimed)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_an_absent_proof_for_a_key_that_leaves_the_path_is_rejected(
    tool_map: VerifiableMap,
) -> None:
    """An alternate leaf that disagrees with the key at a path bit shows nothing about it."""
    tool = absent_tool(tool_map)
    proof = tool_map.prove(tool)
    elsewhere = next(
        other
        for i in range(3000)
        if (other := f"tool:org.example/x{i}") not in tool_map.records
        and tool_map.prove(other).alt_key not in (None, proof.alt_key)
    )
    assert rejected(lambda: verify_map_proof(tool_map.root(), elsewhere, proof)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_a_present_key_cannot_be_shown_absent(tool_map: VerifiableMap) -> None:
    """TOOL's own leaf and path, relabelled absent, lead to the root: still refused."""
    present = tool_map.prove(TOOL)
    value = tool_map.records[TOOL].value()
    absent = MapProof("absent", present.path, alt_key=map_key(TOOL), alt_value=value)
    assert rejected(lambda: verify_map_proof(tool_map.root(), TOOL, absent)) == (
        ErrorCode.BAD_MAP_PROOF
    )


@pytest.mark.parametrize("tool", [TOOL, "absent", "empty"])
def test_truncated_or_extended_binary_proofs_are_malformed(
    tool_map: VerifiableMap, tool: str
) -> None:
    if tool == "empty":
        data = MapProof("empty").to_binary()
    else:
        data = tool_map.prove(absent_tool(tool_map) if tool == "absent" else tool).to_binary()
    for end in range(len(data)):
        assert rejected(lambda end=end: MapProof.from_binary(data[:end])) == (
            ErrorCode.MALFORMED_MAP_PROOF
        )
    for extra in (b"\x00", b"\x00" * 33):
        assert rejected(lambda extra=extra: MapProof.from_binary(data + extra)) == (
            ErrorCode.MALFORMED_MAP_PROOF
        )


@pytest.mark.parametrize(
    "data",
    [b"", b"\x02\x02\x00\x00", b"\x01\x03\x00\x00", b"\x01\x02\x00\x01" + b"\x00" * 33],
    ids=["empty", "version 2", "result 3", "empty with a path"],
)
def test_binary_proofs_with_bad_headers_are_malformed(data: bytes) -> None:
    assert rejected(lambda: MapProof.from_binary(data)) == ErrorCode.MALFORMED_MAP_PROOF


def test_a_path_longer_than_256_steps_is_malformed() -> None:
    data = b"\x01\x01" + b"\x00" * 64 + (257).to_bytes(2, "big") + b"\x00" * 33 * 257
    assert rejected(lambda: MapProof.from_binary(data)) == ErrorCode.MALFORMED_MAP_PROOF


def test_a_wrong_result_kind_is_rejected(tool_map: VerifiableMap) -> None:
    root, present = tool_map.root(), tool_map.prove(TOOL)
    tool = absent_tool(tool_map)
    absent = tool_map.prove(tool)
    as_empty = replace(present, result="empty", record=None)
    as_present = replace(absent, result="present", record=present.record)
    as_absent = replace(
        present, result="absent", alt_key=absent.alt_key, alt_value=absent.alt_value
    )
    assert rejected(lambda: verify_map_proof(root, TOOL, as_empty)) == ErrorCode.BAD_MAP_PROOF
    assert rejected(lambda: verify_map_proof(root, tool, as_present)) == ErrorCode.BAD_MAP_PROOF
    assert rejected(lambda: verify_map_proof(root, TOOL, as_absent)) == ErrorCode.BAD_MAP_PROOF
    assert rejected(lambda: MapProof.from_binary(b"\x01\x02" + absent.to_binary()[2:])) == (
        ErrorCode.MALFORMED_MAP_PROOF
    )


def test_an_empty_proof_under_a_non_empty_root_is_rejected(tool_map: VerifiableMap) -> None:
    proof = MapProof("empty")
    assert rejected(lambda: verify_map_proof(tool_map.root(), TOOL, proof)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_a_noncanonical_record_is_rejected_even_when_the_root_commits_to_it() -> None:
    loose = record_of(make_notice()).encode() + b"\x00"  # one trailing byte
    tree = PrefixTree()
    tree.update({map_key(TOOL): value_hash(loose)})
    proof = MapProof("present", tree.lookup(map_key(TOOL)).steps, record=loose)
    assert rejected(lambda: verify_map_proof(tree.root(), TOOL, proof)) == (
        ErrorCode.MALFORMED_MAP_RECORD
    )


def test_a_record_names_no_tool_its_key_binds_it() -> None:
    """The same rules about two tools are the same bytes; the leaf's key says whose they
    are, so a proof under TOOL's key holds for TOOL and for no other id."""
    mine, theirs = record_of(make_notice()), record_of(make_notice(tool_id=OTHER_TOOL))
    assert mine.encode() == theirs.encode()
    tree = PrefixTree()
    tree.update({map_key(TOOL): mine.value()})
    proof = MapProof("present", (), record=mine.encode())
    assert verify_map_proof(tree.root(), TOOL, proof) == mine
    assert rejected(lambda: verify_map_proof(tree.root(), OTHER_TOOL, proof)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_a_proof_checked_for_another_tool_is_rejected(tool_map: VerifiableMap) -> None:
    proof = tool_map.prove(TOOL)
    assert rejected(lambda: verify_map_proof(tool_map.root(), OTHER_TOOL, proof)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_a_lookup_path_in_the_empty_map_has_no_steps() -> None:
    path = KeyPath(None, None, (PathStep(0, b"\x00" * 32),))
    assert rejected(lambda: root_from_path(b"\x00" * 32, path)) == ErrorCode.BAD_MAP_PROOF


# --- the JSON form ------------------------------------------------------------------------


@pytest.fixture
def signed(tool_map: VerifiableMap) -> tuple[Signer, Checkpoint, bytes]:
    signer = Signer.generate("map.deplog.example/log")
    checkpoint = Checkpoint(signer.name, 7, b"\x01" * 32, (map_line(tool_map.root()),))
    return signer, checkpoint, sign_checkpoint(checkpoint, signer)


def test_a_json_proof_verifies_against_the_callers_checkpoint(
    tool_map: VerifiableMap, signed: tuple[Signer, Checkpoint, bytes]
) -> None:
    signer, _, note = signed
    document = MapProofDocument.parse(MapProofDocument(note, TOOL, tool_map.prove(TOOL)).encode())
    checkpoint, _ = open_checkpoint(document.checkpoint, signer.verifier())
    status = verify_proof_document(document, checkpoint, "1.0.0", NOW)
    assert status.status == "revoked"


def test_a_json_proof_made_at_another_checkpoint_is_rejected(
    tool_map: VerifiableMap, signed: tuple[Signer, Checkpoint, bytes]
) -> None:
    """Even with the same map root: the caller's checkpoint decides what "as of" means."""
    _, checkpoint, note = signed
    document = MapProofDocument(note, TOOL, tool_map.prove(TOOL))
    later = replace(checkpoint, size=8)
    assert rejected(lambda: verify_proof_document(document, later, "1.0.0", NOW)) == (
        ErrorCode.MAP_CHECKPOINT_MISMATCH
    )


def test_an_absent_json_proof_names_the_one_id_it_answers(
    tool_map: VerifiableMap, signed: tuple[Signer, Checkpoint, bytes]
) -> None:
    """fold-spec 6: two ids reaching one alternate leaf share a binary proof, but a JSON
    proof is about the id it names, whatever its result (``bad_map_proof`` for another)."""
    _, checkpoint, note = signed
    by_proof: dict[bytes, str] = {}
    for i in itertools.count():
        tool = f"tool:org.example/absent{i}"
        proof = tool_map.prove(tool)
        if (
            proof.result == "absent"
            and (first := by_proof.setdefault(proof.to_binary(), tool)) != tool
        ):
            break
    document = MapProofDocument(note, first, proof).encode()
    assert verify_tool_status(proof.to_binary(), checkpoint, tool, "1.0.0", NOW).status == "active"
    assert verify_tool_status(document, checkpoint, first, "1.0.0", NOW).status == "active"
    assert rejected(lambda: verify_tool_status(document, checkpoint, tool, "1.0.0", NOW)) == (
        ErrorCode.BAD_MAP_PROOF
    )


def test_a_json_proof_at_a_checkpoint_without_a_map_line_is_rejected(
    tool_map: VerifiableMap,
) -> None:
    signer = Signer.generate("map.deplog.example/log")
    checkpoint = Checkpoint(signer.name, 7, b"\x01" * 32)
    document = MapProofDocument(sign_checkpoint(checkpoint, signer), TOOL, tool_map.prove(TOOL))
    assert rejected(lambda: verify_proof_document(document, checkpoint, "1.0.0", NOW)) == (
        ErrorCode.MISSING_MAP_LINE
    )


def json_edits() -> Iterator[tuple[str, Any]]:
    yield "unknown member", lambda d: d.update(extra=1)
    yield "wrong type", lambda d: d.update(type="deplog.map_proof/v2")
    yield "missing path", lambda d: d.pop("path")
    yield "bit 256", lambda d: d["path"][0].update(bit=256)
    yield "bit true", lambda d: d["path"][0].update(bit=True)
    yield "short sibling", lambda d: d["path"][0].update(sibling="AAAA")
    yield "record not base64", lambda d: d.update(record="!!!!")
    yield "absent member on present", lambda d: d.update(alt_leaf={"key": "", "value": ""})
    yield "bad tool id", lambda d: d.update(tool_id="org.example/search")
    yield "checkpoint not a note", lambda d: d.update(checkpoint="hello\n")


@pytest.mark.parametrize(("name", "edit"), list(json_edits()), ids=[n for n, _ in json_edits()])
def test_json_proofs_off_the_format_are_malformed(
    tool_map: VerifiableMap, signed: tuple[Signer, Checkpoint, bytes], name: str, edit: Any
) -> None:
    _, _, note = signed
    obj = MapProofDocument(note, TOOL, tool_map.prove(TOOL)).to_json()
    edit(obj)
    data = canonical.dumps(obj)
    assert rejected(lambda: MapProofDocument.parse(data)) == ErrorCode.MALFORMED_MAP_PROOF


def test_json_proofs_must_be_strict_json() -> None:
    assert rejected(lambda: MapProofDocument.parse(b'{"type": 1.5}')) == (
        ErrorCode.MALFORMED_MAP_PROOF
    )


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_property_arbitrary_bytes_parse_or_fail_with_a_map_code(data: bytes) -> None:
    for parse in (MapProof.from_binary, MapProofDocument.parse):
        try:
            parse(data)
        except MapFormatError as err:
            assert err.code == ErrorCode.MALFORMED_MAP_PROOF


# --- the checkpoint line --------------------------------------------------------------------


def test_the_line_renders_and_parses_back() -> None:
    root = hashlib.sha256(b"root").digest()
    line = map_line(root)
    assert line.startswith("deplog-map/v1 ") and len(line) == len("deplog-map/v1 ") + 44
    assert map_root_of(["other line", line]) == root


def test_unknown_lines_are_ignored() -> None:
    assert map_root_of(["deplog-map/v2 abc", "deplog-map/v1x abc", "x"]) is None


def test_a_repeated_line_is_malformed_even_when_identical() -> None:
    line = map_line(b"\x00" * 32)
    assert rejected(lambda: map_root_of([line, line])) == ErrorCode.MALFORMED_MAP_LINE


def test_no_line_is_missing_where_a_root_is_needed() -> None:
    checkpoint = Checkpoint("log.example/x", 1, b"\x00" * 32, ("other",))
    with pytest.raises(MapLineError) as info:
        require_map_root(checkpoint)
    assert info.value.code == ErrorCode.MISSING_MAP_LINE


# --- the checked-in vectors -----------------------------------------------------------------


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(VECTORS.read_text())
    return loaded


def b64(text: str) -> bytes:
    raw = decode_base64(text)
    assert raw is not None
    return raw


def test_the_vectors_are_what_the_generator_makes(vectors: dict[str, Any]) -> None:
    assert vectors == json.loads(json.dumps(generate()))


def test_the_hash_vectors_hold(vectors: dict[str, Any]) -> None:
    hashes = vectors["hashes"]
    assert b64(hashes["empty_root"]) == reference_root({})
    leaf = hashes["leaf"]
    assert b64(leaf["hash"]) == reference_root({b64(leaf["key"]): b64(leaf["value"])})
    for case in vectors["keys"]:
        assert b64(case["key"]) == hashlib.sha256(case["tool_id"].encode()).digest()


def test_the_tree_vectors_hold_under_the_reference(vectors: dict[str, Any]) -> None:
    for case in vectors["trees"]:
        items = {b64(i["key"]): b64(i["value"]) for i in case["items"]}
        assert b64(case["root"]) == reference_root(items), case["name"]
        for lookup in case["lookups"]:
            leaf, steps = reference_lookup(items, b64(lookup["key"]))
            assert lookup["leaf_key"] == (None if leaf is None else encode_base64(leaf))
            assert [(s["bit"], b64(s["sibling"])) for s in lookup["path"]] == steps


def test_the_line_vectors_hold(vectors: dict[str, Any]) -> None:
    lines = vectors["lines"]
    for line in lines["valid"]:
        assert map_root_of([line]) is not None
    for line in lines["malformed"]:
        assert rejected(lambda line=line: map_root_of([line])) == ErrorCode.MALFORMED_MAP_LINE
    for line in lines["ignored"]:
        assert map_root_of([line]) is None


def test_the_log_vector_is_an_admitted_log(vectors: dict[str, Any]) -> None:
    """The map is defined over admitted prefixes: the vector log passes every rule."""
    notices: dict[int, Notice] = {}
    used: set[tuple[str, int]] = set()
    checker = EntryChecker(
        PublisherRegistry(),
        Verifier.parse(vectors["log"]["log_key"]),
        notices.get,
        lambda publisher, sequence: (publisher, sequence) in used,
    )
    for index, text in enumerate(vectors["log"]["leaves"]):
        entry = checker.check(index, b64(text))
        if isinstance(entry, NoticeEntry):
            notices[index] = entry.envelope.notice
            used.add((entry.envelope.notice.publisher, entry.envelope.notice.sequence))
    assert sorted(notices) == [1, 2, 3, 4, 5]


def test_the_log_vector_map_roots_follow_from_its_leaves(vectors: dict[str, Any]) -> None:
    log = vectors["log"]
    leaves = [b64(leaf) for leaf in log["leaves"]]
    records: dict[str, StatusRecord] = {}
    for point in log["map_roots"]:
        prefix = leaves[: point["size"]]
        records = fold_notices(admitted(prefix), lambda _: None)
        items = {map_key(t): value_hash(r.encode()) for t, r in records.items()}
        assert b64(point["map_root"]) == reference_root(items)
    assert {t: encode_base64(r.encode()) for t, r in records.items()} == log["records"]


def test_the_log_vector_proofs_verify_to_its_evaluations(vectors: dict[str, Any]) -> None:
    log = vectors["log"]
    checkpoint, _ = open_checkpoint(log["checkpoint"].encode(), Verifier.parse(log["log_key"]))
    root = require_map_root(checkpoint)
    by_tool = {}
    for case in log["proofs"]:
        binary = MapProof.from_binary(b64(case["binary"]))
        document = MapProofDocument.parse(case["json"].encode())
        assert document.proof == binary and document.tool_id == case["tool_id"]
        by_tool[case["tool_id"]] = verify_map_proof(root, case["tool_id"], binary)
    for case in log["evaluations"]:
        at = datetime.strptime(case["at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        got = evaluate(case["tool_id"], by_tool[case["tool_id"]], case["version"], at).to_json()
        assert {k: got[k] for k in case if k in got and k not in ("tool_id", "version")} == {
            k: v for k, v in case.items() if k not in ("tool_id", "version", "at")
        }


def test_the_accumulated_vector_holds_and_the_reference_agrees(vectors: dict[str, Any]) -> None:
    acc = vectors["accumulated"]
    tree, items, digest = PrefixTree(), Items(), hashlib.sha256()
    for step in range(acc["steps"]):
        batch = accumulated_items(step)
        root = tree.update(batch)
        items.update(batch)
        digest.update(root)
        if step % 250 == 249:
            assert root == reference_root(items)
    assert digest.digest() == b64(acc["digest"])
    assert root == b64(acc["last_root"])


def test_spliced_record_bytes_are_the_records_encoding() -> None:
    """The append path grows records by appending item bytes; they must be the one encoding."""
    signed = [
        make_notice(),
        Notice.from_json(revoke_json(sequence=2)),
        Notice.from_json(withdraw_json(1, sequence=3)),
    ]
    raw = [record_item_bytes(i + 1, n) for i, n in enumerate(signed)]
    grown = extend_record_bytes(extend_record_bytes(None, raw[:1]), raw[1:])
    record = StatusRecord.of(TOOL, enumerate(signed, 1))
    assert grown == record.encode()
    assert StatusRecord.decode(grown, TOOL) == record


def test_splicing_refuses_bytes_that_are_not_a_record() -> None:
    first = record_item_bytes(1, make_notice())
    assert rejected(lambda: extend_record_bytes(b"\x02" + first, [first])) == (
        ErrorCode.MALFORMED_MAP_RECORD
    )


def test_the_record_item_vectors_decode_to_their_notices(vectors: dict[str, Any]) -> None:
    *cases, whole = vectors["record_items"]
    signed = [(case["index"], Notice.from_json(case["notice"])) for case in cases]
    for (index, notice), case in zip(signed, cases, strict=True):
        assert record_item_bytes(index, notice).hex() == case["item"]
    record = StatusRecord.decode(bytes.fromhex(whole["record"]), TOOL)
    assert record.notices == tuple(RecordNotice.of(i, n) for i, n in signed)
    assert b"".join(bytes.fromhex(c["item"]) for c in cases) == bytes.fromhex(whole["record"])[1:]
    value = StatusRecord.decode(b64(vectors["hashes"]["value"]["record"]), TOOL)
    assert value.notices[0].index == 12345


def test_the_invalid_record_vector_holds_a_mark_and_evaluates_unknown(
    vectors: dict[str, Any],
) -> None:
    """fold-spec 3.1: an entry that fails validation is an item ``u8 3 || u8 0 || u64
    index`` in its tool's record, which makes every version ``unknown``."""
    case = vectors["invalid_record"]
    record = StatusRecord.decode(bytes.fromhex(case["record"]), case["tool_id"])
    notice, mark = record.notices
    assert (notice.action, mark.action, mark.index) == ("deprecate", "invalid", 9)
    assert bytes.fromhex(case["items"][1]["item"]) == bytes((3, 0)) + (9).to_bytes(8, "big")
    status = evaluate(case["tool_id"], record, "1.0.0", datetime(2026, 3, 1, tzinfo=UTC))
    assert status.to_json() == case["status_at_2026_03_01"]
    assert (status.status, status.invalid) == ("unknown", (9,))


def test_a_malformed_invalid_item_is_a_malformed_record(vectors: dict[str, Any]) -> None:
    case = vectors["invalid_record"]
    first = case["items"][0]["item"]
    for bad in case["malformed_items"]:
        data = bytes.fromhex("01" + first + bad)
        assert rejected(lambda d=data: StatusRecord.decode(d, case["tool_id"])) == (
            ErrorCode.MALFORMED_MAP_RECORD
        )


class UnheldStore(MemoryNodeStore):
    """Rows only through reads (no rows held): the update reads its paths ahead."""

    def held(self) -> Mapping[bytes, InnerNode]:
        return {}


@pytest.mark.parametrize("store_type", [MemoryNodeStore, UnheldStore], ids=["held", "read"])
@pytest.mark.parametrize("keys", [1, 2], ids=["one-key-walk", "merge"])
def test_the_update_refuses_a_cycle_of_rows_instead_of_looping(
    store_type: type[MemoryNodeStore], keys: int
) -> None:
    """A row whose child names the row again (altered storage): the update raises the
    stores' ``MapStorageError`` rather than recursing or walking on for ever."""
    store = store_type()
    low, high = bytes(32), b"\x80" + bytes(31)
    PrefixTree(store).update({low: b"a" * 32, high: b"b" * 32})
    (root_id,) = store._inners
    row = store._inners[root_id]
    store._inners[root_id] = row._replace(right=ChildRef(root_id, 0, row.right.hash))
    changes = {high[:31] + b"\x01": b"c" * 32, high[:31] + b"\x02": b"d" * 32}
    with pytest.raises(MapStorageError, match="map node malformed"):
        PrefixTree(store).update(dict(list(changes.items())[:keys]))


class RootHeldStore(MemoryNodeStore):
    """Holds only the root's row in memory: every other row a batch walks through is read
    through ``inner``, as a store's rows outside its cache are."""

    def held(self) -> Mapping[bytes, InnerNode]:
        root = self.root()
        return (
            {} if root is None or root.id not in self._inners else {root.id: self._inners[root.id]}
        )


@pytest.mark.parametrize("store_type", [MemoryNodeStore, RootHeldStore], ids=["held", "read"])
def test_a_row_the_store_has_lost_is_its_storage_error_and_changes_nothing(
    store_type: type[MemoryNodeStore],
) -> None:
    rng = random.Random(7)
    store = store_type()
    keys = [rng.randbytes(32) for _ in range(50)]
    PrefixTree(store).update({key: rng.randbytes(32) for key in keys})
    root = store.root()
    assert root is not None
    for node in [node for node in store._inners if node != root.id]:
        del store._inners[node]  # every row below the root gone from storage
    before = (store.root(), dict(store._inners))
    with pytest.raises(MapStorageError, match="map node missing"):
        PrefixTree(store).update({keys[0]: b"c" * 32})
    with pytest.raises(MapStorageError, match="map node missing"):
        PrefixTree(store).lookup(keys[0])
    assert (store.root(), dict(store._inners)) == before
