"""One definition of a valid entry (BRIEF invariant 6), through the real HTTP path.

Hypothesis generates notices over the whole space ``deplog publish`` and ``POST
/v1/notices`` accept (every action, field and flag; lists at their maxima; every class of
text in ``message``; tool ids and versions at their maximum lengths; withdraws of earlier
notices, foreign namespaces, unknown keys, reused sequences, resubmissions) and posts each
signed envelope, in canonical or other JSON spellings, to one real authority process.

The oracle is the verifiers, never the authority:

- before each POST the verifiers' own validator (``client.model.rules``, kept in step
  with the log by replaying every served leaf) says what must happen: 201 at the next
  index, 200 for an identical resubmission, or a 4xx with exactly the code it refuses
  with; no answer is ever 5xx, and a notice the schema accepts always makes a leaf the
  decoder accepts (or one too large for a bundle);
- the leaf served for every 201 decodes and is exactly ``encode_entry`` of the envelope;
- ``deplog publish`` (in process) with generated flags is held to the same verdicts, and
  never refuses as a usage error flags whose notice the schema accepts;
- groups of submissions posted at once race into one batch, in an order nobody chose:
  whatever the authority admits there, the validator accepts at the index it was given;
- at the end a follower steps through every checkpoint a receipt carried (its own fold
  must match each one's ``deplog-map/v1`` line) and finds no invalid entry; ``deplog
  follow --once`` reads the whole log over tiles; the offline replay of an export finds
  none, the map auditor matches every checkpoint's map line, a map-verifying witness
  cosigns; every entry's and tool's explorer page answers 200, and every tool's map proof
  (JSON and binary) verifies against the verified checkpoint and gives the follower's own
  status for every version its notices name; restarted, the authority takes its log and
  map back as they are.

Notices the schema refuses are posted too: the authority's code must be the one
``Notice.from_json`` (``Envelope.parse`` for byte-level faults) refuses them with.

One authority serves the module (a process per example would be far too slow); Hypothesis
draws only values, never anything read from the log, so examples replay and shrink.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import http.client
import io
import json
import sys
import time
import unicodedata
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deplog.authority.cli import main as authority_main
from deplog.client import verify_tool_status
from deplog.client.audit.bundle import read_entries
from deplog.client.audit.mapaudit import audit_map
from deplog.client.audit.offline import replay
from deplog.client.cli.main import main as deplog_main
from deplog.client.cli.publish import EXIT_OK, EXIT_REFUSED
from deplog.client.errors import DeplogError
from deplog.client.follow.follower import Follower
from deplog.client.map.line import map_root_of, require_map_root
from deplog.client.map.proof import MapProof, verify_map_proof
from deplog.client.map.record import evaluate
from deplog.client.model import canonical
from deplog.client.model.entries import MAX_ENTRY_BYTES, NoticeEntry, decode_entry, encode_entry
from deplog.client.model.notice import (
    MAX_ADVISORIES,
    MAX_ENVELOPE_BYTES,
    MAX_EVENTS,
    MAX_MESSAGE_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_RANGES,
    MAX_SAFE_INTEGER,
    MAX_TOOL_NAME_CHARS,
    MAX_VERSIONS,
    REASONS,
    Envelope,
    Notice,
    encode_signature,
)
from deplog.client.model.rules import InvalidEntry, LogReplay, RuleViolation
from deplog.client.model.semver import MAX_VERSION_LENGTH, Version
from deplog.client.tlog.checkpoint import Checkpoint, open_checkpoint
from deplog.client.tlog.keyfile import key_file_name
from deplog.client.tlog.note import Signer
from deplog.client.tlog.receipt import Receipt
from tests.integration.harness import ORIGIN, AuthorityProcess, deplog, map_witness

pytestmark = pytest.mark.slow

VALID_EXAMPLES = 200
REFUSED_PER_FAULT = 5
CLI_EXAMPLES = 30
RACING_GROUPS = 20

# --- names at their limits ------------------------------------------------------------------

# Four labels of the namespace grammar, 253 characters: the longest namespace there is.
LONG_NAMESPACE = ".".join(["a" * 63, "0" + "-" * 61 + "9", "z9" * 31 + "x", "q" * 61])
LONG_NAME = "0" + "._-" * 42 + "z"  # [a-z0-9][a-z0-9._-]*, 128 characters
assert len(LONG_NAMESPACE) == MAX_NAMESPACE_CHARS and len(LONG_NAME) == MAX_TOOL_NAME_CHARS

ACME_TOOLS = (
    "tool:org.acme/search",
    "tool:org.acme/fetch",
    f"tool:org.acme/{LONG_NAME}",
    f"tool:{LONG_NAMESPACE}/x",
    f"tool:{LONG_NAMESPACE}/{LONG_NAME}",
)
BETA_TOOL = "tool:org.beta/fetch"

# --- strategies of the valid space ----------------------------------------------------------

_small_num = st.integers(0, 12).map(str)
_num = st.one_of(_small_num, _small_num, st.integers(0, 2**70).map(str))
_alnum_id = st.from_regex(r"[0-9]{0,3}[a-zA-Z-][0-9a-zA-Z-]{0,8}", fullmatch=True)
_pre_id = st.one_of(_small_num, _alnum_id)
_build_id = st.from_regex(r"[0-9a-zA-Z-]{1,10}", fullmatch=True)


def _version_text(major: str, minor: str, patch: str, pre: list[str], build: list[str]) -> str:
    text = f"{major}.{minor}.{patch}"
    if pre:
        text += "-" + ".".join(pre)
    if build:
        text += "+" + ".".join(build)
    return text


def _padded(text: str, length: int, fill: str = "0") -> str:
    """``text`` with build metadata making it ``length`` characters (same precedence)."""
    room = length - len(text) - 1
    if room < 1:
        return text
    return text + ("." if "+" in text else "+") + fill * room


_short_versions = st.builds(
    _version_text,
    _num,
    _num,
    _num,
    st.lists(_pre_id, max_size=4),
    st.lists(_build_id, max_size=3),
).filter(lambda v: len(v) <= MAX_VERSION_LENGTH)
versions = st.one_of(
    _short_versions,
    _short_versions,
    st.builds(_padded, _short_versions, st.just(MAX_VERSION_LENGTH), st.sampled_from("0aZ-")),
)

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# Text the bug was about (backslashes, \u spelled out, quotes), the characters an escaper or
# a renderer might get wrong, and every plane.
_TRICKY = (
    "\\",
    '"',
    "\\u",
    "\\u0041",
    "\\ud800",
    "\\n",
    "C:\\users\\shared",
    "/",
    "'",
    "<",
    ">",
    "&amp;",
    "</script>",
    "{",
    "[",
    "]]",
    "{{",
    "é",
    "\u0301",
    "中",
    "\U0001f600",
    "\U00010348",
    "\U0010fffd",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\u00ad",
    "\ufffe",
    "\uffff",
    "\ue000",
    "\u00a0",
    " ",
    "%s",
    "${x}",
)
_message_chars = st.characters(
    exclude_categories=("Cc", "Cs", "Zl", "Zp"), exclude_characters=_BIDI
)
messages = st.one_of(
    st.text(_message_chars, min_size=1, max_size=60),
    st.lists(st.sampled_from(_TRICKY), min_size=1, max_size=60)
    .map("".join)
    .filter(lambda s: len(s) <= MAX_MESSAGE_CHARS),
    st.text(_message_chars, min_size=MAX_MESSAGE_CHARS - 10, max_size=MAX_MESSAGE_CHARS),
    st.sampled_from(_TRICKY).map(lambda s: (s * MAX_MESSAGE_CHARS)[:MAX_MESSAGE_CHARS]),
)

_EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
moments = st.one_of(
    st.sampled_from([_EARLIEST, _LATEST, datetime(1970, 1, 1, tzinfo=UTC)]),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)).map(
        lambda d: d.replace(microsecond=0, tzinfo=UTC)
    ),
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2032, 1, 1)).map(
        lambda d: d.replace(microsecond=0, tzinfo=UTC)
    ),
)


def ts(moment: datetime) -> str:
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}Z"
    )


_GHSA = "[23456789cfghjmpqrvwx]{4}"
advisory_ids = st.one_of(
    st.from_regex(r"CVE-[0-9]{4}-[0-9]{4,19}", fullmatch=True),
    st.from_regex(rf"GHSA-{_GHSA}-{_GHSA}-{_GHSA}", fullmatch=True),
)
reason_lists = st.lists(st.sampled_from(sorted(REASONS)), min_size=1, max_size=8, unique=True)
digests = st.from_regex(r"[0-9a-f]{64}", fullmatch=True).map(lambda h: "sha256:" + h)
replacement_tools = st.one_of(
    st.sampled_from([*ACME_TOOLS, BETA_TOOL]),
    st.from_regex(
        r"tool:[a-z0-9]{1,10}(\.[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?){1,3}/[a-z0-9][a-z0-9._-]{0,20}",
        fullmatch=True,
    ),
)


@st.composite
def small_range(draw: st.DrawFn) -> dict[str, Any]:
    """An OSV range as ``--range`` or an API client writes it: strictly increasing,
    alternating events, maybe from ``"0"``, maybe ending open."""
    texts = draw(st.lists(versions, min_size=1, max_size=6))
    by_precedence: dict[object, str] = {}
    for text in texts:
        by_precedence.setdefault(Version.parse(text).sort_key, text)
    ordered = [by_precedence[key] for key in sorted(by_precedence)]  # type: ignore[type-var]
    events: list[dict[str, str]] = []
    if draw(st.booleans()):
        events.append({"introduced": "0"})
    for text in ordered:
        if len(events) % 2 == 0:
            events.append({"introduced": text})
        else:
            events.append({draw(st.sampled_from(["fixed", "last_affected"])): text})
    return {"type": "SEMVER", "events": events}


# Lists at their maxima: (versions, ranges, events per range, characters per version).
BULK_SHAPES = (
    (MAX_VERSIONS, 0, 0, MAX_VERSION_LENGTH),  # 256 versions of 128 characters: fits
    (MAX_VERSIONS - 1, 1, MAX_EVENTS, 40),
    (0, MAX_RANGES, MAX_EVENTS, 5),  # 2048 events: fits
    (MAX_VERSIONS, MAX_RANGES, MAX_EVENTS, 5),  # every list at its maximum: fits
    (1, MAX_RANGES - 1, MAX_EVENTS - 1, 5),
    (0, MAX_RANGES, 2, MAX_VERSION_LENGTH),
    (MAX_VERSIONS, MAX_RANGES, MAX_EVENTS, 12),  # just over 60 KiB: 413
    (MAX_VERSIONS, MAX_RANGES, MAX_EVENTS, MAX_VERSION_LENGTH),  # about 350 KB: 413
)


@st.composite
def bulk_affected(draw: st.DrawFn) -> dict[str, Any]:
    """Lists at or near their maxima, built from a few draws (what is drawn stays small):
    some fit a 60 KiB envelope, some do not."""
    n_versions, n_ranges, n_events, width = draw(st.sampled_from(BULK_SHAPES))
    out: dict[str, Any] = {}
    if n_versions:
        texts = [_padded(f"{i}.{i % 7}.0", width) for i in range(n_versions)]
        out["versions"] = draw(st.permutations(texts)) if draw(st.booleans()) else texts
    from_zero = draw(st.booleans())
    kinds = draw(st.integers(0, 2**MAX_EVENTS - 1))  # fixed or last_affected, event by event
    ranges = []
    for r in range(n_ranges):
        events: list[dict[str, str]] = []
        for e in range(n_events):
            if e == 0 and from_zero:
                events.append({"introduced": "0"})
                continue
            text = _padded(f"{r}.{e}.0", width, "x")
            if e % 2 == 0:
                events.append({"introduced": text})
            else:
                events.append({"fixed" if kinds >> e & 1 else "last_affected": text})
        ranges.append({"type": "SEMVER", "events": events})
    if ranges:
        out["ranges"] = ranges
    return out


@st.composite
def affected_objects(draw: st.DrawFn, bulk: bool = True) -> dict[str, Any]:
    if bulk and draw(st.integers(0, 3)) == 0:
        return draw(bulk_affected())
    which = draw(st.sampled_from(["versions", "ranges", "both"]))
    out: dict[str, Any] = {}
    if which != "ranges":
        out["versions"] = draw(st.lists(versions, min_size=1, max_size=8, unique=True))
    if which != "versions":
        out["ranges"] = draw(st.lists(small_range(), min_size=1, max_size=4))
    return out


# --- the bench: one authority process for the module, and the verifiers' view of its log -----


@dataclass
class Admission:
    index: int
    envelope: Envelope
    leaf: bytes


class Http:
    """One keep-alive connection to the authority (reopened after the server closes it)."""

    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
            answer = response.status, response.headers, response.read()
        except (http.client.HTTPException, ConnectionError):
            self.conn.close()  # an idle keep-alive connection the server closed
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            if method != "GET":
                raise  # a POST the server may have read is never sent twice
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
            answer = response.status, response.headers, response.read()
        if response.will_close:
            self.conn.close()
        return answer

    def get(self, path: str) -> tuple[int, http.client.HTTPMessage, bytes]:
        return self.request("GET", path)


@dataclass
class Bench:
    """The authority under test, its publishers' keys, and the verifiers' view of its log."""

    authority: AuthorityProcess
    acme: Signer
    beta: Signer
    impostor: Signer
    """Named ``acme``, never registered: its notices are unauthorized."""
    http: Http
    history: LogReplay
    """The verifiers' validator, fed every served leaf in order."""
    size: int = 0
    admitted: list[Admission] = field(default_factory=list)
    by_leaf: dict[bytes, int] = field(default_factory=dict)
    notes: dict[int, bytes] = field(default_factory=dict)
    """A checkpoint note of each size a receipt carried."""
    sequences: dict[str, int] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)
    """What the run covered: each answer's status and code, each admitted notice's
    features (``features``); printed at the end."""

    def next_sequence(self, publisher: str) -> int:
        self.sequences[publisher] = self.sequences.get(publisher, 0) + 1
        return self.sequences[publisher]

    def served_leaves(self, start: int, end: int) -> list[bytes]:
        status, _, body = self.http.get(f"/v1/entries?start={start}&end={end}")
        assert status == 200, body
        return [base64.b64decode(e) for e in json.loads(body)["entries"]]

    def checkpoint(self) -> tuple[Checkpoint, bytes]:
        status, _, note = self.http.get("/checkpoint")
        assert status == 200
        return open_checkpoint(note, self.authority.log_verifier)[0], note

    def catch_up(self) -> None:
        """Judge every served leaf not judged yet (the registrations at the start)."""
        checkpoint, note = self.checkpoint()
        for index, leaf in enumerate(self.served_leaves(self.size, checkpoint.size), self.size):
            assert not isinstance(self.history.judge(index, leaf), InvalidEntry)
        self.size = checkpoint.size
        self.notes[checkpoint.size] = note


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    """An authority with ``acme`` (owning ``org.acme`` and a 253-character namespace) and
    ``beta`` (owning ``org.beta``), no rate limits; a keep-alive client to it."""
    root = tmp_path_factory.mktemp("admission")
    authority = AuthorityProcess(
        root / "authority", extra_args=["--rate-per-address", "0", "--rate-per-publisher", "0"]
    )
    authority.init()
    acme, beta = Signer.generate("acme"), Signer.generate("beta")
    for signer, namespaces in ((acme, ["org.acme", LONG_NAMESPACE]), (beta, ["org.beta"])):
        flags = [arg for namespace in namespaces for arg in ("--namespace", namespace)]
        code = authority_main(
            [
                "publisher",
                "add",
                signer.name,
                "--data",
                str(authority.data),
                "--keys",
                str(authority.keys),
                *flags,
                "--key",
                signer.verifier().vkey(),
            ]
        )
        assert code == 0
    authority.start()
    bench = Bench(
        authority,
        acme,
        beta,
        Signer.generate("acme"),
        Http(authority.url),
        LogReplay(authority.log_verifier),
    )
    try:
        bench.catch_up()
        yield bench
    finally:
        bench.http.conn.close()
        authority.stop()


