"""The conformance runner: every registered client CLI through the same live cases and the
same vector files. See CLIENT-CLI.md. Expected failures are strict: one that passes fails."""

from __future__ import annotations

import json
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conformance_env import (
    ATTACKER_HOST,
    CLIENTS,
    HOOK_HOST,
    REQUIRE_ALL,
    ClientCli,
    Environment,
    HookScene,
    make_config_dir,
)
from hostile_world import FORMS
from log_relays import asks_for_proof

VECTORS = Path(__file__).resolve().parents[1] / "vectors"

S, F, U = "success", "failure", "unreachable"


@dataclass(frozen=True)
class Step:
    fingerprint: str  # genuine | genuine256 | genuine-plain | forged | a literal
    exit: int
    verdict: bool | None = None
    cache: bool | None = None
    outcomes: tuple[tuple[str, str], ...] | None = None  # (outcome, kind) per notary
    error: str | None = None
    host: str = "127.0.0.1"
    relayed: bool | None = None  # whether the output names a bounce relay
    protocols: tuple[str | None, ...] | None = None  # the protocol each notary answered in
    proofs_asked: bool | None = None  # every request through a log relay asked for a proof


@dataclass(frozen=True)
class Case:
    id: str
    comment: str
    notaries: tuple[str, ...]
    steps: tuple[Step, ...]
    settings: dict[str, Any] = field(default_factory=dict)


ABC = ("Org A", "Org B", "Org C")
ABC_EXT = ("Org A+", "Org B+", "Org C+")
LISTED = (S, "listed")
MISMATCH = (F, "mismatch")
DOWN = (U, "unreachable")
MATCH = (S, "match")
V2 = "converge-answer/1"

