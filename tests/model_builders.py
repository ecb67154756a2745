"""Shared builders and Hypothesis strategies for the data-model tests.

Plain values and functions live here; the pytest fixtures built from them are
in ``tests/fixtures_model.py`` (load it with ``pytest_plugins``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from deplog.client.model.entries import PublisherStatement
from deplog.client.model.notice import Notice
from deplog.client.tlog.note import Signer

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOOL = "tool:org.example/search"
PUBLISHER = "example"
NAMESPACE = "org.example"


def notice_json(**overrides: Any) -> dict[str, Any]:
    """A valid deprecate notice as JSON; ``None`` values delete a field."""
    base: dict[str, Any] = {
        "tool_id": TOOL,
        "action": "deprecate",
        "affected": {"versions": ["1.0.0", "1.1.0"]},
        "reasons": ["superseded"],
        "effective_at": "2026-02-01T00:00:00Z",
        "sunset_at": "2026-06-01T00:00:00Z",
        "issued_at": "2026-01-15T09:30:00Z",
        "publisher": PUBLISHER,
        "sequence": 1,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def make_notice(**overrides: Any) -> Notice:
    """``Notice.from_json(notice_json(**overrides))``."""
    return Notice.from_json(notice_json(**overrides))


def revoke_json(**overrides: Any) -> dict[str, Any]:
    """A valid revoke notice (security, with an advisory)."""
    fields: dict[str, Any] = {
        "action": "revoke",
        "sunset_at": None,
        "reasons": ["security"],
        "advisories": ["CVE-2026-1234"],
    }
    fields.update(overrides)
    return notice_json(**fields)


def withdraw_json(target: int, **overrides: Any) -> dict[str, Any]:
    """A valid withdraw of the notice at log index ``target``."""
    fields: dict[str, Any] = {
        "action": "withdraw",
        "affected": None,
        "sunset_at": None,
        "withdraws": target,
        "reasons": ["other"],
    }
    fields.update(overrides)
    return notice_json(**fields)


def register_statement(
    publisher: str = PUBLISHER,
    namespaces: tuple[str, ...] = (NAMESPACE,),
    keys: tuple[Signer, ...] = (),
) -> PublisherStatement:
    """A register statement for ``publisher`` with the given keys."""
    return PublisherStatement(
        action="register",
        publisher=publisher,
        issued_at=NOW,
        namespaces=namespaces,
        keys=tuple(k.verifier().vkey() for k in keys),
    )


# --- Hypothesis strategies ------------------------------------------------------

_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
namespaces = st.lists(_label, min_size=2, max_size=4).map(".".join)
tool_ids = st.builds(
    lambda ns, name: f"tool:{ns}/{name}",
    namespaces,
    st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
)
_num = st.integers(0, 30).map(str)
_pre_id = st.one_of(_num, st.from_regex(r"[0-9]{0,2}[a-zA-Z-][0-9a-zA-Z-]{0,4}", fullmatch=True))
semvers = st.builds(
    lambda a, b, c, pre, build: (
        f"{a}.{b}.{c}"
        + (("-" + ".".join(pre)) if pre else "")
        + (("+" + ".".join(build)) if build else "")
    ),
    _num,
    _num,
    _num,
    st.lists(_pre_id, max_size=3),
    st.lists(st.from_regex(r"[0-9a-zA-Z-]{1,5}", fullmatch=True), max_size=2),
)
_times = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda d: d.replace(microsecond=0, tzinfo=UTC)
)


def _ts(d: datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


@st.composite
def _ranges(draw: st.DrawFn) -> dict[str, Any]:
    """An OSV range with strictly increasing, alternating events."""
    from deplog.client.model.semver import Version

    vs = draw(st.lists(semvers, min_size=1, max_size=5))
    uniq: dict[tuple[object, ...], str] = {}
    for v in vs:
        uniq.setdefault(Version.parse(v).sort_key, v)
    ordered = [uniq[k] for k in sorted(uniq)]
    events: list[dict[str, str]] = []
    if draw(st.booleans()):
        events.append({"introduced": "0"})
        kinds = ["fixed", "last_affected"]
    else:
        kinds = []
    for v in ordered:
        if len(events) % 2 == 0:
            events.append({"introduced": v})
        else:
            events.append({draw(st.sampled_from(kinds or ["fixed", "last_affected"])): v})
    return {"type": "SEMVER", "events": events}


_reasons = st.lists(
    st.sampled_from(
        [
            "superseded",
            "end_of_life",
            "security",
            "critical_bug",
            "schema_change",
            "moved",
            "policy",
            "other",
        ]
    ),
    min_size=1,
    max_size=8,
    unique=True,
)
_advisories = st.lists(
    st.one_of(
        st.from_regex(r"CVE-[0-9]{4}-[0-9]{4,8}", fullmatch=True),
        st.from_regex(
            r"GHSA-[23456789cfghjmpqrvwx]{4}-[23456789cfghjmpqrvwx]{4}-[23456789cfghjmpqrvwx]{4}",
            fullmatch=True,
        ),
    ),
    min_size=1,
    max_size=4,
    unique=True,
)
_message = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Cf")),
    min_size=1,
    max_size=50,
)


@st.composite
def notices(draw: st.DrawFn) -> dict[str, Any]:
    """Valid notice JSON objects covering every action and optional field."""
    action = draw(st.sampled_from(["deprecate", "revoke", "withdraw"]))
    effective = draw(_times)
    obj: dict[str, Any] = {
        "tool_id": draw(tool_ids),
        "action": action,
        "reasons": draw(_reasons),
        "effective_at": _ts(effective),
        "issued_at": _ts(draw(_times)),
        "publisher": draw(st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True)),
        "sequence": draw(st.integers(1, 2**53 - 1)),
    }
    if action == "withdraw":
        obj["withdraws"] = draw(st.integers(0, 2**53 - 1))
    else:
        affected: dict[str, Any] = {}
        which = draw(st.sampled_from(["versions", "ranges", "both"]))
        if which in ("versions", "both"):
            affected["versions"] = draw(st.lists(semvers, min_size=1, max_size=5, unique=True))
        if which in ("ranges", "both"):
            affected["ranges"] = draw(st.lists(_ranges(), min_size=1, max_size=3))
        obj["affected"] = affected
        if draw(st.booleans()):
            obj["schema_digest"] = "sha256:" + draw(st.from_regex(r"[0-9a-f]{64}", fullmatch=True))
        if draw(st.booleans()):
            obj["replacement"] = {"tool_id": draw(tool_ids), "version": draw(semvers)}
        if action == "deprecate" and draw(st.booleans()):
            sunset = effective + timedelta(seconds=draw(st.integers(0, 10**9)))
            obj["sunset_at"] = _ts(sunset)
    needs_adv = action == "revoke" and "security" in obj["reasons"]
    if needs_adv or draw(st.booleans()):
        obj["advisories"] = draw(_advisories)
    if draw(st.booleans()):
        obj["message"] = draw(_message)
    return obj


# Edits that tend to matter to deplog's line- and JSON-based formats (shared by the
# hypothesis tests and the atheris fuzz targets in bench/fuzz/).
HOSTILE_TOKENS: tuple[bytes, ...] = (
    b"\n",
    b"\n\n",
    b"\xe2\x80\x94 ",  # the signature line prefix: em dash, space
    b" ",
    b"\t",
    b"\r",
    b"\x00",
    b"+",
    b"=",
    b"0",
    b"00",
    b"-1",
    b"9223372036854775808",
    b"18446744073709551616",
    b'"',
    b"\\",
    b"\\ud800",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"1e5",
    b"null",
    b"\xff",
    b"\xc3\xa9",
    b"#",
)
