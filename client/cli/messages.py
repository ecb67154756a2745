"""What each error code means to the person at the terminal: one sentence per code.

Rules:

1. Every ``ErrorCode`` has exactly one sentence here (tests/test_deplog_cli.py
   checks it), and every ``deplog`` command prints an error as ``<code>: <sentence>``
   through :func:`explain`, so one condition reads the same in every command.
2. A sentence says what is wrong and, where a flag or command fixes it, which one.
   It never contains a submitted value: like the codes, it can always be echoed.
3. Conditions that are not a ``DeplogError`` but recur across commands (a missing state
   file) have one wording here too.
4. ``fetch_failed`` also says which failure it was, from its value-free message
   (``client.follow.http`` rule 1): ``fetch_failed: no usable answer from the authority
   (connection refused: ...); check the URL, or try again later``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.model.notice import REASONS

_NO_ANSWER: Final = "no usable answer from the authority"

NO_STATE_YET: Final = "no verified state yet: run deplog follow URL --once first"
"""The one wording for a read-only command given a state file that does not exist."""

_E = ErrorCode
SENTENCES: Final[Mapping[ErrorCode, str]] = {
    _E.TOO_LARGE: "the input is over its size limit",
    _E.MALFORMED_JSON: "the input is not valid JSON",
    _E.DUPLICATE_FIELD: "a JSON object names one field twice",
    _E.BAD_VERSION: "a version is not SemVer 2.0.0 (MAJOR.MINOR.PATCH, e.g. 1.2.0)",
    _E.WRONG_TYPE: "a notice field has the wrong JSON type",
    _E.EMPTY_LIST: "a notice list field is empty; give at least one item",
    _E.TOO_LONG: "a notice field is over its length limit (a message is at most 500 characters)",
    _E.UNKNOWN_FIELD: "the notice has a field the schema does not know",
    _E.MISSING_FIELD: (
        "the notice lacks a required field: a deprecate or revoke needs --version or "
        "--range, a withdraw needs --withdraws"
    ),
    _E.DUPLICATE_VALUE: "a notice list names one value twice; give each once",
    _E.FIELD_NOT_ALLOWED: (
        "the notice carries a field its action cannot have: --withdraws only on a withdraw, "
        "--sunset-at only on a deprecate, a withdraw names no versions"
    ),
    _E.BAD_NAMESPACE: "a namespace is lower-case reverse DNS, e.g. org.example",
    _E.BAD_TOOL_ID: "a tool id is tool:<namespace>/<name>, e.g. tool:org.example/search",
    _E.BAD_PUBLISHER: (
        "a publisher id is 1 to 63 lower-case letters, digits and '-', starting with a "
        "letter or digit"
    ),
    _E.BAD_TIMESTAMP: "a time is RFC 3339 UTC, e.g. 2026-06-01T00:00:00Z",
    _E.BAD_SIGNATURE_ENCODING: "the envelope's signature is not base64 of 64 bytes",
    _E.BAD_MESSAGE: "the message must be plain text without control characters",
    _E.BAD_RANGE: "a version range is A..B (B fixed), A..=B (B last affected) or A.. (open)",
    _E.BAD_ACTION: "the action is one of deprecate, revoke, withdraw",
    _E.BAD_WITHDRAW_INDEX: "--withdraws is the log index (0 or more) of the notice to retract",
    _E.BAD_DIGEST: "a schema digest is sha256:<64 lower-case hex digits>",
    _E.BAD_REASON: "a reason is one of: " + ", ".join(sorted(REASONS)),
    _E.BAD_ADVISORY: "an advisory is a CVE-YYYY-NNNN or GHSA-xxxx-xxxx-xxxx id",
    _E.ADVISORY_REQUIRED: (
        "a notice with reason security must name its advisory: add --advisory CVE-... or GHSA-..."
    ),
    _E.SUNSET_BEFORE_EFFECTIVE: "--sunset-at cannot come before --effective-at",
    _E.BAD_SEQUENCE: "a sequence number is a whole number from 1 to 2^53-1",
    _E.BAD_SIGNATURE: "the envelope's signature does not verify with the key it names",
    _E.KEY_MISMATCH: "the envelope was checked with another key than the one it names",
    _E.MALFORMED_ENTRY: "a log leaf is not a deplog log entry",
    _E.NONCANONICAL_ENTRY: "a log entry is not in its canonical (RFC 8785) encoding",
    _E.LEAF_TOO_LARGE: "the entry would be over the largest leaf the log stores",
    _E.BAD_AUTHORITY_SIGNATURE: "a publisher statement is not signed by the log key",
    _E.PUBLISHER_EXISTS: "that publisher is already registered",
    _E.NAMESPACE_IN_USE: "that namespace already belongs to another publisher",
    _E.PUBLISHER_NOT_REGISTERED: "that publisher is not registered",
    _E.PUBLISHER_ALREADY_REVOKED: "that publisher is already revoked",
    _E.KEY_NOT_REGISTERED: "that key is not registered for the publisher",
    _E.KEY_ALREADY_REVOKED: "that key is already revoked",
    _E.KEY_IN_USE: "that key is already registered",
    _E.BAD_SNAPSHOT: "a stored publisher registry snapshot cannot be read",
    _E.UNKNOWN_PUBLISHER: (
        "the authority does not know this publisher: ask its operator to register it "
        "(authority publisher add)"
    ),
    _E.UNKNOWN_KEY: (
        "the authority does not know this key: ask its operator to add it "
        "(authority publisher add-key)"
    ),
    _E.PUBLISHER_REVOKED: "the publisher is revoked: it can publish nothing more",
    _E.KEY_REVOKED: "the key is revoked: sign with a registered key",
    _E.NAMESPACE_NOT_AUTHORIZED: "the publisher may not publish for that tool's namespace",
    _E.SEQUENCE_REUSED: (
        "another notice of this publisher already used that sequence number: pick another "
        "--sequence (or leave it to the default)"
    ),
    _E.BAD_WITHDRAW_TARGET: (
        "--withdraws must name an earlier deprecate or revoke of the same publisher and tool"
    ),
    _E.BAD_LEAF: "a logged leaf does not decode as a canonical entry",
    _E.BAD_PUBLISHER_ENTRY: "a logged publisher entry is not a valid, log-signed registry change",
    _E.UNAUTHORIZED_NOTICE: "a logged notice was signed by a key that could not publish it then",
    _E.REPLAYED_NOTICE: "a logged notice reuses a sequence number its publisher already used",
    _E.INVALID_WITHDRAW: "a logged withdraw names no earlier notice of its publisher's tool",
    _E.INDEX_NOT_INCREASING: "notices were folded into a tool's status out of log order",
    _E.UNKNOWN_WITHDRAW_TARGET: "a withdraw was folded into a tool's status before its target",
    _E.MALFORMED_MAP_PROOF: "not a deplog-map/v1 proof",
    _E.MALFORMED_MAP_RECORD: "a tool-status map record is not its one encoding or does not fold",
    _E.MALFORMED_MAP_LINE: "a checkpoint's deplog-map/v1 line is malformed or repeated",
    _E.MISSING_MAP_LINE: "the checkpoint has no deplog-map/v1 line",
    _E.BAD_MAP_PROOF: "the map proof does not lead to the map root, or is about another tool",
    _E.MAP_CHECKPOINT_MISMATCH: "the map proof was made at another checkpoint",
    _E.MAP_ROW_UNREADABLE: (
        "a row of the tool-status map's tables is missing or does not decode: the database "
        "was altered or damaged"
    ),
    _E.MAP_ROOT_MISMATCH: (
        "a signed checkpoint's deplog-map/v1 root is not the map its entries fold to: the log "
        "signed a false map (proven; evidence saved, the follower stopped)"
    ),
    _E.BAD_MAP_ROOT: (
        "a signed checkpoint's deplog-map/v1 root is not the fold of the entries under it "
        "(the first bad size is named)"
    ),
    _E.MAP_NOT_PUBLISHED: (
        "the authority's newest batch waits for its publication, so no map proof can be made "
        "at the served checkpoint yet: retry in a second"
    ),
    _E.MAP_NOT_REPRODUCED: (
        "the witness could not reproduce the checkpoint's deplog-map/v1 root from the log's "
        "entries, so it does not cosign"
    ),
    _E.ENTRIES_UNAVAILABLE: (
        "the log's entries up to the checkpoint cannot be fetched yet, so its map root cannot "
        "be reproduced: retry later"
    ),
    _E.MALFORMED_NOTE: "not a signed note (C2SP signed-note)",
    _E.BAD_KEY: (
        "not a usable key: a verifier key is <name>+<8 hex>+<base64> (a .pub file holds one), "
        "and a publisher key's name is its publisher id: 1 to 63 lower-case letters, digits "
        "and '-', starting with a letter or digit"
    ),
    _E.AMBIGUOUS_KEY: "two configured verifier keys share a name and key id",
    _E.BAD_NOTE_SIGNATURE: "a signature by the given key does not verify: the note is rejected",
    _E.UNVERIFIED_NOTE: (
        "nothing is signed by the given key: check --log-key (the log's keys/<origin>.pub)"
    ),
    _E.MALFORMED_CHECKPOINT: "the note's text is not a C2SP checkpoint",
    _E.WRONG_ORIGIN: (
        "the checkpoint's origin is not the log key's name: pass --origin if the log "
        "signs under another origin"
    ),
    _E.BAD_COSIGNATURE: (
        "a witness cosignature does not verify (an Ed25519 witness that signs only a "
        "checkpoint's first three lines, like litewitness, needs '#deplog: tree-lines NAME' "
        "in the policy, or 'authority witness add --tree-lines')"
    ),
    _E.WRONG_COSIGNER: "a cosignature was made by another key than the one checked",
    _E.MALFORMED_PROOF: "a proof is not the API's JSON shape",
    _E.BAD_PROOF_REQUEST: "a proof was asked for a leaf or size outside the tree",
    _E.BAD_INCLUSION_PROOF: "the inclusion proof (or receipt) does not lead to the root",
    _E.BAD_CONSISTENCY_PROOF: "the consistency proof does not link the two checkpoints",
    _E.PROOF_SIZE_MISMATCH: "the consistency proof is for other sizes than the two checkpoints'",
    _E.TOO_MANY_ENTRIES: "there are more entries than the checkpoint's size",
    _E.MISSING_ENTRIES: "there are fewer entries than the checkpoint's size",
    _E.ENTRIES_ROOT_MISMATCH: "the entries do not hash to the checkpoint's root",
    _E.MALFORMED_RECEIPT: "not a C2SP tlog-proof receipt",
    _E.MALFORMED_POLICY: (
        "not a C2SP tlog-policy file, or a '#deplog:' line that is not tree-lines or map-quorum"
    ),
    _E.LOG_NOT_IN_POLICY: "the checkpoint's origin names no log of the policy",
    _E.QUORUM_NOT_MET: (
        "the policy's witness quorum (or its '#deplog: map-quorum') has not cosigned the checkpoint"
    ),
    _E.STALE_CHECKPOINT: "the quorum's newest cosignature is older than the freshness bound",
    _E.MALFORMED_EVIDENCE: "not a fork evidence file",
    _E.OTHER_LOG: "the evidence is about another log key",
    _E.NO_CONFLICT: "the two checkpoints are consistent: no fork",
    _E.NO_PROOF: "checkpoints of two sizes, but no served proof between them",
    _E.FINDING_MISMATCH: "the file states another finding than its signed data shows",
    _E.KEY_MISSING: (
        "the private key file does not exist: give the <name>.key file deplog keygen wrote"
    ),
    _E.KEY_PERMISSIONS: "the private key file is readable by others: run chmod 600 on it",
    _E.KEY_MALFORMED: "the file does not hold a private key (PRIVATE+KEY+...)",
    _E.FETCH_FAILED: f"{_NO_ANSWER}; check the URL, or try again later",
    _E.RESPONSE_TOO_LARGE: "the authority's answer is over its size bound",
    _E.BAD_RESPONSE: "the authority's answer is not what was asked",
    _E.REDIRECT_REFUSED: (
        "the server redirected to another origin (scheme, host or port), from https to "
        "http, or more than 3 times, which deplog never follows: give the URL it redirects "
        "to directly (curl -sI URL shows its Location)"
    ),
    _E.BAD_CHECKPOINT: "a signed checkpoint of the empty tree has another root",
    _E.ROLLBACK: "the log signed a checkpoint smaller than the trusted one",
    _E.FORK: "the log signed two trees of one size: a proven fork (evidence saved)",
    _E.SUSPECTED_FORK: (
        "a consistency proof fails between two signed checkpoints: not proven, run again to retry"
    ),
    _E.NO_STATE: NO_STATE_YET,
    _E.STATE_FOR_ANOTHER_LOG: (
        "the state file was built for another log (another origin, or another log key: an "
        "authority started over with new keys is another log): give that log's key, follow "
        "into a new --state, or delete the old state file"
    ),
    _E.BAD_STATE: "the state file is inconsistent with itself: follow again into a new --state",
    _E.BAD_JOURNAL: "the journal is not a directory of signed envelopes",
    _E.MALFORMED_INVENTORY: 'an inventory is a JSON list of {"tool_id", "version"} objects',
    _E.BAD_CHECKPOINT_RANGE: (
        "--from must not be newer than --to, and --to not newer than the state: "
        "run deplog follow first"
    ),
    _E.MALFORMED_TILE_PATH: "not the canonical path of a C2SP tlog-tiles tile",
    _E.MALFORMED_TILE: "hash tile bytes that are not 32 bytes per hash",
    _E.BAD_TILE: "a tile or entry bundle does not hash to the verified tree",
    _E.MALFORMED_BUNDLE: "the export file ends inside an entry",
    _E.ENTRY_TOO_LARGE: "an entry over 65535 bytes cannot be written to an export file",
    _E.CONFLICTING_CHECKPOINTS: "two genuine checkpoints of one size have different roots",
    _E.MISSING_INPUT: "the command lacks an input it needs (see its --help)",
    _E.FILE_TOO_LARGE: "an input file is over its size bound",
    _E.NOT_FOUND: "the server has no such resource",
    _E.METHOD_NOT_ALLOWED: "the server does not allow that method there",
    _E.REQUEST_TIMEOUT: "the server timed out reading the request: try again",
    _E.UNSUPPORTED_MEDIA_TYPE: "the request's content type is not the one expected",
    _E.BAD_REQUEST: "the server refused a malformed request",
    _E.INTERNAL: "the server failed (its fault, logged there): try again later",
    _E.BAD_PARAMETER: "a query parameter is missing or malformed",
    _E.REPEATED_PARAMETER: "a query parameter was given more than once",
    _E.OUT_OF_RANGE: "the request names entries or sizes outside the tree",
    _E.SIZE_NOT_PUBLISHED: "the request names a tree size that was never published",
    _E.RANGE_TOO_LARGE: "the request asks for more entries than one page holds",
    _E.RATE_LIMITED: "too many requests: wait and try again",
    _E.PUBLISHER_RATE_LIMITED: "this publisher sent too many notices: wait and try again",
    _E.TOO_MANY_SUBSCRIBERS: "the authority has too many push subscribers: try again later",
    _E.TOO_MANY_CONNECTIONS: "the server has too many open connections: try again later",
    _E.MALFORMED_CONFIG: "the authority's config.json is not valid",
    _E.OVERLOADED: "the authority is overloaded: try again later",
    _E.SHUTTING_DOWN: "the authority is shutting down: try again later",
    _E.STORAGE_UNAVAILABLE: "the authority's storage is failing: try again later",
    _E.STORAGE_FULL: "the authority's disk is full: its operator must free space; try again later",
    _E.STORAGE_CORRUPT: "the authority's storage is corrupt: tell its operator",
    _E.STORED_ROOT_MISMATCH: "the authority's stored tree does not match what it signed",
    _E.CHECKPOINT_INVALID: "the latest stored checkpoint is not signed by the log key",
    _E.TREE_TRUNCATED: "storage holds fewer leaves than the latest checkpoint",
    _E.REGISTRY_MISMATCH: (
        "the stored publisher registry is not the one the log's own registry entries make"
    ),
    _E.WITNESS_QUORUM_UNAVAILABLE: "too few witnesses cosigned: try again later",
    _E.EMBEDDED_WITNESS_UNAVAILABLE: "the authority's own witness failed: try again later",
    _E.WITNESS_REFUSED: "a witness refused the checkpoint",
    _E.BAD_WITNESS_RESPONSE: "a witness's answer is malformed",
    _E.NO_COSIGNATURE: "a witness answered without a valid cosignature",
    _E.MALFORMED_REQUEST: "the witness refused a malformed request",
    _E.UNKNOWN_LOG: "the witness does not know that log",
    _E.UNTRUSTED_CHECKPOINT: "the checkpoint is not signed by the log's trusted key",
    _E.OLD_SIZE_TOO_LARGE: "the old size is above the checkpoint's size",
    _E.OLD_SIZE_MISMATCH: "the witness recorded another size than the request's old size",
    _E.ROOT_MISMATCH: "the witness cosigned another root at that size: a fork",
    _E.UNAVAILABLE: "the witness's database is unavailable: try again later",
    _E.BUSY: "the witness is busy: try again later",
    _E.BAD_LOG_KEY: "not a type 0x01 Ed25519 log verifier key",
    _E.BAD_ORIGIN: "an origin is one non-empty line of text",
    _E.BAD_LOGS_FILE: "a logs file line is not log <vkey> [<url>]",
    _E.LOGS_FILE_TOO_LARGE: "the logs file is over 1 MiB",
    _E.LOG_KEY_CONFLICT: "that origin is already trusted with another key",
}


def explain_code(code: str) -> str:
    """``<code>: <sentence>`` for a code as text (one an authority answered, say)."""
    try:
        return f"{code}: {SENTENCES[ErrorCode(code)]}"
    except ValueError:
        return code


def explain(err: DeplogError) -> str:
    """``<code>: <sentence>``, plus the first bad index where the error names one."""
    text = f"{err.code}: {SENTENCES[err.code]}"
    if err.code == ErrorCode.FETCH_FAILED and str(err):  # rule 4
        text = text.replace(_NO_ANSWER, f"{_NO_ANSWER} ({err})", 1)
    index = getattr(err, "index", None)
    if isinstance(index, int):
        text += f" (at index {index})"
    return text