CASES = [
    Case(
        "genuine",
        "three notaries see the certificate the client sees",
        ABC,
        (Step("genuine", 0, True, False, (LISTED,) * 3),),
    ),
    Case(
        "forged",
        "the client is shown a forged certificate; every notary sees the real one",
        ABC,
        (Step("forged", 1, False, False, (MISMATCH,) * 3),),
    ),
    Case(
        "fingerprint-plain-lower",
        "SHA-1 in lower case without colons",
        ABC,
        (Step("genuine-plain", 0, True, False, (LISTED,) * 3),),
    ),
    Case(
        "fingerprint-sha256",
        "SHA-256 alone: v1 lists are SHA-1, the pinned 200 decides",
        ABC,
        (Step("genuine256", 0, True, False, ((S, "status-only"),) * 3),),
    ),
    Case(
        "fingerprint-invalid",
        "a malformed fingerprint is an error, not a verdict",
        ABC,
        (Step("AB:CD:EF", 2, error="fingerprint"),),
    ),
    Case(
        "no-notaries",
        "no notary enabled is a configuration error",
        (),
        (Step("genuine", 2, error="config"),),
    ),
    Case(
        "consensus-dead-stands-aside",
        "consensus; the unreachable notary stands aside",
        ("Org A", "Org B", "Org Dead"),
        (Step("genuine", 0, True, False, (LISTED, LISTED, DOWN)),),
        {"notary-agreement": "consensus", "stand-aside": True},
    ),
    Case(
        "consensus-dead-counts",
        "consensus; unreachable counts as failure",
        ("Org A", "Org B", "Org Dead"),
        (Step("genuine", 1, False, False, (LISTED, LISTED, DOWN)),),
        {"notary-agreement": "consensus", "stand-aside": False},
    ),
    Case(
        "majority-two-dead-count",
        "majority; 1 of 3 counted is not a majority",
        ("Org A", "Org Dead", "Org Dead2"),
        (Step("genuine", 1, False, False, (LISTED, DOWN, DOWN)),),
        {"notary-agreement": "majority", "stand-aside": False},
    ),
    Case(
        "majority-two-dead-stand-aside",
        "majority; 1 of 1 counted",
        ("Org A", "Org Dead", "Org Dead2"),
        (Step("genuine", 0, True, False, (LISTED, DOWN, DOWN)),),
        {"notary-agreement": "majority", "stand-aside": True},
    ),
    Case(
        "all-dead",
        "nobody reachable is never trusted, even with minority and stand-aside",
        ("Org Dead", "Org Dead2"),
        (Step("genuine", 1, False, False, (DOWN, DOWN)),),
        {"notary-agreement": "minority", "stand-aside": True},
    ),
    Case(
        "wrong-pin-consensus",
        "a notary whose certificate is not the pinned one fails",
        ("Org A", "Org B", "Org Wrongpin"),
        (Step("genuine", 1, False, False, (LISTED, LISTED, (F, "pin"))),),
        {"notary-agreement": "consensus", "stand-aside": True},
    ),
    Case(
        "wrong-pin-majority",
        "twin: the two good notaries are a majority",
        ("Org A", "Org B", "Org Wrongpin"),
        (Step("genuine", 0, True, False, (LISTED, LISTED, (F, "pin"))),),
        {"notary-agreement": "majority"},
    ),
    Case(
        "replayed-signature-consensus",
        "a relay with B's certificate returns A's signed bytes: bad signature, a failure",
        ("Org A", "Org C", "Org Replay"),
        (Step("genuine", 1, False, False, (LISTED, LISTED, (F, "signature"))),),
        {"notary-agreement": "consensus", "stand-aside": True},
    ),
    Case(
        "replayed-signature-majority",
        "twin: two good notaries are a majority",
        ("Org A", "Org C", "Org Replay"),
        (Step("genuine", 0, True, False, (LISTED, LISTED, (F, "signature"))),),
        {"notary-agreement": "majority"},
    ),
    Case(
        "split-view-majority",
        "a man-in-the-middle on notary C's path: 2 of 3 confirm",
        ABC,
        (Step("genuine", 0, True, False, (LISTED, LISTED, MISMATCH), host="split.test"),),
        {"notary-agreement": "majority"},
    ),
    Case(
        "split-view-consensus",
        "twin: consensus needs all three",
        ABC,
        (Step("genuine", 1, False, False, (LISTED, LISTED, MISMATCH), host="split.test"),),
        {"notary-agreement": "consensus"},
    ),
    Case(
        "split-view-forged-majority",
        "the client and notary C behind the same attacker",
        ABC,
        (Step("forged", 1, False, False, (MISMATCH, MISMATCH, LISTED), host="split.test"),),
        {"notary-agreement": "majority"},
    ),
    Case(
        "split-view-forged-minority",
        "minority trusts one notary: the attacker wins",
        ABC,
        (Step("forged", 0, True, False, (MISMATCH, MISMATCH, LISTED), host="split.test"),),
        {"notary-agreement": "minority"},
    ),
    Case(
        "local-cache",
        "a trusted verdict is cached; the next check needs no notary",
        ABC,
        (Step("genuine", 0, True, False, (LISTED,) * 3), Step("genuine-plain", 0, True, True, ())),
        {"cache-lifetime": 3600},
    ),
    Case(
        "local-cache-untrusted",
        "twin: an untrusted verdict is never cached",
        ABC,
        (
            Step("forged", 1, False, False, (MISMATCH,) * 3),
            Step("forged", 1, False, False, (MISMATCH,) * 3),
        ),
    ),
    Case(
        "quorum",
        "quorum 2 asks two of the three notaries",
        ABC,
        (Step("genuine", 0, True, False, (LISTED,) * 2),),
        {"quorum": 2},
    ),
    Case(
        "early-return",
        "with early return the verdict is the same",
        ABC,
        (Step("genuine", 0, True, False),),
        {"early-return": True},
    ),
    Case(
        "early-return-forged",
        "twin: early return on a forged certificate",
        ABC,
        (Step("forged", 1, False, False),),
        {"early-return": True, "notary-agreement": "consensus"},
    ),
    Case(
        "bounce",
        "queries tunnelled through one notary's relay; the other two vote",
        ("Org A@bounce", "Org B@bounce", "Org C@bounce"),
        (Step("genuine", 0, True, False, (LISTED, LISTED), relayed=True),),
        {"bounce": True, "bounce-port": "$bounce_port"},
    ),
    Case(
        "bounce-forged",
        "twin: a forged certificate through the relay",
        ("Org A@bounce", "Org B@bounce", "Org C@bounce"),
        (Step("forged", 1, False, False, (MISMATCH, MISMATCH), relayed=True),),
        {"bounce": True, "bounce-port": "$bounce_port"},
    ),
    Case(
        "bounce-refused",
        "twin: the relays refuse a port other than theirs (403): nobody reachable",
        ("Org A@bounce", "Org B@bounce", "Org C@bounce"),
        (Step("genuine", 1, False, False, (DOWN, DOWN), relayed=True),),
        {"bounce": True, "bounce-port": "$wrong_bounce_port"},
    ),
    Case(
        "bounce-off",
        "the same bundles without bounce: direct queries, all three vote",
        ("Org A@bounce", "Org B@bounce", "Org C@bounce"),
        (Step("genuine", 0, True, False, (LISTED,) * 3, relayed=False),),
    ),
    Case(
        "target-down",
        "notaries cannot reach the target: they answer 503",
        ABC,
        (Step("genuine", 1, False, False, ((U, "status"),) * 3, host="localhost"),),
    ),
    # ---- the extended format (converge-answer/1): bundles that advertise it
    Case(
        "ext-genuine",
        "extended: three notaries' signed answers say match",
        ABC_EXT,
        (Step("genuine", 0, True, False, (MATCH,) * 3, protocols=(V2,) * 3),),
    ),
    Case(
        "ext-forged",
        "extended: a forged certificate; three signed mismatches",
        ABC_EXT,
        (Step("forged", 1, False, False, (MISMATCH,) * 3, protocols=(V2,) * 3),),
    ),
    Case(
        "ext-sha256",
        "extended: SHA-256 is first-class (matched, not status-only)",
        ABC_EXT,
        (Step("genuine256", 0, True, False, (MATCH,) * 3),),
    ),
    Case(
        "ext-split-view-majority",
        "extended: a man-in-the-middle on notary C's path: 2 of 3 confirm",
        ABC_EXT,
        (Step("genuine", 0, True, False, (MATCH, MATCH, MISMATCH), host="split.test"),),
        {"notary-agreement": "majority"},
    ),
    Case(
        "ext-split-view-consensus",
        "twin: consensus needs all three",
        ABC_EXT,
        (Step("genuine", 1, False, False, (MATCH, MATCH, MISMATCH), host="split.test"),),
        {"notary-agreement": "consensus"},
    ),
    Case(
        "ext-dead-stands-aside",
        "extended: an unreachable notary stands aside under consensus",
        ("Org A+", "Org B+", "Org Dead+"),
        (Step("genuine", 0, True, False, (MATCH, MATCH, DOWN)),),
        {"notary-agreement": "consensus", "stand-aside": True},
    ),
    Case(
        "ext-target-down",
        "extended: notaries cannot reach the target: signed unreachable answers stand aside",
        ABC_EXT,
        (Step("genuine", 1, False, False, ((U, "target-unreachable"),) * 3, host="localhost"),),
    ),
    Case(
        "ext-mixed",
        "a legacy bundle among extended ones is asked in the legacy format",
        ("Org A+", "Org B", "Org C+"),
        (Step("genuine", 0, True, False, (MATCH, LISTED, MATCH)),),
    ),
    Case(
        "ext-bounce",
        "extended answers through one notary's bounce relay; the other two vote",
        ("Org A@bounce+", "Org B@bounce+", "Org C@bounce+"),
        (Step("genuine", 0, True, False, (MATCH, MATCH), relayed=True, protocols=(V2,) * 2),),
        {"bounce": True, "bounce-port": "$bounce_port"},
    ),
    Case(
        "ext-off",
        "extended off: the same bundles, legacy answers",
        ABC_EXT,
        (Step("genuine", 0, True, False, (LISTED,) * 3),),
        {"extended": "off"},
    ),
    Case(
        "ext-require-legacy-bundles",
        "extended require with only legacy bundles is a configuration error",
        ABC,
        (Step("genuine", 2, error="config"),),
        {"extended": "require"},
    ),
    Case(
        "ext-replayed-answer",
        "a relay with B's certificate returns A's signed answer: not B's key",
        ("Org A+", "Org C+", "Org Replay+"),
        (Step("genuine", 1, False, False, (MATCH, MATCH, (F, "unknown-key"))),),
        {"notary-agreement": "consensus", "stand-aside": True},
    ),
    Case(
        "ext-swapped-target",
        "a relay asks B about the forged server's address instead: the signed answer names "
        "the other target",
        ("Org Swap+",),
        (Step("forged", 1, False, False, ((F, "wrong-target"),)),),
        {"notary-agreement": "minority"},
    ),
    Case(
        "ext-injected-address",
        "a relay asks B to probe the forged server's address for the same target: the signed "
        "answer names an address the client did not ask for",
        ("Org Inject+",),
        (Step("forged", 1, False, False, ((F, "wrong-target"),)),),
        {"notary-agreement": "minority"},
    ),
    Case(
        "ext-injected-address-legacy",
        "twin, the legacy weakness: the injected address fools a legacy answer",
        ("Org Inject",),
        (Step("forged", 0, True, False, (LISTED,)),),
        {"notary-agreement": "minority"},
    ),
    # ---- the transparency log (docs/transparency.md, "Clients"): bundles naming the log
    Case(
        "ext-log-proof",
        "three extended notaries with logs (through relays that record the requests): each "
        "request asks for a proof, each match carries a valid one",
        ("Org A Log+", "Org B Log+", "Org C Log+"),
        (Step("genuine", 0, True, False, (MATCH,) * 3, protocols=(V2,) * 3, proofs_asked=True),),
    ),
    Case(
        "ext-log-proof-legacy",
        "twin: the same relays with legacy bundles: no proof asked",
        ("Org A Log", "Org B Log", "Org C Log"),
        (Step("genuine", 0, True, False, (LISTED,) * 3, proofs_asked=False),),
    ),
    Case(
        "ext-log-stripped",
        "a relay in front of notary B removes the transparency member: log-missing",
        ("Org Log Stripped+",),
        (Step("genuine", 1, False, False, ((F, "log-missing"),)),),
        {"notary-agreement": "minority"},
    ),
    Case(
        "ext-log-stripped-no-log",
        "twin: the same relay with a bundle that names no log: the statement alone decides",
        ("Org Log Stripped No Log+",),
        (Step("genuine", 0, True, False, (MATCH,)),),
        {"notary-agreement": "minority"},
    ),
    Case(
        "ext-log-altered",
        "a relay in front of notary B changes one proof hash: log-proof",
        ("Org Log Altered+",),
        (Step("genuine", 1, False, False, ((F, "log-proof"),)),),
        {"notary-agreement": "minority"},
    ),
    Case(
        "ext-log-other-entry",
        "a relay in front of notary B swaps in another logged entry of the same log with its "
        "own valid proof (the certificate at another port): log-entry",
        ("Org Log Other Entry+",),
        (Step("genuine", 1, False, False, ((F, "log-entry"),)),),
        {"notary-agreement": "minority"},
    ),
    Case(
        "ext-swapped-target-legacy",
        "twin, the legacy weakness: the same swap fools a legacy answer, which names no target",
        ("Org Swap",),
        (Step("forged", 0, True, False, (LISTED,)),),
        {"notary-agreement": "minority"},
    ),
]