# --- submissions and the oracle -------------------------------------------------------------


class Body(bytes):
    """A request body whose repr stays short in Hypothesis's report of a failing example
    (a 60 KiB envelope is no help there): its length and its first bytes."""

    def __repr__(self) -> str:
        head = bytes(self[:300])
        return f"Body({len(self)} bytes: {head!r}{'...' if len(self) > 300 else ''})"


def signed_body(notice: dict[str, Any], signer: Signer, spelling: str) -> Body:
    """The envelope of ``notice`` signed by ``signer``, as a client might spell its JSON:
    canonical (what ``deplog publish`` sends), every non-ASCII character escaped as
    ``\\uXXXX``, or indented with its members in reverse order."""
    signature = encode_signature(signer.key_id, signer.sign(canonical.dumps(notice)))
    envelope = {"notice": notice, "signature": signature}
    if spelling == "canonical":
        return Body(canonical.dumps(envelope))
    if spelling == "escaped":
        return Body(json.dumps(envelope, ensure_ascii=True).encode())

    def reverse(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: reverse(value[k]) for k in reversed(list(value))}
        if isinstance(value, list):
            return [reverse(v) for v in value]
        return value

    return Body(json.dumps(reverse(envelope), ensure_ascii=False, indent=1).encode())


@dataclass(frozen=True)
class Expected:
    """What the verifiers say must happen: ``status`` 201 or 200 at ``index``, or a refusal
    with ``code`` (``status`` 413 or 400 for the schema's, 0 for the rules': some 4xx)."""

    status: int
    code: str | None = None
    index: int | None = None
    leaf: bytes | None = None
    envelope: Envelope | None = None


