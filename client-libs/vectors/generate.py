#!/usr/bin/env python3
"""Build the shared client test vectors from the Python reference implementation.

    python client-libs/vectors/generate.py            # (re)write the *.json files
    python client-libs/vectors/generate.py --verify   # exit 1 if a file differs or a case fails

Every case below states its expected result by hand (or, for the exhaustive consensus tables,
by an independent brute-force restatement of the rules). The generator runs each case through
``converge.vectors.run_case`` and refuses to write when the implementation disagrees, so a
vector file is both the specification and proof that the reference passes it. The
transparency cases are also checked by a restatement of their rules on the notary's log code
(``_transparency_check.py``): two verifiers written apart must both agree with each case.

Signatures are RSASSA-PKCS1-v1_5 (deterministic) with the TEST-ONLY keys in ``keys/``; the
real 2011 responses come from ``legacy-2011/``. The extended answers are signed with TEST-ONLY
Ed25519 keys derived from fixed seeds (``_extended_cases.py``; Ed25519 is deterministic).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _config_cases import config  # noqa: E402
from _extended_cases import canonical_cases, extended_answers  # noqa: E402
from _parsing_cases import bundles, fingerprints, requests_  # noqa: E402
from _rules_cases import cache, consensus  # noqa: E402
from _transparency_cases import transparency  # noqa: E402
from _transparency_check import check_case  # noqa: E402
from _wire_cases import responses, signatures  # noqa: E402
from converge.vectors import compare, run_case  # noqa: E402

from notary.core.canonical import canonical_json  # noqa: E402
from notary.errors import BadData  # noqa: E402

HERE = Path(__file__).resolve().parent

FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "fingerprints.json": fingerprints,
    "requests.json": requests_,
    "legacy-signatures.json": signatures,
    "notary-responses.json": responses,
    "bundles.json": bundles,
    "consensus.json": consensus,
    "cache.json": cache,
    "extended-answers.json": extended_answers,
    "canonical-json.json": canonical_cases,
    "transparency.json": transparency,
    "config.json": config,
}


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def check_transparency(doc: dict[str, Any]) -> list[str]:
    """transparency.json against the restatement of its checks on the notary's own log code
    (``_transparency_check.py``), independent of the Python client's verifier, which
    ``check_against_implementation`` runs as well."""
    problems = []
    for case in doc["tests"]:
        got = check_case(doc, case)
        want = {k: case.get(k) for k in got}
        if got != want:
            problems.append(f"transparency.json #{case['id']} ({case['comment']}): {got} != "
                            f"{want}")
    return problems


def check_canonical(case: dict[str, Any]) -> dict[str, Any]:
    """canonical-json.json is checked against the notary's signer, which is what it pins."""
    try:
        text = canonical_json(json.loads(case["input"])).decode("utf-8")
    except (BadData, ValueError):
        return {"result": "invalid", "kind": "canonical"}
    return {"result": "valid", "canonical": text}


def check_against_implementation(name: str, doc: dict[str, Any]) -> list[str]:
    problems = []
    if name == "transparency.json":
        problems += check_transparency(doc)
    if name == "canonical-json.json":
        for case in doc["tests"]:
            got = check_canonical(case)
            want = {k: case[k] for k in got if k in case}
            if got != want:
                problems.append(f"{name} #{case['id']} ({case['comment']}): {got} != {want}")
        return problems
    for case in doc["tests"]:
        for p in compare(case, run_case(doc, case)):
            problems.append(f"{name} #{case['id']} ({case['comment']}): {p}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--verify",
        action="store_true",
        help="do not write; exit 1 if a file is stale or a case fails",
    )
    args = ap.parse_args(argv)
    status = 0
    for name, build in FILES.items():
        doc = build()
        problems = check_against_implementation(name, doc)
        for p in problems:
            print(f"FAIL {p}", file=sys.stderr)
        if problems:
            status = 1
            continue
        text = render(doc)
        path = HERE / name
        if args.verify:
            if not path.exists() or path.read_text() != text:
                print(f"STALE {name}: run client-libs/vectors/generate.py", file=sys.stderr)
                status = 1
            else:
                print(f"ok    {name}: {len(doc['tests'])} cases")
        else:
            path.write_text(text)
            print(f"wrote {name}: {len(doc['tests'])} cases")
    return status


if __name__ == "__main__":
    sys.exit(main())