def _hostile_cases() -> list[Case]:
    """One hostile notary (holding A's keys) beside two honest ones, under the majority policy:
    its answer must be a failure vote of the documented kind, and the verdict must still come
    back (docs/wire-format.md, "One parse boundary"). ``honest`` is the twin: the same server
    without a hostile element is a success vote."""
    cases = []
    for form_name, form in FORMS.items():
        for ext, (kind, ok_kind) in ((False, (form.kinds[0], "listed")),
                                     (True, (form.kinds[1], "match"))):
            plus = "+" if ext else ""
            vote = (S, ok_kind) if form_name == "honest" else (F, kind)
            honest = MATCH if ext else LISTED
            cases.append(Case(
                f"hostile-{form_name}{'-ext' if ext else ''}",
                f"one hostile notary ({form_name}, {'extended' if ext else 'legacy'}) among two "
                "honest ones",
                (f"Org A{plus}", f"Org B{plus}", f"Org Hostile {form_name}{plus}"),
                (Step("genuine", 0, True, False, (honest, honest, vote)),),
                {"notary-agreement": "majority", "stand-aside": False},
            ))
    return cases


CASES += _hostile_cases()


def _fingerprint(env: Environment, key: str) -> str:
    return {
        "genuine": env.genuine_sha1,
        "genuine256": env.genuine_sha256,
        "genuine-plain": env.genuine_sha1.replace(":", "").lower(),
        "forged": env.forged_sha1,
    }.get(key, key)