def expected(bench: Bench, body: bytes) -> Expected:
    """The verifiers' verdict on posting ``body`` now: the schema (``Envelope.parse``), then
    the verifiers' decoder on the leaf the envelope makes, then the rules at the next index."""
    try:
        envelope = Envelope.parse(body)
    except DeplogError as refused:
        return Expected(413 if refused.code == "too_large" else 400, str(refused.code))
    leaf = encode_entry(NoticeEntry(envelope))
    if len(leaf) > MAX_ENTRY_BYTES:
        return Expected(400, "leaf_too_large")
    # One definition: what the schema accepts is a leaf the verifiers' decoder accepts.
    decoded = decode_entry(leaf)
    assert decoded == NoticeEntry(envelope)
    if leaf in bench.by_leaf:
        return Expected(200, index=bench.by_leaf[leaf], leaf=leaf, envelope=envelope)
    try:
        bench.history.checker.check(bench.size, leaf)
    except RuleViolation as violation:
        assert violation.error is not None
        return Expected(0, str(violation.error.code))
    return Expected(201, index=bench.size, leaf=leaf, envelope=envelope)


def post_and_check(bench: Bench, body: bytes) -> Expected:
    """POST ``body``; the answer must be the verifiers' verdict. A 201's served leaf is
    judged by the verifiers' validator and joins their history."""
    want = expected(bench, body)
    status, headers, answer = bench.http.request("POST", "/v1/notices", body)
    assert status < 500, (status, answer)
    bench.seen[f"{status} {want.code or ''}".strip()] += 1
    if want.code is not None:
        assert 400 <= status < 500, (status, answer, want)
        if want.status:
            assert status == want.status, (status, answer, want)
        assert json.loads(answer) == {"error": want.code}, (answer, want)
        return want
    assert (status, headers.get("Deplog-Index")) == (want.status, str(want.index)), answer
    record(bench, want, Receipt.parse(answer), created=status == 201)
    return want


def record(bench: Bench, want: Expected, receipt: Receipt, *, created: bool) -> None:
    """An accepted submission: its receipt is for the predicted index; a new entry's served
    leaf is the envelope's, decodes, and is judged valid by the verifiers' validator (which
    then holds it in its history)."""
    assert receipt.index == want.index
    checkpoint, _ = open_checkpoint(receipt.checkpoint, bench.authority.log_verifier)
    assert checkpoint.size > receipt.index
    bench.notes.setdefault(checkpoint.size, receipt.checkpoint)
    if not created:
        return
    assert want.index is not None and want.leaf is not None and want.envelope is not None
    [served] = bench.served_leaves(want.index, want.index + 1)
    assert served == want.leaf == encode_entry(NoticeEntry(want.envelope))
    assert decode_entry(served) == NoticeEntry(want.envelope)
    judged = bench.history.judge(want.index, served)
    assert judged == NoticeEntry(want.envelope), judged
    bench.size = want.index + 1
    bench.admitted.append(Admission(want.index, want.envelope, served))
    bench.by_leaf[served] = want.index
    bench.seen.update(features(want.envelope, served))


# --- submissions racing into one batch -------------------------------------------------------


