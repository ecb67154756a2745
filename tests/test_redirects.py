"""``client.follow.http`` rule 6 as a function: which redirect locations may be followed.

``redirect_target`` is the one decision every client request takes on a
redirect (``HttpClient.request``); the servers that send them are
``tests/integration/test_redirects.py``'s. Here every form a location takes is
checked without a network, the downgrade from https to http among them.
"""

from __future__ import annotations

import pytest

from deplog.client.errors import ErrorCode
from deplog.client.follow.http import redirect_target
from deplog.client.follow.source import FetchError

BASE = "https://log.example:8443/deplog/checkpoint?x=1"


@pytest.mark.parametrize(
    ("location", "followed"),
    [
        ("/moved/checkpoint", "https://log.example:8443/moved/checkpoint"),
        ("moved", "https://log.example:8443/deplog/moved"),
        ("?x=2", "https://log.example:8443/deplog/checkpoint?x=2"),
        ("https://LOG.example:8443/a", "https://log.example:8443/a"),
        ("https://log.example:8443/a#part", "https://log.example:8443/a"),
    ],
)
def test_a_location_within_the_origin_is_followed_in_any_form(location: str, followed: str) -> None:
    assert str(redirect_target(BASE, location)) == followed


def test_an_explicit_default_port_is_the_same_origin() -> None:
    assert str(redirect_target("http://log.example/c", "http://log.example:80/d")) == (
        "http://log.example/d"
    )
    assert str(redirect_target("https://log.example:443/c", "https://log.example/d")) == (
        "https://log.example/d"
    )


def refused(url: str, location: str) -> str:
    """The message of the ``redirect_refused`` the location gets."""
    with pytest.raises(FetchError) as caught:
        redirect_target(url, location)
    assert caught.value.code == ErrorCode.REDIRECT_REFUSED
    return str(caught.value)


def test_a_redirect_from_https_to_http_is_refused_as_a_downgrade() -> None:
    assert refused("https://log.example/c", "http://log.example/c").startswith(
        "redirected from https to http"
    )
    assert refused("https://log.example:8443/c", "http://log.example:8443/c").startswith(
        "redirected from https to http"
    )


@pytest.mark.parametrize(
    "location",
    [
        "https://log.example:9443/c",  # another port
        "https://log.example/c",  # the default port is another port
        "https://mirror.example:8443/c",  # another host
        "//mirror.example:8443/c",  # another host, scheme-relative
        "http://log.example:8443/c",  # another scheme (a downgrade)
        "ftp://log.example:8443/c",  # not http at all
    ],
)
def test_a_redirect_to_another_origin_is_refused(location: str) -> None:
    assert "not followed: give the URL it leads to" in refused(BASE, location)


def test_an_upgrade_from_http_to_https_is_another_origin_too() -> None:
    assert refused("http://log.example/c", "https://log.example/c").startswith(
        "redirected to another origin"
    )


def test_a_location_with_credentials_is_refused() -> None:
    assert refused(BASE, "https://user:secret@log.example:8443/c").startswith(
        "redirected to a URL with credentials"
    )


@pytest.mark.parametrize("location", ["http://[::1", "https://log.example:8443\\@evil/"])
def test_a_malformed_location_is_refused(location: str) -> None:
    assert refused(BASE, location).startswith("redirected to a malformed URL")