def _check_step(
    client: ClientCli, env: Environment, cfg: Path, case: Case, step: Step
) -> list[str]:
    port = env.target_port
    if step.host == "localhost":
        port = 1  # nothing listens there; notaries see a refused connection
    relays = [env.log_relays[n.rstrip("+")] for n in case.notaries
              if n.rstrip("+") in env.log_relays]
    seen = [len(r.requests) for r in relays]
    code, lines, stderr = client.run(
        "check", "--config-dir", str(cfg), step.host, str(port), _fingerprint(env, step.fingerprint)
    )
    problems = []
    if step.proofs_asked is not None:
        for r, before in zip(relays, seen, strict=True):
            asked = [asks_for_proof(q) for q in r.requests[before:]]
            if not asked or any(a != step.proofs_asked for a in asked):
                problems.append(f"requests through a log relay asked for a proof: {asked}, "
                                f"expected {step.proofs_asked}")
    if code != step.exit:
        problems.append(f"exit {code}, expected {step.exit} (stderr: {stderr[-300:]})")
    if len(lines) != 1:
        return [*problems, f"expected one JSON line, got {lines!r}"]
    out = lines[0]
    if step.error is not None:
        if out.get("error") != step.error:
            problems.append(f"error {out.get('error')!r}, expected {step.error!r}")
        return problems
    if out.get("verdict") is not step.verdict:
        problems.append(f"verdict {out.get('verdict')!r}, expected {step.verdict!r}")
    if step.cache is not None and out.get("cache") is not step.cache:
        problems.append(f"cache {out.get('cache')!r}, expected {step.cache!r}")
    if step.relayed is not None and (out.get("relay") is not None) != step.relayed:
        problems.append(f"relay {out.get('relay')!r}, expected relayed={step.relayed}")
    if step.outcomes is not None:
        got = tuple((n.get("outcome"), n.get("kind")) for n in out.get("notaries", []))
        if got != step.outcomes:
            problems.append(f"notaries {got}, expected {step.outcomes}")
    if step.protocols is not None:
        got_p = tuple(n.get("protocol") for n in out.get("notaries", []))
        if got_p != step.protocols:
            problems.append(f"protocols {got_p}, expected {step.protocols}")
    return problems


def _strict(client: ClientCli, case_id: str, problems: list[str]) -> None:
    if case_id in client.expected_failures:
        if not problems:
            pytest.fail(
                f"{case_id} is listed as an expected failure of {client.language} "
                "but passes: remove it from clients.toml"
            )
        pytest.xfail(f"expected failure: {'; '.join(problems)}")
    assert not problems, "; ".join(problems)


def _skip_unbuilt(client: ClientCli) -> None:
    if client.skip_reason:
        if client.skip_reason.startswith(REQUIRE_ALL):
            pytest.fail(client.skip_reason)
        pytest.skip(client.skip_reason)


