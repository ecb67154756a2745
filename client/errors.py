"""Errors shared by every part of deplog: the codes, the base classes, the CLI failure.

Rules:

1. Every code is an ``ErrorCode`` (a typo is a type error) with ONE meaning.
2. Each code belongs to exactly one error class, whose constructor refuses any other
   (the tests check every code has one class); a check needing an error another module
   defines raises that class rather than relabelling it.
3. Nothing here knows HTTP: the servers map codes to statuses in one table
   (``authority/http/status.py``); the CLIs print the code.
4. Messages never contain submitted values, so an error can always be logged or echoed.

``CLIError`` is the one exception that is no ``DeplogError``: a command's message to its
own operator (it may name the operator's paths) and exit status, never a stable code.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ErrorCode(enum.StrEnum):
    """Every stable error code, grouped by the module whose class owns it."""

    # client/errors.py
    TOO_LARGE = "too_large"
    # client/model/canonical.py
    MALFORMED_JSON = "malformed_json"
    DUPLICATE_FIELD = "duplicate_field"
    # client/model/semver.py
    BAD_VERSION = "bad_version"
    # client/model/notice.py: the schema (NoticeError), then the signature
    WRONG_TYPE = "wrong_type"
    EMPTY_LIST = "empty_list"
    TOO_LONG = "too_long"
    UNKNOWN_FIELD = "unknown_field"
    MISSING_FIELD = "missing_field"
    DUPLICATE_VALUE = "duplicate_value"
    FIELD_NOT_ALLOWED = "field_not_allowed"
    BAD_NAMESPACE = "bad_namespace"
    BAD_TOOL_ID = "bad_tool_id"
    BAD_PUBLISHER = "bad_publisher"
    BAD_TIMESTAMP = "bad_timestamp"
    BAD_SIGNATURE_ENCODING = "bad_signature_encoding"
    BAD_MESSAGE = "bad_message"
    BAD_RANGE = "bad_range"
    BAD_ACTION = "bad_action"
    BAD_WITHDRAW_INDEX = "bad_withdraw_index"
    BAD_DIGEST = "bad_digest"
    BAD_REASON = "bad_reason"
    BAD_ADVISORY = "bad_advisory"
    ADVISORY_REQUIRED = "advisory_required"
    SUNSET_BEFORE_EFFECTIVE = "sunset_before_effective"
    BAD_SEQUENCE = "bad_sequence"
    BAD_SIGNATURE = "bad_signature"
    KEY_MISMATCH = "key_mismatch"
    # client/model/entries.py
    MALFORMED_ENTRY = "malformed_entry"
    NONCANONICAL_ENTRY = "noncanonical_entry"
    LEAF_TOO_LARGE = "leaf_too_large"
    BAD_AUTHORITY_SIGNATURE = "bad_authority_signature"
    # client/model/registry.py: publisher entries, then notices
    PUBLISHER_EXISTS = "publisher_exists"
    NAMESPACE_IN_USE = "namespace_in_use"
    PUBLISHER_NOT_REGISTERED = "publisher_not_registered"
    PUBLISHER_ALREADY_REVOKED = "publisher_already_revoked"
    KEY_NOT_REGISTERED = "key_not_registered"
    KEY_ALREADY_REVOKED = "key_already_revoked"
    KEY_IN_USE = "key_in_use"
    BAD_SNAPSHOT = "bad_snapshot"
    UNKNOWN_PUBLISHER = "unknown_publisher"
    UNKNOWN_KEY = "unknown_key"
    PUBLISHER_REVOKED = "publisher_revoked"
    KEY_REVOKED = "key_revoked"
    NAMESPACE_NOT_AUTHORIZED = "namespace_not_authorized"
    SEQUENCE_REUSED = "sequence_reused"
    BAD_WITHDRAW_TARGET = "bad_withdraw_target"
    # client/model/rules.py: one per admission rule
    BAD_LEAF = "bad_leaf"
    BAD_PUBLISHER_ENTRY = "bad_publisher_entry"
    UNAUTHORIZED_NOTICE = "unauthorized_notice"
    REPLAYED_NOTICE = "replayed_notice"
    INVALID_WITHDRAW = "invalid_withdraw"
    # client/model/status.py
    INDEX_NOT_INCREASING = "index_not_increasing"
    UNKNOWN_WITHDRAW_TARGET = "unknown_withdraw_target"
    # client/map/: proofs and records, the checkpoint line, verification, the stored rows
    MALFORMED_MAP_PROOF = "malformed_map_proof"
    MALFORMED_MAP_RECORD = "malformed_map_record"
    MALFORMED_MAP_LINE = "malformed_map_line"
    MISSING_MAP_LINE = "missing_map_line"
    BAD_MAP_PROOF = "bad_map_proof"
    MAP_CHECKPOINT_MISMATCH = "map_checkpoint_mismatch"
    MAP_ROW_UNREADABLE = "map_row_unreadable"
    # client/audit/mapaudit.py
    BAD_MAP_ROOT = "bad_map_root"
    # authority/witness/mapverify.py: the map-verifying witness's refusals
    MAP_NOT_REPRODUCED = "map_not_reproduced"
    ENTRIES_UNAVAILABLE = "entries_unavailable"
    # authority/publication.py: the map is ahead of the served checkpoint
    MAP_NOT_PUBLISHED = "map_not_published"
    # client/tlog/note.py
    MALFORMED_NOTE = "malformed_note"
    BAD_KEY = "bad_key"
    AMBIGUOUS_KEY = "ambiguous_key"
    BAD_NOTE_SIGNATURE = "bad_note_signature"
    UNVERIFIED_NOTE = "unverified_note"
    # client/tlog/checkpoint.py
    MALFORMED_CHECKPOINT = "malformed_checkpoint"
    WRONG_ORIGIN = "wrong_origin"
    # client/tlog/cosignature.py
    BAD_COSIGNATURE = "bad_cosignature"
    WRONG_COSIGNER = "wrong_cosigner"
    # client/tlog/proofs.py
    MALFORMED_PROOF = "malformed_proof"
    BAD_PROOF_REQUEST = "bad_proof_request"
    BAD_INCLUSION_PROOF = "bad_inclusion_proof"
    BAD_CONSISTENCY_PROOF = "bad_consistency_proof"
    PROOF_SIZE_MISMATCH = "proof_size_mismatch"
    TOO_MANY_ENTRIES = "too_many_entries"
    MISSING_ENTRIES = "missing_entries"
    ENTRIES_ROOT_MISMATCH = "entries_root_mismatch"
    # client/tlog/receipt.py
    MALFORMED_RECEIPT = "malformed_receipt"
    # client/tlog/policy.py
    MALFORMED_POLICY = "malformed_policy"
    LOG_NOT_IN_POLICY = "log_not_in_policy"
    QUORUM_NOT_MET = "quorum_not_met"
    STALE_CHECKPOINT = "stale_checkpoint"
    # client/tlog/evidence.py
    MALFORMED_EVIDENCE = "malformed_evidence"
    OTHER_LOG = "other_log"
    NO_CONFLICT = "no_conflict"
    NO_PROOF = "no_proof"
    FINDING_MISMATCH = "finding_mismatch"
    # client/tlog/keyfile.py
    KEY_MISSING = "key_missing"
    KEY_PERMISSIONS = "key_permissions"
    KEY_MALFORMED = "key_malformed"
    # client/follow/
    FETCH_FAILED = "fetch_failed"
    RESPONSE_TOO_LARGE = "response_too_large"
    BAD_RESPONSE = "bad_response"
    REDIRECT_REFUSED = "redirect_refused"
    BAD_CHECKPOINT = "bad_checkpoint"
    ROLLBACK = "rollback"
    FORK = "fork"
    MAP_ROOT_MISMATCH = "map_root_mismatch"
    SUSPECTED_FORK = "suspected_fork"
    NO_STATE = "no_state"
    STATE_FOR_ANOTHER_LOG = "state_for_another_log"
    BAD_STATE = "bad_state"
    # client/follow/monitor.py
    BAD_JOURNAL = "bad_journal"
    # client/cache/inventory.py
    MALFORMED_INVENTORY = "malformed_inventory"
    BAD_CHECKPOINT_RANGE = "bad_checkpoint_range"
    # client/tlog/tiles.py: tile paths, tile bytes, entry bundles
    MALFORMED_TILE_PATH = "malformed_tile_path"
    MALFORMED_TILE = "malformed_tile"
    BAD_TILE = "bad_tile"
    MALFORMED_BUNDLE = "malformed_bundle"
    ENTRY_TOO_LARGE = "entry_too_large"
    # client/audit/
    CONFLICTING_CHECKPOINTS = "conflicting_checkpoints"
    # client/cli/audit.py
    MISSING_INPUT = "missing_input"
    FILE_TOO_LARGE = "file_too_large"
    # authority/http/: requests refused by either server's HTTP layer, then the API's own
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    REQUEST_TIMEOUT = "request_timeout"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    BAD_REQUEST = "bad_request"
    INTERNAL = "internal"
    BAD_PARAMETER = "bad_parameter"
    REPEATED_PARAMETER = "repeated_parameter"
    OUT_OF_RANGE = "out_of_range"
    SIZE_NOT_PUBLISHED = "size_not_published"
    RANGE_TOO_LARGE = "range_too_large"
    RATE_LIMITED = "rate_limited"
    PUBLISHER_RATE_LIMITED = "publisher_rate_limited"
    TOO_MANY_SUBSCRIBERS = "too_many_subscribers"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    # authority/: its configuration, the log, its storage and its witnessing
    MALFORMED_CONFIG = "malformed_config"
    OVERLOADED = "overloaded"
    SHUTTING_DOWN = "shutting_down"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    STORAGE_FULL = "storage_full"
    STORAGE_CORRUPT = "storage_corrupt"
    STORED_ROOT_MISMATCH = "stored_root_mismatch"
    CHECKPOINT_INVALID = "checkpoint_invalid"
    TREE_TRUNCATED = "tree_truncated"
    REGISTRY_MISMATCH = "registry_mismatch"
    WITNESS_QUORUM_UNAVAILABLE = "witness_quorum_unavailable"
    EMBEDDED_WITNESS_UNAVAILABLE = "embedded_witness_unavailable"
    WITNESS_REFUSED = "witness_refused"
    BAD_WITNESS_RESPONSE = "bad_witness_response"
    NO_COSIGNATURE = "no_cosignature"
    # authority/witness/: the tlog-witness refusals, then its operator's input
    MALFORMED_REQUEST = "malformed_request"
    UNKNOWN_LOG = "unknown_log"
    UNTRUSTED_CHECKPOINT = "untrusted_checkpoint"
    OLD_SIZE_TOO_LARGE = "old_size_too_large"
    OLD_SIZE_MISMATCH = "old_size_mismatch"
    ROOT_MISMATCH = "root_mismatch"
    UNAVAILABLE = "unavailable"
    BUSY = "busy"
    BAD_LOG_KEY = "bad_log_key"
    BAD_ORIGIN = "bad_origin"
    BAD_LOGS_FILE = "bad_logs_file"
    LOGS_FILE_TOO_LARGE = "logs_file_too_large"
    LOG_KEY_CONFLICT = "log_key_conflict"


class DeplogError(Exception):
    """Base class of every deplog error: the class names the error, ``code`` the case.

    A class owns ``code`` (also its default) or ``codes`` (rule 2); one owning neither
    only groups others (``FormatError``, ``TrustError``) and cannot be raised.
    """

    codes: ClassVar[frozenset[ErrorCode]] = frozenset()
    code: ErrorCode

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "codes" not in own:  # codes are owned, never inherited
            cls.codes = frozenset({own["code"]}) if "code" in own else frozenset()
        if "code" in own and own["code"] not in cls.codes:
            raise TypeError(f"{cls.__name__}'s default code is not one of its codes")

    def __init__(self, code: ErrorCode | None = None, message: str | None = None) -> None:
        chosen = self._default_code() if code is None else code
        if chosen not in type(self).codes:
            # A programming error, not bad input: the code belongs to another class.
            raise TypeError(f"{type(self).__name__} does not carry the code {chosen!s}")
        self.code = chosen
        super().__init__(message or chosen)

    @classmethod
    def _default_code(cls) -> ErrorCode:
        default = cls.__dict__.get("code")
        if default is None:
            raise TypeError(f"{cls.__name__} has no default code: name one")
        code: ErrorCode = default
        return code


class FormatError(DeplogError):
    """Bytes that do not parse as the format they claim to be."""


class VerificationError(DeplogError):
    """Well-formed input whose signature, proof or hash does not check out."""


class TooLargeError(FormatError):
    """Input over its size limit, refused before it is parsed (a request body, an envelope)."""

    code = ErrorCode.TOO_LARGE


class CLIError(Exception):
    """A command's one-line failure message for its operator, and the exit status to end with."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status
