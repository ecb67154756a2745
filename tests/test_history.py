"""``client.history``: a dict's committed states, read without a copy while its owner goes on."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deplog.client.history import History, Snapshot

KEYS = st.integers(0, 7)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(0, 99)),
        st.tuples(st.just("pop"), KEYS, st.just(0)),
        st.tuples(st.just("commit"), st.just(0), st.just(0)),
        st.tuples(st.just("revert"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


def assert_reads(snapshot: Snapshot[int, int], expected: dict[int, int]) -> None:
    for key in range(8):
        assert snapshot.get(key) == expected.get(key)
        assert (key in snapshot) == (key in expected)
        if key in expected:
            assert snapshot[key] == expected[key]
        else:
            with pytest.raises(KeyError):
                snapshot[key]
    assert len(snapshot) == len(expected)
    assert snapshot.copy() == expected and dict(snapshot) == expected


@settings(max_examples=300)
@given(start=st.dictionaries(KEYS, st.integers(0, 99)), ops=OPS)
def test_every_snapshot_reads_the_dict_as_it_was_at_its_commit(
    start: dict[int, int], ops: list[tuple[str, int, int]]
) -> None:
    live = dict(start)
    history = History(live)
    model, at_commit = dict(start), dict(start)
    taken = [(history.commit(), dict(start))]
    for op, key, value in ops:
        if op == "set":
            history.set(key, value)
            model[key] = value
        elif op == "pop" and key in model:
            history.pop(key)
            del model[key]
        elif op == "commit":
            taken.append((history.commit(), dict(model)))
            at_commit = dict(model)
        elif op == "revert":
            history.revert()
            model = dict(at_commit)
        assert live == model
        for snapshot, expected in taken:
            assert_reads(snapshot, expected)


def test_a_revert_undoes_the_changes_since_the_last_commit_only() -> None:
    live = {1: 10, 2: 20}
    history = History(live)
    history.set(1, 11)
    committed = history.commit()
    history.set(1, 12)
    history.set(3, 30)
    history.pop(2)
    history.revert()
    assert live == {1: 11, 2: 20}
    assert dict(committed) == live
    history.set(2, 21)  # recorded again after the revert
    assert dict(committed) == {1: 11, 2: 20}


def test_a_key_set_then_popped_since_the_commit_is_reverted_to_absent() -> None:
    live: dict[int, int] = {}
    history = History(live)
    committed = history.commit()
    history.set(5, 50)
    history.pop(5)
    history.revert()
    assert live == {} and dict(committed) == {}


def test_a_commit_shares_the_dict_rather_than_copying_it() -> None:
    live = {key: key for key in range(1000)}
    history = History(live)
    snapshot = history.commit()
    assert snapshot.of(live)
    assert not snapshot.of(dict(live))


def changes_records() -> int:
    gc.collect()
    return sum(type(o).__name__ == "_Changes" for o in gc.get_objects())


def test_records_of_changes_live_only_as_long_as_a_snapshot_reaches_them() -> None:
    before = changes_records()
    history = History({0: 0})
    kept = history.commit()
    for value in range(200):
        history.set(value % 5, value)
        history.commit()
    assert changes_records() - before == 201  # the kept snapshot reaches every later one
    del kept
    assert changes_records() - before == 1  # the owner's newest only


@pytest.fixture
def switch_often() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("switch_often")
def test_readers_in_another_thread_never_see_a_later_change() -> None:
    """The owner changes, commits and reverts while a reader thread reads the snapshots
    it was handed: each read is the snapshot's committed value (rule 2's order)."""
    keys = range(64)
    live = {key: (0, key) for key in keys}
    history = History(live)
    handed = [(history.commit(), 0)]
    wrong: list[tuple[int, int, object]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            snapshot, generation = handed[-1]
            for key in keys:
                value = snapshot.get(key)
                if value != (generation, key) and not (value is None and key % 7 == 0):
                    wrong.append((generation, key, value))
            copied = snapshot.copy()
            if any(copied.get(key, (generation, key)) != (generation, key) for key in keys):
                wrong.append((generation, -1, None))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for generation in range(1, 600):
            for key in keys:
                history.set(key, (generation, key))
            for key in range(0, 64, 7):
                history.pop(key)
            if generation % 3 == 0:  # a rolled back batch: undone, never committed
                for key in keys:
                    history.set(key, (-1, key))
                history.revert()  # the multiples of 7 are absent again, as committed
                for key in keys:
                    if key % 7:
                        history.set(key, (generation, key))
            handed.append((history.commit(), generation))
            for key in range(0, 64, 7):  # back for the next generation
                history.set(key, (generation, key))
    finally:
        done.set()
        reader.join()
    assert not wrong