@pytest.mark.parametrize("client", CLIENTS, ids=[c.language for c in CLIENTS])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_check(client: ClientCli, case: Case, env: Environment, tmp_path: Path) -> None:
    _skip_unbuilt(client)
    cfg = make_config_dir(tmp_path / "cfg", env, list(case.notaries), case.settings)
    problems: list[str] = []
    for i, step in enumerate(case.steps):
        problems += [f"step {i + 1}: {p}" for p in _check_step(client, env, cfg, case, step)]
    _strict(client, f"check:{case.id}", problems)


# ---------------------------------------------------------------- TLS hooks


@dataclass(frozen=True)
class HookCase:
    id: str
    comment: str
    notaries: tuple[str, ...]
    proxy: str | None  # None (direct), "good", "evil" or "switching"
    host: str
    connected: bool
    body: str | None = None
    error: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    within: float | None = None  # seconds: the answer must come before this (the total timeout
    # plus 8 s for the CLI's own start on a loaded machine; a hang would take the 60 s the
    # hanging notary holds a connection)
    server: str = "genuine"  # "reset": the server that resets during the check
    errors: tuple[str, ...] = ()  # other acceptable errors besides ``error``
    refusal_ok: bool = False  # a refusal ("untrusted", nothing written) passes too
    path: str = "/"  # "{q}" is replaced by the port Q
    port: str = "q"  # "q" (hook.test's genuine port) or "r" (the attacker's site's port)
    follow: bool = False  # --follow-redirects
    first: str | None = None  # --first URL ("{q}", "{r}" replaced)
    unhooked_first: bool = False  # --unhooked-first
    forged_requests: int = 0  # requests the forged server may get (the unhooked one)


