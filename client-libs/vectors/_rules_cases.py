"""Vector cases for the rules: consensus truth tables (with stand-aside and early return)
and local cache decisions."""

from __future__ import annotations

import itertools
import math
from typing import Any

from _common import Case, numbered

# ----------------------------------------------------------------------------- consensus


def _reference(policy: str, votes: tuple[str, ...], stand_aside: bool) -> bool:
    """The rules restated independently of converge.policy."""
    counted = [v for v in votes if not (stand_aside and v == "unreachable")]
    s = sum(1 for v in counted if v == "success")
    if s == 0:
        return False
    if policy == "consensus":
        return s == len(counted)
    if policy == "majority":
        return s >= math.ceil(len(counted) / 2)
    return True


def _reference_settled(policy: str, votes: tuple[str, ...], pending: int, stand_aside: bool) -> str:
    finals = {
        _reference(policy, votes + rest, stand_aside)
        for rest in itertools.product(("success", "failure", "unreachable"), repeat=pending)
    }
    if len(finals) > 1:
        return "unsettled"
    return "trusted" if finals.pop() else "untrusted"


def consensus() -> dict[str, Any]:
    cases: list[Case] = []
    hand = [
        ("majority", ["success", "success", "failure"], False, "trusted", "2 of 3"),
        ("majority", ["success", "failure"], False, "trusted", "1 of 2 is ceil(2/2)"),
        ("majority", ["success", "failure", "failure"], False, "untrusted", "1 of 3"),
        (
            "consensus",
            ["success", "success", "unreachable"],
            True,
            "trusted",
            "the unreachable notary stands aside",
        ),
        (
            "consensus",
            ["success", "success", "unreachable"],
            False,
            "untrusted",
            "the unreachable notary counts as a failure",
        ),
        ("majority", ["success", "unreachable", "unreachable"], True, "trusted", "1 of 1 counted"),
        (
            "majority",
            ["success", "unreachable", "unreachable"],
            False,
            "untrusted",
            "1 of 3 counted",
        ),
        (
            "minority",
            ["unreachable", "unreachable", "unreachable"],
            True,
            "untrusted",
            "nobody answered: never trusted",
        ),
        ("consensus", [], True, "untrusted", "no notary asked: never trusted"),
        ("minority", ["failure", "failure", "success"], False, "trusted", "one is enough"),
    ]
    for pol, votes, sa, res, why in hand:
        cases.append(
            {
                "comment": why,
                "policy": pol,
                "stand_aside": sa,
                "votes": votes,
                "result": res,
                "flags": ["example"],
            }
        )
    outcomes = ("success", "failure", "unreachable")
    for pol in ("consensus", "majority", "minority"):
        for sa in (True, False):
            for n in range(1, 5):
                for votes in itertools.combinations_with_replacement(outcomes, n):
                    cases.append(
                        {
                            "comment": f"truth table: {pol}, stand-aside {'on' if sa else 'off'}",
                            "policy": pol,
                            "stand_aside": sa,
                            "votes": list(votes),
                            "result": "trusted" if _reference(pol, votes, sa) else "untrusted",
                            "flags": ["truth-table"],
                        }
                    )
    for pol in ("consensus", "majority", "minority"):
        for sa in (True, False):
            for total in (3, 4):
                for done in range(total):
                    for votes in itertools.combinations_with_replacement(outcomes, done):
                        cases.append(
                            {
                                "comment": f"early return: {pol}, {total - done} pending",
                                "policy": pol,
                                "stand_aside": sa,
                                "votes": list(votes),
                                "pending": total - done,
                                "result": _reference_settled(pol, votes, total - done, sa),
                                "flags": ["early-return"],
                            }
                        )
    return {
        "schema": "converge-vectors/consensus/1",
        "description": "Verdicts from votes. n = notaries that count (all asked, minus "
        "unreachable ones when stand_aside), s = successes. consensus: s == n and s >= 1; "
        "majority: s >= ceil(n/2) and s >= 1; minority: s >= 1. With `pending` > 0 the "
        "result is the verdict if every outcome of the pending notaries gives the same one "
        "(early return is safe), else 'unsettled'.",
        "notes": {
            "example": "hand-written cases from the add-on's documented rules",
            "truth-table": "every multiset of 1..4 votes (expected values from an independent "
            "restatement of the rules in generate.py)",
            "early-return": "whether the verdict is settled while notaries are pending "
            "(expected values by brute force over 3^pending outcomes)",
        },
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- cache


def cache() -> dict[str, Any]:
    now = 1_700_000_000
    week = 604800
    rows = [
        ("no entry", None, week, "miss", []),
        ("fresh entry", now - 60, week, "hit", []),
        ("exactly one lifetime old", now - week, week, "hit", ["boundary"]),
        ("one second past the lifetime", now - week - 1, week, "stale", ["boundary"]),
        (
            "old entry, no lifetime (the 2011 add-on never expired)",
            now - 10 * week,
            None,
            "hit",
            ["no-expiry"],
        ),
        ("lifetime 0, written this second", now, 0, "hit", ["boundary"]),
        ("lifetime 0, one second later", now - 1, 0, "stale", ["boundary"]),
        ("300 s in the future (clock skew tolerated)", now + 300, week, "hit", ["future"]),
        ("301 s in the future", now + 301, week, "stale", ["future"]),
        ("far future, no lifetime", now + 86400, None, "stale", ["future"]),
        ("milliseconds timestamp, fresh", (now - 60) * 1000, week, "hit", ["milliseconds"]),
        (
            "milliseconds timestamp, stale",
            (now - week - 60) * 1000,
            week,
            "stale",
            ["milliseconds"],
        ),
        ("timestamp 0", 0, week, "stale", []),
        ("timestamp 0, no lifetime", 0, None, "hit", ["no-expiry"]),
    ]
    cases = [
        {"comment": c, "timestamp": ts, "now": now, "lifetime": lt, "result": r, "flags": f}
        for c, ts, lt, r, f in rows
    ]
    return {
        "schema": "converge-vectors/cache/1",
        "description": "Local cache decisions for a (location, fingerprint) entry written at "
        "`timestamp` (unix seconds), checked at `now` with a lifetime in seconds (null = "
        "never expires): hit, stale (ask the notaries again) or miss (no entry).",
        "notes": {
            "boundary": "age == lifetime is still a hit",
            "no-expiry": "lifetime null keeps entries forever",
            "future": "entries more than 300 s in the future are stale",
            "milliseconds": "timestamps above 1e11 are milliseconds",
        },
        "tests": numbered(cases),
    }
