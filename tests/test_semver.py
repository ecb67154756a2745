"""Tests for client/semver.py: the semver.org grammar and section 11 precedence."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deplog.client.model.semver import SemverError, Version, is_version
from tests.builders import semvers

SPEC_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
]


def test_parse_splits_components() -> None:
    v = Version.parse("1.2.3-rc.1+build.007")
    assert (v.major, v.minor, v.patch) == (1, 2, 3)
    assert v.prerelease == ("rc", "1")
    assert v.build == ("build", "007")


def test_str_returns_original_text() -> None:
    assert str(Version.parse("10.20.30-x-y-z.--+b-1")) == "10.20.30-x-y-z.--+b-1"


@pytest.mark.parametrize(
    "text",
    [
        "0.0.4",
        "1.2.3",
        "10.20.30",
        "1.0.0-alpha.beta.1",
        "1.0.0+0.build.1-rc.10000aaa-kk",
        "1.0.0-0A.is.legal",
        "2.0.0+build.1848",
        "1.0.0-x.7.z.92",
        "99999999999999999999.0.0",
    ],
)
def test_valid_versions_from_semver_org_parse(text: str) -> None:
    assert is_version(text)


@pytest.mark.parametrize(
    "text",
    [
        "1",
        "1.2",
        "1.2.3-0123",
        "1.2.3-0123.0123",
        "1.1.2+.123",
        "+invalid",
        "-invalid",
        "alpha",
        "1.2.3.DEV",
        "1.2-SNAPSHOT",
        "01.1.1",
        "1.01.1",
        "1.1.01",
        "1.2.3-",
        "1.2.3+",
        "v1.2.3",
        " 1.2.3",
        "1.2.3\n",
        "1.2.3-a..b",
        "\u0661.2.3",
        "1.2.3-\u00e9",
    ],
)
def test_invalid_versions_are_refused_with_bad_version(text: str) -> None:
    with pytest.raises(SemverError) as e:
        Version.parse(text)
    assert e.value.code == "bad_version"
    assert not is_version(text)


def test_version_longer_than_128_characters_is_refused() -> None:
    text = "1.0.0-" + "a" * 123
    assert len(text) == 129
    assert not is_version(text)
    assert is_version(text[:-1])


def test_non_string_is_not_a_version() -> None:
    assert not is_version(1)


def test_spec_precedence_example_is_strictly_increasing() -> None:
    versions = [Version.parse(s) for s in SPEC_ORDER]
    for a, b in itertools.pairwise(versions):
        assert a < b and b > a and a <= b and not a >= b


def test_numeric_components_compare_numerically() -> None:
    assert Version.parse("1.9.0") < Version.parse("1.10.0") < Version.parse("1.11.0")
    assert Version.parse("2.0.0") > Version.parse("1.99.99")


def test_build_metadata_is_ignored_for_precedence() -> None:
    a, b = Version.parse("1.0.0+a"), Version.parse("1.0.0+b")
    assert a.same_precedence(b)
    assert a <= b and b <= a and not a < b
    assert a != b


def test_comparing_with_non_version_is_not_supported() -> None:
    with pytest.raises(TypeError):
        _ = Version.parse("1.0.0") < "1.0.0"


@given(st.permutations(SPEC_ORDER))
def test_sorting_any_permutation_gives_spec_order(order: list[str]) -> None:
    assert [str(v) for v in sorted(Version.parse(s) for s in order)] == SPEC_ORDER


@given(semvers, semvers, semvers)
def test_precedence_is_a_total_preorder(a: str, b: str, c: str) -> None:
    x, y, z = Version.parse(a), Version.parse(b), Version.parse(c)
    assert (x < y) + (y < x) + x.same_precedence(y) == 1  # trichotomy
    assert (x <= y) == (not x > y)
    if x <= y and y <= z:
        assert x <= z


@given(semvers)
def test_parse_round_trips_text(text: str) -> None:
    assert str(Version.parse(text)) == text
    assert Version.parse(text) == Version.parse(text)
