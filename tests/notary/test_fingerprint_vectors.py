"""The notary's fingerprint parser over every case of the clients' shared fingerprint vectors
(``client-libs/vectors/fingerprints.json``): one rule for the notary and every client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from notary.core.fingerprint import parse_fingerprint
from notary.errors import BadFingerprint

VECTORS = Path(__file__).resolve().parents[2] / "client-libs" / "vectors" / "fingerprints.json"
DOC = json.loads(VECTORS.read_text())


def notary_output(case: dict[str, Any]) -> dict[str, Any]:
    try:
        fp = parse_fingerprint(case["input"])
    except BadFingerprint:
        return {"result": "invalid", "error": "fingerprint"}
    return {"result": "valid", "algorithm": fp.algorithm, "canonical": fp.canonical}


@pytest.mark.parametrize("case", DOC["tests"], ids=[str(c["id"]) for c in DOC["tests"]])
def test_notary_parser_follows_the_shared_rule(case: dict[str, Any]) -> None:
    expected = {k: case[k] for k in ("result", "error", "algorithm", "canonical") if k in case}
    assert notary_output(case) == expected


def test_the_vectors_hold_both_results_and_the_separators_the_notary_once_took() -> None:
    """Must-fail twin of the parametrised test: the file is not all one result, and it holds
    the dash and space forms (refused by every implementation)."""
    assert {c["result"] for c in DOC["tests"]} == {"valid", "invalid"}
    refused = {c["input"] for c in DOC["tests"] if c["result"] == "invalid"}
    assert any("-" in t for t in refused) and any(t.count(" ") == 19 for t in refused)
    dash = next(c for c in DOC["tests"] if "-" in c["input"] and c["result"] == "invalid")
    assert notary_output({**dash, "input": dash["input"].replace("-", ":")})["result"] == "valid"
