"""The two error families of the replay tool.

``ReplayInputError`` means the data or the command line is wrong (a malformed row, an unknown
layout, a bad option); ``ReplayIOError`` means an IO step failed (a tool exited non-zero, a
file could not be read, a socket failed). They never share a class.
"""

from __future__ import annotations


class ReplayError(Exception):
    """Base of every error the replay tool raises on purpose."""


class ReplayInputError(ReplayError):
    """Bad input: a malformed record, an unknown layout, an invalid option value."""


class MalformedRow(ReplayInputError):
    """A row that cannot be parsed; carries where it came from."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}:{line}: {reason}")
        self.source = source
        self.line = line
        self.reason = reason


class ReplayIOError(ReplayError):
    """An IO step failed: a subprocess, a file, a socket."""