def post_together(bench: Bench, bodies: list[Body]) -> None:
    """POST ``bodies`` at once, each on its own connection, so that the sequencer takes them
    in one batch in an order nobody chose. Whatever it admits, the verifiers' validator must
    accept at the index it was given; what it refuses, it refuses with a stable 4xx code (the
    schema's own for a notice the schema refuses: the rules' depend on the order)."""
    start = bench.size

    def post(body: Body) -> tuple[int, str | None, bytes]:
        connection = Http(bench.authority.url)
        try:
            status, headers, answer = connection.request("POST", "/v1/notices", body)
        finally:
            connection.conn.close()
        return status, headers.get("Deplog-Index"), answer

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(post, bodies))
    created: dict[int, Envelope] = {}
    for body, (status, index, answer) in zip(bodies, answers, strict=True):
        assert status < 500, (status, answer)
        bench.seen[f"together {status}"] += 1
        if status >= 400:
            code = json.loads(answer)["error"]
            try:
                Envelope.parse(body)
            except DeplogError as refused:
                assert code == refused.code, (code, refused.code)
            continue
        assert status in (200, 201) and index is not None, (status, answer)
        envelope = Envelope.parse(body)
        if status == 200:
            leaf = encode_entry(NoticeEntry(envelope))
            assert bench.by_leaf.get(leaf, int(index)) == int(index)
            continue
        assert int(index) not in created
        created[int(index)] = envelope
        checkpoint, _ = open_checkpoint(
            Receipt.parse(answer).checkpoint, bench.authority.log_verifier
        )
        bench.notes.setdefault(checkpoint.size, Receipt.parse(answer).checkpoint)
    assert sorted(created) == list(range(start, start + len(created)))
    served = bench.served_leaves(start, start + len(created)) if created else []
    for index, leaf in enumerate(served, start):
        envelope = created[index]
        assert leaf == encode_entry(NoticeEntry(envelope))
        assert bench.history.judge(index, leaf) == NoticeEntry(envelope)
        bench.admitted.append(Admission(index, envelope, leaf))
        bench.by_leaf.setdefault(leaf, index)
        bench.seen.update(features(envelope, leaf))
    bench.size = start + len(created)


# --- the same through ``deplog publish`` -----------------------------------------------------


@st.composite
def cli_ranges(draw: st.DrawFn) -> str:
    """A ``--range`` as a user types it: ``A..B``, ``A..=B``, ``A..``, ``..B``, ``..=B``."""
    low, high = sorted(draw(st.lists(versions, min_size=2, max_size=2)), key=_precedence)
    if not Version.parse(low) < Version.parse(high):
        high = _version_text(str(Version.parse(low).major + 1), "0", "0", [], [])
    forms = [f"{low}..{high}", f"{low}..={high}", f"{low}..", f"..{high}", f"..={high}"]
    return draw(st.sampled_from(forms))


def _precedence(text: str) -> Any:
    return Version.parse(text).sort_key


@st.composite
def cli_flags(draw: st.DrawFn, bench: Bench, sequence: int) -> list[str]:
    """``deplog publish`` flags over every flag, each value one the CLI takes."""
    action = draw(st.sampled_from(["deprecate", "revoke", "withdraw"]))
    tool = draw(st.sampled_from([*ACME_TOOLS, BETA_TOOL]))  # org.beta is not acme's
    flags = ["--tool", tool, "--action", action, "--sequence", str(sequence)]
    reasons = draw(reason_lists)
    flags += [arg for reason in reasons for arg in ("--reason", reason)]
    effective = draw(moments)
    if draw(st.booleans()):
        flags += ["--effective-at", ts(effective)]
    if action == "withdraw":
        pick = draw(st.integers(0, 2**20))
        own = [a.index for a in bench.admitted if a.envelope.notice.tool_id == tool]
        targets = own or [0]
        flags += ["--withdraws", str(targets[pick % len(targets)])]
    else:
        named = draw(st.lists(versions, max_size=5, unique=True))
        ranges = draw(st.lists(cli_ranges(), min_size=0 if named else 1, max_size=4))
        flags += [arg for v in named for arg in ("--version", v)]
        flags += [arg for r in ranges for arg in ("--range", r)]
        if action == "deprecate" and draw(st.booleans()):
            flags += ["--sunset-at", ts(max(effective, draw(moments)))]
            if "--effective-at" not in flags:  # the default is now
                flags += ["--effective-at", ts(effective)]
        if draw(st.booleans()):
            flags += ["--replacement", f"{draw(replacement_tools)}@{draw(versions)}"]
        if draw(st.booleans()):
            flags += ["--schema-digest", draw(digests)]
    if (action == "revoke" and "security" in reasons) or draw(st.booleans()):
        advisories = draw(st.lists(advisory_ids, min_size=1, max_size=3, unique=True))
        flags += [arg for a in advisories for arg in ("--advisory", a)]
    if draw(st.booleans()):
        flags.append("--message=" + draw(messages))  # one argument, even if it starts with -
    return flags


def publish_with_the_cli(bench: Bench, flags: list[str], workdir: Path, sequence: int) -> None:
    """``deplog publish`` (in process) with ``flags``: it must log the notice where the
    verifiers say, or be refused with their code; never a usage error for flags it takes."""
    key_file = bench.authority.keys / f"{key_file_name(ORIGIN)}.pub"
    argv = ["publish", "--url", bench.authority.url, "--log-key", str(key_file)]
    argv += ["--key", str(workdir / "keys" / "acme.key"), "--out", str(workdir / "out")]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = deplog_main([*argv, *flags])
    assert code in (EXIT_OK, EXIT_REFUSED), (code, stderr.getvalue())
    saved = workdir / "out" / f"acme-{sequence}.envelope.json"
    want = expected(bench, saved.read_bytes())  # nothing changed the log since the post
    bench.seen[f"cli {want.status or 'refused'} {want.code or ''}".strip()] += 1
    if code == EXIT_REFUSED:
        assert want.code is not None and f" {want.code})" in stderr.getvalue(), stderr.getvalue()
        return
    assert want.code is None, (want, stdout.getvalue())
    assert f"logged at index {want.index} (verified)" in stdout.getvalue()
    receipt = Receipt.parse(saved.with_name(f"acme-{sequence}.tlog-proof").read_bytes())
    record(bench, want, receipt, created=want.status == 201)