HOOK_CASES = [
    HookCase("hook-direct", "direct TLS to the genuine server on a port other than 443",
             ("Org A", "Org B"), None, "127.0.0.1", True, body="genuine"),
    HookCase("hook-direct-refused", "twin: the notaries see another certificate there (a "
             "relay asks about the forged server's address): refused before the request",
             ("Org Swap",), None, "127.0.0.1", False, error="untrusted",
             settings={"notary-agreement": "minority"}),
    HookCase("hook-proxy-genuine", "through an HTTP CONNECT proxy to the genuine server: the "
             "notaries are asked about the origin, not the proxy", ("Org A", "Org B", "Org C"),
             "good", HOOK_HOST, True, body="genuine"),
    HookCase("hook-proxy-forged", "through the attacker's proxy to a forged server whose "
             "certificate the client's CAs accept: refused before the request",
             ("Org A", "Org B", "Org C"), "evil", HOOK_HOST, False, error="untrusted"),
    HookCase("hook-proxy-forged-extended", "the same with extended answers",
             ("Org A+", "Org B+", "Org C+"), "evil", HOOK_HOST, False, error="untrusted"),
    HookCase("hook-proxy-genuine-extended", "twin: the genuine server with extended answers",
             ("Org A+", "Org B+", "Org C+"), "good", HOOK_HOST, True, body="genuine"),
    HookCase("hook-hanging-notary", "the only notary never answers: no verdict within the "
             "timeouts, refused by then", ("Org Hanging",), None, "127.0.0.1", False,
             error="untrusted",
             settings={"connect-timeout": 2, "notary-timeout": 2, "total-timeout": 3},
             within=3 + 8),
    HookCase("hook-hanging-notary-stands-aside", "twin: beside a notary that answers, the "
             "hanging one stands aside once its timeout is over", ("Org A", "Org Hanging"),
             None, "127.0.0.1", True, body="genuine",
             settings={"connect-timeout": 2, "notary-timeout": 2, "total-timeout": 3,
                       "notary-agreement": "consensus", "stand-aside": True},
             within=3 + 8),
    HookCase("hook-check-then-use", "the attacker's proxy tunnels the first connection to the "
             "genuine server and every later one to his forged server: the response must come "
             "over the connection that was checked (or the hook refuses); the forged server never "
             "gets a request", ("Org A", "Org B", "Org C"), "switching", HOOK_HOST, True,
             body="genuine", refusal_ok=True),
    HookCase("hook-redirect-other-host", "the attacker's own site (which the notaries vouch "
             "for) redirects to https://hook.test:Q/, which his proxy routes to his forged "
             "server: the hop is checked for its own origin and refused",
             ("Org A", "Org B", "Org C"), "evil", ATTACKER_HOST, False, error="untrusted",
             path="/go/hook.test/{q}", follow=True),
    HookCase("hook-redirect-other-host-genuine", "twin: the same redirect reaching the genuine "
             "server", ("Org A", "Org B", "Org C"), "good", ATTACKER_HOST, True, body="genuine",
             path="/go/hook.test/{q}", follow=True),
    HookCase("hook-redirect-other-port", "hook.test:R (the attacker's site) redirects to "
             "hook.test:Q, his forged server: the hop is checked for port Q, not R",
             ("Org A", "Org B", "Org C"), "evil", HOOK_HOST, False, error="untrusted",
             path="/go/hook.test/{q}", port="r", follow=True),
    HookCase("hook-redirect-other-port-genuine", "twin: the same redirect reaching the genuine "
             "server on port Q", ("Org A", "Org B", "Org C"), "good", HOOK_HOST, True,
             body="genuine", path="/go/hook.test/{q}", port="r", follow=True),
    HookCase("hook-redirect-same-origin-intercepted", "the genuine server answers with an "
             "absolute redirect to its own origin; the proxy routes the next connection to the "
             "forged server: the new connection is checked too", ("Org A", "Org B", "Org C"),
             "switching", HOOK_HOST, False, error="untrusted", path="/go/hook.test/{q}",
             follow=True),
    HookCase("hook-redirect-same-origin-genuine", "twin: the same redirect, the next "
             "connection reaching the genuine server", ("Org A", "Org B", "Org C"), "good",
             HOOK_HOST, True, body="genuine", path="/go/hook.test/{q}", follow=True),
    HookCase("hook-resume-other-port", "a TLS session from the attacker's site at hook.test:R "
             "is offered to (and resumed by) his forged server at hook.test:Q: the resumed "
             "connection is checked for hook.test:Q, or not resumed", ("Org A", "Org B", "Org C"),
             "evil", HOOK_HOST, False, error="untrusted", first="https://hook.test:{r}/keep"),
    HookCase("hook-resume-other-port-genuine", "twin: after the attacker's site, the genuine "
             "hook.test:Q", ("Org A", "Org B", "Org C"), "good", HOOK_HOST, True,
             body="genuine", first="https://hook.test:{r}/keep"),
    HookCase("hook-resume-other-name", "a TLS session from site.test:Q (the attacker's site) "
             "resumed by his forged server at hook.test:Q: checked for hook.test, or not "
             "resumed", ("Org A", "Org B", "Org C"), "evil", HOOK_HOST, False, error="untrusted",
             first="https://site.test:{q}/keep"),
    HookCase("hook-resume-other-name-genuine", "twin: after site.test:Q, the genuine "
             "hook.test:Q", ("Org A", "Org B", "Org C"), "good", HOOK_HOST, True, body="genuine",
             first="https://site.test:{q}/keep"),
    HookCase("hook-unhooked-keepalive", "code without the hook fetches hook.test:Q/keep over "
             "the attacker's proxy (CA validation only) and its keep-alive connection stays "
             "open: the hooked request that follows must not use it unchecked",
             ("Org A", "Org B", "Org C"), "evil", HOOK_HOST, False, error="untrusted",
             path="/keep", unhooked_first=True, forged_requests=1),
    HookCase("hook-unhooked-keepalive-genuine", "twin: the same through the honest proxy",
             ("Org A", "Org B", "Org C"), "good", HOOK_HOST, True, body="genuine", path="/keep",
             unhooked_first=True),
    HookCase("hook-reset-during-check", "the server resets the connection while the notaries "
             "are asked (one answers, one hangs until its timeout): a clean refusal, the CLI "
             "neither crashes nor hangs", ("Org A", "Org Hanging"), None, "127.0.0.1", False,
             error="io", errors=("untrusted",), server="reset",
             settings={"connect-timeout": 2, "notary-timeout": 2, "total-timeout": 3,
                       "notary-agreement": "consensus", "stand-aside": True},
             within=3 + 8),
]


