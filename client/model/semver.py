"""Semantic Versioning 2.0.0 versions and their precedence.

Notices name affected versions exactly and by range, so every party must
agree on what is a version and how versions order. The grammar is the
semver.org BNF (no leading "v", no leading zeros in numeric identifiers,
ASCII only); precedence is section 11 of the spec. Build metadata is kept
(``str(v)`` gives back the original text) but ignored for ordering, so
``1.0.0+a`` and ``1.0.0+b`` are different values of equal precedence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deplog.client.errors import ErrorCode, FormatError

MAX_VERSION_LENGTH = 128

_NUM = r"0|[1-9][0-9]*"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD_ID = r"[0-9a-zA-Z-]+"
_VERSION_RE = re.compile(
    rf"({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
    rf"(?:\+({_BUILD_ID}(?:\.{_BUILD_ID})*))?",
    re.ASCII,
)


class SemverError(FormatError):
    """A string that is not a SemVer 2.0.0 version."""

    code = ErrorCode.BAD_VERSION


# A precedence key: (major, minor, patch, is_release, prerelease identifiers)
# where each identifier is (0, number, "") or (1, 0, text) so that numeric
# identifiers sort before alphanumeric ones (spec 11.4.3) and a longer list
# wins when all earlier identifiers are equal (11.4.4).
_Key = tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]


@dataclass(frozen=True, order=False)
class Version:
    """A parsed SemVer 2.0.0 version; compare with <, <=, >, >= for precedence."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...]
    build: tuple[str, ...]
    text: str

    @classmethod
    def parse(cls, s: str) -> Version:
        """Parse ``s`` strictly; raise SemverError (``bad_version``) otherwise."""
        if not isinstance(s, str) or len(s) > MAX_VERSION_LENGTH:
            raise SemverError()
        m = _VERSION_RE.fullmatch(s)
        if m is None:
            raise SemverError()
        pre = tuple(m.group(4).split(".")) if m.group(4) is not None else ()
        build = tuple(m.group(5).split(".")) if m.group(5) is not None else ()
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, build, s)

    @property
    def sort_key(self) -> _Key:
        """The precedence key (spec section 11); build metadata is not part of it."""
        ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, ids)

    def same_precedence(self, other: Version) -> bool:
        """True when neither version precedes the other (they may differ in build)."""
        return self.sort_key == other.sort_key

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.sort_key < other.sort_key

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.sort_key <= other.sort_key

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.sort_key > other.sort_key

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.sort_key >= other.sort_key

    def __str__(self) -> str:
        return self.text


def is_version(s: object) -> bool:
    """True when ``s`` is a valid SemVer 2.0.0 version string."""
    if not isinstance(s, str):
        return False
    try:
        Version.parse(s)
    except SemverError:
        return False
    return True