def features(envelope: Envelope, leaf: bytes) -> set[str]:
    """The parts of the input space an admitted notice covers."""
    notice = envelope.notice
    out = {f"action {notice.action}"}
    for name in ("sunset_at", "replacement", "schema_digest", "advisories", "message"):
        if getattr(notice, name):
            out.add(name)
    if len(leaf) > 48 * 1024:
        out.add("leaf over 48 KiB")
    if LONG_NAMESPACE in notice.tool_id:
        out.add("253-character namespace")
    if LONG_NAME in notice.tool_id:
        out.add("128-character tool name")
    if len(notice.advisories) == MAX_ADVISORIES:
        out.add("32 advisories")
    for moment in (notice.effective_at, notice.sunset_at, notice.issued_at):
        if moment in (_EARLIEST, _LATEST):
            out.add(f"year {moment.year:04d}")
    if notice.affected is not None:
        texts = [v.text for v in notice.affected.versions]
        texts += [t for r in notice.affected.ranges for _, t in r.events]
        if any(len(t) == MAX_VERSION_LENGTH for t in texts):
            out.add("128-character version")
        if len(notice.affected.versions) == MAX_VERSIONS:
            out.add("256 versions")
        if len(notice.affected.ranges) == MAX_RANGES:
            out.add("32 ranges")
        if any(len(r.events) == MAX_EVENTS for r in notice.affected.ranges):
            out.add("64 events")
        if notice.affected.versions and notice.affected.ranges:
            out.add("versions and ranges")
        kinds = {k for r in notice.affected.ranges for k, _ in r.events}
        out |= {f"event {k}" for k in kinds}
        if any(r.events[0] == ("introduced", "0") for r in notice.affected.ranges):
            out.add("introduced 0")
    text = notice.message or ""
    for label, hit in (
        ("message with a backslash", "\\" in text),
        ("message with \\u", "\\u" in text),
        ("message with a quote", '"' in text),
        ("message beyond the BMP", any(ord(c) > 0xFFFF for c in text)),
        ("message of 500 characters", len(text) == MAX_MESSAGE_CHARS),
        ("message with a format character", any(unicodedata.category(c) == "Cf" for c in text)),
    ):
        if hit:
            out.add(label)
    return out


# --- generating submissions -----------------------------------------------------------------


@st.composite
def notice_fields(
    draw: st.DrawFn, bench: Bench, tool: str, publisher: str, bulk: bool = True
) -> dict[str, Any]:
    """A notice about ``tool`` by ``publisher`` over every field and flag; withdraws name an
    earlier logged notice (theirs or not, of this tool or not) or an index that is none."""
    action = draw(st.sampled_from(["deprecate", "revoke", "withdraw"]))
    effective, other = draw(moments), draw(moments)
    notice: dict[str, Any] = {
        "tool_id": tool,
        "action": action,
        "reasons": draw(reason_lists),
        "effective_at": ts(effective),
        "issued_at": ts(draw(moments)),
        "publisher": publisher,
    }
    if action == "withdraw":
        # What is drawn never depends on the log (Hypothesis replays draws): a kind and a
        # number, resolved against the notices logged so far.
        kind = draw(st.sampled_from(["own"] * 4 + ["anyone", "none"]))
        pick = draw(st.integers(0, 2**20))
        own = [
            a.index
            for a in bench.admitted
            if a.envelope.notice.publisher == publisher and a.envelope.notice.tool_id == tool
        ]
        anyone = [a.index for a in bench.admitted]
        pool = {"own": own, "anyone": anyone}.get(kind) or anyone or [0]
        if kind == "none":
            pool = [0, bench.size, MAX_SAFE_INTEGER]  # a registration, itself, nothing
        notice["withdraws"] = pool[pick % len(pool)]
    else:
        notice["affected"] = draw(affected_objects(bulk))
        if draw(st.booleans()):
            notice["schema_digest"] = draw(digests)
        if draw(st.booleans()):
            notice["replacement"] = {
                "tool_id": draw(replacement_tools),
                "version": draw(versions),
            }
        if action == "deprecate" and draw(st.booleans()):
            notice["sunset_at"] = ts(max(effective, other))
    if (action == "revoke" and "security" in notice["reasons"]) or draw(st.booleans()):
        many = draw(st.booleans()) and draw(st.booleans())
        notice["advisories"] = draw(
            st.lists(
                advisory_ids,
                min_size=MAX_ADVISORIES if many else 1,
                max_size=MAX_ADVISORIES if many else 4,
                unique=True,
            )
        )
    if draw(st.booleans()):
        notice["message"] = draw(messages)
    return notice


@st.composite
def submissions(draw: st.DrawFn, bench: Bench) -> Body:
    """A body to POST: mostly acme's notices about its tools; also beta's, acme's about a
    namespace it does not own, an unknown key's, a reused sequence number, a resubmission."""
    kind = draw(
        st.sampled_from(["acme"] * 6 + ["beta", "foreign", "impostor", "reuse", "resubmit"])
    )
    spelling = draw(st.sampled_from(["canonical", "canonical", "escaped", "indented"]))
    pick, often = draw(st.integers(0, 2**20)), draw(st.integers(0, 9))
    signer = {"beta": bench.beta, "impostor": bench.impostor}.get(kind, bench.acme)
    if kind == "beta" or kind == "foreign":
        tool = BETA_TOOL
    else:
        tool = draw(
            st.one_of(
                st.sampled_from(ACME_TOOLS),
                st.from_regex(r"[a-z0-9][a-z0-9._-]{0,127}", fullmatch=True).map(
                    lambda name: f"tool:org.acme/{name}"
                ),
            )
        )
    notice = draw(notice_fields(bench, tool, signer.name))
    # Below, only the log decides (never what is drawn next).
    if kind == "resubmit" and bench.admitted:
        again = bench.admitted[pick % len(bench.admitted)].envelope
        return signed_body(again.notice.to_json(), _signer_of(bench, again), spelling)
    if kind == "reuse" and bench.sequences.get(signer.name):
        notice["sequence"] = 1 + pick % bench.sequences[signer.name]
    else:
        sequence = bench.next_sequence(signer.name)
        notice["sequence"] = MAX_SAFE_INTEGER - sequence + 1 if often == 0 else sequence
    return signed_body(notice, signer, spelling)


def _signer_of(bench: Bench, envelope: Envelope) -> Signer:
    return bench.beta if envelope.notice.publisher == "beta" else bench.acme


# --- the end-of-run verification ------------------------------------------------------------


