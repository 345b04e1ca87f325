"""Consensus rules: from per-notary votes to a verdict (pure).

Votes are ``success``, ``failure`` or ``unreachable`` (no usable answer: connection refused,
timeout, an HTTP status other than 200/409, a 303). With *stand-aside* on, unreachable
notaries do not count: they are removed from the number asked. With it off, an unreachable
notary counts as a failure (what the 2011 add-on actually did).

With ``n`` = notaries that count and ``s`` = successes:

* ``consensus``: ``s == n`` and ``s >= 1``
* ``majority``:  ``s >= ceil(n / 2)`` and ``s >= 1``
* ``minority``:  ``s >= 1``

No notary asked, or every one standing aside, is never trusted.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from .errors import ConfigError
from .legacy import Vote


class Policy(StrEnum):
    CONSENSUS = "consensus"
    MAJORITY = "majority"
    MINORITY = "minority"

    @classmethod
    def parse(cls, value: str) -> Policy:
        try:
            return cls(value.strip().lower())
        except (ValueError, AttributeError) as e:
            raise ConfigError(
                f"notary-agreement must be consensus, majority or minority, not {value!r}"
            ) from e


def _trusted(
    policy: Policy, successes: int, failures: int, unreachable: int, stand_aside: bool
) -> bool:
    counted = successes + failures + (0 if stand_aside else unreachable)
    if successes < 1:
        return False
    if policy is Policy.CONSENSUS:
        return successes == counted
    if policy is Policy.MAJORITY:
        return successes >= (counted + 1) // 2
    return True


def decide(policy: Policy, votes: Iterable[Vote], *, stand_aside: bool) -> bool:
    """The verdict for a complete set of votes."""
    vs = list(votes)
    for v in vs:
        if v not in ("success", "failure", "unreachable"):
            raise ValueError(f"unknown vote {v!r}")
    return _trusted(
        policy, vs.count("success"), vs.count("failure"), vs.count("unreachable"), stand_aside
    )


def settled(
    policy: Policy, votes: Iterable[Vote], pending: int, *, stand_aside: bool
) -> bool | None:
    """The verdict if no outcome of the ``pending`` notaries can change it, else ``None``.

    Exact: every split of the pending notaries into success/failure/unreachable is tried
    (``O(pending^2)``), so early return never changes a verdict.
    """
    vs = list(votes)
    s, f, u = vs.count("success"), vs.count("failure"), vs.count("unreachable")
    seen: set[bool] = set()
    for ps in range(pending + 1):
        for pf in range(pending - ps + 1):
            pu = pending - ps - pf
            seen.add(_trusted(policy, s + ps, f + pf, u + pu, stand_aside))
            if len(seen) > 1:
                return None
    return seen.pop()