def _run_hook(client: ClientCli, env: Environment, case: HookCase, cfg: Path) -> list[str]:
    scene = env.hook
    assert scene is not None
    args = ["hook", "--config-dir", str(cfg), "--ca-file", str(scene.ca_file)]
    proxy = {"good": scene.good_proxy, "evil": scene.evil_proxy,
             "switching": scene.switching_proxy}.get(case.proxy or "")
    if proxy is not None:
        args += ["--proxy", proxy.url]
    ports = {"q": scene.port, "r": scene.attacker_port}
    if case.path != "/":
        args += ["--path", case.path.format(**ports)]
    if case.follow:
        args.append("--follow-redirects")
    first_connect: tuple[str, int] | None = None
    if case.first is not None:
        first_url = case.first.format(**ports)
        args += ["--first", first_url]
        origin = first_url.removeprefix("https://").partition("/")[0].rpartition(":")
        first_connect = (origin[0], int(origin[2]))
    if case.unhooked_first:
        args.append("--unhooked-first")
    heads_before = (len(scene.genuine.heads), len(scene.forged.heads))
    if case.proxy == "switching":
        scene.switching_proxy.connects.clear()  # its first CONNECT goes to the genuine server
    connects_before = len(proxy.connects) if proxy else 0
    port = scene.reset_port if case.server == "reset" else ports[case.port]
    t0 = time.monotonic()
    code, lines, stderr = client.run(*args, case.host, str(port))
    took = time.monotonic() - t0
    problems: list[str] = []
    forged_got = len(scene.forged.heads) - heads_before[1]
    if case.refusal_ok and code == 1 and lines and lines[0].get("error") == "untrusted":
        if forged_got:
            problems.append("the request was written to the forged server")
        return problems
    if forged_got > case.forged_requests:
        problems.append(f"{forged_got} request(s) written to the forged server, at most "
                        f"{case.forged_requests} expected (unhooked)")
    want_exit = 0 if case.connected else 1
    if code != want_exit:
        problems.append(f"exit {code}, expected {want_exit} (stderr: {stderr[-300:]})")
    if len(lines) != 1:
        return [*problems, f"expected one JSON line, got {lines!r}"]
    out = lines[0]
    if out.get("connected") is not case.connected:
        problems.append(f"connected {out.get('connected')!r}, expected {case.connected}: {out}")
    if case.body is not None and out.get("body") != case.body:
        problems.append(f"body {out.get('body')!r}, expected {case.body!r}")
    if case.error is not None and out.get("error") not in (case.error, *case.errors):
        problems.append(f"error {out.get('error')!r}, expected {case.error!r}: {out}")
    if case.within is not None and took > case.within:
        problems.append(f"answered after {took:.1f} s, expected within {case.within:g} s")
    want_connect = first_connect or (case.host, port)
    if proxy is not None and proxy.connects[connects_before:][:1] != [want_connect]:
        problems.append(f"the proxy saw {proxy.connects[connects_before:]}, expected "
                        f"CONNECT {want_connect[0]}:{want_connect[1]} first")
    if not case.connected and case.forged_requests == 0:
        got = (len(scene.genuine.heads), len(scene.forged.heads))
        if got[1] != heads_before[1] or (got[0] != heads_before[0] and not case.follow):
            problems.append("the request was written to a server the hook refused")
    return problems


def _scene(env: Environment) -> HookScene:
    assert env.hook is not None
    return env.hook


@pytest.mark.parametrize("client", CLIENTS, ids=[c.language for c in CLIENTS])
@pytest.mark.parametrize("case", HOOK_CASES, ids=[c.id for c in HOOK_CASES])
def test_hook(client: ClientCli, case: HookCase, env: Environment, tmp_path: Path) -> None:
    _skip_unbuilt(client)
    _scene(env)
    cfg = make_config_dir(tmp_path / "cfg", env, list(case.notaries),
                          {"cache-lifetime": 0, **case.settings})
    _strict(client, f"hook:{case.id}", _run_hook(client, env, case, cfg))


UNSAFE_CAUGHT = [
    ("check-then-use", "hook-check-then-use"), ("crash", "hook-reset-during-check"),
    *(("first-only", c.id) for c in HOOK_CASES
      if (c.follow or c.first or c.unhooked_first) and not c.connected),
]


@pytest.mark.parametrize("mode,case_id", UNSAFE_CAUGHT, ids=[f"{m}-{c}" for m, c in UNSAFE_CAUGHT])
def test_hook_cases_catch_an_unsafe_hook(
    mode: str, case_id: str, env: Environment, tmp_path: Path
) -> None:
    """The must-fail twins: a hook that checks one connection and uses another, one that
    crashes on a reset, and one that checks only the first connection it makes (redirect hops,
    resumed sessions and reused keep-alive sockets go unchecked) are caught by the cases
    above."""
    (case,) = [c for c in HOOK_CASES if c.id == case_id]
    unsafe = ClientCli("unsafe", [sys.executable, str(Path(__file__).with_name(
        "unsafe_hook.py")), mode], set())
    cfg = make_config_dir(tmp_path / "cfg", env, list(case.notaries),
                          {"cache-lifetime": 0, **case.settings})
    assert _run_hook(unsafe, env, case, cfg), f"{mode} was not caught by {case_id}"


@pytest.mark.parametrize("mode", ["first-only"])
def test_the_unsafe_hook_passes_the_genuine_twins(
    mode: str, env: Environment, tmp_path: Path
) -> None:
    """The first-only hook really checks its first connection and follows redirects, resumes
    and reuses: it fetches every genuine twin, so the cases above catch what it skips, not a
    broken CLI."""
    unsafe = ClientCli("unsafe", [sys.executable, str(Path(__file__).with_name(
        "unsafe_hook.py")), mode], set())
    for case in HOOK_CASES:
        if not (case.follow or case.first or case.unhooked_first) or not case.connected:
            continue
        cfg = make_config_dir(tmp_path / case.id, env, list(case.notaries),
                              {"cache-lifetime": 0, **case.settings})
        assert _run_hook(unsafe, env, case, cfg) == [], case.id