def probe_versions(bench: Bench, tool: str) -> list[str]:
    """The versions the tool's admitted notices name (exactly or as range bounds), and two
    they may not cover; at most 40."""
    named: list[str] = []
    for admission in bench.admitted:
        notice = admission.envelope.notice
        if notice.tool_id != tool or notice.affected is None:
            continue
        named += [v.text for v in notice.affected.versions]
        named += [text for r in notice.affected.ranges for _, text in r.events if text != "0"]
    unique = list(dict.fromkeys(named))
    if len(unique) > 38:
        unique = unique[:: len(unique) // 38 + 1]
    return [*unique, "0.0.0", "999999.0.0"]


async def follow_every_checkpoint(
    bench: Bench, state_path: Path, probes: dict[str, list[str]], now: datetime
) -> dict[tuple[str, str], dict[str, Any]]:
    """A follower steps through every checkpoint a receipt carried, then the served one:
    each step checks that checkpoint's map line against the follower's own fold. Returns
    the follower's status of every probed version."""
    key = bench.authority.log_verifier
    async with Follower(bench.authority.url, key, state_path) as follower:
        for size in sorted(bench.notes):
            note = bench.notes[size]
            assert map_root_of(open_checkpoint(note, key)[0].extensions) is not None
            result = await follower.sync_to(note)
            assert result.invalid == (), result.invalid
        result = await follower.sync()
        assert result.invalid == ()
        assert follower.state.size == bench.size
        assert follower.state.invalid_entries() == (0, [])
        statuses = {}
        for tool, probed in probes.items():
            index, _ = follower.state.tool_status(tool)
            for version in probed:
                statuses[tool, version] = index.lookup(tool, version, now).to_json()
        return statuses


def verify_everything_admitted(bench: Bench, workdir: Path) -> dict[str, float]:
    """The end-of-run checks; returns the seconds each took."""
    took: dict[str, float] = {}
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        took[name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    url = bench.authority.url
    checkpoint, note = bench.checkpoint()
    assert checkpoint.size == bench.size  # nothing refused was appended
    bench.notes.setdefault(checkpoint.size, note)
    now = datetime.now(UTC)
    tools = sorted({a.envelope.notice.tool_id for a in bench.admitted})
    probes = {tool: probe_versions(bench, tool) for tool in tools}
    followed = asyncio.run(follow_every_checkpoint(bench, workdir / "follower.db", probes, now))
    lap("follower")

    # ``deplog follow --once``, over the tiles the authority serves (the CLI's default path).
    key_file = bench.authority.keys / f"{key_file_name(ORIGIN)}.pub"
    done = deplog("follow", url, "--once", "--log-key", key_file, "--state", workdir / "cli.db")
    assert done.returncode == 0, done.stderr
    assert "fails validation" not in done.stderr, done.stderr
    lap("deplog follow")

    # The offline auditor over an export of the log.
    out = workdir / "export"
    assert deplog_main(["export", bench.authority.url, "--out", str(out), "--json"]) == 0
    report = replay(
        read_entries(out / "entries"),
        (out / "checkpoint").read_bytes(),
        bench.authority.log_verifier,
    )
    assert report.invalid == ()
    assert report.size >= bench.size
    # The map auditor folds the export and matches the map line of every checkpoint a
    # receipt carried.
    mapped = audit_map(
        read_entries(out / "entries"), list(bench.notes.values()), bench.authority.log_verifier
    )
    assert set(mapped.matched) == set(bench.notes) and mapped.without_line == ()
    lap("replay")

    # A map-verifying witness folds the whole log itself before it cosigns.
    with map_witness(workdir / "witness", bench.authority) as witness:
        request = urllib.request.Request(
            witness.url + "/add-checkpoint", data=b"old 0\n\n" + note, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 200
            assert answer.read().startswith("— map.witness.test/w ".encode())
    lap("map witness")

    # The explorer's page of every entry and every tool, and the API's tool status.
    for index in range(bench.size):
        status, headers, page = bench.http.get(f"/notices/{index}")
        assert status == 200 and headers.get_content_type() == "text/html", (index, page[:200])
    for tool in tools:
        for path in (f"/tools/{tool}", f"/v1/tools/{tool}"):
            status, _, page = bench.http.get(path)
            assert status == 200, (path, page[:200])
    lap("explorer")

    # Every tool's map proof, in both forms, verified against the verified checkpoint, says
    # what the follower's own fold says. ``verify_tool_status`` is verifying the proof, then
    # evaluating the record it proves: the record is evaluated again for the other versions.
    served, _ = bench.checkpoint()
    root = require_map_root(served)
    for tool in tools:
        for form in ("", "?format=binary"):
            status, _, proof = bench.http.get(f"/v1/tools/{tool}/proof{form}")
            assert status == 200, proof
            first, *others = probes[tool]
            proved = verify_tool_status(proof, served, tool, first, now)
            assert proved.to_json() == followed[tool, first], (tool, first, form)
        record = verify_map_proof(root, tool, MapProof.from_binary(proof))
        for version in others:
            assert evaluate(tool, record, version, now).to_json() == followed[tool, version]
    lap("map proofs")

    # The authority itself, restarted on its files, takes its log and map back as they are.
    port = bench.authority.port
    bench.authority.stop()
    bench.authority.start(port)
    status, _, health = bench.http.get("/healthz")
    assert status == 200 and "invalid_entries" not in json.loads(health), health
    assert bench.checkpoint()[0] == served
    checked = bench.authority.run_cli("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lap("restart")
    return took


# --- the tests ------------------------------------------------------------------------------


def _notice(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tool_id": "tool:org.acme/search",
        "action": "deprecate",
        "affected": {"versions": ["1.0.0"]},
        "reasons": ["superseded"],
        "effective_at": "2026-01-01T00:00:00Z",
        "issued_at": "2026-01-01T00:00:00Z",
        "publisher": "acme",
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def sized_body(bench: Bench, size: int) -> bytes:
    """A canonical envelope of exactly ``size`` bytes (about 60 KiB): range events of
    128-character versions to come within about a kilobyte, then a message of four-byte
    characters and ASCII for the rest."""
    sequence = bench.next_sequence("acme")

    def body(events: int, message: str) -> bytes:
        notice = _notice(affected=_long_ranges(events), sequence=sequence, message=message)
        return signed_body(notice, bench.acme, "canonical")

    events = 1
    while len(body(events * 2, "x")) < size - 600:
        events *= 2
    for step in (256, 64, 16, 4, 1):  # the most events whose envelope stays 600 bytes short
        while len(body(events + step, "x")) < size - 600:
            events += step
    missing = size - len(body(events, "x"))
    assert 0 <= missing <= 1500, missing
    fours, ones = divmod(missing + 1, 4)
    sized = body(events, "\U0001f600" * fours + "x" * ones)
    assert len(sized) == size, (len(sized), size)
    return sized


def _maximal_affected() -> dict[str, Any]:
    """256 versions and 32 ranges of 64 events (fixed and last_affected, from "0")."""
    ranges = [
        {
            "type": "SEMVER",
            "events": [{"introduced": "0"}]
            + [
                {("introduced", "fixed", "introduced", "last_affected")[e % 4]: f"{r}.{e}.0"}
                for e in range(1, MAX_EVENTS)
            ],
        }
        for r in range(MAX_RANGES)
    ]
    return {"versions": [f"1.0.{i}" for i in range(MAX_VERSIONS)], "ranges": ranges}


def _long_ranges(events: int) -> dict[str, Any]:
    """``events`` range events of 128-character versions, 64 to a range."""
    ranges = []
    for r in range(0, events, MAX_EVENTS):
        count = min(MAX_EVENTS, events - r)
        ranges.append(
            {
                "type": "SEMVER",
                "events": [
                    {
                        "introduced" if e % 2 == 0 else "fixed": _padded(
                            f"{r}.{e}.0", MAX_VERSION_LENGTH
                        )
                    }
                    for e in range(count)
                ],
            }
        )
    return {"ranges": ranges}


def test_every_notice_the_authority_admits_is_one_every_verifier_accepts(
    bench: Bench, tmp_path: Path
) -> None:
    started = time.monotonic()
    # The triggers of the bug fixed in canonical.loads_checked, and the size boundary.
    for fields in (
        {
            "affected": {
                "ranges": [
                    {
                        "type": "SEMVER",
                        "events": [{"introduced": f"{m}.0.0"}, {"fixed": f"{m}.1.0"}],
                    }
                    for m in (1, 2, 3)
                ]
            }
        },
        {"message": "moved to C:\\users\\shared"},
    ):
        sequence = bench.next_sequence("acme")
        body = signed_body(_notice(sequence=sequence, **fields), bench.acme, "canonical")
        assert post_and_check(bench, body).status == 201
    assert post_and_check(bench, sized_body(bench, MAX_ENVELOPE_BYTES)).status == 201
    assert post_and_check(bench, sized_body(bench, MAX_ENVELOPE_BYTES + 1)).code == "too_large"
    # Every list at its maximum in one notice, and its withdraw.
    widest = _notice(
        tool_id=ACME_TOOLS[-1],
        action="revoke",
        affected=_maximal_affected(),
        reasons=sorted(REASONS),
        advisories=[f"CVE-2026-{10000 + i}" for i in range(MAX_ADVISORIES)],
        message="\U0001f600" * MAX_MESSAGE_CHARS,
        sequence=bench.next_sequence("acme"),
    )
    widest_at = post_and_check(bench, signed_body(widest, bench.acme, "canonical")).index
    withdraw = _notice(
        tool_id=ACME_TOOLS[-1],
        action="withdraw",
        affected=None,
        withdraws=widest_at,
        reasons=["other"],
        sequence=bench.next_sequence("acme"),
    )
    assert post_and_check(bench, signed_body(withdraw, bench.acme, "indented")).status == 201

    @settings(
        max_examples=VALID_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def submit(data: st.DataObject) -> None:
        post_and_check(bench, data.draw(submissions(bench)))

    submit()

    workdir = tmp_path / "publisher"
    (workdir / "keys").mkdir(parents=True)
    key_path = workdir / "keys" / "acme.key"
    key_path.write_text(bench.acme.skey() + "\n")
    key_path.chmod(0o600)

    @settings(
        max_examples=CLI_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def publish(data: st.DataObject) -> None:
        sequence = bench.next_sequence("acme")
        publish_with_the_cli(bench, data.draw(cli_flags(bench, sequence)), workdir, sequence)

    publish()

    @settings(
        max_examples=RACING_GROUPS,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def race(data: st.DataObject) -> None:
        post_together(bench, data.draw(st.lists(submissions(bench), min_size=2, max_size=6)))

    race()
    generated = time.monotonic()
    took = verify_everything_admitted(bench, tmp_path)
    print(
        f"\n{len(bench.admitted)} notices admitted; log size {bench.size}; covered"
        f" {dict(sorted(bench.seen.items()))};"
        f" {len(bench.notes)} checkpoints followed; posting {generated - started:.1f} s,"
        f" verifying {time.monotonic() - generated:.1f} s {took}",
        file=sys.stderr,
    )
    assert len(bench.admitted) >= VALID_EXAMPLES // 5


# --- notices the schema refuses -------------------------------------------------------------

_CONTROLS = "\x00\x01\t\n\r\x1b\x1f\x7f\x80\x85\x9f"
_SEPARATORS = "\u2028\u2029"


def _insert(text: str, at: int, char: str) -> str:
    at = at % (len(text) + 1)
    return text[:at] + char + text[at:]


Mutation = Callable[[st.DrawFn, dict[str, Any]], None]


def _message_with(chars: str) -> Mutation:
    def mutate(draw: st.DrawFn, notice: dict[str, Any]) -> None:
        text = notice.get("message") or draw(messages)
        notice["message"] = _insert(
            text[: MAX_MESSAGE_CHARS - 1], draw(st.integers(0, 500)), draw(st.sampled_from(chars))
        )

    return mutate


def _set(name: str, values: st.SearchStrategy[Any]) -> Mutation:
    def mutate(draw: st.DrawFn, notice: dict[str, Any]) -> None:
        notice[name] = draw(values)

    return mutate


def _affected(values: st.SearchStrategy[Any]) -> Mutation:
    def mutate(draw: st.DrawFn, notice: dict[str, Any]) -> None:
        notice.pop("withdraws", None)
        notice["action"] = "deprecate"
        notice["affected"] = draw(values)

    return mutate


def _drop(draw: st.DrawFn, notice: dict[str, Any]) -> None:
    required = ["tool_id", "action", "reasons", "effective_at", "issued_at", "publisher"]
    required.append("withdraws" if notice["action"] == "withdraw" else "affected")
    del notice[draw(st.sampled_from(required))]


def _foreign_field(draw: st.DrawFn, notice: dict[str, Any]) -> None:
    if notice["action"] == "withdraw":
        notice["affected"] = {"versions": ["1.0.0"]}
    else:
        notice["withdraws"] = 1


def _security_revoke_without_advisory(draw: st.DrawFn, notice: dict[str, Any]) -> None:
    notice.update(action="revoke", reasons=["security"], affected={"versions": ["1.0.0"]})
    for name in ("advisories", "sunset_at", "withdraws"):
        notice.pop(name, None)


def _sunset_before_effective(draw: st.DrawFn, notice: dict[str, Any]) -> None:
    notice.update(action="deprecate", affected={"versions": ["1.0.0"]})
    notice.pop("withdraws", None)
    notice["effective_at"] = "2026-06-01T00:00:00Z"
    notice["sunset_at"] = draw(st.sampled_from(["2026-05-31T23:59:59Z", "0001-01-01T00:00:00Z"]))


_bad_versions = st.sampled_from(
    [
        "1.0",
        "01.0.0",
        "1.0.0-01",
        "v1.0.0",
        "1.0.0+",
        "1.0.0-",
        "1.0.0 ",
        "\uff11.0.0",
        "1.0.0-é",
        "1.0.0+a..b",
        "0",
        "",
        _padded("1.0.0", MAX_VERSION_LENGTH + 1),
    ]
)
_event = st.sampled_from([{"introduced": "1.0.0"}, {"fixed": "2.0.0"}])
_range = {"type": "SEMVER", "events": [{"introduced": "1.0.0"}]}
_bad_timestamps = st.sampled_from(
    [
        "2026-02-30T00:00:00Z",
        "0000-01-01T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-12-31T23:59:60Z",
        "2026-01-01T00:00:00.5Z",
        "2026-01-01T00:00:00+00:00",
        "2026-01-01t00:00:00z",
        "2026-01-01 00:00:00Z",
        "10000-01-01T00:00:00Z",
        "\uff12026-01-01T00:00:00Z",
    ]
)

MUTATIONS: dict[str, Mutation] = {
    "control_character_in_message": _message_with(_CONTROLS),
    "separator_in_message": _message_with(_SEPARATORS),
    "bidi_control_in_message": _message_with(_BIDI),
    "message_too_long": _set(
        "message", st.text(_message_chars, min_size=501, max_size=501) | st.just("\\" * 501)
    ),
    "empty_message": _set("message", st.just("")),
    "bad_version": _affected(_bad_versions.map(lambda v: {"versions": ["1.0.0", v]})),
    "repeated_version": _affected(versions.map(lambda v: {"versions": [v, "2.0.0", v]})),
    "too_many_versions": _affected(
        st.just({"versions": [f"{i}.0.0" for i in range(MAX_VERSIONS + 1)]})
    ),
    "empty_versions": _affected(st.just({"versions": []})),
    "empty_affected": _affected(st.just({})),
    "too_many_ranges": _affected(st.just({"ranges": [_range] * (MAX_RANGES + 1)})),
    "too_many_events": _affected(
        st.just(
            {
                "ranges": [
                    {
                        "type": "SEMVER",
                        "events": [
                            {"introduced" if e % 2 == 0 else "fixed": f"{e}.0.0"}
                            for e in range(MAX_EVENTS + 1)
                        ],
                    }
                ]
            }
        )
    ),
    "bad_range": _affected(
        st.sampled_from(
            [
                [{"introduced": "2.0.0"}, {"fixed": "1.0.0"}],
                [{"introduced": "1.0.0"}, {"fixed": "1.0.0+b"}],
                [{"fixed": "1.0.0"}],
                [{"introduced": "1.0.0"}, {"introduced": "2.0.0"}],
                [{"introduced": "1.0.0"}, {"fixed": "2.0.0"}, {"introduced": "0"}],
                [{"introduced": "1.0.0", "fixed": "2.0.0"}],
                [{"limit": "1.0.0"}],
                [{"introduced": "0"}, {"fixed": "0"}],
                [],
            ]
        ).map(lambda events: {"ranges": [{"type": "SEMVER", "events": events}]})
        | st.just({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}]}]})
        | st.just({"ranges": [{**_range, "repo": "x"}]})
    ),
    "bad_tool_id": _set(
        "tool_id",
        st.sampled_from(
            [
                "tool:org.acme/Search",
                "tool:org.acme/",
                "tool:acme/search",
                "org.acme/search",
                "tool:org.acme/a/b",
                "tool:org.acme/.search",
                f"tool:{LONG_NAMESPACE}0/x",
                f"tool:org.acme/{LONG_NAME}0",
                "tool:org.-acme/search",
                "tool:org.acme/sé",
            ]
        ),
    ),
    "bad_timestamp": lambda draw, notice: notice.__setitem__(
        draw(st.sampled_from(["effective_at", "issued_at"])), draw(_bad_timestamps)
    ),
    "sunset_before_effective": _sunset_before_effective,
    "bad_reasons": _set(
        "reasons",
        st.sampled_from(
            [[], ["boredom"], ["security", "security"], [*sorted(REASONS), "other"], "security"]
        ),
    ),
    "bad_advisories": _set(
        "advisories",
        st.sampled_from(
            [
                [],
                ["CVE-26-1"],
                ["cve-2026-1234"],
                ["GHSA-aaaa-aaaa-aaaa"],
                ["CVE-2026-1234", "CVE-2026-1234"],
                [f"CVE-2026-{1000 + i}" for i in range(MAX_ADVISORIES + 1)],
            ]
        ),
    ),
    "security_revoke_without_advisory": _security_revoke_without_advisory,
    "bad_digest": _set(
        "schema_digest",
        st.sampled_from(["sha256:" + "A" * 64, "sha256:" + "0" * 63, "sha1:" + "0" * 40]),
    ),
    "bad_replacement": _set(
        "replacement",
        st.sampled_from(
            [
                {"tool_id": "tool:org.acme/search", "version": "1.0"},
                {"tool_id": "tool:org.acme/search"},
                {"tool_id": "search", "version": "1.0.0"},
                {"tool_id": "tool:org.acme/search", "version": "1.0.0", "note": "x"},
            ]
        ),
    ),
    "bad_sequence": _set("sequence", st.sampled_from([0, -1, True, "1", None])),
    "bad_withdraws": lambda draw, notice: notice.update(
        action="withdraw",
        withdraws=draw(st.sampled_from([-1, True, "1"])),
        **{k: None for k in ("affected", "sunset_at", "replacement", "schema_digest")},
    ),
    "field_not_allowed": _foreign_field,
    "unknown_field": _set("endpoint", st.just("https://example.org/")),
    "missing_field": _drop,
    "bad_action": _set("action", st.sampled_from(["retire", "Deprecate", "", 1])),
    "bad_publisher": _set("publisher", st.sampled_from(["Acme", "-acme", "a" * 64, ""])),
}

FAULTS = (*MUTATIONS, "lone_surrogate", "duplicate_member")


@st.composite
def refused_submissions(draw: st.DrawFn, bench: Bench, name: str) -> tuple[Body, str | None]:
    """A notice with the fault ``name``: (body, the code ``Notice.from_json`` refuses the
    notice with, or None for a fault ``Envelope.parse`` finds in the bytes first)."""
    tool = draw(st.sampled_from(ACME_TOOLS))
    notice = draw(notice_fields(bench, tool, "acme", bulk=False))
    notice["sequence"] = bench.next_sequence("acme")
    if name == "lone_surrogate":  # only a \u escape spells one: JSON, not a notice
        notice["message"] = "@@"
        body = Body(signed_body(notice, bench.acme, "canonical").replace(b'"@@"', b'"a\\udc00"'))
        return body, None
    if name == "duplicate_member":
        body = Body(
            signed_body(notice, bench.acme, "canonical").replace(
                b'{"notice":{', b'{"notice":{"publisher":"acme",', 1
            )
        )
        return body, None
    MUTATIONS[name](draw, notice)
    notice = {k: v for k, v in notice.items() if v is not None}
    try:
        Notice.from_json(notice)
    except DeplogError as refused:
        code: str | None = str(refused.code)
    else:
        code = None
    spelling = draw(st.sampled_from(["canonical", "escaped", "indented"]))
    return signed_body(notice, bench.acme, spelling), code


def test_a_notice_the_schema_refuses_is_refused_by_the_authority_with_the_schemas_code(
    bench: Bench,
) -> None:
    """Every kind of fault, each over a few generated notices."""
    before, _ = bench.checkpoint()
    seen: Counter[str] = Counter()

    @settings(
        max_examples=REFUSED_PER_FAULT,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def submit(fault: str, data: st.DataObject) -> None:
        body, schema_code = data.draw(refused_submissions(bench, fault))
        try:
            Envelope.parse(body)
        except DeplogError as refused:
            parsed_code = str(refused.code)
        else:
            raise AssertionError(f"{fault}: the schema accepted it")
        if len(body) > MAX_ENVELOPE_BYTES:  # the size is checked before anything else
            assert parsed_code == "too_large", fault
        elif schema_code is not None:  # one definition: the envelope's parse is the notice's
            assert parsed_code == schema_code, fault
        want = post_and_check(bench, body)
        assert want.code == parsed_code
        seen[parsed_code] += 1

    for fault in FAULTS:
        submit(fault)
    after, _ = bench.checkpoint()
    assert after.size == before.size  # nothing refused was appended
    print(f"\nrefused with {dict(sorted(seen.items()))}", file=sys.stderr)
