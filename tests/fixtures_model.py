"""Shared pytest fixtures for the data-model tests: real Ed25519 keys.

Load with ``pytest_plugins = ("tests.fixtures_model",)`` in a test module (or
from tests/conftest.py); builders and strategies are in tests/model_builders.py.
"""

from __future__ import annotations

import pytest

from deplog.client.model.notice import Envelope
from deplog.client.tlog.note import Signer
from tests.model_builders import make_notice


@pytest.fixture(scope="session")
def authority() -> Signer:
    """The authority's log key."""
    return Signer.generate("log.example.org")


@pytest.fixture(scope="session")
def publisher_key() -> Signer:
    """The publisher's signing key."""
    return Signer.generate("example-key-1")


@pytest.fixture
def signed_envelope(publisher_key: Signer) -> Envelope:
    """A valid deprecate notice signed by ``publisher_key``."""
    return Envelope.sign(make_notice(), publisher_key)