def test_the_attackers_servers_resume_across_ports_and_names(env: Environment) -> None:
    """The resumption cases test something: a TLS session from the attacker's site
    (hook.test:R, site.test:Q) is resumed by his forged server at hook.test:Q."""
    scene = _scene(env)
    ctx = ssl.create_default_context(cafile=str(scene.ca_file))
    for first_host, first_addr in (("hook.test", ("127.0.0.1", scene.attacker_port)),
                                   ("site.test", ("127.0.0.3", scene.port))):
        session = None
        for host, addr in ((first_host, first_addr), ("hook.test", ("127.0.0.2", scene.port))):
            with socket.create_connection(addr, timeout=10) as raw, ctx.wrap_socket(
                raw, server_hostname=host, session=session
            ) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                while s.recv(4096):
                    pass
                if session is not None:
                    assert s.session_reused, f"{first_host} -> hook.test not resumed"
                session = s.session


# canonical-json.json pins the notary's signer; clients verify bytes and never re-serialise
NOTARY_ONLY = {"canonical-json.json"}
VECTOR_FILES = sorted(f for f in VECTORS.glob("*.json") if f.name not in NOTARY_ONLY)


@pytest.mark.parametrize("client", CLIENTS, ids=[c.language for c in CLIENTS])
@pytest.mark.parametrize("vector_file", VECTOR_FILES, ids=[f.name for f in VECTOR_FILES])
def test_vectors(client: ClientCli, vector_file: Path) -> None:
    _skip_unbuilt(client)
    from converge.vectors import compare  # the comparison rule of CLIENT-CLI.md

    doc = json.loads(vector_file.read_text())
    code, lines, stderr = client.run("vector", str(vector_file))
    if f"vector:{vector_file.name}" in client.expected_failures:
        # the whole file (an unimplemented schema) is an expected failure
        passes = code == 0 and all(
            compare(case, next((x for x in lines if x.get("id") == case["id"]), {})) == []
            for case in doc["tests"]
        )
        _strict(client, f"vector:{vector_file.name}", [] if passes else [f"exit {code}"])
        return
    assert code == 0, stderr
    by_id = {line.get("id"): line for line in lines}
    failed_ids = []
    problems = []
    for case in doc["tests"]:
        case_key = f"vector:{vector_file.name}#{case['id']}"
        actual = by_id.get(case["id"])
        diff = ["no output"] if actual is None else compare(case, actual)
        expected_fail = case_key in client.expected_failures
        if diff and not expected_fail:
            failed_ids.append(case_key)
            problems.append(f"{case_key} ({case['comment']}): {'; '.join(diff)}")
        elif not diff and expected_fail:
            problems.append(
                f"{case_key} is an expected failure of {client.language} but "
                "passes: remove it from clients.toml"
            )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("client", CLIENTS, ids=[c.language for c in CLIENTS])
def test_info_and_usage(client: ClientCli) -> None:
    _skip_unbuilt(client)
    code, lines, _ = client.run("info")
    assert code == 0 and lines[0]["language"] == client.language
    needed = {
        json.loads(f.read_text())["schema"]
        for f in VECTOR_FILES
        if f"vector:{f.name}" not in client.expected_failures
    }
    assert set(lines[0]["schemas"]) >= needed
    code, _, _ = client.run("frobnicate")
    assert code == 2


def test_every_case_id_is_unique_and_expected_failures_exist() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    hook_ids = [c.id for c in HOOK_CASES]
    assert len(hook_ids) == len(set(hook_ids))
    known = {f"check:{i}" for i in ids} | {f"hook:{i}" for i in hook_ids}
    for f in VECTOR_FILES:
        known |= {f"vector:{f.name}#{c['id']}" for c in json.loads(f.read_text())["tests"]}
        known.add(f"vector:{f.name}")
    for client in CLIENTS:
        assert client.expected_failures <= known, client.expected_failures - known


def test_expected_failure_lists_are_strict() -> None:
    strict = ClientCli("demo", ["true"], {"check:genuine"})
    with pytest.raises(pytest.fail.Exception, match="remove it from clients.toml"):
        _strict(strict, "check:genuine", [])  # listed but passing: an error
    with pytest.raises(pytest.xfail.Exception):
        _strict(strict, "check:genuine", ["verdict False, expected True"])
    with pytest.raises(AssertionError):
        _strict(strict, "check:forged", ["verdict True, expected False"])  # not listed
    _strict(strict, "check:forged", [])  # not listed and passing


def test_an_unbuilt_cli_fails_when_all_are_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import conformance_env

    registry = tmp_path / "clients.toml"
    registry.write_text('[ghost]\ncommand = ["{root}/client-libs/ghost/bin/cli"]\n')
    monkeypatch.setenv(REQUIRE_ALL, "1")
    (ghost,) = conformance_env.load_clients(registry)
    with pytest.raises(pytest.fail.Exception, match="not built"):
        _skip_unbuilt(ghost)
    # twin: without the variable an unbuilt CLI is skipped
    monkeypatch.delenv(REQUIRE_ALL)
    (ghost,) = conformance_env.load_clients(registry)
    with pytest.raises(pytest.skip.Exception, match="not built"):
        _skip_unbuilt(ghost)
