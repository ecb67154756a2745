"""Errors shared by every part of deplog.

Each error carries a stable, value-free ``code``: the HTTP layer returns it as
``{"error": code}`` and the CLIs print it. Messages never contain submitted
values, so an error can always be logged or echoed safely.
"""

from __future__ import annotations

__all__ = [
    "DeplogError",
    "FormatError",
    "VerificationError",
]


class DeplogError(Exception):
    """Base class of every deplog error; ``code`` is stable across releases."""

    code = "error"

    def __init__(self, code: str | None = None, message: str | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code)


class FormatError(DeplogError):
    """Bytes that do not parse as the format they claim to be."""

    code = "malformed"


class VerificationError(DeplogError):
    """Well-formed input whose signature, proof or hash does not check out."""

    code = "verification_failed"
