"""Parsing bytes whose signature has been checked (pure).

Rules (``docs/wire-format.md``, "The bounds scan" and "One parse boundary"):

* The bounds scan passes over the bytes once, outside strings (a string runs from ``"`` to
  the next ``"`` that is not escaped; ``\\`` escapes the byte after it): ``[``/``{`` open a
  level and ``]``/``}`` close one, at most :data:`MAX_DEPTH` levels open at once; a number
  token (a maximal run of ``-+.0-9eE`` starting with ``-`` or a digit) must be an integer of
  at most 15 digits, ``-?(0|[1-9][0-9]{0,14})``. It produces no values.
* Then the standard library's ``json`` parses the bytes as strict UTF-8 JSON: ``NaN`` and
  ``Infinity`` are refused; comments, trailing commas and non-string member names are refused
  by the parser itself; a repeated member name keeps its last value.

Every failure is a :class:`ValueError`; callers turn it into their own typed failure.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32
# a string (possibly unterminated): everything in it is out of the scan
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")
_NUMBER = re.compile(rb"[-0-9][-+.0-9eE]*")
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]{0,14})")


def bounds_scan(data: bytes) -> None:
    """Raise :class:`ValueError` if ``data`` nests deeper than :data:`MAX_DEPTH` levels or
    holds a number that is not an integer of at most 15 digits (see the module rules)."""
    bare = _STRING.sub(b'""', data)  # what is left: brackets, numbers, literals, punctuation
    if bare.count(b"[") + bare.count(b"{") > MAX_DEPTH:  # else no nesting can be too deep
        depth = 0
        for m in _BRACKET.finditer(bare):
            if m.group() in (b"[", b"{"):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
            else:
                depth -= 1
    for m in _NUMBER.finditer(bare):
        token = m.group()
        if not _INTEGER.fullmatch(token):
            raise ValueError(f"number {token[:20]!r} is not an integer of at most 15 digits")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_verified(data: bytes) -> Any:
    """The bounds scan, then a strict parse of ``data`` (UTF-8). Raises :class:`ValueError`
    (which :class:`UnicodeDecodeError` and :class:`json.JSONDecodeError` are) or
    :class:`RecursionError` on anything else than bounded, strict JSON."""
    bounds_scan(data)
    return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)


__all__ = ["MAX_DEPTH", "bounds_scan", "loads_verified"]
