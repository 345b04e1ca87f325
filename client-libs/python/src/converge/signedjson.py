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

:func:`loads_verified` accepts exactly what the bounds scan and then the strict parse accept,
with less work: a body with at most :data:`MAX_DEPTH` brackets in all (strings included) cannot
nest too deep, so only a body with more gets the string-aware depth scan; and the parser hands
every number token to :func:`_integer` or :func:`_refuse_fraction` before making a value of
it, which apply the number rule to that token (in valid JSON a number token is exactly the
scan's maximal run, and invalid JSON is refused either way). The test suite holds it to
:func:`bounds_scan` plus the parse on generated bodies.
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


def _not_integer(token: str) -> ValueError:
    return ValueError(f"number {token[:20]!r} is not an integer of at most 15 digits")


def _integer(token: str) -> int:
    """An integer token as the parser found it (JSON's grammar: ``-?(0|[1-9][0-9]*)``), held
    to at most 15 digits before it becomes a value."""
    if len(token) - (token[:1] == "-") > 15:
        raise _not_integer(token)
    return int(token)


def _refuse_fraction(token: str) -> Any:
    """A number token with a fraction or an exponent: never allowed."""
    raise _not_integer(token)


# one decoder for every parse (``json.loads`` with hooks builds one per call)
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_integer,
                            parse_float=_refuse_fraction)


def loads_verified(data: bytes) -> Any:
    """The bounds scan, then a strict parse of ``data`` (UTF-8). Raises :class:`ValueError`
    (which :class:`UnicodeDecodeError` and :class:`json.JSONDecodeError` are) or
    :class:`RecursionError` on anything else than bounded, strict JSON."""
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        bounds_scan(data)  # else no nesting can be too deep, strings' brackets counted or not
    return _DECODER.decode(data.decode("utf-8"))


__all__ = ["MAX_DEPTH", "bounds_scan", "loads_verified"]
